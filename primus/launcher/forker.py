"""The warm starter: Primus's own processes forked from a Python that has imported them.

A Primus process started cold pays for the interpreter and its imports: an AM about 0.35
CPU-seconds, a host agent as much again to import the executor it forks executors from. On a
machine that starts many (the embedded default: every submit starts an AM and an agent; a
test suite or a sweep, hundreds), that is most of what an application costs before its first
trainer runs. The forker pays it once: a Python that imports what a module imports (read from
its source, never running it) the first time it is asked to run it, and then forks one child
per request. A child becomes what
``python -m MODULE ARGS`` would have been — its own session, the request's environment (the
whole of it, not the forker's), working directory, umask, log file on stdout and stderr,
descriptors, its secrets on an inherited pipe (never through the forker's memory), that command
line as its process title — and runs the module as ``__main__``.

A forker serves one account and one exact environment of processes: the Python it runs, the
``PYTHON*`` and locale variables, the namespaces, cgroup, groups, limits and priority a cold
start would have had (:func:`_key`). Anything else gets a forker of its own, or starts cold.
It never holds a secret (a request passes the descriptor of a pipe holding them), refuses peers
of another uid, is undumpable all the same, and exits after :data:`IDLE_SECONDS` without a
request, or at the first request after a file of the Primus it imported changed (an upgrade or
an edit: the next request starts a fresh forker, so a child never runs stale code).

Callers: the local launcher for an AM (``python -m primus.am``), the host agent's starter for
the agent itself (on the local launcher), and the embedded API server's starter.
:func:`spawn` raises :class:`ForkerError` whenever the forker cannot serve a request, and the
caller starts the process cold: the forker only saves time.

Protocol: one JSON line from the client, with the descriptors to pass (``SCM_RIGHTS``):
``{"op": "spawn", "module", "args", "title", "warm", "env", "cwd", "umask", "log_file",
"fds"}``; one line back, ``{"pid", "start_time"}``, ``{"error"}`` or ``{"stale": true}``.
"""

from __future__ import annotations

import ast
import contextlib
import fcntl
import gc
import hashlib
import importlib
import importlib.util
import json
import os
import resource
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import primus
from primus import __version__, process_secrets, processes
from primus.private_files import (
    append_private,
    listen_private,
    peer_of,
    private_dir,
    socket_address,
)

IDLE_SECONDS = 120.0
"""A forker without a request for this long exits; the next request starts another."""
START_TIMEOUT = 20.0
MODULE_PREFIX = "primus."
"""The forker runs Primus's own modules only."""
_FD_LIMIT = 16
"""At most this many descriptors pass with one request."""
_ENV_KEYED = ("PYTHON", "LC_", "LANG")
"""Variables read when the interpreter starts (its flags, path, stdio encoding): a child's must
be the forker's, so they are part of its key."""
_TITLE_ROOM = "PRIMUS_FORKER_TITLE_ROOM"
_TITLE_BYTES = 8192
"""A child's process title takes the place of the forker's command line and environment
(setproctitle): the forker starts with this much room in a variable of its own, so that an
executor's long command line (forked by an agent the forker forked) shows whole."""
_LIMITS = ("RLIMIT_AS", "RLIMIT_CORE", "RLIMIT_CPU", "RLIMIT_DATA", "RLIMIT_FSIZE",
           "RLIMIT_NOFILE", "RLIMIT_NPROC", "RLIMIT_STACK")


class ForkerError(Exception):
    """The forker could not start the process; nothing was started: start it cold."""


def module_of(argv: Sequence[str]) -> tuple[str, list[str]] | None:
    """``(module, args)`` when ``argv`` is ``PYTHON -m MODULE ARGS...`` with an absolute
    ``PYTHON`` and a module of Primus's, which the forker may run; else ``None``."""
    if len(argv) >= 3 and argv[1] == "-m" and os.path.isabs(argv[0]) \
            and argv[2].startswith(MODULE_PREFIX):
        return argv[2], list(argv[3:])
    return None


