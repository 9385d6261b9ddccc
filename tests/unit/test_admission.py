"""Admission: which waiting applications get hosts now, from requests and reservations."""

from __future__ import annotations

from primus.config.inventory import Host
from primus.config.queues import QueuesConfig
from primus.config.spec import JobSpec, RoleSpec
from primus.scheduler.admission import Admit, Preempt, Wait, admit, vet
from primus.scheduler.leader import AdmissionState
from primus.scheduler.seals import seal
from primus.state.keys import SchedulerKeys
from primus.state.records import (
    AdmissionRequest,
    AppOwner,
    Preemption,
    Reservation,
    encode,
    encode_host,
)
from primus.store.api import EventType, KeyValue, WatchEvent

HOSTS = {f"h{i}": Host(f"h{i}", f"10.0.0.{i}", slots=2, gpus=2,
                       groups=frozenset({"gpu" if i <= 2 else "cpu"})) for i in range(1, 5)}
QUEUES = QueuesConfig.model_validate({"queues": {
    "default": {}, "urgent": {"priority": 10}, "batch": {"priority": 5},
    "small": {"quota": {"gpus": 2}, "user_quota": {"executors": 1}}}})


def request(app: str, num: int = 1, gpu: int = 0, queue: str = "default", at: float = 0.0,
            user: str = "alice", hosts: list[str] | None = None, **role: object
            ) -> AdmissionRequest:
    worker = RoleSpec.model_validate({"name": "worker", "command": "x", "num": num, "gpu": gpu,
                                      "cpu": 0.5, **role})
    return AdmissionRequest(app_id=app, user=user, queue=queue, submit_time=at,
                            hosts=hosts or sorted(HOSTS), roles=[worker],
                            executors=[("worker", i) for i in range(num)])


def held(app: str, host: str, index: int = 0, gpus: tuple[int, ...] = (), queue: str = "default",
         user: str = "alice") -> Reservation:
    return Reservation(app_id=app, user=user, queue=queue, role="worker", index=index, host=host,
                       cpu=0.5, memory=1, gpus=list(gpus), since=0.0)


def decided(decisions: list[Admit | Wait]) -> dict[str, str]:
    return {d.request.app_id: ("admit" if isinstance(d, Admit) else d.reason)
            for d in decisions}


def test_a_gang_is_admitted_whole_or_waits_holding_nothing():
    decisions = admit([request("big", num=9), request("fits", num=8, at=1)], [], HOSTS, QUEUES)

    assert decided(decisions)["big"].startswith("cannot place worker-8")
    assert decided(decisions)["fits"] == ("every host it may use (h1, h2, h3, h4) is kept for "
                                          "applications ahead in the queue")


def test_higher_priority_queue_goes_first_then_earlier_submissions():
    decisions = admit([request("late", num=8, at=5), request("early", num=8, at=1),
                       request("urgent", num=8, queue="urgent", at=9)], [], HOSTS, QUEUES)

    assert [d.request.app_id for d in decisions] == ["urgent", "early", "late"]
    assert [type(d) for d in decisions] == [Admit, Wait, Wait]
    assert [d.position for d in decisions if isinstance(d, Wait)] == [0, 1]


def test_a_smaller_application_backfills_only_hosts_the_head_cannot_use():
    busy = [held("running", name, i) for name in ("h1", "h2") for i in range(2)]
    head = request("head", num=1, gpu=1, at=1, hosts=["h1", "h2"])  # GPU hosts: all busy
    decisions = admit([head, request("cpu-job", num=2, at=2),
                       request("gpu-job", num=1, at=3, hosts=["h1", "h2"])], busy, HOSTS, QUEUES)

    result = decided(decisions)
    assert result["head"].startswith("cannot place worker-0")
    assert result["cpu-job"] == "admit"
    slots = next(d for d in decisions if isinstance(d, Admit)).slots
    assert {slot.host.name for slot in slots.values()} <= {"h3", "h4"}
    assert result["gpu-job"] == ("every host it may use (h1, h2) is kept for applications "
                                 "ahead in the queue")


