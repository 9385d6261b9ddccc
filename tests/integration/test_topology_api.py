"""The topology RPCs over a real gRPC channel: a real server process, the session etcd, and
applications submitted through the API with a real AM, executors and trainers (``sleep``).

What the AM does with a change (launching, retiring, what trainers see) is
tests/integration/test_topology.py's business; here: what each RPC answers, what it writes to
etcd, how GetApplication and WatchApplication show it, who may ask, and that every refused
change names its field and writes nothing.
"""

from __future__ import annotations

import asyncio
import getpass
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from primus.am.streams import STATS_INTERVAL
from primus.api.client import ApiError, Client, Update
from primus.api.servicer import MAX_REQUEST_BYTES
from primus.api.v1 import primus_pb2 as pb
from primus.client.api import AppNotFoundError
from primus.client.watch import RoleChanged
from primus.config.etcd import EtcdConfig
from primus.state.keys import AppKeys
from primus.state.records import decode
from primus.state.states import AppState
from primus.state.topology import RoleAdded, RoleRemoved, TopologyChange
from primus.store.etcd_store import EtcdCoordinator
from tests.support.jobs import READER_JOB, write_days
from tests.support.tokens import client_of
from tests.support.waiting import wait_until

JOB = ("name: train\npolicy: {stop_grace: 2s}\n"
       "roles: [{name: worker, num: 1, cpu: 0.1, command: sleep 600}]\n")

EVALUATOR = "name: evaluator\nnum: 2\ncpu: 0.1\ncommand: sleep 600\n"


def app_keys(config: EtcdConfig, prefix: str, app_id: str) -> dict[str, int]:
    """Every key of the application with the revision it was last written at."""
    async def read() -> dict[str, int]:
        store = await EtcdCoordinator.connect(config)
        try:
            snapshot = await store.get_prefix(AppKeys(prefix, app_id).root)
            return {kv.key: kv.mod_revision for kv in snapshot.kvs}
        finally:
            await store.close()
    return asyncio.run(read())


def value_of(config: EtcdConfig, key: str) -> bytes | None:
    async def read() -> bytes | None:
        store = await EtcdCoordinator.connect(config)
        try:
            kv = await store.get(key)
            return kv.value if kv is not None else None
        finally:
            await store.close()
    return asyncio.run(read())


def running_app(client: Client, job: str, base: Path | None = None) -> str:
    """Submit ``job`` through the API and return its id once it runs."""
    app_id = client.submit(job, source="job.yaml", base_directory=str(base or ""))
    wait_until(lambda: client.get_app(app_id).status.state is AppState.RUNNING, 60,
               f"{app_id} to run")
    return app_id


def steady_keys(config: EtcdConfig, prefix: str, app_id: str) -> dict[str, int]:
    """The application's keys once reads over more than the AM's stats interval agree: the
    AM and executors have written what starting wrote (the stats of a stream at most every
    ``STATS_INTERVAL`` seconds), so a refused change is the only thing that could move them."""
    reads: list[dict[str, int]] = []

    def settled() -> dict[str, int] | None:
        reads.append(app_keys(config, prefix, app_id))
        last = reads[-3:]
        return last[0] if len(last) == 3 and last[0] == last[1] == last[2] else None
    return wait_until(settled, 30, f"the keys of {app_id} to settle",
                      interval=STATS_INTERVAL * 0.75)


def role_changes(updates: Iterator[Update], until: Callable[[list[RoleChanged]], bool],
                 timeout: float = 30) -> list[RoleChanged]:
    """The RoleChanged of the watch ``updates`` (progress every second) until ``until`` holds
    for what was seen."""
    seen: list[RoleChanged] = []
    deadline = time.monotonic() + timeout
    for update in updates:
        seen += [c for c in update.changes if isinstance(c, RoleChanged)]
        if until(seen):
            return seen
        if time.monotonic() > deadline:
            break
    pytest.fail(f"the watch did not show the role changes within {timeout}s; saw {seen}")


def refused(call: Callable[[], object]) -> ApiError:
    with pytest.raises(ApiError) as error:
        call()
    return error.value


