"""What the layers contract (``.importlinter``, ``test_import_layers.py``) does not say: which
modules a process loads, and who imports a library. The client layer and the CLI never load
the AM; only ``history/sql_history.py`` imports SQLAlchemy, and the CLI loads it only for the
history's commands; ``python -m primus.server`` loads nothing of the ``primus`` command."""

from __future__ import annotations

import subprocess
import sys

from tests.support.primus import REPO

LOADED_AM_MODULES = """
import importlib, pkgutil, sys
import primus.client
for module in pkgutil.walk_packages(primus.client.__path__, "primus.client."):
    importlib.import_module(module.name)
importlib.import_module("primus.cli.main")
print("\\n".join(sorted(m for m in sys.modules if m == "primus.am" or m.startswith("primus.am."))))
"""


def test_the_client_layer_and_the_cli_import_nothing_of_the_am():
    # A fresh interpreter: in this one, other tests may have imported the AM already.
    result = subprocess.run([sys.executable, "-c", LOADED_AM_MODULES], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [], f"the client layer loads the AM: {result.stdout.split()}"


def test_only_sql_history_imports_sqlalchemy():
    importers = [str(path.relative_to(REPO)) for path in sorted((REPO / "primus").rglob("*.py"))
                 if any(line.startswith(("import sqlalchemy", "from sqlalchemy"))
                        for line in path.read_text().splitlines())]
    assert importers == ["primus/history/sql_history.py"]


LOADED_BY_THE_CLI = """
import sys
import primus.cli.main
print("sqlalchemy" in sys.modules)
"""


def test_the_cli_loads_sqlalchemy_only_for_the_commands_that_read_the_history():
    result = subprocess.run([sys.executable, "-c", LOADED_BY_THE_CLI], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


LOADED_BY_THE_SERVER = """
import sys
import primus.server.command, primus.server.grpc_server
print("\\n".join(sorted(m for m in sys.modules
                        if m == "primus.cli" or m.startswith("primus.cli."))))
"""


def test_python_m_primus_server_loads_nothing_of_the_primus_command():
    result = subprocess.run([sys.executable, "-c", LOADED_BY_THE_SERVER], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == []
