"""The ``primus`` command.

gRPC's C core prints its own log lines (a failed TLS handshake, a refused connection) to stderr
unless told otherwise before it is imported; the command says what went wrong in one line of
its own, so those are off here (``GRPC_VERBOSITY=NONE`` unless the environment sets it).
"""

import os

os.environ.setdefault("GRPC_VERBOSITY", "NONE")
