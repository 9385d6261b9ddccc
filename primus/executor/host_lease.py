"""One lease per application and host: the host's lease keeper holds it for every executor there.

An executor's ``live`` key is attached to a lease; when the lease ends, etcd deletes the key and
the AM records the executor LOST. One lease per executor means one renewal every TTL / 3 per
executor: at 10,000 executors and the default 10 s TTL, 3,000 renewals a second that etcd
serves and Python clients pay for. Instead, a keeper process per application and host (forked
by the host agent, ``launcher/agent.py``, beside the executors it forks) keeps one lease, and
the executors attach their ``live`` keys to it: 8 executors a host renew 8 times less, the way
a Kubernetes node keeps one lease for all its pods.

What each executor still has on its own, as with a lease of its own:

- **Death.** An executor holds a connection to the keeper (a Unix socket in the agent's
  directory, this account's alone). When the connection ends, the keeper deletes the
  executor's ``live`` key, if it still is that executor's (same pid, on this lease): the AM
  learns of a killed executor at once instead of after the TTL.
- **Liveness.** The executor writes a line every TTL / 3; one silent for the TTL (stopped,
  or its event loop stuck) has its key deleted and is told so, as an expired lease of its own
  would have done.
- **Self-fencing.** The keeper tells every executor of each renewal, and that the lease is lost
  when no renewal succeeded for the TTL less a margin (:class:`~primus.store.api.LeaseKeeper`):
  each executor then stops its trainer, as before.
- **A keeper that dies** takes no trainer with it: each executor renews the host's lease itself
  from the last renewal it was told of, takes a lease of its own, moves its key onto it and
  goes on as an executor started without a keeper. The host agent starts a new keeper for the
  executors it forks afterwards.

Protocol. The connection, JSON lines: the executor sends ``{"live": key, "owners": [...]}``;
the keeper answers ``{"lease", "ttl", "renewed", "beat"}``, and later only ``{"lost": why}``
when this executor may no longer count on the lease; the executor sends nothing more, and its
end is the connection's. What recurs goes through two small files in the keeper's directory,
so that no message wakes anyone up each round (at 10,000 executors, 6,000 messages a second
cost the executors a sixth of a core): the keeper writes its lease and when it last renewed it
into ``lease.renewed`` (``<qd``) after each renewal, and each executor writes when it last
looked into its own ``beat`` file (``<d``) every TTL / 3, reading ``lease.renewed`` at the same
time. Times are ``time.monotonic()`` readings, the same clock in every process of the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from primus import process_secrets
from primus.private_files import listen_private, peer_of, socket_address
from primus.state.records import ExecutorLive, TaskOwner, decode
from primus.store.api import (
    Coordinator,
    Delete,
    Lease,
    LeaseHolder,
    LeaseKeeper,
    LeaseState,
    Put,
    StoreError,
    key_unchanged_since,
    while_leased,
)
from primus.store.recipes import unless

logger = logging.getLogger(__name__)

SOCKET_NAME = "lease.sock"
"""The keeper's socket, in the host agent's directory of the application."""
ENV = "PRIMUS_HOST_LEASE"
"""Where an executor forked by the agent finds its keeper (the socket's path)."""
IDLE_SECONDS = 5.0
"""A keeper no executor has held for this long revokes its lease and exits."""
JOIN_TIMEOUT = 5.0
"""How long an executor waits for the keeper's first answer before taking a lease of its own."""


def _connectable(path: str) -> tuple[str, int]:
    """A name of the socket at ``path`` that fits a Unix socket address (108 bytes) however deep
    the directory lies, and the directory's descriptor to close once connected."""
    directory = os.open(os.path.dirname(path) or ".", os.O_PATH | os.O_DIRECTORY)
    return socket_address(directory, os.path.basename(path)), directory


def listen(directory: str) -> socket.socket:
    """The keeper's listening socket in ``directory`` (0600; one left by a dead keeper is
    replaced)."""
    name, directory_fd = _connectable(os.path.join(directory, SOCKET_NAME))
    try:
        return listen_private(name, 256)
    finally:
        os.close(directory_fd)


# --- the keeper ---


@dataclass
class _Holder:
    pid: int
    key: str
    owners: list[str]
    """Where the executor's data task claims are (``data/<stream>/owner/``)."""
    beat: str
    """The executor's ``beat`` file."""
    joined: float
    silent: bool = False


RENEWED = "lease.renewed"
_RENEWED = struct.Struct("<qd")
_BEAT = struct.Struct("<d")


def _read_stamp(path: str, layout: struct.Struct) -> tuple | None:
    """The values ``layout`` packs, as written last into ``path``; None when unreadable."""
    try:
        with open(path, "rb") as stamp:
            return layout.unpack(stamp.read(layout.size))
    except (OSError, struct.error):
        return None


def _write_stamp(fd: int, layout: struct.Struct, *values: object) -> None:
    os.pwrite(fd, layout.pack(*values), 0)


class HostLeaseKeeper:
    """Keeps one lease of ``ttl`` seconds for the executors that connect to it."""

    def __init__(self, store: Coordinator, ttl: int, directory: str,
                 idle: float = IDLE_SECONDS) -> None:
        """``directory``: where the stamp files go (the listener's socket's)."""
        self.store = store
        self.ttl = ttl
        self.directory = directory
        self.idle = idle
        self._renewed_fd = -1
        self._joins = 0
        self.renewals: LeaseKeeper | None = None
        """Renews the lease once :meth:`serve` took it (``leased``)."""
        self.leased = asyncio.Event()
        self._holders: dict[asyncio.StreamWriter, _Holder] = {}
        self._serving: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Event()
        self._stopping = False

    @property
    def holders(self) -> int:
        return len(self._holders)

    @property
    def lease(self) -> Lease:
        """The lease, once ``leased`` is set."""
        assert self.renewals is not None, "serve() has not taken the lease yet"
        return self.renewals.lease

    def stop(self) -> None:
        """Stop serving: the lease is revoked if no executor holds it, else left to expire
        (the executors take over)."""
        self._stopping = True
        self._changed.set()

    async def serve(self, listener: socket.socket) -> str:
        """Grant the lease, serve executors on ``listener`` until none held it for ``idle``
        seconds (then revoke it), the lease is lost, or :meth:`stop`; say which."""
        lease = await self.store.grant_lease(self.ttl)
        self._renewed_fd = os.open(os.path.join(self.directory, RENEWED),
                                   os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        _write_stamp(self._renewed_fd, _RENEWED, lease.id, time.monotonic())
        self.renewals = renewals = LeaseKeeper(self.store, lease, on_lost=[self._tell_lost],
                                               on_renewed=[self._tell_renewed])
        renewals.start()
        self.leased.set()
        server = await asyncio.start_unix_server(self._hold, sock=listener)
        ended = "stopped"
        round_ = max(self.ttl / 3.0, 0.2)
        try:
            idle_since = looked = time.monotonic()
            while not self._stopping:
                if renewals.lost.is_set():
                    ended = "lease lost"
                    break
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(round_, 1.0)):
                        await self._changed.wait()
                now = time.monotonic()
                if now - looked >= round_:
                    looked = now
                    self._silence(now)
                if self._holders:
                    idle_since = now
                elif now - idle_since > self.idle:
                    ended = f"no executor for {self.idle:g}s"
                    break
        finally:
            self._stopping = True  # the connections it ends are not executors leaving
            held = bool(self._holders)
            server.close()
            for writer in list(self._holders):
                writer.close()
            if self._serving:  # each connection's end, before the loop may close
                await asyncio.wait(self._serving, timeout=5)
            await renewals.stop(revoke=not held)
            os.close(self._renewed_fd)
        return ended

    def _silence(self, now: float) -> None:
        """End the connection of each executor whose beat is older than the TTL (stopped, or
        its event loop stuck), telling it why; its keys then go (:meth:`_hold`)."""
        for writer, holder in list(self._holders.items()):
            stamp = _read_stamp(holder.beat, _BEAT)
            last = max(holder.joined, stamp[0] if stamp else 0.0)
            if now - last > self.ttl and not holder.silent:
                holder.silent = True
                writer.write(_line(lost=f"the host's lease keeper heard nothing from this "
                                        f"executor for {self.ttl}s"))
                writer.close()

    async def _hold(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert self.renewals is not None and task is not None
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)
        pid, uid = peer_of(writer.get_extra_info("socket"))
        holder = None
        try:
            if uid != os.getuid():
                logger.warning("refused a connection from uid %s", uid)
                return
            async with asyncio.timeout(self.ttl):
                said = json.loads(await reader.readline())
            key, owners = said["live"], said.get("owners", [])
            if not isinstance(key, str) or not isinstance(owners, list) or \
                    not all(isinstance(o, str) for o in owners) or self.renewals.lost.is_set():
                return
            self._joins += 1
            beat = os.path.join(self.directory, f"beat.{pid}.{self._joins}")
            holder = self._holders[writer] = _Holder(pid, key, owners, beat, time.monotonic())
            self._changed.set()
            writer.write(_line(lease=self.lease.id, ttl=self.lease.ttl,
                               renewed=self.renewals.renewed or time.monotonic(),
                               beat=os.path.basename(beat)))
            while await reader.readline():
                pass  # nothing more is said: the end of the connection is the executor's
        except (OSError, ValueError, KeyError, TypeError, TimeoutError):
            pass
        finally:
            writer.close()
            if holder is not None:
                if holder.silent:
                    logger.warning("executor %s silent for %ss: its live key goes", pid,
                                   self.ttl)
                with contextlib.suppress(OSError):
                    os.unlink(holder.beat)
                await self._release(holder)
            # Counted as held until released: a keeper stops only once every key is settled.
            self._holders.pop(writer, None)
            self._changed.set()

    async def _release(self, holder: _Holder) -> None:
        """Delete what an executor that left had on the lease, if it still is that
        executor's (its pid in the value): its live key and its data task claims, which etcd
        would have deleted with a lease of its own."""
        assert self.renewals is not None
        if self.renewals.lost.is_set() or self._stopping:
            return  # etcd deletes every key of the lease; or the executor goes on without us
        lease = self.lease.id
        try:
            kvs = [kv for kv in [await self.store.get(holder.key)] if kv is not None and
                   kv.lease == lease and decode(ExecutorLive, kv.value).pid == holder.pid]
            for prefix in holder.owners:
                kvs += [kv for kv in (await self.store.get_prefix(prefix)).kvs
                        if kv.lease == lease and decode(TaskOwner, kv.value).pid == holder.pid]
            for kv in kvs:  # each only as it was read: a claim given up meanwhile stays so
                await while_leased(self.renewals.lost, partial(
                    self.store.txn, [key_unchanged_since(kv.key, kv.mod_revision)],
                    [Delete(kv.key)]))
        except (StoreError, ValueError) as exc:
            logger.warning("could not release the keys of executor %s (%s): %s", holder.pid,
                           holder.key, exc)

    def _tell_renewed(self, sent: float) -> None:
        _write_stamp(self._renewed_fd, _RENEWED, self.lease.id, sent)

    def _tell_lost(self, reason: str) -> None:
        said = _line(lost=reason)
        for writer in self._holders:
            writer.write(said)
        self._changed.set()


def _line(**fields: object) -> bytes:
    return json.dumps(fields).encode() + b"\n"


# --- the executor's side ---


class SharedLease(LeaseHolder):
    """The host's lease as one executor holds it: what :class:`LeaseKeeper` is to an executor
    with a lease of its own (``lease``, ``lost``, ``on_lost``, ``start``, ``stop``)."""

    def __init__(self, store: Coordinator, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, lease: Lease, renewed: float,
                 live_key: str, owners: Sequence[str] = (), directory: str = ".",
                 beat: str = "") -> None:
        """``directory``: the keeper's (its stamp files); ``beat``: this executor's file."""
        self.store = store
        self._renewed_path = os.path.join(directory, RENEWED)
        self._beat_path = os.path.join(directory, beat) if beat else ""
        self._beat_fd = -1
        self.lease = lease
        self.renewed = renewed
        self.live_key = live_key
        self.owners = list(owners)
        self.on_lost: list[Callable[[str], None]] = []
        self.state = LeaseState.HEALTHY
        self.lost = asyncio.Event()
        self.own: LeaseKeeper | None = None
        """The lease of its own this executor moved to when its keeper died."""
        self._reader = reader
        self._writer = writer
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def join(cls, store: Coordinator, path: str, live_key: str,
                   owners: Sequence[str] = (), timeout: float = JOIN_TIMEOUT
                   ) -> SharedLease | None:
        """Hold the lease of the keeper at ``path`` for ``live_key`` (and the data task claims
        under ``owners``); None (and why, logged) when the keeper does not answer within
        ``timeout``."""
        writer = None
        try:
            name, directory = _connectable(path)
            try:
                async with asyncio.timeout(timeout):
                    reader, writer = await asyncio.open_unix_connection(name)
                    writer.write(_line(live=live_key, owners=list(owners)))
                    first = json.loads(await reader.readline())
            finally:
                os.close(directory)
            lease = Lease(int(first["lease"]), int(first["ttl"]))
            return cls(store, reader, writer, lease, float(first["renewed"]), live_key, owners,
                       os.path.dirname(path), os.path.basename(str(first["beat"])))
        except (OSError, TimeoutError, ValueError, KeyError, TypeError) as exc:
            logger.warning("the host's lease keeper (%s) did not answer: %s", path,
                           exc or type(exc).__name__)
            if writer is not None:
                writer.close()
            return None

    def start(self) -> None:
        if self._beat_path:
            self._beat_fd = os.open(self._beat_path,
                                    os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
            _write_stamp(self._beat_fd, _BEAT, time.monotonic())
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self, revoke: bool = True) -> None:
        """Leave the lease: the keeper deletes this executor's key if it is still there (or,
        moved to a lease of its own, that lease is revoked unless ``revoke`` is false)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._writer.close()
        if self._beat_fd >= 0:  # the keeper removes the file once it saw the connection end
            os.close(self._beat_fd)
            self._beat_fd = -1
            if self.own is not None:  # ... unless it is gone
                with contextlib.suppress(OSError):
                    os.unlink(self._beat_path)
        if self.own is not None:
            await self.own.stop(revoke=revoke)

    async def _run(self) -> None:
        gone = asyncio.Event()  # the keeper: its connection ended, or it renews no more
        ticking = asyncio.get_running_loop().create_task(self._tick(gone))
        try:
            if await self._listen(gone):
                await self._take_over()
        finally:
            ticking.cancel()
            self._writer.close()

    async def _listen(self, gone: asyncio.Event) -> bool:
        """Wait until the keeper says the lease is lost (False) or is gone (True): its
        connection ended, or it renewed nothing for so long that one round is left before the
        lease may expire (a keeper stopped or stuck is as good as gone: the lease would expire
        with no executor knowing)."""
        try:
            line = await unless(gone, self._reader.readline())
            told = json.loads(line) if line else {}
        except (OSError, ValueError):
            return True
        if "lost" in told:
            self._declare_lost(str(told["lost"]))
            return False
        return True

    async def _tick(self, gone: asyncio.Event) -> None:
        """Every TTL / 3: write this executor's beat, and read when the keeper last renewed the
        lease; ``gone`` once that is so long ago that the executor's own renewals have one
        round left before LeaseKeeper's deadline (TTL - 1 s): 5.7 s at the default TTL. The
        beats go on while the executor takes over, so that a keeper that was only slow
        deletes nothing."""
        interval = max(self.lease.ttl / 3.0, 0.2)
        silence = max(interval, self.lease.ttl - LeaseKeeper.margin - interval)
        host_lease = self.lease.id
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            if self._beat_fd >= 0:
                _write_stamp(self._beat_fd, _BEAT, now)
            stamp = _read_stamp(self._renewed_path, _RENEWED)
            if stamp is not None and stamp[0] == host_lease:
                self.renewed = max(self.renewed, stamp[1])
            if now - self.renewed > silence and not gone.is_set():
                logger.warning("the host's lease keeper renewed nothing for %.1fs",
                               now - self.renewed)
                gone.set()

    async def _take_over(self) -> None:
        """The keeper is gone: keep the host's lease alive from its last renewal while this
        executor's keys move to a lease of its own (heartbeats go on meanwhile, so that a
        keeper that was only slow deletes nothing)."""
        logger.warning("the host's lease keeper is gone: this executor takes a lease of its own")
        renewed = asyncio.Event()
        shared = LeaseKeeper(self.store, self.lease, renewed=self.renewed,
                             on_lost=[self._declare_lost], on_renewed=[lambda _: renewed.set()])
        shared.start()
        try:
            # Only a renewal proves the lease (and so this executor's keys) still alive: one
            # that etcd expired meanwhile took the keys with it, and a replacement may start.
            await unless(self.lost, renewed.wait())
            while not self.lost.is_set():
                try:
                    own = await self.store.grant_lease(self.lease.ttl)
                    host_lease, self.lease = self.lease, own  # writes from now on use it
                    await self._move_keys(host_lease.id)
                    break
                except StoreError as exc:
                    logger.warning("could not take a lease of its own yet: %s", exc)
                    await asyncio.sleep(0.5)
            else:
                return
        finally:
            await shared.stop(revoke=False)
        self.own = LeaseKeeper(self.store, self.lease, on_lost=[self._declare_lost])
        self.own.start()
        await asyncio.sleep(1.0)
        await self._move_keys(host_lease.id)  # a write begun before the switch may have landed

    async def _move_keys(self, host_lease: int) -> None:
        """Put this executor's keys still on the host's lease (its live key, its task claims)
        on its own; a key written meanwhile is read again."""
        for _ in range(10):
            kvs = [kv for kv in [await self.store.get(self.live_key)]
                   if kv is not None and kv.lease == host_lease]
            for prefix in self.owners:
                kvs += [kv for kv in (await self.store.get_prefix(prefix)).kvs
                        if kv.lease == host_lease and
                        decode(TaskOwner, kv.value).pid == os.getpid()]
            if not kvs:
                return  # not registered yet, ended, or moved
            for kv in kvs:
                await self.store.txn([key_unchanged_since(kv.key, kv.mod_revision)],
                                     [Put(kv.key, kv.value, self.lease.id)])


async def keep_lease(store: Coordinator, ttl: int, live_key: str, keeper_path: str | None,
                     owners: Sequence[str] = (), join_timeout: float = JOIN_TIMEOUT
                     ) -> LeaseKeeper | SharedLease:
    """The lease an executor's ``live_key`` (and its data task claims under ``owners``) go
    under: the host's, from the keeper at ``keeper_path`` (an executor the agent forked), else
    one of its own. Not started."""
    if keeper_path:
        shared = await SharedLease.join(store, keeper_path, live_key, owners, join_timeout)
        if shared is not None and shared.lease.ttl == ttl:
            return shared
        if shared is not None:
            logger.warning("the host's lease has a TTL of %ss, not %ss: taking one of its own",
                           shared.lease.ttl, ttl)
            await shared.stop()
    return LeaseKeeper(store, await store.grant_lease(ttl))


# --- the keeper's process ---


async def _keep(listener: socket.socket, app_id: str, directory: str) -> int:
    from primus.config.site import load_settings  # noqa: PLC0415 - the process's alone
    from primus.state.keys import AppKeys  # noqa: PLC0415
    from primus.state.view import read_spec  # noqa: PLC0415
    from primus.store.etcd_store import EtcdCoordinator  # noqa: PLC0415

    settings = load_settings(env=process_secrets.environment())
    if settings.etcd is None:
        logger.error("PRIMUS_ETCD is not set; the host agent starts the keeper")
        return 2
    store = await EtcdCoordinator.connect(settings.etcd)
    try:
        spec = await read_spec(store, AppKeys(settings.prefix, app_id))
        if spec is None:
            logger.error("application %s has no spec in etcd", app_id)
            return 2
        keeper = HostLeaseKeeper(store, spec.policy.heartbeat_ttl, directory)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(signum, keeper.stop)
        logger.info("keeping the host's lease of %s (TTL %ss)", app_id,
                    spec.policy.heartbeat_ttl)
        logger.info("ended: %s", await keeper.serve(listener))
        return 0
    finally:
        await store.close()


def run_keeper(listener: socket.socket, app_id: str, directory: str) -> int:
    """The keeper process's main: serve ``listener`` (in ``directory``) for application
    ``app_id`` (etcd settings from the environment, as an executor's)."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return asyncio.run(_keep(listener, app_id, directory))
    except StoreError as exc:
        logger.error("%s", exc)
        return 2