def runtime_dir() -> str:
    """Where this account's forkers listen: ``$XDG_RUNTIME_DIR/primus``, else
    ``~/.cache/primus/run`` (0700)."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    return os.path.join(base, "primus") if base else os.path.expanduser("~/.cache/primus/run")


# --- the client side ---


def spawn(argv: Sequence[str], env: Mapping[str, str], log_file: str, cwd: str | None = None,
          secrets: Mapping[str, str] | None = None, pass_fds: Sequence[int] = (),
          warm: Sequence[str] = (), inherit: bool = True) -> int:
    """Start ``argv`` (``PYTHON -m primus.MODULE ARGS``) forked by this account's forker for
    ``PYTHON``, started first if none runs; return its pid.

    ``env`` is added to this process's environment (without the names of ``secrets``), as
    :func:`primus.processes.spawn_detached` does (``inherit=False``: ``env`` is the whole of
    it); ``secrets`` reach the child on a pipe of their own, as
    :func:`primus.process_secrets.handed_over` hands them to a cold child; ``pass_fds`` keep
    their numbers in it; ``warm`` names modules the forker imports before it forks, for the
    child's own children (the agent's executors).

    Raises:
        ForkerError: no forker can serve it (a Python without Primus, a refused request, a
            forker that died); nothing was started.
    """
    found = module_of(argv)
    if found is None or len(pass_fds) >= _FD_LIMIT or min(pass_fds, default=3) < 3:
        raise ForkerError(f"not a module the forker runs: {list(argv)[:3]}")
    module, args = found
    secrets = secrets or {}
    inherited = os.environ if inherit else {}
    try:
        # The secrets on a pipe the child inherits, as a cold child gets them: the forker
        # passes the descriptor on and never holds a secret itself, so no child it forks
        # later can find another's in the memory it inherits.
        with process_secrets.handed_over(secrets) as (named, secret_fds):
            child_env = {**{k: v for k, v in inherited.items()
                            if k not in secrets and k != process_secrets.FD_ENV},
                         **env, **named}
            fds = [*pass_fds, *secret_fds]
            request = {
                "op": "spawn", "module": module, "args": args, "title": " ".join(argv),
                "warm": list(warm),
                "cwd": os.path.abspath(os.path.expanduser(cwd or os.getcwd())),
                "env": child_env, "umask": _umask(), "log_file": os.path.expanduser(log_file),
                "fds": fds}
            return _spawn(argv[0], child_env, json.dumps(request).encode() + b"\n", fds)
    except OSError as exc:  # its directory, its lock, its socket, the secrets' pipe
        raise ForkerError(f"cannot reach the forker: {exc}") from exc


def _spawn(python: str, child_env: Mapping[str, str], message: bytes,
           pass_fds: Sequence[int]) -> int:
    directory = str(private_dir(runtime_dir()))
    name = f"forker-{_key(python, child_env)}.sock"
    why = "no answer"
    for _ in range(3):  # a forker that is stale or ending says so, or drops us: start another
        connection = _connect_or_start(directory, name, python, child_env)
        with connection:
            try:
                socket.send_fds(connection, [message], list(pass_fds))
                with connection.makefile("rb") as stream:
                    answer = json.loads(stream.readline() or b'{"gone": true}')
            except (OSError, ValueError) as exc:
                answer, why = {"gone": True}, f"the forker did not answer: {exc}"
        if "pid" in answer:
            return int(answer["pid"])
        if not (answer.get("stale") or answer.get("gone")):
            raise ForkerError(str(answer.get("error") or answer))
    raise ForkerError(f"the forker kept ending before it answered ({why})")


def _umask() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022


def _key(python: str, env: Mapping[str, str]) -> str:
    """What a process started by ``python`` here with ``env`` inherits and cannot be given
    after a fork, hashed: a forker serves only requests whose key is its own."""
    parts: list[object] = [os.path.realpath(python), python, __version__, os.getuid(),
                           os.getgid(), sorted(os.getgroups()),
                           os.getpriority(os.PRIO_PROCESS, 0)]
    parts += sorted((k, v) for k, v in env.items() if k.startswith(_ENV_KEYED))
    for namespace in ("cgroup", "ipc", "mnt", "net", "pid", "user", "uts"):
        with contextlib.suppress(OSError):
            parts.append(os.stat(f"/proc/self/ns/{namespace}").st_ino)
    with contextlib.suppress(OSError), open("/proc/self/cgroup") as cgroups:
        parts.append(cgroups.read())
    parts += [resource.getrlimit(getattr(resource, name)) for name in _LIMITS
              if hasattr(resource, name)]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def connect_at(directory: str, name: str) -> socket.socket:
    """A connection to the Unix socket ``name`` in ``directory`` (however deep it lies).

    Raises:
        OSError: nothing listens there.
    """
    directory_fd = os.open(directory, os.O_PATH | os.O_DIRECTORY)
    try:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(socket_address(directory_fd, name))
        except OSError:
            connection.close()
            raise
        return connection
    finally:
        os.close(directory_fd)


def connect_or_start(directory: str, name: str, lock_file: str,
                     start: Callable[[], None]) -> socket.socket:
    """A connection to the server listening at ``name`` in ``directory`` (the forker, a host
    agent), ``start``-ed first when none answers: one starter at a time, under an exclusive
    lock on ``lock_file``, so that a second client finds the first one's server instead of
    starting another beside it.

    Raises:
        OSError: the server started but does not answer (or the lock could not be taken);
            what ``start`` raises.
    """
    with contextlib.suppress(OSError):
        return connect_at(directory, name)
    with append_private(lock_file) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with contextlib.suppress(OSError):
            return connect_at(directory, name)
        start()
        return connect_at(directory, name)


def _connect_or_start(directory: str, name: str, python: str, env: Mapping[str, str]
                      ) -> socket.socket:
    try:
        connection = connect_or_start(directory, name, os.path.join(directory, name + ".lock"),
                                      lambda: _start(directory, name, python, env))
    except OSError as exc:
        raise ForkerError(f"the forker cannot be started or does not answer: {exc}") from exc
    connection.settimeout(START_TIMEOUT)
    return connection


def _start(directory: str, name: str, python: str, env: Mapping[str, str]) -> None:
    """Start the forker detached, with the variables of ``env`` (the child's) that its
    interpreter reads as it starts and nothing else (it belongs to no application: its own
    environment names none) but the room for its children's titles, and wait until it listens
    or says why it cannot."""
    ready_read, ready_write = os.pipe()
    try:
        with append_private(os.path.join(directory, name.removesuffix(".sock") + ".log")) as log:
            child = subprocess.Popen(
                [python, "-m", "primus.launcher.forker", directory, name, str(ready_write)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd="/",
                start_new_session=True, pass_fds=[ready_write],
                env={**{k: v for k, v in env.items() if k.startswith(_ENV_KEYED)},
                     _TITLE_ROOM: "." * _TITLE_BYTES})
    except OSError as exc:
        os.close(ready_read)
        raise ForkerError(f"cannot start the forker: {exc}") from exc
    finally:
        os.close(ready_write)
    said, answered = await_ready(ready_read)
    if said != "ready":
        if child.poll() is None and not answered:
            child.kill()
        raise ForkerError("the forker did not start: " + (said or "no answer"))


def await_ready(ready_read: int, timeout: float = START_TIMEOUT) -> tuple[str, bool]:
    """What a server just started (the forker, a host agent) said on the pipe ``ready_read``
    (closed here): ``ready``, or why it cannot serve, once it wrote and closed its end or
    died; and whether it did so within ``timeout`` seconds (else nothing was said)."""
    with os.fdopen(ready_read, "rb") as ready:
        selector = selectors.DefaultSelector()
        selector.register(ready, selectors.EVENT_READ)
        answered = bool(selector.select(timeout))
        selector.close()
        return (ready.read().decode(errors="replace").strip() if answered else ""), answered


# --- what a forked child does (the host agent's children too) ---


def detach(keep: set[int], log_fd: int) -> None:
    """In a forked child: a session of its own, default signal handling, no descriptor of the
    parent's but ``keep``, stdin on ``/dev/null``, stdout and stderr on ``log_fd``."""
    os.setsid()
    signal.set_wakeup_fd(-1)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep | {log_fd}:
            with contextlib.suppress(OSError):
                os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)


