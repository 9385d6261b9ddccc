"""The layers of ``primus/`` are a contract (``.importlinter``), checked here with import-linter:
each package imports only the floors below its own, and no modules of one package import each
other in a circle (docs/architecture.md, "Layers")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.primus import REPO


def test_every_import_in_primus_keeps_the_layers_and_closes_no_circle():
    lint_imports = Path(sys.executable).with_name("lint-imports")
    assert lint_imports.exists(), (f"{lint_imports} is missing: the lint extra installs it "
                                   "(scripts/bootstrap --test)")
    # A fresh process reading the files as they are; --no-cache: nothing written to the tree.
    result = subprocess.run([str(lint_imports), "--no-cache", "--no-logo",
                             str(REPO / ".importlinter")], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, (f"lint-imports found imports against the layers "
                                    f"(.importlinter):\n{result.stdout}{result.stderr}")