def test_gpu_devices_are_never_given_twice():
    decisions = admit([request("a", num=1, gpu=1, hosts=["h1"])],
                      [held("other", "h1", gpus=(0,))], HOSTS, QUEUES)

    assert isinstance(decisions[0], Admit)
    assert decisions[0].slots[("worker", 0)].gpus == (1,)


def test_a_quota_holds_the_request_back_without_blocking_the_others():
    decisions = admit([request("greedy", num=2, queue="small", at=1),
                       request("next", num=1, at=2)], [], HOSTS, QUEUES)

    assert decided(decisions) == {
        "greedy": "queue small, user alice: executors quota 1, would hold 2", "next": "admit"}


def test_queue_quota_counts_what_every_user_holds():
    decisions = admit([request("b", gpu=1, queue="small", user="bob")],
                      [held("a", "h1", gpus=(0, 1), queue="small")], HOSTS, QUEUES)

    assert decided(decisions) == {"b": "queue small: gpus quota 2, would hold 3"}


def test_max_per_host_counts_only_the_application_s_own_executors():
    others = [held("other", "h1", 0)]
    packed = request("a", num=2, max_per_host=1, hosts=["h1", "h2"]).model_copy(
        update={"placement": "pack"})
    decisions = admit([packed], others, HOSTS, QUEUES)

    assert isinstance(decisions[0], Admit)
    assert sorted(s.host.name for s in decisions[0].slots.values()) == ["h1", "h2"]


def test_avoided_hosts_are_used_only_when_nothing_else_fits():
    avoiding = request("a", hosts=["h1", "h2"]).model_copy(update={"avoid": ["h1"]})
    full = [held("x", "h2", i) for i in range(2)]

    assert admit([avoiding], [], HOSTS, QUEUES)[0].slots[("worker", 0)].host.name == "h2"
    assert admit([avoiding], full, HOSTS, QUEUES)[0].slots[("worker", 0)].host.name == "h1"


def test_a_higher_priority_request_preempts_the_fewest_lower_priority_preemptible_apps():
    held_now = [held("old", "h3", 0).model_copy(update={"preemptible": True, "since": 1.0}),
                held("old", "h3", 1).model_copy(update={"preemptible": True, "since": 1.0}),
                held("new", "h4", 0).model_copy(update={"preemptible": True, "since": 2.0}),
                held("new", "h4", 1).model_copy(update={"preemptible": True, "since": 2.0}),
                held("keep", "h1", 0), held("keep", "h1", 1),
                held("keep", "h2", 0), held("keep", "h2", 1)]
    urgent = request("urgent", num=2, queue="urgent", at=9)

    decisions = admit([urgent], held_now, HOSTS, QUEUES)

    assert [type(d) for d in decisions] == [Wait, Preempt]
    assert decisions[1].victims == ("new",), "the latest admitted goes first, and alone"
    assert admit([urgent], held_now, HOSTS, QUEUES, preempting=["new"])[1:] == [], \
        "nothing more is preempted while a preemption runs"


def test_an_application_whose_hosts_do_not_help_is_not_preempted_with_the_one_that_does():
    preemptible = {"preemptible": True}
    held_now = [held("useless", "h3", i).model_copy(update=preemptible) for i in range(2)] + \
        [held("needed", "h1", i, queue="batch").model_copy(update=preemptible)
         for i in range(2)] + [held("keep", "h2", i) for i in range(2)]
    gpu_job = request("urgent", gpu=1, queue="urgent", hosts=["h1", "h2"])

    decisions = admit([gpu_job], held_now, HOSTS, QUEUES)

    # useless, of the lowest priority, is tried first: it holds a host the job may not use.
    assert decisions[1:] == [Preempt(gpu_job, ("needed",))]


def test_nothing_is_preempted_for_a_request_of_the_same_priority_or_that_would_not_fit():
    held_now = [held("p", name, i).model_copy(update={"preemptible": True})
                for name in HOSTS for i in range(2)]

    assert [type(d) for d in admit([request("same", num=2, at=9)], held_now, HOSTS,
                                   QUEUES)] == [Wait]
    assert [type(d) for d in admit([request("huge", num=9, queue="urgent")], held_now, HOSTS,
                                   QUEUES)] == [Wait]


