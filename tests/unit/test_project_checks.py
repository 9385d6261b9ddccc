"""The project's own checks, run by the README's test command (so by CI) and failing on any
finding: ruff over the code, mypy over ``primus/``, ansible-lint over the whole deployment tree
(docs/testing.md, "The project's own checks"). Each runs as a process of the venv's tool, as a
person would run it; a failure shows what the tool found. tox's ``lint`` and ``type``
environments run the same commands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.primus import REPO

VENV_BIN = Path(sys.executable).parent
DEPLOY = REPO / "deploy" / "ansible"


def run_check(tool: str, *args: str, cwd: Path = REPO, timeout: float = 240
              ) -> subprocess.CompletedProcess[str]:
    """``tool args…`` from the venv, in ``cwd``, its output captured."""
    path = VENV_BIN / tool
    assert path.exists(), (f"{path} is missing: the lint extra installs it "
                           f"(scripts/bootstrap --test)")
    # The venv's bin first on PATH, as an activated venv has it: ansible-lint runs
    # ansible-playbook --syntax-check from there (and warns when it has to add it itself).
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([str(path), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def findings(checked: subprocess.CompletedProcess[str]) -> str:
    """What the tool said, under its command line and exit status."""
    return (f"{' '.join(checked.args)} exited {checked.returncode}:\n"
            f"{checked.stdout}{checked.stderr}")


def test_ruff_finds_nothing_in_the_code_the_tests_or_the_benchmarks():
    checked = run_check("ruff", "check", "--no-cache", "primus", "tests", "bench")

    assert checked.returncode == 0, findings(checked)


@pytest.mark.timeout(660)
def test_mypy_finds_nothing_in_primus():
    # The repository's cache (.mypy_cache, ignored by git): a check after an edit rereads what
    # changed (about 2 s); a clean clone, as in CI, checks everything (docs/testing.md).
    checked = run_check("mypy", "--cache-dir", str(REPO / ".mypy_cache"), "primus",
                        timeout=600)

    assert checked.returncode == 0, findings(checked)


@pytest.mark.timeout(660)
def test_ansible_lint_finds_nothing_in_the_deployment_tree():
    # Run in the playbook's directory, as its configuration (.ansible-lint there) and its
    # roles' own modules (roles/common/library) are found from it; "." lints every file.
    checked = run_check("ansible-lint", "--offline", "--nocolor", ".", cwd=DEPLOY, timeout=600)

    assert checked.returncode == 0, findings(checked)
