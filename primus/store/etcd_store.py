"""The etcd implementation of :class:`~primus.store.api.Coordinator`, on the ``aetcd`` client.

This is the only module that imports ``aetcd``. Library errors are converted here, at the
boundary, into :mod:`primus.store.api` errors that name the endpoint.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ipaddress
import logging
import re
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path

import aetcd
import grpc
from aetcd import exceptions as aetcd_errors
from aetcd import rpc

from primus.config.etcd import EtcdConfig
from primus.store.api import (
    Alarm,
    CompactedError,
    Compare,
    CompareTarget,
    Coordinator,
    Delete,
    EventType,
    Get,
    Grant,
    KeyValue,
    Lease,
    MemberSpace,
    Op,
    Put,
    Snapshot,
    StoreAuthError,
    StoreError,
    StoreSpaceExceededError,
    StoreUnavailableError,
    TxnResult,
    WatchEvent,
)

logger = logging.getLogger(__name__)

_COMPARE_OPS = {"==": rpc.Compare.EQUAL, "!=": rpc.Compare.NOT_EQUAL,
                "<": rpc.Compare.LESS, ">": rpc.Compare.GREATER}
_CHANNEL_OPTIONS: dict[str, object] = {
    "grpc.keepalive_time_ms": 10_000, "grpc.keepalive_timeout_ms": 5_000,
    "grpc.max_receive_message_length": 64 * 1024 * 1024,
    # gRPC waits 1 s, then 1.6 times longer after each failed reconnect (up to 120 s), and
    # fails calls at once meanwhile: after an outage of 8 s it stayed away ~2 s more, after
    # 12 s ~5 s, eating into every lease's TTL. A lease holder must be back within a second.
    "grpc.initial_reconnect_backoff_ms": 250,
    "grpc.max_reconnect_backoff_ms": 1_000}
MAINTENANCE_TIMEOUT = 300.0
"""Seconds a compaction or a defragmentation may take (a member's database of gigabytes is
rewritten while it runs)."""
QUOTA_METRIC = b"etcd_server_quota_backend_bytes "
"""The line of a member's ``/metrics`` that gives its space quota (etcd's API does not)."""
METRICS_READ_LIMIT = 16 * 1024 * 1024
"""Bytes of a member's ``/metrics`` read at most (about 150 KiB in etcd 3.5)."""


def _host_port(endpoint: str) -> tuple[str, int]:
    bare = endpoint.split("://", 1)[-1].rstrip("/")
    host, _, port = bare.rpartition(":")
    if not host or not port.isdigit():
        raise StoreError(f"etcd endpoint {endpoint!r} is not host:port or scheme://host:port")
    return host.strip("[]"), int(port)


def _range(get: Get, revision: int = 0) -> rpc.RangeRequest:
    """The range request of ``get`` (its last ``limit`` keys: the first, keys descending)."""
    raw = get.key.encode()
    request = rpc.RangeRequest(key=raw, range_end=_range_end(raw) if get.prefix else b"",
                               limit=get.limit, revision=revision)
    if get.last:
        request.sort_order = rpc.RangeRequest.DESCEND
        request.sort_target = rpc.RangeRequest.KEY
    return request


def _kvs(found: Sequence[rpc.KeyValue], backwards: bool) -> tuple[KeyValue, ...]:
    """A range's keys, in key order (a range of the last keys comes descending)."""
    kvs = tuple(_kv(kv) for kv in found)
    return kvs[::-1] if backwards else kvs