def test_a_drained_or_quarantined_host_takes_no_new_executor():
    out = {"h1": "drained by alice: new disks", "h2": "quarantined by the health check: disk"}

    [placed] = admit([request("a", hosts=["h1", "h3"])], [], HOSTS, QUEUES, out_of_service=out)
    [waits] = admit([request("b", hosts=["h1", "h2"])], [], HOSTS, QUEUES, out_of_service=out)

    assert isinstance(placed, Admit) and placed.slots[("worker", 0)].host.name == "h3"
    assert isinstance(waits, Wait)
    assert waits.reason == ("every host it may use is out of service or kept for applications "
                            "ahead: h1 (drained by alice: new disks), h2 (quarantined by the "
                            "health check: disk)")


def test_nothing_is_preempted_for_hosts_out_of_service():
    victims = [held("low", name, i).model_copy(update={"preemptible": True})
               for name in ("h1", "h2") for i in range(2)]
    urgent = request("urgent", num=2, queue="urgent", hosts=["h1", "h2", "h3"])
    out = {"h3": "drained by alice: new disks"}

    decisions = admit([urgent], victims, HOSTS, QUEUES, out_of_service=out)

    assert decisions[1:] == [Preempt(urgent, ("low",))], "low holds the hosts that serve"
    assert "out of service: h3 (drained by alice: new disks)" in decisions[0].reason


def test_an_elastic_role_is_admitted_at_its_minimum_when_that_is_all_that_fits():
    busy = [held("other", name, i) for name in ("h1", "h2", "h3") for i in range(2)]

    [decision] = admit([request("elastic", num=4, min_num=2)], busy, HOSTS, QUEUES)

    assert isinstance(decision, Admit)
    assert sorted(decision.slots) == [("worker", 0), ("worker", 1)]
    assert decision.request.executors == [("worker", 0), ("worker", 1)]
    assert decision.rest.startswith("2 executors beyond the elastic minimum wait for hosts: "
                                    "cannot place worker-")


def test_an_elastic_role_below_its_minimum_waits_whole_and_keeps_its_hosts():
    busy = [held("other", name, i) for name in HOSTS for i in range(2)][1:]  # 1 slot free

    decisions = admit([request("elastic", num=4, min_num=2),
                       request("later", num=1, at=1)], busy, HOSTS, QUEUES)

    assert [type(d) for d in decisions] == [Wait, Wait]
    assert decided(decisions)["later"].startswith("every host it may use")


def test_an_elastic_role_at_its_minimum_grows_into_what_is_free_and_keeps_no_host():
    mine = [held("elastic", "h1", i) for i in range(2)]  # its minimum
    others = [held("other", name, i) for name in ("h2", "h3") for i in range(2)] + \
        [held("other", "h4", 0, gpus=(0,))]  # h4: one slot and one GPU left
    rest = request("elastic", num=4, min_num=2, gpu=2).model_copy(
        update={"executors": [("worker", 2), ("worker", 3)]})
    later = request("later", num=1, gpu=1, at=1)

    decisions = admit([rest, later], mine + others, HOSTS, QUEUES)

    # Neither of the rest fits (two GPUs each): they wait without keeping h4 from later.
    assert decided(decisions) == {"elastic": decisions[0].reason, "later": "admit"}
    assert isinstance(decisions[0], Wait)
    grows = admit([rest], mine + others[:-1], HOSTS, QUEUES)  # h4 free: one of them fits
    assert [sorted(d.slots) for d in grows] == [[("worker", 2)]]
    assert grows[0].rest.startswith("1 executor beyond the elastic minimum waits for hosts")