def log_entry(config: EtcdConfig, prefix: str, app_id: str, seq: int) -> TopologyChange:
    value = value_of(config, AppKeys(prefix, app_id).change(seq))
    assert value is not None, f"no changes/{seq} entry"
    return decode(TopologyChange, value)


# ---- What each RPC answers and writes -------------------------------------------------------

def test_scale_role_records_the_desired_count_and_get_and_watch_show_it(client, etcd, prefix):
    app_id = running_app(client, JOB)
    updates = client.watch(app_id, progress_interval=1)
    assert next(updates).snapshot is not None

    changed = client.scale_role(app_id, "worker", 3)

    assert changed.role is not None and changed.role.name == "worker"
    assert (changed.previous, changed.role.num) == (1, 3)
    keys = AppKeys(prefix, app_id)
    assert value_of(etcd, keys.desired("worker")) == b"3"
    entry = log_entry(etcd, prefix, app_id, 1)
    assert (entry.kind, entry.user, entry.role) == ("scale", getpass.getuser(), "worker")
    app = client.get_app(app_id)
    assert app.desired == {"worker": 3} and [r.num for r in app.roles] == [3]
    assert app.spec.roles[0].num == 1  # spec_json is the job as submitted
    assert app.revision >= changed.revision
    seen = role_changes(updates, lambda seen: any(c.desired == 3 for c in seen))
    assert [(c.role.name, c.desired, c.removed) for c in seen] == [("worker", 3, False)]
    client.kill(app_id, reason="test over")


def test_resize_role_records_the_new_size_and_the_role_shows_it(client, etcd, prefix):
    app_id = running_app(client, JOB)

    changed = client.resize_role(app_id, "worker", cpu=0.25, memory="48Mi")

    assert changed.role is not None and (changed.role.cpu, changed.role.memory) == \
        (0.25, 48 << 20)
    entry = log_entry(etcd, prefix, app_id, 1)
    assert (entry.kind, entry.role) == ("resize", "worker")
    assert "to 0.25 CPUs, 48 MiB per executor" in entry.message
    assert [(r.cpu, r.memory) for r in client.get_app(app_id).roles] == [(0.25, 48 << 20)]
    with pytest.raises(ApiError) as refused:
        client.resize_role(app_id, "worker", cpu=-1)
    assert refused.value.code is grpc.StatusCode.INVALID_ARGUMENT
    client.kill(app_id, reason="test over")


def test_added_role_appears_and_a_removed_one_is_sent_once_with_removed_set(
        client, etcd, prefix):
    app_id = running_app(client, JOB)
    updates = client.watch(app_id, progress_interval=1)
    next(updates)

    added = client.add_role(app_id, EVALUATOR)

    assert added.role is not None and added.role.name == "evaluator"
    assert (added.role.num, added.role.cpu, added.role.restart_policy) == (2, 0.1, "never")
    keys = AppKeys(prefix, app_id)
    stored = decode(RoleAdded, value_of(etcd, keys.role_spec("evaluator")))
    assert stored.role == added.role and stored.change == 1
    assert value_of(etcd, keys.desired("evaluator")) == b"2"
    app = client.get_app(app_id)
    assert [r.name for r in app.roles] == ["worker", "evaluator"]
    assert app.desired == {"worker": 1, "evaluator": 2}
    assert [r.name for r in app.spec.roles] == ["worker"]
    role_changes(updates, lambda seen: any(c.role.name == "evaluator" for c in seen))

    removed = client.remove_role(app_id, "evaluator")

    assert removed.revision > added.revision
    assert decode(RoleRemoved, value_of(etcd, keys.role_removed("evaluator"))).change == 2
    assert log_entry(etcd, prefix, app_id, 2).kind == "remove-role"
    assert [r.name for r in client.get_app(app_id).roles] == ["worker"]
    seen = role_changes(updates, lambda seen: any(c.removed for c in seen))
    assert [(c.role.name, c.desired, c.removed) for c in seen] == [("evaluator", 0, True)]
    client.scale_role(app_id, "worker", 2)  # a later change of another role
    later = role_changes(updates, lambda seen: bool(seen))
    assert [(c.role.name, c.removed) for c in later] == [("worker", False)], \
        "a removed role is sent once"
    client.kill(app_id, reason="test over")