def _range_end(prefix: bytes) -> bytes:
    """The smallest key greater than every key starting with ``prefix``."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


# etcd 3.4 gives the reason it refused a watch as a Go gRPC status text.
_GO_STATUS = re.compile(r"rpc error: code = (\w+) desc = (.*)", re.DOTALL)
_STATUS_BY_GO_NAME = {code.name.title().replace("_", ""): code for code in grpc.StatusCode}


def _watch_refusal(reason: str) -> grpc.aio.AioRpcError:
    """The gRPC error for a watch that etcd refused, with ``reason`` as it gave it."""
    match = _GO_STATUS.fullmatch(reason)
    if match and match[1] in _STATUS_BY_GO_NAME:
        return grpc.aio.AioRpcError(_STATUS_BY_GO_NAME[match[1]], details=match[2])
    code = (grpc.StatusCode.PERMISSION_DENIED if "permission denied" in reason
            else grpc.StatusCode.FAILED_PRECONDITION)
    return grpc.aio.AioRpcError(code, details=reason)


# etcd refuses a request that arrived before its users or roles last changed; 3.5 says so as
# UNKNOWN with the first text, the second is etcd's gRPC error for it. Every change (an identity
# added at a submit, removed by the keeper) can race every client's request this way.
_STALE_AUTH = ("auth: revision in header is old", "revision of auth store is old")
_TOKEN_RETRIES = 10
_TOKEN_BACKOFF = 0.02
"""Seconds before the second retry of a refused call, doubling up to 0.32: a burst of auth
changes (a server's keeper removing identities while submissions add others) outlasted five
immediate retries under load."""


def _token_refused(code: grpc.StatusCode, details: str | None) -> bool:
    """Whether etcd refused a request for its token: expired, unknown, or older than etcd's
    current users and roles. Such a request was not applied; it is safe to send again."""
    return code is grpc.StatusCode.UNAUTHENTICATED or any(
        text in (details or "") for text in _STALE_AUTH)


class _RenewToken(grpc.aio.UnaryUnaryClientInterceptor):
    """Re-authenticates and retries a call that etcd refused for its auth token.

    etcd expires tokens (a simple token after ``--auth-token-ttl`` seconds without a request, 300
    by default; a JWT at its expiry) and aetcd never gets a new one; lease keepalives and open
    watches do not count as requests, so a quiet executor would otherwise lose access for good.
    And etcd refuses a request that arrived before a change of users or roles, which on a shared
    site happens at every submit: the retries, spaced from the second on, cover a burst of such
    changes.
    """

    def __init__(self, client: _Client) -> None:
        self._client = client

    async def intercept_unary_unary(self, continuation, client_call_details, request):  # type: ignore[no-untyped-def]
        call = await continuation(client_call_details, request)
        if "token" not in client_call_details.metadata:
            return call
        for attempt in range(_TOKEN_RETRIES):
            code = await call.code()
            if not _token_refused(code, await call.details()):
                return call
            # etcd dates a simple token's request when it arrives, so a request refused as older
            # than a change is sent again as it is; a JWT carries its date, so one refused twice
            # gets a new token (each costs etcd a bcrypt: not for every client at every change).
            if attempt > 0:
                await asyncio.sleep(min(_TOKEN_BACKOFF * 2 ** (attempt - 1), 0.32))
            if code is grpc.StatusCode.UNAUTHENTICATED or attempt > 0:
                await self._client.authenticate()
            call = await continuation(
                client_call_details._replace(metadata=grpc.aio.Metadata(*self._client.metadata)),
                request)
        return call


class _Watcher(aetcd.Watcher):
    """aetcd's watcher, failing a watch that etcd refuses (aetcd would wait on it forever),
    and keeping the revision etcd created the watch at (``created_revision``)."""

    created_revision = 0

    async def _handle_response(self, response: rpc.WatchResponse) -> None:
        if response.created and response.canceled and not response.compact_revision:
            async with self._lock:
                if self._new_callback is not None:
                    self._new_callback.error = _watch_refusal(response.cancel_reason)
                    self._new_callback_ready.notify_all()
            return
        if response.created:
            self.created_revision = response.header.revision
        await super()._handle_response(response)


class _Client(aetcd.Client):
    """aetcd's client with TLS credentials and renewed auth tokens.

    aetcd itself only opens insecure channels, and authenticates once per connection.
    """

    def __init__(self, host: str, port: int, credentials: grpc.ChannelCredentials | None,
                 target: str | None = None, **kwargs: object) -> None:
        super().__init__(host=host, port=port, **kwargs)  # type: ignore[arg-type]
        self._credentials = credentials
        self._target = target
        self._watchers: set[_Watcher] = set()

    async def connect(self) -> None:
        if self._connected.is_set():
            return
        if self._is_connecting:  # type: ignore[has-type]  # set by aetcd's __init__
            async with asyncio.timeout(self._connect_wait_timeout):
                await self._connected.wait()
            return
        self._is_connecting = True
        try:
            target = self._target or f"{self._host}:{self._port}"
            options = list(self._options.items())
            # Only a user's token can be refused; without one, calls skip the interceptor's
            # slower path (a task more per call).
            interceptors = [_RenewToken(self)] if self._username is not None else None
            if self._credentials is None:
                self.channel = grpc.aio.insecure_channel(target, options=options,
                                                         interceptors=interceptors)
            else:
                self.channel = grpc.aio.secure_channel(target, self._credentials,
                                                       options=options,
                                                       interceptors=interceptors)
            if self._username is not None:
                self.auth_stub = rpc.AuthStub(self.channel)
                await self.authenticate()
            self.kvstub = rpc.KVStub(self.channel)
            self.clusterstub = rpc.ClusterStub(self.channel)
            self.leasestub = rpc.LeaseStub(self.channel)
            self.maintenancestub = rpc.MaintenanceStub(self.channel)
            self._connected.set()
        finally:
            self._is_connecting = False

    async def authenticate(self) -> None:
        """Get a new auth token for the configured user."""
        try:
            response = await self.auth_stub.Authenticate(
                rpc.AuthenticateRequest(name=self._username, password=self._password),
                timeout=self._timeout)
        except grpc.aio.AioRpcError as exc:
            # etcd answers a wrong user or password with INVALID_ARGUMENT.
            if exc.code() is not grpc.StatusCode.INVALID_ARGUMENT:
                raise
            raise aetcd_errors.UnauthenticatedError(exc.details()) from exc
        self.metadata = (("token", response.token),)

    async def open_watch(self, key: bytes, range_end: bytes, start_revision: int
                         ) -> tuple[aetcd.Watch, int]:
        """Watch ``[key, range_end)`` from ``start_revision`` (0: after the current revision)
        on a stream of its own; the watch, and the store's revision when etcd created it.

        etcd checks each new watch against the token its stream was opened with, and tokens
        expire; so rather than share one long-lived stream as aetcd does, each watch opens a
        stream with the current token, and a refused watch renews the token and retries once.
        """
        await self.connect()
        events: asyncio.Queue[aetcd.Event | Exception | None] = asyncio.Queue()
        try:
            watcher = await self._start_watcher(key, range_end, start_revision, events.put)
        except grpc.aio.AioRpcError as exc:
            # An expired token is refused as "invalid auth token", or, when etcd no longer
            # knows the token at all, as "permission denied": both are retried once.
            if self._username is None or not (
                    _token_refused(exc.code(), exc.details())
                    or exc.code() is grpc.StatusCode.PERMISSION_DENIED):
                raise
            await self.authenticate()
            watcher = await self._start_watcher(key, range_end, start_revision, events.put)

        self._watchers.add(watcher)

        async def iterate() -> AsyncIterator[aetcd.Event]:
            while (event := await events.get()) is not None:  # None: the watcher shut down
                if isinstance(event, Exception):
                    raise event
                yield event

        async def cancel() -> None:
            self._watchers.discard(watcher)
            await watcher.shutdown()

        return aetcd.Watch(iterate, cancel, None), watcher.created_revision

    async def _start_watcher(self, key: bytes, range_end: bytes, start_revision: int,
                             callback: Callable[[object], Awaitable[None]]) -> _Watcher:
        watcher = _Watcher(rpc.WatchStub(self.channel), timeout=self._timeout,
                           metadata=self.metadata)
        task = asyncio.current_task()
        cancels = task.cancelling() if task is not None else 0
        try:
            await watcher.add_callback(key, callback, range_end=range_end,
                                       start_revision=start_revision)
            if task is not None and task.cancelling() > cancels:
                # aetcd waits for the watch with asyncio.wait_for, which on Python 3.11 can
                # swallow a cancellation arriving as the watch is created (CPython gh-86296):
                # the caller would go on waiting on a watch it was asked to leave.
                raise asyncio.CancelledError
        except BaseException:
            await watcher.shutdown()
            raise
        return watcher

    async def close(self) -> None:
        # Shutting the watchers down ends their iterators, as aetcd's shared watcher's would.
        for watcher in list(self._watchers):
            await watcher.shutdown()
        self._watchers.clear()
        await super().close()


class _KeepAlives:
    """Every lease renewal of one connection on one long-lived ``LeaseKeepAlive`` stream.

    aetcd opens a stream per renewal; etcd's own clients keep one open, and so does this. A
    renewal writes the lease's ID on the stream and waits for the reply with that ID (etcd
    answers each request in order); a stream that fails or that left a renewal unanswered
    fails every renewal waiting on it, and the next renewal opens a new one, with the
    connection's current auth token.
    """

    def __init__(self, client: _Client) -> None:
        self._client = client
        self._stream: grpc.aio.StreamStreamCall | None = None
        self._writing = asyncio.Lock()
        self._waiting: dict[int, collections.deque[asyncio.Future[int]]] = {}

    async def renew(self, lease_id: int) -> int:
        """The lease's remaining TTL as etcd renewed it (0: etcd no longer knows it)."""
        await self._client.connect()
        if self._stream is None:
            self._stream = self._client.leasestub.LeaseKeepAlive(metadata=self._client.metadata)
            asyncio.get_running_loop().create_task(self._read(self._stream))
        stream = self._stream
        reply: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(lease_id, collections.deque()).append(reply)
        try:
            async with self._writing:
                if self._stream is not stream:
                    # Dropped while this renewal waited its turn (another one's cancel or
                    # timeout): writing would find the call finished.
                    raise _unavailable("the lease keepalive stream closed")
                try:
                    await stream.write(rpc.LeaseKeepAliveRequest(ID=lease_id))
                except asyncio.InvalidStateError as exc:  # the call ended under the write
                    raise _unavailable("the lease keepalive stream closed") from exc
            return await reply  # taken off ``_waiting`` by ``_read``
        except BaseException:
            # Unanswered (a timeout, a cancellation, a broken stream): its reply could still
            # come and be taken for the next renewal's, so this stream is not used again
            # (dropping it forgets every renewal waiting on it, this one too).
            reply.cancel()  # nobody awaits it any more
            self._drop(stream)
            raise

    async def _read(self, stream: grpc.aio.StreamStreamCall) -> None:
        failure: BaseException = _unavailable("the lease keepalive stream closed")
        try:
            async for reply in stream:
                waiting = self._waiting.get(reply.ID)
                if waiting:
                    answered = waiting.popleft()
                    if not answered.done():
                        answered.set_result(max(int(reply.TTL), 0))
        except grpc.aio.AioRpcError as exc:
            failure = exc
        except asyncio.CancelledError:
            pass
        self._drop(stream, failure)

    def _drop(self, stream: grpc.aio.StreamStreamCall, failure: BaseException | None = None
              ) -> None:
        if self._stream is None or stream is not self._stream:
            return
        self._stream = None
        stream.cancel()
        for waiting in self._waiting.values():
            for reply in waiting:
                if not reply.done():
                    reply.set_exception(failure or _unavailable(
                        "the lease keepalive stream was dropped"))
        self._waiting.clear()

    def close(self) -> None:
        if self._stream is not None:
            self._drop(self._stream)