def test_an_elastic_role_growing_preempts_nothing():
    mine = [held("elastic", "h1", i, queue="urgent") for i in range(2)]
    victims = [held("low", name, i).model_copy(update={"preemptible": True})
               for name in ("h2", "h3", "h4") for i in range(2)]
    rest = request("elastic", num=4, min_num=2, queue="urgent").model_copy(
        update={"executors": [("worker", 2), ("worker", 3)]})

    assert [type(d) for d in admit([rest], mine + victims, HOSTS, QUEUES)] == [Wait]


def test_the_leader_never_grants_an_executor_that_already_holds_a_reservation():
    keys = SchedulerKeys("/p")
    state = AdmissionState(keys)
    asked = request("a", num=2)
    state.fold(KeyValue(keys.request("a"), encode(asked), 1, 7, 1, 0))
    state.fold(KeyValue(keys.reservation("a", "worker", 0), encode(held("a", "h1")), 8, 8, 1, 0))
    assert state.pending() == [], "a request not vetted against the server's records waits"
    state.vetted["a"] = 7  # as the leader marks it once vetted (test_vetting below)

    [pending] = state.pending()

    assert pending.executors == [("worker", 1)], "a leader that died mid-grant is not repeated"
    state.fold(KeyValue(keys.request("a"), encode(asked.model_copy(update={"granted": True})),
                        1, 9, 2, 0))
    assert state.pending() == []


def test_a_waiting_gpu_request_does_not_keep_hosts_without_gpus_from_others():
    hosts = {**HOSTS, "h4": Host("h4", "10.0.0.4", slots=2)}  # no GPU devices
    busy = [held("running", name, 0, gpus=(0, 1)) for name in ("h1", "h2", "h3")]
    decisions = admit([request("head", gpu=2, at=1), request("cpu-job", at=2)], busy, hosts,
                      QUEUES)

    assert decided(decisions)["head"].startswith("cannot place worker-0")
    assert decided(decisions)["cpu-job"] == "admit"
    assert decisions[1].slots[("worker", 0)].host.name == "h4"


def test_a_request_waits_until_admission_knows_every_host_it_names():
    partial = {name: HOSTS[name] for name in ("h1", "h2", "h3")}
    decisions = admit([request("first", num=4), request("later", num=1, at=1, hosts=["h1"])],
                      [], partial, QUEUES)

    assert decided(decisions) == {
        "first": "host h4 not registered with admission yet",
        "later": "every host it may use (h1) is kept for applications ahead in the queue"}
    [admitted] = admit([request("first", num=4)], [], HOSTS, QUEUES)
    assert isinstance(admitted, Admit)
    assert sorted(slot.host.name for slot in admitted.slots.values()) == ["h1", "h2", "h3", "h4"]


def test_the_leader_never_admits_on_part_of_the_transaction_that_registers_the_hosts():
    # The AM's first request and its hosts are one transaction, whose events the leader's
    # watch delivers one at a time: a decision may come between any two of them.
    keys = SchedulerKeys("/p")
    state = AdmissionState(keys)
    events = [WatchEvent(EventType.PUT, keys.request("a"), encode(request("a", num=4)), 5)] + [
        WatchEvent(EventType.PUT, keys.host(name), encode_host(host), 5)
        for name, host in HOSTS.items()]
    decisions = []
    for event in events:
        state.fold(event)
        state.vetted["a"] = 5  # as the leader marks it once vetted
        hosts = {name: host for name, (host, _) in state.hosts.items()}
        decisions = admit(state.pending(), [], hosts, QUEUES)
        if event is not events[-1]:
            assert [type(d) for d in decisions] == [Wait], f"admitted after {event.key} only"

    [admitted] = decisions
    assert isinstance(admitted, Admit)
    assert sorted(slot.host.name for slot in admitted.slots.values()) == ["h1", "h2", "h3", "h4"]


# ---- What admission believes of a request (its AM's, so anything its identity wrote) -------

OWNER = AppOwner(app_id="a", name="a", user="bob", account="bob", queue="batch",
                 preemptible=True, submit_time=100.0)


def owned_spec(num: int = 2, gpu: int = 0) -> JobSpec:
    return JobSpec.model_validate({"name": "a", "placement": "pack", "roles": [
        {"name": "worker", "command": "x", "num": num, "gpu": gpu, "cpu": 2}]})


