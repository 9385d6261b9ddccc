"""The host agent: forks an application's executors on one host from a warm Python.

An executor started cold pays for a Python start-up and its imports (about 0.3 CPU-seconds and
35 MB of private memory each). The agent pays that once per application and host: it imports
the executor's code, then forks one child per executor it is asked for. A child becomes exactly
what ``python -m primus.executor ...`` would have been — its own session and process group, its
log file on stdout and stderr, the request's environment and working directory, that command
line as its process title — and then runs the executor. Nothing of the agent is left in it but
memory pages shared copy-on-write. The agent does not supervise the executors it forked, and
they outlive it.

With the first executor it also forks the application's lease keeper on the host
(``executor/host_lease.py``): one lease for every executor the agent forks, which their
``live`` keys go under (the keeper's socket is in their environment, ``PRIMUS_HOST_LEASE``). A
keeper that died is replaced for the executors forked after it; those already running move to
leases of their own.

Start-up is paced: at most one child per CPU runs its start-up (connect to etcd, register) at a
time; the others wait for a slot, which a child gives back once registered (or by exiting).
A launch wave therefore never makes a host's CPUs queue behind dozens of start-ups, which is
what starved the AM's own lease renewals when the AM shared a host with them.

The agent listens on a Unix socket in the application's directory on the host (0700, the
socket 0600, and peers of another uid refused). Requests carry the processes' secrets (the
application's etcd password, the job's ``secret_env``), so the agent is undumpable, and so is
what it forks, which takes them in memory, never in its environment
(:mod:`primus.process_secrets`). It is started on demand by :func:`spawn_many`,
one per application, host and Primus version; it exits when told (the AM releases a host when
the application ends) or after it has had no child and no request for ``idle`` seconds.

Protocol: one JSON object per line. A client sends ``{"op": "spawn", "requests": [{"argv",
"env", "secrets", "cwd", "log_file"}, ...]}`` and reads one line per request as its child is forked
(``{"pid", "start_time"}`` or ``{"error"}``), then ``{"done": true}``; or ``{"op": "exit"}``;
or ``{"op": "ping"}`` for ``{"pid", "version", "children"}``.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import gc
import json
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from primus import __version__, process_secrets, processes
from primus.launcher import forker
from primus.private_files import append_private, peer_of, private_dir

EXECUTOR_MODULE = ("-m", "primus.executor")
IDLE_SECONDS = 5.0
"""An agent with no executor left exits after this long without a request: a restart in place
needs none, and a new wave to the host starts another (about half a second)."""
START_TIMEOUT = 20.0
SLOT_HOLD_MAX = 15.0
"""A child that neither registered nor exited within this holds its start-up slot no longer."""


class AgentError(Exception):
    """The agent could not be reached or started; the caller starts processes cold instead."""


def socket_name() -> str:
    """The agent's socket in the application's directory: one agent per Primus version."""
    return f"agent-{__version__}.sock"


def warm_argv(argv: Sequence[str]) -> list[str] | None:
    """The executor's own arguments when ``argv`` starts an executor, else ``None``."""
    if len(argv) >= 3 and tuple(argv[1:3]) == EXECUTOR_MODULE:
        return list(argv[3:])
    return None


# --- the client side: used by ``remote launch`` on a host and by the local launcher ---


def spawn_many(directory: str, requests: Sequence[Mapping[str, Any]],
               python: str | None = None, forked: bool = False) -> list[dict[str, Any]]:
    """Start every request's process through the application's agent in ``directory``.

    Starts the agent when none answers: ``forked``, by this account's forker where it can
    (:mod:`primus.launcher.forker`), else cold. Returns one answer per request, in order: ``{"pid",
    "start_time"}`` or ``{"error"}``. A request the agent had not answered when it died gets
    an error naming that, never a second process.

    Raises:
        AgentError: the agent is not running and cannot be started; nothing was started.
    """
    directory = os.path.expanduser(directory)
    message = json.dumps({"op": "spawn", "requests": list(requests)}).encode() + b"\n"
    answers: list[dict[str, Any]] = []
    for _ in range(3):  # an agent that was exiting as we connected says so: start another
        connection = _connect_or_start(directory, python or sys.executable, forked)
        answer: dict[str, Any] = {}
        with connection, connection.makefile("rwb") as stream:
            stream.write(message)
            stream.flush()
            for line in stream:
                answer = json.loads(line)
                if answer.get("done") or answer.get("gone"):
                    break
                answers.append(answer)
        if not answer.get("gone"):
            break
    while len(answers) < len(requests):
        answers.append({"error": "the host agent ended before it started this executor"})
    return answers