def exit_with(child: Callable[[], int | None]) -> None:
    """Run ``child`` in a forked process and exit with its code, whatever happens (1 for an
    exception, whose traceback goes to the log). Never returns."""
    code = 1
    try:
        code = child() or 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int | None):
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - the child must exit, whatever happened
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _become(request: Mapping[str, Any], fds: Sequence[int], log_fd: int, ready: int) -> None:
    """In the forked child: become ``python -m MODULE ARGS`` as the request says. Never
    returns."""
    def run() -> int | None:
        wanted = [int(fd) for fd in request["fds"]]
        detach({ready, *fds}, log_fd)
        # The passed descriptors at the numbers they had in the client (as Popen's pass_fds),
        # each moved out of the way first, with the pipe to the forker.
        high = 3 + max([*wanted, ready, *fds])
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, high) for fd in fds]
        told = fcntl.fcntl(ready, fcntl.F_DUPFD_CLOEXEC, high)
        for fd in (*fds, ready):
            os.close(fd)
        for source, target in zip(moved, wanted, strict=True):
            os.dup2(source, target)  # inheritable, as the cold child's
            os.close(source)
        # The title first: setproctitle takes its room from the environment's strings as the
        # process started, which it cannot find once the environment is replaced.
        import setproctitle  # noqa: PLC0415 - only children rename themselves

        setproctitle.setproctitle(request["title"])
        os.umask(int(request["umask"]))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])  # with the secrets' descriptor named, if any
        time.tzset()
        os.write(told, b"t")
        os.close(told)
        module = str(request["module"])
        sys.argv = [request["title"].split(" ", 1)[0], *request["args"]]
        if sys.path and sys.path[0] == _STARTED_IN:
            sys.path[0] = request["cwd"]  # as ``-m`` puts the working directory first
        # Run as ``__main__`` afresh (its imports are warm); runpy warns of a copy imported.
        if not hasattr(sys.modules.get(module), "__path__"):  # not a package
            sys.modules.pop(module, None)
        sys.modules.pop(f"{module}.__main__", None)
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return 0

    exit_with(run)