def test_add_data_source_records_the_source_and_counts_its_files(client, etcd, prefix,
                                                                  tmp_path):
    write_days(tmp_path, "day-1-a.txt", "day-2-a.txt", "day-2-b.txt")
    app_id = running_app(client, READER_JOB, tmp_path)

    added = client.add_data_source(app_id, "train", str(tmp_path / "data" / "day-2-*.txt"))

    assert added.files == 2
    value = value_of(etcd, AppKeys(prefix, app_id).added_source("train", 1))
    assert value is not None and b"day-2-*.txt" in value
    entry = log_entry(etcd, prefix, app_id, 1)
    assert (entry.kind, entry.stream) == ("add-source", "train")
    app = client.get_app(app_id)
    assert [s.path for s in app.spec.data[0].sources] == [str(tmp_path / "data" / "day-1-*.txt")]
    # A source given as a mapping, with the fields of a stream's `sources` entry.
    again = client.add_data_source(app_id, "train", {"path": str(tmp_path / "data" / "*a.txt"),
                                                     "success_marker": None})
    assert again.files == 2
    client.kill(app_id, reason="test over")


# ---- Who may change an application ----------------------------------------------------------

def test_only_the_owner_or_an_admin_may_change_the_topology(token_server, pki, tmp_path, etcd,
                                                             prefix):
    write_days(tmp_path, "day-1-a.txt", "day-2-a.txt")
    with client_of(token_server, pki, tmp_path, "alice", timeout=30) as alice, \
            client_of(token_server, pki, tmp_path, "bob", timeout=30) as bob, \
            client_of(token_server, pki, tmp_path, "root", timeout=30) as root:
        app_id = running_app(alice, READER_JOB, tmp_path)
        before = steady_keys(etcd, prefix, app_id)
        source = str(tmp_path / "data" / "day-2-*.txt")
        for what, call in (
                ("scale", lambda: bob.scale_role(app_id, "worker", 2)),
                ("resize", lambda: bob.resize_role(app_id, "worker", cpu=0.5)),
                ("add a role to", lambda: bob.add_role(app_id, EVALUATOR)),
                ("remove a role of", lambda: bob.remove_role(app_id, "ps")),
                ("add a data source to", lambda: bob.add_data_source(app_id, "train", source))):
            error = refused(call)
            assert error.code is grpc.StatusCode.PERMISSION_DENIED, what
            assert f"bob may not {what} application {app_id} owned by alice" in str(error)
        assert app_keys(etcd, prefix, app_id) == before, "a refused change wrote to etcd"

        alice.scale_role(app_id, "worker", 2)
        root.add_role(app_id, EVALUATOR)
        root.remove_role(app_id, "evaluator")
        alice.add_data_source(app_id, "train", source)

        assert [(e.user, e.kind) for e in (log_entry(etcd, prefix, app_id, seq)
                                           for seq in range(1, 5))] == [
            ("alice", "scale"), ("root", "add-role"), ("root", "remove-role"),
            ("alice", "add-source")]
        alice.kill(app_id, reason="test over")


# ---- Every bad change: its status, its field, and nothing written ---------------------------

