"""A trainer's usage figures: read from its cgroup's counters (v1 and v2 files), turned into
rates and peaks, shown against its reservation, and summed per role in the metrics."""

from __future__ import annotations

import pytest

from primus.config.resources import read_resources
from primus.executor.cgroups import Hierarchy, Limits, TrainerCgroup, Usage
from primus.executor.usage import UsageSampler
from primus.server.metrics import Fold, FoldCollector
from primus.state.records import (
    AppStatus,
    ExecutorPlan,
    ExecutorUsage,
    encode,
    usage_texts,
)
from primus.state.states import AppState, ExecutorState
from primus.store.api import KeyValue
from tests.support.metrics import samples

LIMITS = Limits(memory=1 << 30, cpu=2.0, pids=None)


def test_v2_counters_are_read_from_cpu_stat_and_memory_current_and_peak(tmp_path):
    (tmp_path / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\n")
    (tmp_path / "memory.current").write_text("1048576\n")
    (tmp_path / "memory.peak").write_text("4194304\n")
    cgroup = TrainerCgroup(Hierarchy(2, {"": tmp_path}), {"": tmp_path}, LIMITS)
    assert cgroup.usage() == Usage(2.5, 1 << 20, 4 << 20)
    (tmp_path / "memory.peak").unlink()  # kernels before 5.19 keep no peak
    assert cgroup.usage() == Usage(2.5, 1 << 20, None)


def test_v1_counters_are_read_from_cpuacct_and_memory(tmp_path):
    cpuacct, memory = tmp_path / "cpuacct", tmp_path / "memory"
    cpuacct.mkdir()
    memory.mkdir()
    (cpuacct / "cpuacct.usage").write_text("1500000000\n")
    (memory / "memory.usage_in_bytes").write_text("2048\n")
    (memory / "memory.max_usage_in_bytes").write_text("8192\n")
    cgroup = TrainerCgroup(Hierarchy(1, {}), {"cpuacct": cpuacct, "memory": memory}, LIMITS)
    assert cgroup.usage() == Usage(1.5, 2048, 8192)
    without = TrainerCgroup(Hierarchy(1, {}), {"memory": memory}, LIMITS)  # no accounting
    assert without.usage().cpu_seconds is None


def test_the_sampler_gives_the_cpu_of_each_interval_and_keeps_the_highest_memory():
    sampler = UsageSampler(attempt=2, cpu_reserved=2.0, memory_reserved=1 << 30)
    first = sampler.figures(100.0, Usage(10.0, 100, None))
    assert (first.cpu, first.cpu_seconds, first.memory_peak) == (None, 10.0, 100)
    second = sampler.figures(110.0, Usage(25.0, 50, None))
    assert (second.cpu, second.memory, second.memory_peak) == (1.5, 50, 100)
    third = sampler.figures(120.0, Usage(25.0, 400, 300))
    assert (third.cpu, third.memory_peak) == (0.0, 400)
    assert (third.attempt, third.cpu_reserved, third.memory_reserved) == (2, 2.0, 1 << 30)


def test_usage_is_shown_against_the_reservation_and_only_for_its_own_attempt():
    usage = ExecutorUsage(attempt=3, time=1.0, cpu=0.4812, memory=310 << 20,
                          memory_peak=402 << 20, cpu_reserved=2, memory_reserved=1 << 30)
    assert usage_texts(usage, 3) == ("0.48 of 2", "310 MiB, peak 402 MiB of 1 GiB")
    assert usage_texts(usage, 4) == ("-", "-")
    assert usage_texts(None, 1) == ("-", "-")


@pytest.mark.parametrize("interval", [0, 0.5, 3601, "fast", True])
def test_a_usage_interval_out_of_range_is_refused_naming_the_key(interval):
    def refuse(field, value, allowed):
        raise ValueError(f"{field}: {value!r}: {allowed}")
    with pytest.raises(ValueError, match="resources.usage_interval"):
        read_resources({"usage_interval": interval}, refuse)


def test_the_metrics_sum_each_roles_usage_of_running_attempts_only():
    fold = Fold("/p", "default")
    revision = iter(range(1, 100))

    def put(key: str, value: bytes) -> None:
        fold.put(KeyValue("/p/apps/" + key, value, 1, next(revision), 1))

    put("a/status", encode(AppStatus(app_id="a", name="a", state=AppState.RUNNING,
                                     submit_time=1.0)))
    put("a/spec", b'{"name":"a","roles":[{"name":"worker","command":"x","num":3}]}')
    for index, (state, attempt) in enumerate(((ExecutorState.RUNNING, 1),
                                              (ExecutorState.RUNNING, 2),
                                              (ExecutorState.FAILED, 1))):
        put(f"a/executors/worker/{index}/plan", encode(ExecutorPlan(
            role="worker", index=index, attempt=attempt, host="h", address="h", state=state)))
        put(f"a/executors/worker/{index}/usage", encode(ExecutorUsage(
            attempt=1, time=1.0, cpu=0.5, memory=100, cpu_reserved=1.0, memory_reserved=1000)))
    shown = samples(FoldCollector(fold, ()))
    label = (("app", "a"), ("role", "worker"))
    # worker-1's figures are of its first attempt, worker-2's attempt ended: worker-0's alone
    assert shown["primus_role_cpu_used_cores", label] == 0.5
    assert shown["primus_role_cpu_reserved_cores", label] == 1.0
    assert shown["primus_role_memory_used_bytes", label] == 100
    assert shown["primus_role_memory_reserved_bytes", label] == 1000


def test_a_roles_usage_sums_its_running_executors_measured_in_their_current_attempt():
    from primus.config.spec import JobSpec
    from primus.state.keys import AppKeys
    from primus.state.view import AppView, ExecutorView

    view = AppView(AppKeys("/p", "a"), JobSpec.model_validate(
        {"name": "a", "roles": [{"name": "worker", "command": "x", "num": 3}]}),
        AppStatus(app_id="a", name="a", state=AppState.RUNNING, submit_time=1.0))
    assert view.role_usage("worker") == ""
    for index, (state, attempt) in enumerate(((ExecutorState.RUNNING, 1),
                                              (ExecutorState.RUNNING, 2),
                                              (ExecutorState.SUCCEEDED, 1))):
        view.executors[("worker", index)] = ExecutorView(
            plan=ExecutorPlan(role="worker", index=index, attempt=attempt, host="h",
                              address="h", state=state),
            usage=ExecutorUsage(attempt=1, time=1.0, cpu=0.75, memory=256 << 20,
                                cpu_reserved=2.0, memory_reserved=1 << 30))
    assert view.role_usage("worker") == "using 0.75 of 2 cores, 256 MiB of 1 GiB"


def test_the_metrics_count_the_change_log_entries_in_etcd_by_kind():
    from primus.state.topology import TopologyChange

    fold = Fold("/p", "default")
    for seq, kind in enumerate(("scale", "resize", "resize", "forged"), start=1):
        fold.put(KeyValue(f"/p/apps/a/changes/{seq}", encode(TopologyChange(
            seq=seq, time=1.0, user="alice", kind=kind, message="m")), 1, seq, 1))
    shown = samples(FoldCollector(fold, ()))
    assert shown["primus_topology_changes", (("kind", "resize"),)] == 2
    assert shown["primus_topology_changes", (("kind", "other"),)] == 1
    fold.delete("/p/apps/a/changes/2", 10)
    assert samples(FoldCollector(fold, ()))["primus_topology_changes", (("kind", "resize"),)] == 1


def test_a_reservation_raises_a_trainers_limits_no_further_than_the_servers_record():
    from primus.config.spec import RoleSpec
    from primus.executor.executor import within_record
    from primus.state.records import Reservation
    from primus.state.topology import RoleResources

    role = RoleSpec.model_validate({"name": "worker", "command": "x", "cpu": 1,
                                    "memory": "1Gi"})
    forged = Reservation(app_id="a", user="u", queue="", role="worker", index=0, host="h",
                         cpu=64, memory=1 << 40, since=0.0)
    assert (within_record(forged, None, role).cpu,
            within_record(forged, None, role).memory) == (1.0, 1 << 30)
    resized = RoleResources(change=2, cpu=4, memory=2 << 30)
    capped = within_record(forged, resized, role)
    assert (capped.cpu, capped.memory) == (4.0, 2 << 30)
    granted = forged.model_copy(update={"cpu": 2.0, "memory": 1 << 30})
    assert within_record(granted, resized, role).cpu == 2.0  # a grant below the record
