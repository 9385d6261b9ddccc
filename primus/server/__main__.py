"""``python -m primus.server run|start|status|stop``: the same as ``primus server ...``."""

import sys

from primus.cli.main import cli

cli(["server", *sys.argv[1:]], prog_name="python -m primus.server")