# --- the forker itself ---

_STARTED_IN = os.getcwd()


def _fingerprint() -> tuple[int, int]:
    """Primus's files as they are now (count, newest change): an upgrade or an edit changes
    it."""
    count, newest = 0, 0
    pending = [os.path.dirname(primus.__file__)]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        pending.append(entry.path)
                elif entry.name.endswith(".py"):
                    count += 1
                    newest = max(newest, entry.stat().st_mtime_ns)
    return count, newest


class _Forker:
    def __init__(self, listener: socket.socket, path: str, idle: float) -> None:
        self.listener = listener
        self.path = path
        self.inode = os.stat(path).st_ino
        self.idle = idle
        self.imported = _fingerprint()
        self.children: set[int] = set()
        self.warmed: set[tuple[str, ...]] = set()
        self.last_request = time.monotonic()
        self.stopping = False

    def serve(self, wakeup: int) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self.listener, selectors.EVENT_READ, "accept")
        selector.register(wakeup, selectors.EVENT_READ, "wakeup")
        while not self.stopping:
            for key, _ in selector.select(timeout=1.0):
                if key.data == "accept":
                    self._serve_client()
                else:
                    with contextlib.suppress(BlockingIOError):
                        os.read(wakeup, 512)
            self._reap()
            if time.monotonic() - self.last_request > self.idle:
                _log(f"no request for {self.idle:g}s; exiting")
                return
        _log("told to stop")

    def _serve_client(self) -> None:
        connection, _ = self.listener.accept()
        self.last_request = time.monotonic()
        fds: list[int] = []
        with connection:
            _, uid = peer_of(connection)
            if uid != os.getuid():
                _log(f"refused a connection from uid {uid}")
                return
            connection.settimeout(30)
            try:
                message, fds = _receive(connection)
                answer = self._answer(json.loads(message), fds)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            finally:
                for fd in fds:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            with contextlib.suppress(OSError):
                connection.sendall(json.dumps(answer).encode() + b"\n")

    def _answer(self, request: Mapping[str, Any], fds: list[int]) -> dict[str, Any]:
        if request.get("op") != "spawn":
            return {"error": f"no such operation: {request.get('op')!r}"}
        if _fingerprint() != self.imported:
            _log("Primus's files changed since this forker imported them; exiting")
            self.withdraw()  # before the answer: the client's next try starts a new forker
            self.stopping = True
            return {"stale": True}
        module = str(request["module"])
        if not module.startswith(MODULE_PREFIX) or len(fds) != len(request["fds"]):
            return {"error": f"refused: {module!r}, {len(fds)} descriptor(s)"}
        try:
            self._warm(module, request.get("warm", ()))
        except Exception as exc:  # noqa: BLE001 - said to the client, who starts cold
            return {"error": f"cannot import {module}: {type(exc).__name__}: {exc}"}
        pid = self._fork(request, fds)
        return {"pid": pid, "start_time": processes.start_time_of(pid)}

    def withdraw(self) -> None:
        """Take the socket's name away, unless a newer forker holds it already: a client
        that connects from now on starts a new forker."""
        with contextlib.suppress(OSError):
            if os.stat(self.path).st_ino == self.inode:
                os.unlink(self.path)

    def close(self) -> None:
        """Stop listening: the name goes first, then whoever connected meanwhile is dropped
        unanswered (and tries again)."""
        self.withdraw()
        self.listener.setblocking(False)
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                break
            connection.close()
        self.listener.close()

    def _warm(self, module: str, warm: Sequence[str]) -> None:
        """Import what ``module`` imports (:func:`_imports_of`) and the modules ``warm``
        names, unless imported already; then keep the collector off what was imported, so
        that children do not copy its pages by touching them."""
        key = (module, *warm)
        if key in self.warmed:
            return
        for name in [*_imports_of(module), *(str(w) for w in warm)]:
            if name not in sys.modules:
                with contextlib.suppress(ImportError):  # not a module: an attribute
                    importlib.import_module(name)
        self.warmed.add(key)
        gc.collect()
        gc.freeze()

    def _fork(self, request: Mapping[str, Any], fds: list[int]) -> int:
        log_file = str(request["log_file"])
        if os.path.dirname(log_file):
            private_dir(os.path.dirname(log_file))
        log_fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        ready_read, ready_write = os.pipe()
        try:
            pid = os.fork()
            if pid == 0:  # the child: never returns
                _become(request, fds, log_fd, ready_write)
        finally:
            os.close(log_fd)
            os.close(ready_write)
        # The child says when it is detached and named: the answer then names a process that
        # already looks like the one asked for to ps, to a kill and to its starter.
        with os.fdopen(ready_read, "rb") as ready:
            ready.read(1)
        self.children.add(pid)
        return pid

    def _reap(self) -> None:
        for _ in reap(self.children):
            continue