def test_every_bad_change_is_refused_naming_its_field_and_writes_nothing(client, etcd, prefix,
                                                                         tmp_path):
    app_id = running_app(client, JOB)
    stub = client._stub
    missing = str(tmp_path / "nothing-here-*.txt")
    cases = [
        # (what, call, status code, words of the message, BadRequest field or None)
        ("negative executors", lambda: client.scale_role(app_id, "worker", -1),
         grpc.StatusCode.INVALID_ARGUMENT, "executors: got -1", "executors"),
        ("zero executors", lambda: client.scale_role(app_id, "worker", 0),
         grpc.StatusCode.INVALID_ARGUMENT, "executors: got 0", "executors"),
        ("executors above the limit", lambda: client.scale_role(app_id, "worker", 100_001),
         grpc.StatusCode.INVALID_ARGUMENT, "executors: got 100001; must be >= 1 and <= 100000",
         "executors"),
        ("unknown role", lambda: client.scale_role(app_id, "chief", 2),
         grpc.StatusCode.NOT_FOUND, "has no role 'chief'; roles: worker", None),
        ("empty role name", lambda: client.scale_role(app_id, "", 2),
         grpc.StatusCode.INVALID_ARGUMENT, "role: must not be empty", None),
        ("a role name no role can have", lambda: client.remove_role(app_id, "Worker!"),
         grpc.StatusCode.INVALID_ARGUMENT, "role: got 'Worker!'; must be a role name", None),
        ("removing the last role", lambda: client.remove_role(app_id, "worker"),
         grpc.StatusCode.FAILED_PRECONDITION, "worker is the last role", None),
        ("removing an unknown role", lambda: client.remove_role(app_id, "chief"),
         grpc.StatusCode.NOT_FOUND, "has no role 'chief'", None),
        ("a role that fails validation",
         lambda: client.add_role(app_id, "name: evaluator\nnum: 0\ncommand: sleep 1\n"),
         grpc.StatusCode.INVALID_ARGUMENT, "role: num: got 0; must be an integer >= 1",
         "role.num"),
        ("a role without its command", lambda: client.add_role(app_id, {"name": "evaluator"}),
         grpc.StatusCode.INVALID_ARGUMENT, "role: command: is required", "role.command"),
        ("a duplicate role name",
         lambda: client.add_role(app_id, "name: worker\ncommand: sleep 1\n"),
         grpc.StatusCode.INVALID_ARGUMENT, "role: name: got 'worker'; must be unique",
         "role.name"),
        ("a role that is no mapping", lambda: client.add_role(app_id, "[1, 2]"),
         grpc.StatusCode.INVALID_ARGUMENT, "role: got [1, 2]; must be a mapping", "role"),
        ("a role that is no YAML", lambda: client.add_role(app_id, "name: [evaluator\n"),
         grpc.StatusCode.INVALID_ARGUMENT, "role: invalid YAML at line", "role"),
        ("an empty role", lambda: client.add_role(app_id, ""),
         grpc.StatusCode.INVALID_ARGUMENT, "role: must not be empty", "role"),
        ("an oversized role text",
         lambda: client.add_role(app_id, "name: evaluator\ncommand: sleep 1\n#" + "x" * (1 << 20)),
         grpc.StatusCode.INVALID_ARGUMENT, "role: is 1,048,610 bytes; at most 1,048,576",
         "role"),
        ("an unknown stream", lambda: client.add_data_source(app_id, "train", missing),
         grpc.StatusCode.NOT_FOUND, "has no data stream 'train'; it reads no data", None),
        ("an empty stream name", lambda: client.add_data_source(app_id, "", missing),
         grpc.StatusCode.INVALID_ARGUMENT, "stream: must not be empty", None),
        ("a relative source path",
         lambda: client.add_data_source(app_id, "train", "data/*.txt"),
         grpc.StatusCode.INVALID_ARGUMENT, "source: path: got 'data/*.txt'; must be an "
         "absolute path", "source.path"),
        ("a table without its version",
         lambda: client.add_data_source(app_id, "train",
                                        {"table": {"format": "delta", "path": "/lake"}}),
         grpc.StatusCode.INVALID_ARGUMENT, "source: table.version: must be set: the server "
         "does not read", "source.table.version"),
        ("a relative table path",
         lambda: client.add_data_source(app_id, "train", {"table": {
             "format": "delta", "path": "lake", "version": 1}}),
         grpc.StatusCode.INVALID_ARGUMENT, "source: table.path: got 'lake'; must be an "
         "absolute path", "source.table.path"),
        ("a malformed source text",
         lambda: stub.AddDataSource(pb.AddDataSourceRequest(
             app_id=app_id, stream="train", source="{path: "), timeout=30),
         grpc.StatusCode.INVALID_ARGUMENT, "source: invalid YAML", "source"),
        ("a request past the server's bound",
         lambda: client.add_role(app_id, "#" + "x" * MAX_REQUEST_BYTES),
         grpc.StatusCode.RESOURCE_EXHAUSTED, "", None),
        ("an unknown application", lambda: client.scale_role("no-such-app", "worker", 2),
         grpc.StatusCode.NOT_FOUND, "no application 'no-such-app'", None),
        ("a malformed application id", lambda: client.remove_role("../etc", "worker"),
         grpc.StatusCode.INVALID_ARGUMENT, "app_id: got '../etc'", None),
    ]
    before = steady_keys(etcd, prefix, app_id)
    for what, call, code, words, field in cases:
        with pytest.raises((ApiError, AppNotFoundError, grpc.RpcError)) as error:
            call()
        if isinstance(error.value, grpc.RpcError):  # called on the stub: the raw status
            got_code, message = error.value.code(), error.value.details()
            violations = ()
        elif isinstance(error.value, AppNotFoundError):
            got_code, message, violations = grpc.StatusCode.NOT_FOUND, str(error.value), ()
        else:
            got_code, message = error.value.code, str(error.value)
            violations = tuple(f for f, _ in error.value.violations)
        assert got_code is code, f"{what}: {got_code.name} {message}"
        assert words in message, f"{what}: {message}"
        if field is not None and not isinstance(error.value, grpc.RpcError):
            assert field in violations, f"{what}: violations {violations}"
        assert app_keys(etcd, prefix, app_id) == before, f"{what}: etcd was written"
    client.kill(app_id, reason="test over")


