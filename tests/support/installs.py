"""Another installation of Primus beside the one under test, as a host upgraded (or not) apart
from the AM has: a virtual environment whose ``primus`` is a copy of this one with another
version string. Its other packages are this environment's, reached through a ``.pth`` file, so
that making it needs no network and takes about a second."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import primus


def install_primus_copy(root: Path, version: str) -> str:
    """Install a copy of this Primus that says it is ``version`` in a new virtual environment
    at ``root``; return the environment's python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = str(root / "bin" / "python")
    site_packages = Path(subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True).stdout.strip())
    package = site_packages / "primus"
    shutil.copytree(Path(primus.__file__).parent, package,
                    ignore=shutil.ignore_patterns("__pycache__"))
    init = package / "__init__.py"
    text, count = re.subn(r'^__version__ = ".*"$', f'__version__ = "{version}"',
                          init.read_text(), flags=re.MULTILINE)
    assert count == 1, f"no __version__ line in {init}"
    init.write_text(text)
    dependencies = dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")])
    (site_packages / "primus-dependencies.pth").write_text("\n".join(dependencies) + "\n")
    found = subprocess.run(
        [python, "-c", "import primus, psutil; print(primus.__version__, primus.__file__)"],
        capture_output=True, text=True, check=True, cwd=root).stdout.split()
    assert found == [version, str(init)], f"the copy at {root} imports {found}"
    return python