def tell_exit(directory: str) -> bool:
    """Ask the application's agent in ``directory`` to exit; False when none was running."""
    try:
        connection = _connect(os.path.expanduser(directory))
    except OSError:
        return False
    with connection, connection.makefile("rwb") as stream:
        stream.write(b'{"op": "exit"}\n')
        stream.flush()
        stream.readline()
    return True


def _connect(directory: str) -> socket.socket:
    return forker.connect_at(directory, socket_name())


def _connect_or_start(directory: str, python: str, forked: bool) -> socket.socket:
    with contextlib.suppress(OSError):
        return _connect(directory)
    private_dir(directory)
    try:
        return forker.connect_or_start(directory, socket_name(),
                                       os.path.join(directory, "agent.lock"),
                                       lambda: _start(directory, python, forked))
    except OSError as exc:
        raise AgentError(f"the host agent cannot be started or does not answer: {exc}") from exc


def _start(directory: str, python: str, forked: bool) -> None:
    """Start the agent detached, ``forked`` from a warm Python where this account's forker
    can (:mod:`primus.launcher.forker`: it has imported the executor already), else cold;
    wait until it listens (or says why it cannot)."""
    ready_read, ready_write = os.pipe()
    argv = [python, "-m", "primus.launcher.agent", directory, str(ready_write)]
    log_file = os.path.join(directory, "agent.log")
    stop: Callable[[], object]
    try:
        pid = _forked(argv, log_file, ready_write) if forked else None
        if pid is not None:
            stop = functools.partial(os.kill, pid, signal.SIGKILL)
        else:
            with append_private(log_file) as log:
                child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True,
                                         pass_fds=[ready_write])
            stop = child.kill
    except OSError as exc:
        os.close(ready_read)
        raise AgentError(f"cannot start the host agent: {exc}") from exc
    finally:
        os.close(ready_write)
    said, answered = forker.await_ready(ready_read, START_TIMEOUT)
    if said != "ready":
        if not answered:
            with contextlib.suppress(OSError):
                stop()
        raise AgentError("the host agent did not start: " + (
            said or f"no answer within {START_TIMEOUT:g}s (see {directory}/agent.log)"))


def _forked(argv: list[str], log_file: str, ready_write: int) -> int | None:
    """The agent's pid, forked by this account's forker with the executor imported; ``None``
    when the forker cannot (the agent then starts cold)."""
    try:
        return forker.spawn(argv, {}, log_file, pass_fds=[ready_write],
                            warm=[EXECUTOR_MODULE[1] + ".__main__"])
    except forker.ForkerError as exc:
        logging.getLogger(__name__).debug("starting the host agent cold: %s", exc)
        return None


# --- the agent itself ---


@dataclass
class _Starting:
    """A forked child waiting for, or holding, a start-up slot."""

    pid: int
    go: int  # written (closed) to let the child start
    ready: int  # readable (EOF) once the child registered or exited
    since: float = 0.0


