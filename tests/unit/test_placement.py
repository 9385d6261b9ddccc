"""Placement: which host of the inventory each executor runs on."""

from __future__ import annotations

import pytest

from primus.config.inventory import Host
from primus.config.spec import JobSpec
from primus.scheduler.placement import (
    MAX_EXECUTORS_PER_HOST,
    HostFree,
    PlacementError,
    place,
    place_executors,
)

GIB = 2**30


def job(placement: str = "spread", **worker: object) -> JobSpec:
    """A job with one role, ``worker``, with the given role fields."""
    return JobSpec.model_validate({"name": "job", "placement": placement, "roles": [
        {"name": "worker", "command": "train", **worker}]})


def hosts(count: int, **resources: object) -> list[Host]:
    """``count`` hosts h1, h2... each with the given resources."""
    return [Host(f"h{i}", f"10.0.0.{i}", **resources) for i in range(1, count + 1)]


def host_names(placement: dict[tuple[str, int], Host]) -> list[str]:
    """The host of each executor, in executor order."""
    return [placement[key].name for key in sorted(placement)]


def placement_error(*args: object, **kwargs: object) -> str:
    with pytest.raises(PlacementError) as caught:
        place(*args, **kwargs)
    return str(caught.value)


def test_spread_places_each_executor_on_the_least_used_host():
    placement = place(job(num=4, placement="spread"), hosts(2))

    assert host_names(placement) == ["h1", "h2", "h1", "h2"]


def test_pack_fills_the_first_host_before_the_next():
    placement = place(job(num=3, placement="pack"), hosts(2, slots=2))

    assert host_names(placement) == ["h1", "h1", "h2"]


def test_unlimited_resources_never_block_placement():
    placement = place(job(num=50, cpu=64.0, memory="1Ti"), hosts(1))

    assert len(placement) == 50


def test_a_gpu_is_placed_only_on_hosts_that_declare_gpu_devices():
    message = placement_error(job(gpu=1), hosts(2))

    assert "h1 declares no GPU devices (primus_gpus)" in message


def test_each_executor_gets_its_own_gpu_devices():
    free = [HostFree.of(host) for host in hosts(2, gpus=4)]
    roles = {"worker": job(gpu=2).roles[0]}

    slots = place_executors([("worker", i) for i in range(4)], roles, free, "pack")

    assert [(s.host.name, s.gpus) for s in slots.values()] == [
        ("h1", (0, 1)), ("h1", (2, 3)), ("h2", (0, 1)), ("h2", (2, 3))]
    with pytest.raises(PlacementError, match="not enough gpus on h1 .needs 2, 0 left"):
        place_executors([("worker", 4)], roles, free, "pack")
    assert [f.devices for f in free] == [[], []], "a refused placement takes nothing"


@pytest.mark.parametrize(("resource", "host_has", "role_needs"), [
    ("slots", {"slots": 0}, {}),
    ("cpu", {"cpu": 0.5}, {"cpu": 1.0}),
    ("memory", {"memory": GIB}, {"memory": "2Gi"}),
    ("gpus", {"gpus": 1}, {"gpu": 2}),
])
def test_short_resource_blocks_with_an_error_naming_role_and_resource(resource, host_has,
                                                                      role_needs):
    message = placement_error(job(**role_needs), hosts(2, **host_has))

    assert "worker" in message and resource in message


def test_host_without_gpus_takes_roles_that_need_none():
    assert host_names(place(job(), hosts(1, gpus=0))) == ["h1"]


def test_existing_placements_consume_host_capacity():
    placement = place(job(num=2), hosts(2, slots=1), existing={("worker", 0): "h1"})

    assert placement == {("worker", 1): hosts(2, slots=1)[1]}


def test_existing_placements_prevent_oversubscription():
    message = placement_error(job(num=2, cpu=2.0), hosts(1, cpu=3.0),
                              existing={("worker", 0): "h1"})

    assert "worker-1" in message and "cpu" in message


def test_empty_inventory_is_an_error():
    assert "no hosts" in placement_error(job(), [])


def test_max_per_host_spreads_a_role_even_when_packing():
    placement = place(job(num=4, placement="pack", max_per_host=2), hosts(3))

    assert host_names(placement) == ["h1", "h1", "h2", "h2"]


def test_max_per_host_that_no_inventory_satisfies_names_the_role():
    error = placement_error(job(num=3, max_per_host=1), hosts(2))

    assert "worker-2" in error and "max_per_host=1" in error


def test_one_host_takes_at_most_the_executors_its_agent_supervises():
    error = placement_error(job(num=MAX_EXECUTORS_PER_HOST + 1), hosts(1))

    assert f"worker-{MAX_EXECUTORS_PER_HOST}" in error, error
    assert f"already runs {MAX_EXECUTORS_PER_HOST} executors of this application" in error


def test_the_limit_counts_every_role_and_executor_placed_before():
    two_roles = JobSpec.model_validate({"name": "job", "roles": [
        {"name": "ps", "command": "serve", "num": 6},
        {"name": "worker", "command": "train", "num": MAX_EXECUTORS_PER_HOST - 6}]})
    placed = {("ps", index): "h1" for index in range(6)}

    assert len(place(two_roles, hosts(1), existing=placed)) == MAX_EXECUTORS_PER_HOST - 6
    grown = two_roles.model_copy(update={"roles": [
        two_roles.roles[0],
        two_roles.roles[1].model_copy(update={"num": MAX_EXECUTORS_PER_HOST - 5})]})
    assert "of this application" in placement_error(grown, hosts(1), existing=placed)


def test_a_job_over_the_limit_on_one_host_spreads_over_two():
    placement = place(job(num=2 * MAX_EXECUTORS_PER_HOST, placement="pack"), hosts(2))

    assert host_names(placement).count("h2") == MAX_EXECUTORS_PER_HOST


def test_host_selector_picks_hosts_by_group_or_label():
    inventory = [Host("cpu1", "10.0.0.1", groups=frozenset({"all", "cpu"})),
                 Host("gpu1", "10.0.0.2", groups=frozenset({"all", "gpu"})),
                 Host("big1", "10.0.0.3", labels=frozenset({"bigmem"}))]

    assert set(host_names(place(job(num=2, hosts=["gpu"]), inventory))) == {"gpu1"}
    assert set(host_names(place(job(num=2, hosts=["bigmem"]), inventory))) == {"big1"}
    assert "not in nvme" in placement_error(job(hosts=["nvme"]), inventory)