def test_vetting_takes_who_where_and_how_much_from_the_servers_records_not_the_request():
    forged = request("a", num=2, gpu=0, queue="urgent", at=0.0, user="alice",
                     hosts=["h1", "elsewhere"], cpu=0.001).model_copy(
        update={"app_id": "alice-app", "preemptible": False})

    vetted = vet("a", forged, OWNER, owned_spec(gpu=1), ["h1", "h2"])

    assert vetted.refused == ""
    request_ = vetted.request
    assert request_ is not None
    assert (request_.app_id, request_.user, request_.queue, request_.submit_time,
            request_.preemptible, request_.placement, request_.hosts) == (
        "a", "bob", "batch", 100.0, True, "pack", ["h1", "h2"])
    assert [(r.name, r.cpu, r.gpu) for r in request_.roles] == [("worker", 2.0, 1)]
    assert request_.executors == [("worker", 0), ("worker", 1)]


def test_vetting_leaves_out_executors_the_spec_does_not_have_and_says_which():
    forged = request("a", num=1).model_copy(update={"executors": [
        ("worker", 0), ("worker", 2), ("worker", -1), ("ghost", 0)]})

    vetted = vet("a", forged, OWNER, owned_spec(num=2), ["h1"])

    assert vetted.request is not None and vetted.request.executors == [("worker", 0)]
    assert vetted.refused == ("a: executors its spec does not have left out of its request: "
                              "ghost-0, worker--1, worker-2")


def test_vetting_refuses_a_request_of_nothing_it_may_have_or_without_records():
    only_ghosts = request("a").model_copy(update={"executors": [("ghost", 0)]})
    assert vet("a", only_ghosts, OWNER, owned_spec(), ["h1"]).request is None
    no_record = vet("a", request("a"), None, owned_spec(), ["h1"])
    assert no_record.request is None and "no owner record" in no_record.refused


def test_the_leader_believes_only_the_reservations_and_preemptions_it_sealed():
    keys = SchedulerKeys("/p")
    key = b"k" * 32
    state = AdmissionState(keys, seal_key=key)
    good = seal(key, keys.reservation("a", "worker", 0), held("a", "h1"))
    state.fold(KeyValue(keys.reservation("a", "worker", 0), encode(good), 1, 2, 1, 0))
    # Forged, and a sealed one copied to another application's key: neither is believed.
    state.fold(KeyValue(keys.reservation("b", "worker", 0), encode(held("b", "h2")), 1, 3, 1, 0))
    state.fold(KeyValue(keys.reservation("b", "worker", 1), encode(good), 1, 4, 1, 0))
    assert list(state.reservations) == [keys.reservation("a", "worker", 0)]
    preempt = Preemption(by="x", time=1.0, reason="r")
    state.fold(KeyValue(keys.preempt("b"), encode(preempt), 1, 5, 1, 0))
    assert state.preempting == {}
    state.fold(KeyValue(keys.preempt("b"), encode(seal(key, keys.preempt("b"), preempt)),
                        1, 6, 1, 0))
    assert list(state.preempting) == ["b"]
    # A value that does not read is left out, not a failure of the leader.
    state.fold(KeyValue(keys.request("b"), b"{not json", 1, 7, 1, 0))
    state.fold(KeyValue(keys.reservation("b", "worker", 0) + "x", b"{}", 1, 8, 1, 0))
    assert "b" not in state.requests
    # Each is noted, for the leader to record as the application's (state/refusals.py).
    assert [key for key, _ in state.refused] == [
        keys.reservation("b", "worker", 0), keys.reservation("b", "worker", 1), keys.preempt("b"),
        keys.request("b"), keys.reservation("b", "worker", 0) + "x"]
    assert "did not write" in state.refused[0][1] and "cannot read" in state.refused[3][1]


# --- Job arrays: max_running, and fair share between users ---------------------------------------