@dataclass
class _Agent:
    directory: str
    listener: socket.socket
    idle: float
    slots: int = field(default_factory=lambda: max(1, os.cpu_count() or 1))
    children: set[int] = field(default_factory=set)
    starting: dict[int, _Starting] = field(default_factory=dict)  # by ready fd
    waiting: collections.deque[_Starting] = field(default_factory=collections.deque)
    selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)
    last_activity: float = field(default_factory=time.monotonic)
    stopping: bool = False
    keeper: int | None = None
    """The pid of the application's lease keeper on this host (``executor/host_lease.py``)."""

    def serve(self, wakeup: int) -> None:
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        self.selector.register(wakeup, selectors.EVENT_READ, "wakeup")
        while not self.stopping:
            for key, _ in self.selector.select(timeout=1.0):
                if key.data == "accept":
                    self._serve_client()
                elif key.data == "wakeup":
                    with contextlib.suppress(BlockingIOError):
                        os.read(wakeup, 512)
                else:
                    self._registered(key.data)
            self._reap()
            self._expire_slots()
            if not self.children - {self.keeper} and not self.starting and not self.waiting \
                    and time.monotonic() - self.last_activity > self.idle:
                log(f"no executor and no request for {self.idle:g}s; exiting")
                self._stop_keeper()
                return
        log("told to exit")
        self._stop_keeper()

    def _stop_keeper(self) -> None:
        """The lease keeper revokes its lease and exits (if an executor still holds it, the
        lease is left to it)."""
        if self.keeper is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.keeper, signal.SIGTERM)

    def _serve_client(self) -> None:
        connection, _ = self.listener.accept()
        self.last_activity = time.monotonic()
        with connection:
            _, uid = peer_of(connection)
            if uid != os.getuid():
                log(f"refused a connection from uid {uid}")
                return
            connection.settimeout(30)
            with connection.makefile("rwb") as stream:
                try:
                    message = json.loads(stream.readline() or b"{}")
                except ValueError:
                    return
                op = message.get("op")
                if op == "spawn":
                    for request in message.get("requests", []):
                        stream.write(json.dumps(self._spawn(request)).encode() + b"\n")
                        stream.flush()
                    stream.write(b'{"done": true}\n')
                elif op == "exit":
                    self.stopping = True
                    stream.write(b"{}\n")
                elif op == "ping":
                    stream.write(json.dumps({"pid": os.getpid(), "version": __version__,
                                             "children": len(self.children)}).encode() + b"\n")
                stream.flush()

    def _spawn(self, request: Mapping[str, Any]) -> dict[str, Any]:
        argv = list(request["argv"])
        executor_args = warm_argv(argv)
        try:
            if executor_args is None:  # not an executor: start it as any other process
                child = processes.spawn_detached(argv, request.get("env") or {},
                                                 request["log_file"], request.get("cwd"),
                                                 request.get("secrets"))
                pid = child.pid
                self.children.add(pid)
            else:
                pid = self._fork(argv, executor_args, self._with_keeper(executor_args, request))
        except OSError as exc:
            return {"error": f"cannot start {argv[0]!r}: {exc}"}
        return {"pid": pid, "start_time": processes.start_time_of(pid)}

    def _with_keeper(self, executor_args: list[str], request: Mapping[str, Any]
                     ) -> Mapping[str, Any]:
        """``request`` with the lease keeper's socket in its environment, the keeper started
        first if none runs; unchanged (the executor keeps a lease of its own) when it cannot
        be started."""
        if self.keeper is None:
            try:
                app_id = executor_args[executor_args.index("--app") + 1]
                self.keeper = self._fork_keeper(app_id, request)
            except (ValueError, IndexError, OSError) as exc:
                log(f"cannot start the lease keeper: {exc}")
                return request
            self.children.add(self.keeper)
        from primus.executor import host_lease  # noqa: PLC0415 - see _warm

        socket_path = os.path.join(self.directory, host_lease.SOCKET_NAME)
        return {**request, "env": {**(request.get("env") or {}), host_lease.ENV: socket_path}}

    def _fork_keeper(self, app_id: str, request: Mapping[str, Any]) -> int:
        from primus.executor import host_lease  # noqa: PLC0415 - see _warm

        listener = host_lease.listen(self.directory)
        log_fd = os.open(os.path.join(self.directory, "lease.log"),
                         os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            pid = os.fork()
            if pid == 0:  # the child: never returns
                _become_keeper(listener, app_id, self.directory, request, log_fd)
        finally:
            listener.close()
            os.close(log_fd)
        log(f"lease keeper {pid} started")
        return pid

    def _fork(self, argv: list[str], executor_args: list[str], request: Mapping[str, Any]
              ) -> int:
        log_file = os.path.expanduser(request["log_file"])
        if os.path.dirname(log_file):
            private_dir(os.path.dirname(log_file))
        log_fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        go_read, go_write = os.pipe()
        ready_read, ready_write = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            for fd in (log_fd, go_read, go_write, ready_read, ready_write):
                os.close(fd)
            raise
        if pid == 0:  # the child: never returns
            _become_executor(argv, executor_args, request, log_fd, go_read, ready_write)
        for fd in (log_fd, go_read, ready_write):
            os.close(fd)
        # The child says when it is detached and named: the answer then names a process that
        # already looks like the executor to ps, to a kill and to the AM. (Or it died: EOF.)
        os.read(ready_read, 1)
        self.children.add(pid)
        child = _Starting(pid, go_write, ready_read)
        self.waiting.append(child)
        self._grant()
        return pid

    def _grant(self) -> None:
        while self.waiting and len(self.starting) < self.slots:
            child = self.waiting.popleft()
            child.since = time.monotonic()
            os.close(child.go)
            self.starting[child.ready] = child
            self.selector.register(child.ready, selectors.EVENT_READ, child.ready)

    def _registered(self, ready: int) -> None:
        """The child gave its slot back (registered or exited)."""
        self.selector.unregister(ready)
        os.close(ready)
        del self.starting[ready]
        self._grant()

    def _expire_slots(self) -> None:
        now = time.monotonic()
        for ready, child in list(self.starting.items()):
            if now - child.since > SLOT_HOLD_MAX:
                self._registered(ready)

    def _reap(self) -> None:
        for pid in forker.reap(self.children):
            if pid == self.keeper:
                self.keeper = None  # the next executor forked gets a new one
            self.last_activity = time.monotonic()


def _become_executor(argv: list[str], executor_args: list[str], request: Mapping[str, Any],
                     log_fd: int, go: int, ready: int) -> None:
    """In the forked child: detach, take the request's environment and secrets, wait for a
    start-up slot, run the executor, exit with its code. Never returns."""
    def execute() -> int:
        _detach({go, ready}, log_fd, request)
        os.chdir(os.path.expanduser(request.get("cwd") or "~"))
        import setproctitle  # noqa: PLC0415 - only children rename themselves

        setproctitle.setproctitle(" ".join(argv))
        os.write(ready, b"t")
        sys.argv = [argv[0], *executor_args]
        os.read(go, 1)  # EOF once the agent grants a slot (or has died: go on then)
        os.close(go)
        from primus.executor.__main__ import main  # noqa: PLC0415 - imported by the agent

        return main(executor_args, ready=lambda: os.close(ready))

    forker.exit_with(execute)


def _detach(keep: set[int], log_fd: int, request: Mapping[str, Any]) -> None:
    """In a forked child: detached (:func:`primus.launcher.forker.detach`), with the request's
    environment, and its secrets as the process's own (in memory: its environment is the
    agent's, which holds none)."""
    forker.detach(keep, log_fd)
    os.environ.update(request.get("env") or {})
    process_secrets.hold(request.get("secrets") or {})


def _become_keeper(listener: socket.socket, app_id: str, directory: str,
                   request: Mapping[str, Any], log_fd: int) -> None:
    """In the forked child: detach and keep the host's lease of ``app_id``. Never returns."""
    def keep() -> int:
        _detach({listener.fileno()}, log_fd, request)
        import setproctitle  # noqa: PLC0415 - only children rename themselves

        setproctitle.setproctitle(f"primus lease keeper {app_id}")
        os.environ["PRIMUS_APP_ID"] = app_id  # as the executors' trainers are found by it
        from primus.executor import host_lease  # noqa: PLC0415 - see _warm

        return host_lease.run_keeper(listener, app_id, directory)

    forker.exit_with(keep)


def log(message: str) -> None:
    """A line in the agent's log (its stderr)."""
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} primus agent {os.getpid()}: {message}",
          file=sys.stderr, flush=True)


