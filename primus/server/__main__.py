"""``python -m primus.server run [OPTIONS]``: the server process, as ``primus server run``
(what the embedded server and the deployment start). It loads nothing of the ``primus``
command."""

import sys

from primus.server.command import server_run

if sys.argv[1:2] != ["run"]:
    sys.exit("usage: python -m primus.server run [OPTIONS] (`primus server --help` for the "
             "other server commands)")
server_run(sys.argv[2:], prog_name="python -m primus.server run")