def reap(children: set[int]) -> Iterator[int]:
    """Collect, without waiting, each child of this process that has exited (a server's
    forked children: the forker's, a host agent's); yield its pid, dropped from ``children``."""
    while children:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        children.discard(pid)
        yield pid


def _imports_of(module: str) -> list[str]:
    """The modules that ``module`` (a package's ``__main__`` for a package) imports at its top
    level, read from its source without running it (a ``__main__`` may act as it is
    imported); ``from A import B`` names ``A`` and ``A.B``, which may be a module."""
    spec = importlib.util.find_spec(module)
    if spec is not None and spec.submodule_search_locations is not None:
        spec = importlib.util.find_spec(f"{module}.__main__")
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return []
    names: list[str] = []
    for node in ast.parse(Path(spec.origin).read_bytes(), spec.origin).body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return names


def _receive(connection: socket.socket) -> tuple[bytes, list[int]]:
    """The request's line and the descriptors that came with its first bytes."""
    data, fds, _, _ = socket.recv_fds(connection, 1 << 20, _FD_LIMIT)
    fds = list(fds)
    while not data.endswith(b"\n"):
        more = connection.recv(1 << 20)
        if not more:
            raise ValueError("the request ended before its end of line")
        data += more
    return data, fds


def _log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} primus forker {os.getpid()}: {message}",
          file=sys.stderr, flush=True)


