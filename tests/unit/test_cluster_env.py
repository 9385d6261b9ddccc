"""The trainer's environment: rank order, the cluster spec and the variables derived from it."""

from __future__ import annotations

import json

import pytest

from primus.config.spec import JobSpec
from primus.executor.cluster import build_cluster, rank_order, trainer_env
from primus.executor.executor import describe_exit
from primus.state.records import ClusterSpec

A, B = "10.0.0.1", "10.0.0.2"

# chief-0 and worker-0 share host A; worker-1 runs on B; ps-0 (no ports) on B.
ADDRESSES = {("chief", 0): A, ("worker", 0): A, ("worker", 1): B, ("ps", 0): B}


def job(*roles: dict) -> JobSpec:
    return JobSpec.model_validate({"name": "job", "roles": [
        {"command": "train", **role} for role in roles]})


JOB = job({"name": "chief"}, {"name": "worker", "num": 2, "ports": 2}, {"name": "ps", "ports": 0})


def cluster_of(spec: JobSpec, addresses: dict[tuple[str, int], str]) -> ClusterSpec:
    """The cluster of attempt 2 once every executor registered at its address; executor i of the
    n-th role (from 0) reserved ports 5000 + 1000 n + i, then the same + 100, + 200..."""
    return build_cluster(spec, attempt=2, registered={
        (role.name, i): (addresses[(role.name, i)],
                         [5000 + 1000 * n + i + 100 * p for p in range(role.ports)], 1)
        for n, role in enumerate(spec.roles) for i in range(role.num)})


def env_of(role: str, index: int, spec: JobSpec = JOB,
           addresses: dict[tuple[str, int], str] = ADDRESSES) -> dict[str, str]:
    return trainer_env("app-1", role, index, 2, cluster_of(spec, addresses))


def test_rank_order_is_roles_as_listed_then_index():
    assert rank_order(JOB) == [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0)]


def test_tf_config_lists_each_role_in_index_order_with_its_first_port():
    assert json.loads(env_of("worker", 1)["TF_CONFIG"])["cluster"] == {
        "chief": [f"{A}:5000"], "worker": [f"{A}:6000", f"{B}:6001"]}


def test_tf_config_names_the_trainers_own_task():
    assert json.loads(env_of("worker", 1)["TF_CONFIG"])["task"] == {"type": "worker", "index": 1}


def test_role_without_ports_is_left_out_of_tf_config():
    assert "ps" not in json.loads(env_of("chief", 0)["TF_CONFIG"])["cluster"]


def test_role_without_ports_still_counts_in_world_size():
    assert env_of("chief", 0)["WORLD_SIZE"] == "4"


@pytest.mark.parametrize(("executor", "rank", "local_rank", "local_world_size"), [
    (("chief", 0), 0, 0, 2),
    (("worker", 0), 1, 1, 2),
    (("worker", 1), 2, 0, 2),
    (("ps", 0), 3, 1, 2),
])
def test_ranks_are_global_in_rank_order_and_local_per_address(executor, rank, local_rank,
                                                              local_world_size):
    env = env_of(*executor)

    assert (env["RANK"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == (
        str(rank), str(local_rank), str(local_world_size))


def test_master_is_rank_0_at_its_first_port():
    env = env_of("worker", 1)

    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == (A, "5000")


def test_master_is_the_lowest_rank_that_reserved_a_port():
    spec = job({"name": "ps", "ports": 0}, {"name": "worker", "num": 2})

    env = env_of("worker", 0, spec, {("ps", 0): B, ("worker", 0): A, ("worker", 1): B})

    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == (A, "6000")


def test_primus_variables_identify_app_executor_attempt_ports_and_host():
    env = env_of("worker", 1)

    assert {name: value for name, value in env.items() if name.startswith("PRIMUS_")} == {
        "PRIMUS_APP_ID": "app-1", "PRIMUS_ROLE": "worker", "PRIMUS_INDEX": "1",
        "PRIMUS_ATTEMPT": "2", "PRIMUS_PORTS": "6001,6101", "PRIMUS_HOST": B,
        "PRIMUS_APP_ATTEMPT": "2", "PRIMUS_CLUSTER_VERSION": "1"}


@pytest.mark.parametrize(("returncode", "expected"), [
    (0, (0, "")),
    (3, (3, "trainer exited with code 3")),
    (-9, (137, "trainer killed by SIGKILL")),
    (-15, (143, "trainer killed by SIGTERM")),
])
def test_describe_exit_gives_a_shell_style_code_and_a_diagnosis(returncode, expected):
    assert describe_exit(returncode) == expected
