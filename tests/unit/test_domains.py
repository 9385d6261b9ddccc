"""Placement across hosts (issue 44): a job's executors in one domain of a level the site
defines (``topology.levels``), the hosts placed in domains by the inventory's
``primus_domains``; admission's choice (pure) and submit's refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from primus.client.preflight import check_job
from primus.config.inventory import Host, InventoryError, load_inventory
from primus.config.loader import SpecError
from primus.config.queues import QueuesConfig
from primus.config.site import load_settings
from primus.config.spec import JobSpec
from primus.scheduler.admission import Admit, Wait, admit, request_of
from primus.state.records import Reservation

# Two racks: r1 of two hosts, r2 of three; every host one slot. r2's hosts share a spine with
# nothing else; h6 names no rack.
RACKS = {"h1": "r1", "h2": "r1", "h3": "r2", "h4": "r2", "h5": "r2"}
HOSTS = {name: Host(name, name, slots=1, domains=(("rack", rack), ("spine", "s1")))
         for name, rack in RACKS.items()} | {"h6": Host("h6", "h6", slots=1)}


def job(num: int, **fields: object) -> JobSpec:
    return JobSpec.model_validate({"name": "gang", "roles": [
        {"name": "worker", "num": num, "command": "x", "cpu": 0.1}], **fields})


def decide(spec: JobSpec, held: list[Reservation] | None = None, app: str = "a",
           executors: list[tuple[str, int]] | None = None) -> Admit | Wait:
    request = request_of(app, "alice", spec, 0.0, sorted(HOSTS),
                         executors or [("worker", i) for i in range(spec.roles[0].num)])
    (decision,) = admit([request], held or [], HOSTS, QueuesConfig())
    assert isinstance(decision, Admit | Wait)
    return decision


def hosts_of(decision: Admit | Wait) -> list[str]:
    assert isinstance(decision, Admit), decision
    return sorted(slot.host.name for slot in decision.slots.values())


def test_a_gang_asking_one_rack_is_placed_inside_the_rack_that_takes_it_whole():
    assert hosts_of(decide(job(3, placement_domain="rack"))) == ["h3", "h4", "h5"]
    # Two fit in either: the rack with the least room (r1) takes them, r2 stays whole.
    assert hosts_of(decide(job(2, placement_domain="rack"))) == ["h1", "h2"]
    # Spread alone puts a gang of three on hosts of both racks (and h6).
    assert {RACKS.get(h) for h in hosts_of(decide(job(3)))} != {"r2"}


def test_a_gang_no_rack_can_take_waits_saying_what_each_rack_lacks():
    decision = decide(job(4, placement_domain="rack"))
    assert isinstance(decision, Wait)
    assert decision.reason.startswith("no rack can take all 4 executors (placement_domain "
                                      "rack): rack r1: cannot place worker-2"), decision.reason
    assert "rack r2: cannot place worker-3" in decision.reason


def test_a_preferred_domain_is_used_where_one_takes_the_gang_else_anywhere():
    assert hosts_of(decide(job(3, placement_domain_preferred="rack"))) == ["h3", "h4", "h5"]
    spread = hosts_of(decide(job(4, placement_domain_preferred="rack")))
    assert len(spread) == 4 and {RACKS.get(h) for h in spread} >= {"r1", "r2"}
    # Preferred rack within a required spine: h6, of no spine, is never taken.
    both = decide(job(5, placement_domain="spine", placement_domain_preferred="rack"))
    assert hosts_of(both) == ["h1", "h2", "h3", "h4", "h5"]


def test_a_restarted_executor_joins_the_rack_its_application_holds():
    held = [Reservation(app_id="a", user="alice", queue="default", role="worker", index=i,
                        host=host, cpu=0.1, memory=1 << 30, gpus=[], since=0.0)
            for i, host in enumerate(["h3", "h4"])]
    # worker-2 restarts: r1 has room too, but the application is in r2.
    again = decide(job(3, placement_domain="rack"), held, executors=[("worker", 2)])
    assert hosts_of(again) == ["h5"]
    full = held + [Reservation(app_id="other", user="bob", queue="default", role="worker",
                               index=0, host="h5", cpu=0.1, memory=1 << 30, gpus=[],
                               since=0.0)]
    waits = decide(job(3, placement_domain="rack"), full, executors=[("worker", 2)])
    assert isinstance(waits, Wait) and "rack r2: cannot place worker-2" in waits.reason
    assert "rack r1" not in waits.reason, "its rack alone is tried"


# --- The site, the inventory and submit --------------------------------------------------------


def test_the_site_defines_its_levels_and_refuses_a_bad_list(tmp_path: Path):
    site = tmp_path / "site.yaml"
    site.write_text("topology: {levels: [spine, rack]}\n")
    env = {"PRIMUS_CONF": str(site), "PRIMUS_HOME": str(tmp_path)}
    assert load_settings(env=env).domain_levels == ("spine", "rack")
    for bad in ("topology: {levels: [rack, rack]}", "topology: {levels: [Rack]}",
                "topology: {racks: [a]}"):
        site.write_text(bad + "\n")
        with pytest.raises(SpecError, match=r"topology"):
            load_settings(env=env)


def test_the_inventory_places_hosts_in_domains_as_a_mapping_or_text(tmp_path: Path):
    (tmp_path / "hosts.ini").write_text("a primus_domains='rack=r1,spine=s1'\n"
                                        "b primus_domains='rack='\n")
    with pytest.raises(InventoryError, match="host b: primus_domains='rack=': must name"):
        load_inventory(tmp_path / "hosts.ini")
    (tmp_path / "hosts.yml").write_text(
        "all:\n  hosts:\n    a: {primus_domains: {rack: r1, spine: s1}}\n"
        "    b: {primus_domains: 'spine=s1, rack=r2'}\n")
    a, b = load_inventory(tmp_path / "hosts.yml").hosts
    assert a.domains == (("rack", "r1"), ("spine", "s1")) and b.domain("rack") == "r2"
    assert b.domain("row") is None


def problems(error: pytest.ExceptionInfo[SpecError]) -> dict[str, str]:
    return {p.field: p.allowed for p in error.value.problems}


def test_submit_refuses_a_level_the_site_lacks_a_coarser_preference_and_a_gang_no_rack_holds():
    with pytest.raises(SpecError) as caught:
        check_job("job.yaml", job(2, placement_domain="row"), domain_levels=("spine", "rack"))
    assert problems(caught) == {"placement_domain": "the site's levels of host domains are "
                                                    "spine, rack"}
    with pytest.raises(SpecError) as caught:
        check_job("job.yaml", job(2, placement_domain="rack"))
    assert "the site defines no levels" in problems(caught)["placement_domain"]
    with pytest.raises(SpecError) as caught:
        check_job("job.yaml", job(2, placement_domain="rack", placement_domain_preferred="spine"),
                  domain_levels=("spine", "rack"))
    assert problems(caught)["placement_domain_preferred"].startswith("must be rack or a level "
                                                                     "finer than it")
    with pytest.raises(SpecError) as caught:
        check_job("job.yaml", job(4, placement_domain="rack"), list(HOSTS.values()),
                  domain_levels=("spine", "rack"))
    assert problems(caught)["placement_domain"].startswith(
        "no rack of its hosts can take every executor of the job: rack r1 (h1, h2): cannot "
        "place worker-2")
    check_job("job.yaml", job(3, placement_domain="rack"), list(HOSTS.values()),
              domain_levels=("spine", "rack"))
