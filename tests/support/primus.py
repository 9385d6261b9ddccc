"""The repository's root and the real ``primus`` command line, each run in a process of its own.

A ``primus`` command pays about 0.4 CPU-seconds for its interpreter start-up and imports
before it does anything, and the suite runs hundreds of them on a machine whose cores its test
workers keep busy. So each test worker keeps one warm Python (:class:`_Forker`, started on the
first command) that has imported the command's dependencies and nothing else, and forks a
child per command, as Primus's host agent forks executors: the child sets the command's
environment, working directory, standard streams and process title, then runs
``python -m primus.cli`` (importing ``primus.cli.main`` itself, so its consoles see the
command's environment). It is a process of its own with its own pid, exit status and session
of descendants, killed at the timeout like ``subprocess.run``'s; only its start-up is skipped.
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_FORKER_CODE = r"""
import importlib, json, os, runpy, selectors, socket, sys, traceback
import setproctitle
# Everything the command imports, then not the command itself: a child imports primus.cli.main
# again, so that the consoles it makes at import see the child's environment (COLUMNS...).
importlib.import_module("primus.cli.main")
del sys.modules["primus.cli.main"]

listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(sys.argv[1])
listener.listen(64)
sys.stdout.write("ready\n")
sys.stdout.flush()
selector = selectors.DefaultSelector()
selector.register(listener, selectors.EVENT_READ)
selector.register(sys.stdin, selectors.EVENT_READ)  # closed when the test worker exits
waiting = {}  # pidfd -> (pid, connection)


def child(request, fds):
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    os.closerange(3, 1 << 16)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    setproctitle.setproctitle(" ".join([sys.executable, "-m", "primus.cli", *request["args"]]))
    sys.argv = ["primus", *request["args"]]
    code = 0
    try:
        runpy.run_module("primus.cli", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, (int, type(None))):
            sys.stderr.write(f"{exc.code}\n")
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


while True:
    for key, _ in selector.select():
        if key.fileobj is sys.stdin:
            if not os.read(0, 4096):
                os._exit(0)
        elif key.fileobj is listener:
            connection, _ = listener.accept()
            message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
            request = json.loads(message)
            pid = os.fork()
            if pid == 0:
                child(request, fds)
            for fd in fds:
                os.close(fd)
            pidfd = os.pidfd_open(pid)
            waiting[pidfd] = (pid, connection)
            selector.register(pidfd, selectors.EVENT_READ)
            connection.sendall(f"{pid}\n".encode())
        else:
            pid, connection = waiting.pop(key.fd)
            selector.unregister(key.fd)
            os.close(key.fd)
            _, status = os.waitpid(pid, 0)
            try:
                connection.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            except OSError:
                pass
            connection.close()
"""


class _Forker:
    """This test worker's warm Python that forks the ``primus`` commands."""

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="primus-forker-")
        self.address = os.path.join(self.directory, "socket")
        self.process = subprocess.Popen(
            [sys.executable, "-c", _FORKER_CODE, self.address], cwd=REPO,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            start_new_session=True)
        assert self.process.stdout is not None
        ready = self.process.stdout.readline()
        assert ready == "ready\n", f"the primus command forker did not start: {ready!r}"
        atexit.register(shutil.rmtree, self.directory, ignore_errors=True)

    def alive(self) -> bool:
        return self.process.poll() is None

    def run(self, args: list[str], env: dict[str, str], cwd: Path, timeout: float
            ) -> subprocess.CompletedProcess[str]:
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        devnull = os.open(os.devnull, os.O_RDONLY)
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(self.address)
            request = json.dumps({"args": args, "env": env, "cwd": str(cwd)}).encode()
            socket.send_fds(connection, [request], [devnull, out_write, err_write])
        finally:
            for fd in (devnull, out_write, err_write):
                os.close(fd)
        chunks: dict[int, list[bytes]] = {out_read: [], err_read: []}
        replies = b""
        deadline = time.monotonic() + timeout
        selector = selectors.DefaultSelector()
        for fd in chunks:
            selector.register(fd, selectors.EVENT_READ)
        selector.register(connection, selectors.EVENT_READ)
        pid, code = None, None
        try:
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    if pid is not None:
                        _kill(pid)
                    raise subprocess.TimeoutExpired([sys.executable, "-m", "primus.cli", *args],
                                                    timeout)
                for key, _ in selector.select(left):
                    data = os.read(key.fd, 65536) if key.fileobj is not connection \
                        else connection.recv(64)
                    if not data:
                        selector.unregister(key.fileobj)
                        continue
                    if key.fileobj is connection:
                        replies += data
                        lines = replies.decode().split("\n")
                        if pid is None and len(lines) > 1:
                            pid = int(lines[0])
                        if len(lines) > 2:
                            code = int(lines[1])
                    else:
                        chunks[key.fd].append(data)
        finally:
            selector.close()
            connection.close()
            os.close(out_read)
            os.close(err_read)
        assert code is not None, f"the primus command forker lost {args}"
        return subprocess.CompletedProcess(
            [sys.executable, "-m", "primus.cli", *args], code,
            b"".join(chunks[out_read]).decode(errors="replace"),
            b"".join(chunks[err_read]).decode(errors="replace"))


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


_forker: _Forker | None = None
_forker_lock = threading.Lock()


def _the_forker() -> _Forker:
    global _forker  # noqa: PLW0603 - one per test worker, started on first use
    with _forker_lock:
        if _forker is None or not _forker.alive():
            _forker = _Forker()
        return _forker


def run_primus(env: dict[str, str], *args: str, timeout: float = 120,
               cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real ``primus`` command line in a process of its own (forked from this worker's
    warm Python: see the module's docstring); its output and exit status, as
    ``subprocess.run(capture_output=True, text=True)`` gives them."""
    return _the_forker().run(list(args), env, cwd or REPO, timeout)