def serve(directory: str, ready_fd: int, idle: float = IDLE_SECONDS,
          warm: Callable[[], object] | None = None) -> int:
    """Run the agent for the application directory ``directory`` until told to exit or idle.

    Writes ``ready`` (or why it cannot serve) to ``ready_fd`` once it listens.
    """
    process_secrets.make_undumpable()  # before any request, which may carry secrets
    listening = forker.listen_ready(ready_fd, directory, socket_name(), warm or _warm)
    if listening is None:
        return 1
    listener, path = listening
    agent = _Agent(directory, listener, idle)
    wakeup = forker.wake_on_signals(lambda: setattr(agent, "stopping", True))
    log(f"serving {directory} (Primus {__version__}, {agent.slots} start-up slots)")
    try:
        agent.serve(wakeup)
    finally:
        _close(listener, path)
    return 0


def _close(listener: socket.socket, path: str) -> None:
    """Stop listening without dropping a request: the socket's name goes first (a new client
    then starts a new agent), then whoever already connected is told to do the same."""
    with contextlib.suppress(OSError):
        os.unlink(path)
    listener.setblocking(False)
    while True:
        try:
            connection, _ = listener.accept()
        except OSError:
            break
        with connection, contextlib.suppress(OSError):
            connection.sendall(b'{"gone": true}\n')
    listener.close()


def _warm() -> None:
    """Import what an executor imports, then keep the garbage collector off those objects so
    that children do not copy their pages by touching them. (The agent's own code imports the
    executor's modules where it uses them: the helper that only talks to an agent —
    ``remote.py``'s launch, stop and release — then imports none of them, which costs 0.13 s
    of CPU a call.)"""
    import primus.executor.__main__  # noqa: F401, PLC0415

    gc.collect()
    gc.freeze()


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1], int(sys.argv[2])))