def test_a_data_source_matching_nothing_or_added_to_an_unknown_stream_writes_nothing(
        client, etcd, prefix, tmp_path):
    write_days(tmp_path, "day-1-a.txt")
    app_id = running_app(client, READER_JOB, tmp_path)
    before = steady_keys(etcd, prefix, app_id)
    nothing = str(tmp_path / "data" / "day-9-*.txt")

    matching_nothing = refused(lambda: client.add_data_source(app_id, "train", nothing))
    unknown_stream = refused(lambda: client.add_data_source(app_id, "eval", nothing))
    bad_field = refused(lambda: client.add_data_source(app_id, "train", {
        "path": nothing, "marker_timeout": -1}))

    assert matching_nothing.code is grpc.StatusCode.INVALID_ARGUMENT
    assert "source: path: got '" in str(matching_nothing)
    assert str(matching_nothing).endswith("; matches no file")
    assert [field for field, _ in matching_nothing.violations] == ["source.path"]
    assert unknown_stream.code is grpc.StatusCode.NOT_FOUND
    assert "has no data stream 'eval'; streams: train" in str(unknown_stream)
    assert bad_field.code is grpc.StatusCode.INVALID_ARGUMENT
    assert "source.marker_timeout" in [field for field, _ in bad_field.violations]
    assert app_keys(etcd, prefix, app_id) == before, "a refused change wrote to etcd"
    client.kill(app_id, reason="test over")


def test_a_finished_application_cannot_be_changed(client, etcd, prefix, tmp_path):
    write_days(tmp_path, "day-1-a.txt")
    app_id = running_app(client, READER_JOB, tmp_path)
    client.kill(app_id, reason="done")
    for _ in client.watch(app_id):  # ends once it has ended and its AM has exited
        pass
    assert client.get_app(app_id).status.state is AppState.KILLED
    before = app_keys(etcd, prefix, app_id)
    source = str(tmp_path / "data" / "day-1-*.txt")

    for what, call in (("scale", lambda: client.scale_role(app_id, "worker", 2)),
                       ("add a role", lambda: client.add_role(app_id, EVALUATOR)),
                       ("remove a role", lambda: client.remove_role(app_id, "ps")),
                       ("add a source", lambda: client.add_data_source(app_id, "train",
                                                                       source))):
        error = refused(call)
        assert error.code is grpc.StatusCode.FAILED_PRECONDITION, f"{what}: {error}"
        assert f"{app_id} has ended (KILLED)" in str(error), what
    assert app_keys(etcd, prefix, app_id) == before, "a refused change wrote to etcd"

