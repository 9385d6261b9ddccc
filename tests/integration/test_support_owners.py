"""The owners' Python (``tests/support/owners.owners_python``), tested itself: the virtual
environment of Debian's Python that the owners' tests run Primus with is kept between runs, and
must never be kept past the test environment it imports from."""

from __future__ import annotations

import shutil
import subprocess
import sysconfig
from pathlib import Path

from tests.support.owners import IMPORTS_PRIMUS, PTH_NAME, missing_parts, owners_python
from tests.support.primus import REPO


def imports_primus(python: Path) -> str:
    """Empty when ``python`` imports Primus and its dependencies, else its error."""
    result = subprocess.run([str(python), "-I", "-c", IMPORTS_PRIMUS],
                            capture_output=True, text=True, timeout=120)
    return "" if result.returncode == 0 else result.stderr[-2000:]


def pth_of(python: Path) -> Path:
    return next(python.parent.parent.glob(f"lib/python*/site-packages/{PTH_NAME}"))


def site_packages_copy(path: Path) -> Path:
    """A site-packages at ``path`` with what ``.venv``'s holds (each entry a link to it), as
    another test environment made at another path has."""
    path.mkdir(parents=True)
    for entry in Path(sysconfig.get_path("purelib")).iterdir():
        (path / entry.name).symlink_to(entry)
    return path


def test_a_new_test_environment_gets_an_owners_python_of_its_own(tmp_path):
    assert not missing_parts(), f"the owners' Python needs {missing_parts()}"
    root = tmp_path / "owners"
    old_site = site_packages_copy(tmp_path / "old-venv" / "site-packages")
    old = owners_python(root, old_site)
    assert not imports_primus(old), imports_primus(old)
    shutil.rmtree(old_site.parent)  # the environment moved: a new venv, the old one deleted

    new = owners_python(root, site_packages_copy(tmp_path / "new-venv" / "site-packages"))
    assert new != old, f"the new environment got the old one's Python, {old}"
    assert not imports_primus(new), imports_primus(new)
    assert pth_of(new).read_text().split() == [str(REPO), str(tmp_path / "new-venv" /
                                                               "site-packages")]


def test_a_kept_owners_python_whose_pth_names_a_deleted_site_packages_is_made_again(tmp_path):
    assert not missing_parts(), f"the owners' Python needs {missing_parts()}"
    root = tmp_path / "owners"
    kept = owners_python(root)
    pth_of(kept).write_text(f"{REPO}\n{tmp_path / 'deleted-venv' / 'site-packages'}\n")
    assert imports_primus(kept), "the kept Python, broken on purpose, still imports Primus"

    again = owners_python(root)
    assert not imports_primus(again), imports_primus(again)
    assert pth_of(again).read_text().split() == [
        str(REPO), str(Path(sysconfig.get_path("purelib")).resolve())]


def test_an_owners_python_asking_for_the_owners_python_gets_itself(tmp_path):
    # bench/bench_owners.py executes itself again as the owners' Python, and asks for it there:
    # the running Python's site-packages is then the owners' own, which holds only the .pth.
    assert not missing_parts(), f"the owners' Python needs {missing_parts()}"
    root = tmp_path / "owners"
    python = owners_python(root)
    asked = subprocess.run(
        [str(python), "-I", "-c", "from pathlib import Path; from tests.support.owners import "
         f"owners_python; print(owners_python(Path({str(root)!r})))"],
        capture_output=True, text=True, timeout=300, cwd=REPO)
    assert asked.returncode == 0, asked.stderr[-3000:]
    assert asked.stdout.strip() == str(python), \
        f"an owners' Python made another, {asked.stdout.strip()}, not itself"
