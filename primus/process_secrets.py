"""How a Primus process gets its secrets, and keeps them from processes of its own account.

An AM, a host agent, an executor and the host's lease keeper hold secrets: the etcd password
of the identity they use (an application's own, on a shared site) and the values of the job's
``secret_env``. They run as the owner's account, beside the owner's trainers, so a secret is
safe only where a process of the same uid cannot read it:

- **Never in the environment.** ``/proc/<pid>/environ`` shows the environment a process was
  started with; changing ``os.environ`` later does not change it. So a starter hands secrets
  to a Primus process it starts on a pipe the child inherits (:func:`handed_over`; the
  variable ``PRIMUS_SECRETS_FD`` names only the descriptor's number), over ssh on stdin
  (``launcher/remote.py``), to the host agent over its socket, and to what the agent forks in
  memory (:func:`hold`). The child reads them once (:func:`received`); they never reach
  ``os.environ``, so no process it starts inherits them. A trainer gets its ``secret_env``
  values, and only those, in its environment from its executor: that is the user's contract.
- **Undumpable.** A process of the same uid may read another's ``/proc/<pid>/environ``,
  ``mem`` and open descriptors, and ptrace it, unless the kernel marks it undumpable
  (:func:`make_undumpable`, ``prctl(PR_SET_DUMPABLE, 0)``); then those files belong to root.
  A fork keeps the mark, an ``exec`` clears it: executors forked by an undumpable agent are
  undumpable from their first instruction, and the trainers they ``exec`` are not (they stay
  debuggable by their owner, and by ``primus stacks``).

Neither is a boundary to rely on (a process is dumpable from its ``exec`` until it calls
:func:`make_undumpable`): the server takes no application-written value as fact whatever the
trainer holds (docs/operations.md, "The trust boundary").

Kept to the standard library: ``primus.processes`` imports it on remote hosts.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import sys
from collections.abc import Iterator, Mapping

FD_ENV = "PRIMUS_SECRETS_FD"
"""The variable that names the inherited descriptor a process's secrets are on (the number
only, never a secret)."""
_PR_SET_DUMPABLE = 4

_held: dict[str, str] | None = None


def make_undumpable() -> None:
    """Mark this process undumpable, so that processes of its own uid cannot read its memory,
    environment or descriptors through ``/proc``, nor ptrace it. Nothing outside Linux.

    Raises:
        OSError: the kernel refused (it never does for a process setting its own mark).
    """
    if not sys.platform.startswith("linux"):
        return
    # The interpreter's own symbols hold libc's: find_library("c") would run ldconfig, a
    # process of its own, in every AM, agent and executor.
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl(PR_SET_DUMPABLE, 0): {os.strerror(errno)}")


@contextlib.contextmanager
def handed_over(secrets: Mapping[str, str]) -> Iterator[tuple[dict[str, str], list[int]]]:
    """A pipe holding ``secrets`` for a child about to be started: yields what to add to the
    child's environment (the descriptor's number) and the descriptors it must inherit
    (``pass_fds``); this process's end closes on leaving. No secrets: nothing to add.

    The secrets are written whole before the child starts (the pipe is made large enough),
    so starting it never waits on it.

    Raises:
        OSError: no pipe could hold them (larger than the host's ``fs.pipe-max-size``).
    """
    if not secrets:
        yield {}, []
        return
    data = json.dumps(dict(secrets)).encode()
    read_end, write_end = os.pipe()
    try:
        try:
            if len(data) > fcntl.fcntl(write_end, fcntl.F_GETPIPE_SZ):
                fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, len(data))
            view = memoryview(data)
            while view:
                view = view[os.write(write_end, view):]
        finally:
            os.close(write_end)
        yield {FD_ENV: str(read_end)}, [read_end]
    finally:
        os.close(read_end)


def received() -> Mapping[str, str]:
    """The secrets this process was started with: read once from the descriptor that
    ``$PRIMUS_SECRETS_FD`` names (then closed, and the variable removed, so that no child
    inherits either), or given by :func:`hold`; empty when there are none."""
    global _held  # noqa: PLW0603 - one process, one set of secrets
    if _held is None:
        named = os.environ.pop(FD_ENV, None)
        if named is None:
            _held = {}
        else:
            with os.fdopen(int(named), "rb") as pipe:
                _held = {str(k): str(v) for k, v in json.loads(pipe.read() or b"{}").items()}
    return _held


def hold(secrets: Mapping[str, str]) -> None:
    """Take ``secrets`` as this process's own: for a child forked with them in memory (the
    host agent's executors and lease keeper), which inherits no descriptor of them."""
    global _held  # noqa: PLW0603 - one process, one set of secrets
    _held = dict(secrets)


def environment() -> dict[str, str]:
    """This process's environment with its secrets: what it resolves its settings from
    (``load_settings(env=...)``); never what a child is given."""
    return {**os.environ, **received()}