def member(app: str, array: str, at: float, max_running: int | None = None,
           user: str = "alice", **kwargs: object) -> AdmissionRequest:
    return request(app, at=at, user=user, **kwargs).model_copy(
        update={"array": array, "array_max_running": max_running})


def test_array_members_past_max_running_wait_as_records_keeping_no_host():
    running = [held("sweep-0", "h1").model_copy(update={"array": "sweep"})]
    decisions = admit([member("sweep-1", "sweep", 1, max_running=2),
                       member("sweep-2", "sweep", 2, max_running=2),
                       member("sweep-3", "sweep", 3, max_running=2),
                       request("other", num=8, at=4)], running, HOSTS, QUEUES)

    result = decided(decisions)
    assert result["sweep-1"] == "admit"
    assert result["sweep-2"] == result["sweep-3"] == \
        "array sweep: 2 of its members run, max_running 2"
    # The throttled members keep no host: the job behind them fits on what is left.
    assert result["other"].startswith("cannot place") or result["other"] == "admit"
    assert "kept for applications ahead" not in result["other"]


def test_a_member_that_holds_hosts_already_is_not_counted_against_itself():
    running = [held("sweep-0", "h1").model_copy(update={"array": "sweep"})]
    grow = member("sweep-0", "sweep", 0, max_running=1).model_copy(
        update={"executors": [("worker", 1)]})
    assert decided(admit([grow], running, HOSTS, QUEUES))["sweep-0"] == "admit"


def test_vet_takes_the_array_and_max_running_from_the_owner_record_not_the_request():
    spec = JobSpec.model_validate({"name": "sweep", "roles": [
        {"name": "worker", "command": "x", "num": 1}]})
    owner = AppOwner(app_id="sweep-1", name="sweep", user="alice", submit_time=1.0,
                     array="sweep-array", array_index=1, array_max_running=2)
    lying = member("sweep-1", "another", 1, max_running=None)

    vetted = vet("sweep-1", lying, owner, spec, ["h1"]).request

    assert (vetted.array, vetted.array_max_running) == ("sweep-array", 2)


def test_fair_share_puts_another_users_job_before_a_thousand_member_array_of_one_user():
    one_slot = {"h1": Host("h1", "10.0.0.1", slots=1)}
    running = [held("sweep-0000", "h1").model_copy(update={"array": "sweep"})]
    members = [member(f"sweep-{i:04d}", "sweep", float(i), hosts=["h1"])
               for i in range(1, 1000)]
    late = request("bobs-job", at=5000.0, user="bob", hosts=["h1"])

    # While one of the array's members runs, bob's job is next in line, ahead of the 999.
    waiting = admit([*members, late], running, one_slot, QUEUES)
    assert waiting[0].request.app_id == "bobs-job"
    # The slot freed, alice's next member and bob's job take turns: bob's is second, not the
    # 1000th (submitted last, it would be last in submission order).
    freed = admit([*members, late], [], one_slot, QUEUES)
    assert [d.request.app_id for d in freed[:3]] == ["sweep-0001", "bobs-job", "sweep-0002"]
    assert decided(freed)["sweep-0001"] == "admit"


def test_a_resize_is_granted_in_place_where_the_hosts_have_room_else_it_waits_naming_one():
    hosts = {"h1": Host("h1", "10.0.0.1", cpu=2, memory=1 << 30),
             "h2": Host("h2", "10.0.0.2", cpu=2, memory=1 << 30)}
    reservations = [r.model_copy(update={"cpu": 1.0, "memory": 256 << 20})
                    for r in (held("a", "h1", 0), held("a", "h2", 1), held("b", "h2", 0))]
    grow = request("a", num=2, cpu=1.5, memory=256 << 20, hosts=["h1", "h2"]).model_copy(
        update={"resize": True})
    (decision,) = admit([grow], reservations, hosts, QUEUES)
    assert isinstance(decision, Wait)  # h2 holds a's worker-1 and b's: 0 CPUs free
    assert decision.reason == "resize: host h2 has 0 CPUs free, 0.5 more needed"
    (granted,) = admit([grow], reservations[:2], hosts, QUEUES)  # b ended
    assert isinstance(granted, Admit)
    assert {key: (slot.host.name, slot.gpus) for key, slot in granted.slots.items()} == {
        ("worker", 0): ("h1", ()), ("worker", 1): ("h2", ())}
    shrink = request("a", num=2, cpu=0.5, memory=128 << 20, hosts=["h1", "h2"]).model_copy(
        update={"resize": True})
    assert isinstance(admit([shrink], reservations, hosts, QUEUES)[0], Admit)
    nothing = request("c", num=1, cpu=1).model_copy(update={"resize": True})
    assert admit([nothing], reservations, hosts, QUEUES)[0].reason == \
        "resize: none of its executors holds a reservation"