def _credentials(config: EtcdConfig) -> grpc.ChannelCredentials | None:
    """The TLS credentials of ``config``'s connections (``None``: plain)."""
    if not config.tls:
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=Path(config.ca_cert).read_bytes() if config.ca_cert else None,
        private_key=Path(config.key).read_bytes() if config.key else None,
        certificate_chain=Path(config.cert).read_bytes() if config.cert else None,
    )


def quota_of(metrics: bytes) -> int | None:
    """The space quota an etcd member's ``/metrics`` text states, if it states one."""
    for line in metrics.splitlines():
        if line.startswith(QUOTA_METRIC):
            try:
                return int(float(line[len(QUOTA_METRIC):].split()[0]))
            except (ValueError, IndexError):
                return None
    return None


def _unavailable(details: str) -> grpc.aio.AioRpcError:
    """An UNAVAILABLE error of our own making, converted like etcd's (``_call``)."""
    return grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(),
                                grpc.aio.Metadata(), details)


def _kv(raw: rpc.KeyValue) -> KeyValue:
    return KeyValue(raw.key.decode(), bytes(raw.value), raw.create_revision, raw.mod_revision,
                    raw.version, raw.lease)


class EtcdCoordinator(Coordinator):
    """A :class:`Coordinator` backed by one etcd cluster.

    Use :meth:`connect`, which tries each endpoint in order and keeps the first that answers.
    """

    def __init__(self, client: _Client, endpoint: str, config: EtcdConfig) -> None:
        self._client = client
        self.endpoint = endpoint
        self.config = config
        self._keepalives = _KeepAlives(client)

    @classmethod
    async def connect(cls, config: EtcdConfig) -> EtcdCoordinator:
        """Connect to the first endpoint of ``config`` that answers a status request.

        Raises:
            StoreUnavailableError: no endpoint answered within the request timeout; the message
                names every endpoint tried and why it failed.
            StoreAuthError: the endpoint refused the credentials.
        """
        if not config.endpoints:
            raise StoreError("no etcd endpoint configured")
        credentials = _credentials(config)
        options = dict(_CHANNEL_OPTIONS)
        if config.server_name:
            return await cls._connect_members(config, credentials, options)
        failures = []
        for endpoint in config.endpoints:
            host, port = _host_port(endpoint)
            client = _Client(
                host, port, credentials, username=config.user, password=config.password,
                timeout=config.request_timeout, options=options,
            )
            store = cls(client, endpoint, config)
            try:
                await store._call(client.connect())
                await store._call(client.maintenancestub.Status(
                    rpc.StatusRequest(), timeout=config.request_timeout,
                    metadata=client.metadata))
                return store
            except StoreAuthError:
                await client.close()
                raise
            except StoreError as exc:
                failures.append(f"{endpoint}: {exc}")
                await client.close()
        raise StoreUnavailableError("cannot reach etcd: " + "; ".join(failures))

    @classmethod
    async def _connect_members(cls, config: EtcdConfig,
                               credentials: grpc.ChannelCredentials | None,
                               options: dict[str, object]) -> EtcdCoordinator:
        """One connection over every endpoint: gRPC uses one member and moves to the next
        when it fails (calls in flight then fail as unavailable, and are retried by their
        callers as after any outage). Each member's certificate is checked against
        ``config.server_name``.

        Raises:
            StoreError: an endpoint's host does not resolve to an IPv4 address.
            StoreUnavailableError: no member answered within the request timeout.
            StoreAuthError: the members refused the credentials.
        """
        assert config.server_name is not None
        addresses = []
        for endpoint in config.endpoints:
            host, port = _host_port(endpoint)
            try:
                ipaddress.IPv4Address(host)
                addresses.append(f"{host}:{port}")
            except ValueError:
                try:
                    found = await asyncio.get_running_loop().getaddrinfo(
                        host, port, family=socket.AF_INET, type=socket.SOCK_STREAM)
                except OSError as exc:
                    raise StoreError(f"etcd endpoint {endpoint}: {host} does not resolve to "
                                     f"an IPv4 address: {exc}") from exc
                addresses.append(f"{found[0][4][0]}:{port}")
        names = ",".join(config.endpoints)
        client = _Client(*_host_port(config.endpoints[0]), credentials,
                         target="ipv4:" + ",".join(addresses), username=config.user,
                         password=config.password, timeout=config.request_timeout,
                         options={**options,
                                  "grpc.ssl_target_name_override": config.server_name})
        store = cls(client, names, config)
        try:
            await store._call(client.connect())
            await store._call(client.maintenancestub.Status(
                rpc.StatusRequest(), timeout=config.request_timeout, metadata=client.metadata))
        except StoreError:
            await client.close()
            raise
        return store

    async def _call(self, awaitable):  # type: ignore[no-untyped-def]
        """Await a client call, converting library errors into store errors."""
        try:
            return await awaitable
        except grpc.aio.AioRpcError as exc:
            raise self._convert(exc.code(), exc.details()) from exc
        except aetcd_errors.UnauthenticatedError as exc:
            raise StoreAuthError(f"etcd at {self.endpoint} refused the credentials: {exc}") \
                from exc
        except aetcd_errors.RevisionCompactedError as exc:
            raise CompactedError(exc.compacted_revision) from exc
        except aetcd_errors.ClientError as exc:
            # aetcd maps only some gRPC codes to its own errors (not PERMISSION_DENIED); convert
            # from the gRPC status so that its calls and ours map every code the same way.
            if isinstance(exc.__cause__, grpc.aio.AioRpcError):
                raise self._convert(exc.__cause__.code(), exc.__cause__.details()) from exc
            raise StoreError(f"etcd at {self.endpoint}: {exc}") from exc
        except asyncio.TimeoutError as exc:
            raise StoreUnavailableError(f"etcd at {self.endpoint} did not answer in "
                                        f"{self.config.request_timeout}s") from exc

    def _convert(self, code: grpc.StatusCode, details: str | None) -> StoreError:
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                    grpc.StatusCode.CANCELLED):
            return StoreUnavailableError(f"etcd at {self.endpoint} unavailable: {details}")
        # etcd 3.5 refuses a defragmentation by a non-root user as UNKNOWN "auth: permission
        # denied".
        if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED) or \
                "permission denied" in (details or ""):
            return StoreAuthError(f"etcd at {self.endpoint} refused access: {details}")
        if "database space exceeded" in (details or ""):
            return StoreSpaceExceededError(
                f"etcd at {self.endpoint} is out of space ({details}): it refuses every write "
                f"until an operator recovers it (`primus etcd recover-space`, see "
                f"docs/operations.md)")
        if code is grpc.StatusCode.OUT_OF_RANGE and "compacted" in (details or ""):
            return CompactedError(0)  # a read at a past revision; etcd does not say up to which
        if code is grpc.StatusCode.RESOURCE_EXHAUSTED or "request is too large" in (details or ""):
            return StoreError(f"etcd at {self.endpoint} refused a request as too large "
                              f"({details}); nothing of it was written")
        return StoreError(f"etcd at {self.endpoint}: {code.name}: {details}")

    def _rpc_kwargs(self) -> dict:
        return {"timeout": self.config.request_timeout, "metadata": self._client.metadata}

    async def get(self, key: str) -> KeyValue | None:
        kv = await self._call(self._client.get(key.encode()))
        return None if kv is None else KeyValue(kv.key.decode(), kv.value, kv.create_revision,
                                                kv.mod_revision, kv.version, kv.lease)

    async def get_prefix(self, prefix: str, limit: int = 0, after: str | None = None,
                         revision: int = 0) -> Snapshot:
        await self._call(self._client.connect())
        raw = prefix.encode()
        start = raw if after is None else max(raw, after.encode() + b"\0")
        response = await self._call(self._client.kvstub.Range(
            rpc.RangeRequest(key=start, range_end=_range_end(raw), limit=limit,
                             revision=revision),
            **self._rpc_kwargs()))
        return Snapshot(response.header.revision, tuple(_kv(kv) for kv in response.kvs))

    async def count_prefix(self, prefix: str) -> int:
        await self._call(self._client.connect())
        raw = prefix.encode()
        response = await self._call(self._client.kvstub.Range(
            rpc.RangeRequest(key=raw, range_end=_range_end(raw), count_only=True),
            **self._rpc_kwargs()))
        return int(response.count)

    async def list_keys(self, prefix: str, modified_after: int = 0) -> list[str]:
        await self._call(self._client.connect())
        raw = prefix.encode()
        response = await self._call(self._client.kvstub.Range(
            rpc.RangeRequest(key=raw, range_end=_range_end(raw), keys_only=True,
                             min_mod_revision=modified_after + 1 if modified_after else 0),
            **self._rpc_kwargs()))
        return [kv.key.decode() for kv in response.kvs]

    async def put(self, key: str, value: bytes, lease: int = 0) -> int:
        result = await self._call(self._client.put(key.encode(), value, lease=lease or None))
        return result.header.revision

    async def delete(self, key: str, prefix: bool = False) -> int:
        await self._call(self._client.connect())
        raw = key.encode()
        request = rpc.DeleteRangeRequest(key=raw, range_end=_range_end(raw) if prefix else b"")
        response = await self._call(self._client.kvstub.DeleteRange(request,
                                                                    **self._rpc_kwargs()))
        return response.deleted

    @staticmethod
    def _compare(compare: Compare) -> rpc.Compare:
        message = rpc.Compare(key=compare.key.encode(), result=_COMPARE_OPS[compare.op])
        if compare.target is CompareTarget.VALUE:
            message.target = rpc.Compare.VALUE
            message.value = compare.operand  # type: ignore[assignment]
        elif compare.target is CompareTarget.VERSION:
            message.target = rpc.Compare.VERSION
            message.version = int(compare.operand)
        elif compare.target is CompareTarget.CREATE:
            message.target = rpc.Compare.CREATE
            message.create_revision = int(compare.operand)
        else:
            message.target = rpc.Compare.MOD
            message.mod_revision = int(compare.operand)
        return message

    @staticmethod
    def _op(op: Op) -> rpc.RequestOp:
        raw = op.key.encode()
        if isinstance(op, Put):
            return rpc.RequestOp(request_put=rpc.PutRequest(key=raw, value=op.value,
                                                            lease=op.lease))
        range_end = _range_end(raw) if op.prefix else b""
        if isinstance(op, Delete):
            return rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(
                key=raw, range_end=range_end))
        if isinstance(op, Get):
            return rpc.RequestOp(request_range=_range(op))
        raise TypeError(f"not a transaction operation: {op!r}")

    async def txn(self, compares: Sequence[Compare], success: Sequence[Op],
                  failure: Sequence[Op] = ()) -> TxnResult:
        await self._call(self._client.connect())
        gets = [op for op in success if isinstance(op, Get)]
        if not compares and not failure and len(gets) == len(success):
            return await self._read_at_one_revision(gets)
        request = rpc.TxnRequest(compare=[self._compare(c) for c in compares],
                                 success=[self._op(o) for o in success],
                                 failure=[self._op(o) for o in failure])
        response = await self._call(self._client.kvstub.Txn(request, **self._rpc_kwargs()))
        ranges = [r.response_range for r in response.responses
                  if r.WhichOneof("response") == "response_range"]
        last = [get.last for get in (success if response.succeeded else failure)
                if isinstance(get, Get)]
        reads = tuple(_kvs(found.kvs, backwards) for found, backwards in zip(ranges, last,
                                                                            strict=True))
        return TxnResult(response.succeeded, response.header.revision, reads)

    async def _read_at_one_revision(self, gets: Sequence[Get]) -> TxnResult:
        """Reads alone, as a transaction of them would give them (every one at one revision),
        made of ranges: the first read (linearizable) fixes the revision, the others read at
        it, together.

        Not a read-only transaction because etcd 3.5 before 3.5.5 panics when one is
        cancelled while it is applied (etcd-io/etcd#14110: a client that times out, is
        cancelled or dies mid-read takes the whole etcd down); a cancelled range only fails.
        """
        def request(get: Get, revision: int = 0) -> rpc.RangeRequest:
            return _range(get, revision)

        for attempt in range(3):
            first = await self._call(self._client.kvstub.Range(
                request(gets[0]) if gets else rpc.RangeRequest(key=b"\0", limit=1),
                **self._rpc_kwargs()))
            revision = first.header.revision
            try:
                rest = await asyncio.gather(*(self._call(self._client.kvstub.Range(
                    request(get, revision), **self._rpc_kwargs())) for get in gets[1:]))
            except StoreError as exc:
                if "compacted" not in str(exc) or attempt == 2:
                    raise
                continue  # the revision was compacted between two reads: read again
            responses = [first, *rest] if gets else []
            return TxnResult(True, revision, tuple(
                _kvs(response.kvs, get.last) for response, get in zip(responses, gets,
                                                                       strict=True)))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _auth(self) -> rpc.AuthStub:
        return rpc.AuthStub(self._client.channel)

    async def add_identity(self, name: str, password: str, grants: Sequence[Grant]) -> None:
        await self._call(self._client.connect())
        auth, kwargs = self._auth(), self._rpc_kwargs()
        await self._call(auth.RoleAdd(rpc.AuthRoleAddRequest(name=name), **kwargs))
        await self.grant(name, grants)
        await self._call(auth.UserAdd(rpc.AuthUserAddRequest(name=name, password=password),
                                      **kwargs))
        await self._call(auth.UserGrantRole(rpc.AuthUserGrantRoleRequest(user=name, role=name),
                                            **kwargs))

    async def grant(self, name: str, grants: Sequence[Grant]) -> None:
        await self._call(self._client.connect())
        auth, kwargs = self._auth(), self._rpc_kwargs()
        for grant in grants:
            key = grant.key.encode()
            await self._call(auth.RoleGrantPermission(rpc.AuthRoleGrantPermissionRequest(
                name=name, perm=rpc.Permission(
                    permType=rpc.Permission.READWRITE if grant.write else rpc.Permission.READ,
                    key=key, range_end=_range_end(key) if grant.prefix else b"")),
                **kwargs))

    async def remove_identity(self, name: str) -> bool:
        await self._call(self._client.connect())
        auth, kwargs = self._auth(), self._rpc_kwargs()
        removed = False
        for call, request in ((auth.UserDelete, rpc.AuthUserDeleteRequest(name=name)),
                              (auth.RoleDelete, rpc.AuthRoleDeleteRequest(role=name))):
            try:
                await self._call(call(request, **kwargs))
                removed = True
            except StoreError as exc:
                if "not found" not in str(exc):
                    raise
        return removed

    async def list_identities(self, start: str) -> list[str]:
        await self._call(self._client.connect())
        reply = await self._call(self._auth().UserList(rpc.AuthUserListRequest(),
                                                       **self._rpc_kwargs()))
        return sorted(name for name in reply.users if name.startswith(start))

    # --- Maintenance: the database's space ------------------------------------------------

    async def check_maintainer(self) -> None:
        await self._call(self._client.connect())
        try:
            # Listing users needs the root role once auth is on, like defragmenting; etcd 3.5
            # lets any client compact and disarm, so the check cannot be left to them.
            await self._call(self._auth().UserList(rpc.AuthUserListRequest(),
                                                   **self._rpc_kwargs()))
        except StoreAuthError as exc:
            who = f"user {self.config.user!r}" if self.config.user else "this client"
            raise StoreAuthError(
                f"etcd at {self.endpoint}: {who} may not maintain etcd (compact, defragment, "
                f"disarm): that needs etcd's root role, which Primus's own etcd identity has "
                f"({exc})") from exc

    async def _members(self) -> list[rpc.Member]:
        await self._call(self._client.connect())
        reply = await self._call(self._client.clusterstub.MemberList(rpc.MemberListRequest(),
                                                                     **self._rpc_kwargs()))
        return list(reply.members)

    @staticmethod
    def _name(member: rpc.Member) -> str:
        return member.name or f"{member.ID:x}"

    async def _member(self, name: str) -> tuple[rpc.Member, bool]:
        """The member called ``name`` (or of that id in hex), and whether it is the only one."""
        members = await self._members()
        for member in members:
            if name in (member.name, f"{member.ID:x}"):
                return member, len(members) == 1
        raise StoreError(f"etcd at {self.endpoint} has no member {name!r}; its members: "
                         f"{', '.join(self._name(m) for m in members)}")

    @contextlib.asynccontextmanager
    async def _channel_to(self, member: rpc.Member, alone: bool
                          ) -> AsyncIterator[grpc.aio.Channel]:
        """A channel to ``member`` itself (at its advertised client URL, with this
        connection's credentials); this connection's own when it is the only member."""
        if alone:
            yield self._client.channel
            return
        if not member.clientURLs:
            raise StoreUnavailableError(f"etcd member {self._name(member)} has not started "
                                        f"(no client URL)")
        url = member.clientURLs[0]
        host, port = _host_port(url)
        target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if self.config.tls or url.startswith("https://"):
            options = dict(_CHANNEL_OPTIONS)
            if self.config.server_name:
                options["grpc.ssl_target_name_override"] = self.config.server_name
            channel = grpc.aio.secure_channel(target, _credentials(self.config) or
                                              grpc.ssl_channel_credentials(),
                                              options=list(options.items()))
        else:
            channel = grpc.aio.insecure_channel(target, options=list(_CHANNEL_OPTIONS.items()))
        try:
            yield channel
        finally:
            await channel.close()

    async def _quota(self, url: str) -> int | None:
        """The member's space quota, from its ``/metrics`` at ``url`` (``None``: unread)."""
        host, port = _host_port(url)
        context = None
        if self.config.tls or url.startswith("https://"):
            context = ssl.create_default_context(cafile=self.config.ca_cert)
            if self.config.cert:
                context.load_cert_chain(self.config.cert, self.config.key)
        try:
            async with asyncio.timeout(self.config.request_timeout):
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=context,
                    server_hostname=(self.config.server_name or host) if context else None)
                try:
                    writer.write(f"GET /metrics HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
                    await writer.drain()
                    chunks: list[bytes] = []
                    read = 0
                    while read < METRICS_READ_LIMIT and (chunk := await reader.read(1 << 16)):
                        chunks.append(chunk)
                        read += len(chunk)
                finally:
                    writer.close()
        except (OSError, ssl.SSLError, TimeoutError) as exc:
            logger.debug("could not read the quota of etcd at %s: %s", url, exc)
            return None
        return quota_of(b"".join(chunks))

    async def space(self) -> tuple[MemberSpace, ...]:
        members = await self._members()
        raised: dict[int, list[Alarm]] = collections.defaultdict(list)
        reply = await self._call(self._client.maintenancestub.Alarm(
            rpc.AlarmRequest(action=rpc.AlarmRequest.GET), **self._rpc_kwargs()))
        for alarm in reply.alarms:
            if alarm.alarm != rpc.NONE:
                raised[alarm.memberID].append(Alarm(rpc.AlarmType.Name(alarm.alarm)))

        async def one(member: rpc.Member) -> MemberSpace:
            name, alarms = self._name(member), tuple(raised.get(member.ID, ()))
            url = member.clientURLs[0] if member.clientURLs else ""
            try:
                async with self._channel_to(member, len(members) == 1) as channel:
                    status = await self._call(rpc.MaintenanceStub(channel).Status(
                        rpc.StatusRequest(), **self._rpc_kwargs()))
            except StoreError as exc:
                return MemberSpace(name, url, alarms=alarms, error=str(exc))
            return MemberSpace(name, url, status.dbSize, status.dbSizeInUse,
                               await self._quota(url), alarms)

        listed = await asyncio.gather(*(one(member) for member in members))
        known = {member.ID for member in members}
        gone = [MemberSpace(f"{member_id:x}", "", alarms=tuple(alarms),
                            error="no longer a member of the cluster")
                for member_id, alarms in raised.items() if member_id not in known]
        return (*listed, *gone)

    async def compact(self) -> int:
        await self._call(self._client.connect())
        current = await self._call(self._client.kvstub.Range(
            rpc.RangeRequest(key=b"\0", limit=1, count_only=True), **self._rpc_kwargs()))
        revision = int(current.header.revision)
        try:
            # physical: answered once the member has freed the history, so that a
            # defragmentation right after gives the space back.
            await self._call(self._client.kvstub.Compact(
                rpc.CompactionRequest(revision=revision, physical=True),
                timeout=max(MAINTENANCE_TIMEOUT, self.config.request_timeout),
                metadata=self._client.metadata))
        except CompactedError:
            pass  # compacted up to here already (nothing was written since)
        return revision

    async def defragment(self, member: str) -> None:
        found, alone = await self._member(member)
        async with self._channel_to(found, alone) as channel:
            await self._call(rpc.MaintenanceStub(channel).Defragment(
                rpc.DefragmentRequest(),
                timeout=max(MAINTENANCE_TIMEOUT, self.config.request_timeout),
                metadata=self._client.metadata))

    async def disarm(self, member: str, alarm: Alarm) -> None:
        try:
            member_id = (await self._member(member))[0].ID
        except StoreError:
            try:  # a member removed since it raised the alarm: its id in hex
                member_id = int(member, 16)
            except ValueError:
                raise StoreError(f"etcd at {self.endpoint} has no member {member!r}") from None
        await self._call(self._client.maintenancestub.Alarm(
            rpc.AlarmRequest(action=rpc.AlarmRequest.DEACTIVATE, memberID=member_id,
                             alarm=rpc.AlarmType.Value(alarm.value)),
            **self._rpc_kwargs()))

    async def grant_lease(self, ttl: int) -> Lease:
        lease = await self._call(self._client.lease(ttl))
        return Lease(lease.id, lease.ttl)

    async def refresh_lease(self, lease_id: int) -> int:
        return await self._call(self._keepalives.renew(lease_id))

    async def revoke_lease(self, lease_id: int) -> None:
        try:
            await self._call(self._client.revoke_lease(lease_id))
        except StoreError as exc:
            if "not found" not in str(exc):
                raise

    async def _watch_from(self, prefix: str, start_revision: int,
                          opened: Callable[[int], None] | None = None
                          ) -> AsyncIterator[WatchEvent]:
        raw = prefix.encode()
        watch, created = await self._call(self._client.open_watch(raw, _range_end(raw),
                                                                  start_revision))
        if opened is not None:
            opened(created)
        iterator = watch.__aiter__()
        try:
            while True:
                try:
                    event = await self._call(iterator.__anext__())
                except StopAsyncIteration:
                    return
                if event is None:
                    raise StoreUnavailableError(f"watch stream to {self.endpoint} closed")
                kind = EventType.PUT if event.kind == aetcd.EventKind.PUT else EventType.DELETE
                yield WatchEvent(kind, event.kv.key.decode(), event.kv.value,
                                 event.kv.mod_revision)
        finally:
            try:
                await watch.cancel()
            except Exception as exc:  # noqa: BLE001 - cancelling a dead stream may fail any way
                logger.debug("watch cancel failed: %s", exc)

    async def close(self) -> None:
        self._keepalives.close()
        try:
            await self._client.close()
        except Exception as exc:  # noqa: BLE001 - closing must never mask the caller's error
            logger.debug("closing etcd client failed: %s", exc)