def serve(directory: str, name: str, ready_fd: int, idle: float = IDLE_SECONDS) -> int:
    """Run the forker listening at ``name`` in ``directory`` until idle or told to stop;
    ``ready`` (or why it cannot serve) goes to ``ready_fd`` once it listens."""
    process_secrets.make_undumpable()  # it holds none, but its children start out as it is
    listening = listen_ready(ready_fd, directory, name)
    if listening is None:
        return 1
    forker = _Forker(*listening, idle)
    wakeup = wake_on_signals(lambda: setattr(forker, "stopping", True))
    _log(f"serving {Path(directory) / name} (Primus {__version__}, {sys.executable})")
    try:
        forker.serve(wakeup)
    finally:
        forker.close()
    return 0


def listen_ready(ready_fd: int, directory: str, name: str,
                 prepare: Callable[[], object] | None = None
                 ) -> tuple[socket.socket, str] | None:
    """For a server of this account's requests (the forker, a host agent): ``prepare``, then
    listen at ``name`` in ``directory`` (0600) and say ``ready`` on ``ready_fd``; or say why
    not there (its starter starts cold) and return ``None``."""
    with os.fdopen(ready_fd, "w") as ready:
        try:
            if prepare is not None:
                prepare()
            directory_fd = os.open(directory, os.O_PATH | os.O_DIRECTORY)
            path = socket_address(directory_fd, name)
            listener = listen_private(path, 128)
        except Exception as exc:  # noqa: BLE001 - said to the starter, who starts cold
            ready.write(f"{type(exc).__name__}: {exc}")
            return None
        ready.write("ready")
    return listener, path


def wake_on_signals(stop: Callable[[], None]) -> int:
    """A descriptor a server's loop selects on, readable at every signal (a child's exit
    among them); SIGTERM, SIGINT and SIGHUP call ``stop``."""
    wakeup_read, wakeup_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wakeup_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda *_: stop())
    return wakeup_read


def describe() -> dict[str, Any]:
    """What this process was given as it started, to compare a forked start with a cold one
    (``python -m primus.launcher.forker describe ARGS``, by either): its arguments, title,
    directory, umask, session, environment, descriptors, standard streams, the names of its
    secrets with each one's length (never the value), its first import path and parent."""
    secrets = process_secrets.received()
    fds = []
    for name in sorted(os.listdir("/proc/self/fd"), key=int):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed since
            os.readlink(f"/proc/self/fd/{name}")
            fds.append(int(name))
    with open("/proc/self/cmdline", "rb") as cmdline:
        title = cmdline.read().replace(b"\0", b" ").decode().strip()
    return {
        "args": sys.argv[2:], "title": title, "cwd": os.getcwd(), "umask": _umask(),
        "session_leader": os.getsid(0) == os.getpid(), "env": dict(os.environ),
        "fds": [fd for fd in fds if fd > 2],
        "streams": [os.path.realpath(f"/proc/self/fd/{fd}") for fd in (0, 1, 2)],
        "secrets": {name: len(value) for name, value in secrets.items()},
        "path0": sys.path[0], "ppid": os.getppid(), "version": __version__}


if __name__ == "__main__":
    if sys.argv[1:2] == ["describe"]:
        print(json.dumps(describe()), flush=True)
        sys.exit(0)
    sys.exit(serve(sys.argv[1], sys.argv[2], int(sys.argv[3])))