def test_a_resize_that_grows_waits_while_it_would_pass_its_queues_cpu_quota():
    hosts = {"h1": Host("h1", "10.0.0.1", cpu=8, memory=1 << 30)}
    queues = QueuesConfig.model_validate({"queues": {
        "default": {}, "capped": {"quota": {"cpu": 3}}, "per-user": {"user_quota": {"cpu": 2}}}})
    for queue, words in (("capped", "resize: queue capped: cpu quota 3, would hold 4"),
                         ("per-user", "resize: queue per-user, user alice: cpu quota 2, "
                                      "would hold 4")):
        reservations = [held("a", "h1", i, queue=queue).model_copy(update={"cpu": 1.0})
                        for i in range(2)]
        grow = request("a", num=2, cpu=2, memory=1, queue=queue, hosts=["h1"]).model_copy(
            update={"resize": True})
        (decision,) = admit([grow], reservations, hosts, queues)
        assert isinstance(decision, Wait) and decision.reason == words
        shrink = request("a", num=2, cpu=0.5, memory=1, queue=queue, hosts=["h1"]).model_copy(
            update={"resize": True})
        assert isinstance(admit([shrink], reservations, hosts, queues)[0], Admit), \
            "a shrink is always within the quota"


def test_resizes_in_one_pass_count_each_others_cpu_and_one_landing_on_the_quota_fits():
    hosts = {"h1": Host("h1", "10.0.0.1", cpu=8, memory=1 << 30)}
    queues = QueuesConfig.model_validate({"queues": {"default": {},
                                                     "capped": {"quota": {"cpu": 0.9}}}})
    reservations = [held(app, "h1", queue="capped").model_copy(update={"cpu": 0.1})
                    for app in ("a", "b", "c")]
    grows = [request(app, cpu=0.3, memory=1, queue="capped", at=at, hosts=["h1"]).model_copy(
        update={"resize": True}) for at, app in enumerate(("a", "b", "c"))]
    decisions = admit(grows, reservations, hosts, queues)
    assert all(isinstance(d, Admit) for d in decisions), \
        "0.1 + 0.1 + 0.1 grown by 0.2 each lands on 0.9 (in floats, a hair above)"
    four = [*reservations, held("d", "h1", queue="capped").model_copy(update={"cpu": 0.1})]
    grows.append(request("d", cpu=0.3, memory=1, queue="capped", at=9, hosts=["h1"])
                 .model_copy(update={"resize": True}))
    decided_now = decided(admit(grows, four, hosts, queues))
    assert (decided_now["a"], decided_now["b"]) == ("admit", "admit")  # 0.4 held, now 0.8
    assert decided_now["c"] == decided_now["d"] == \
        "resize: queue capped: cpu quota 0.9, would hold 1", \
        "the grows granted before them in the pass count"


def test_a_shrink_on_a_host_already_over_full_is_granted():
    hosts = {"h1": Host("h1", "10.0.0.1", cpu=1, memory=1 << 30)}  # its inventory cut to 1
    reservations = [held(app, "h1").model_copy(update={"cpu": 1.0}) for app in ("a", "b")]
    shrink = request("a", cpu=0.5, memory=1, hosts=["h1"]).model_copy(update={"resize": True})
    assert isinstance(admit([shrink], reservations, hosts, QUEUES)[0], Admit)
