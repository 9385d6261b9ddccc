"""Many applications sharing the SSH test hosts: an audit of what their trainers held, and when.

Every trainer appends a ``start`` and a ``stop`` record (its application, executor, host address,
``CUDA_VISIBLE_DEVICES`` and the wall-clock time) to one file: the hosts are network namespaces of
this machine (``tests/support/cluster.py``), so they share its file system and its clock. From those
records the tests check what admission promises (docs/scheduling.md): no host over its slots, no
GPU device held twice, priorities, backfill, quotas, and a cut-off host's slot given back once
its executor's lease expired.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from primus.client.queues import NO_LEADER_YET
from tests.support import service
from tests.support.apps import status_json, write_job
from tests.support.chaos import TTL, link_down
from tests.support.cluster import TestCluster
from tests.support.primus import run_primus
from tests.support.waiting import wait_until

SITE = """
queues:
  default: {priority: 0}
  urgent: {priority: 10}
  capped:
    priority: 0
    quota: {executors: QUOTA}
"""

RECORD = ('echo "{kind} $PRIMUS_APP_ID $PRIMUS_ROLE-$PRIMUS_INDEX-$PRIMUS_ATTEMPT $PRIMUS_HOST'
          ' ${{CUDA_VISIBLE_DEVICES:-none}} $(date +%s.%N)" >> {log}')
"""A trainer's audit record: ``start`` or ``stop``, who, where, which GPUs, when."""

ENDED = ("SUCCEEDED", "FAILED", "KILLED")


@dataclass(frozen=True)
class Held:
    """One trainer's time on its host: from its ``start`` record to its ``stop`` record."""

    app_id: str
    executor: str
    address: str
    devices: tuple[str, ...]
    start: float
    stop: float


@dataclass
class Bed:
    """The test hosts as one test declares them, its site queues and the audit log."""

    env: dict[str, str]
    cluster: TestCluster
    inventory: Path
    log: Path
    jobs: Path
    submitted: list[str] = field(default_factory=list)

    def job(self, name: str, num: int = 1, gpu: int = 0, queue: str = "default",
            hold: bool = False, seconds: float = 1.0, role: str = "",
            policy: str = "") -> Path:
        """A job of ``num`` executors; each trainer records its start, then runs ``seconds``,
        or until the test creates ``finish-<name>`` when ``hold``, then records its stop;
        ``role`` adds fields to the role, ``policy`` to the policy."""
        log = self.log
        wait = (f"while [ ! -e {self.jobs}/finish-{name} ]; do sleep 0.1; done" if hold
                else f"sleep {seconds}")
        command = (f"{RECORD.format(kind='start', log=log)}; {wait}; "
                   f"{RECORD.format(kind='stop', log=log)}")
        return write_job(self.jobs / f"{name}.yaml", f"""
name: {name}
queue: {queue}
policy: {{stop_grace: 2s, {policy}}}
roles:
  - name: worker
    num: {num}
    gpu: {gpu}
    cpu: 0.1
    command: '{command}'
    {role}
""")

    def submit(self, job: Path) -> str:
        result = run_primus(self.env, "submit", str(job), "-i", str(self.inventory))
        assert result.returncode == 0, result.stderr
        self.submitted.append(result.stdout.strip())
        return self.submitted[-1]

    def finish(self, name: str) -> None:
        (self.jobs / f"finish-{name}").touch()

    def held(self) -> list[Held]:
        """Every trainer that started, its stop ``inf`` while it runs."""
        starts: dict[tuple[str, str], list[str]] = {}
        stops: dict[tuple[str, str], float] = {}
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        for line in lines:
            kind, app_id, executor, address, devices, at = line.split()
            if kind == "start":
                starts[(app_id, executor)] = [address, devices, at]
            else:
                stops[(app_id, executor)] = float(at)
        return [Held(app_id, executor, address,
                     () if devices == "none" else tuple(devices.split(",")), float(at),
                     stops.get((app_id, executor), float("inf")))
                for (app_id, executor), (address, devices, at) in starts.items()]

    def started(self, app_id: str) -> list[Held]:
        return [h for h in self.held() if h.app_id == app_id]

    def states(self) -> dict[str, str]:
        """What ``primus list -o json`` says of each application's state (computed in this
        process: the tests poll it)."""
        return {app["app_id"]: app["state"] for app in service.apps(self.env)}

    def wait_for_end(self, *app_ids: str, timeout: float = 60) -> set[str]:
        """The final states of ``app_ids``, once every one of them ended."""
        def states() -> dict[str, str] | None:
            found = self.states()
            return found if all(found[app_id] in ENDED for app_id in app_ids) else None
        found = wait_until(states, timeout, f"{', '.join(app_ids)} to end", interval=1)
        return {found[app_id] for app_id in app_ids}

    def queued(self) -> dict[str, str]:
        """What ``primus queue -o json`` says of each waiting application's reason (computed in
        this process: the tests poll it)."""
        return {entry["app_id"]: entry["reason"] or "" for entry in service.queue(self.env)}


@pytest.fixture
def shared(ssh_testbed, primus_env, tmp_path: Path) -> Iterator[Callable[..., Bed]]:
    """Declares the test hosts; afterwards, kills what a failed test left running."""
    beds: list[Bed] = []

    def declare(hosts: dict[str, str], quota: int = 2, site: str = "") -> Bed:
        beds.append(bed(ssh_testbed, primus_env, tmp_path, hosts, quota, site))
        return beds[-1]
    yield declare
    for test in beds:
        states = test.states()
        for app_id in test.submitted:
            if states.get(app_id) not in ENDED:
                run_primus(test.env, "kill", app_id)


def bed(ssh_testbed, primus_env, tmp_path: Path, hosts: dict[str, str], quota: int,
        site_extra: str = "") -> Bed:
    """The test hosts named in ``hosts`` (name: extra inventory variables) and the site queues
    ``default`` (priority 0), ``urgent`` (10) and ``capped`` (0, at most ``quota`` executors),
    with ``site_extra`` in the site file too."""
    cluster: TestCluster = ssh_testbed.cluster
    lines = ["[primus]"] + [
        f"{h.name} ansible_host={h.address} primus_home={h.home} {hosts[h.name]}"
        for h in cluster.hosts if h.name in hosts]
    lines += ["", "[primus:vars]", "ansible_user=root",
              f"ansible_ssh_private_key_file={cluster.key_file}",
              f"ansible_python_interpreter={sys.executable}", ""]
    inventory = tmp_path / "shared.ini"
    inventory.write_text("\n".join(lines))
    site = tmp_path / "site.yaml"
    site.write_text(SITE.replace("QUOTA", str(quota)) + site_extra)
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    return Bed(ssh_testbed.env(primus_env, PRIMUS_CONF=str(site)), cluster, inventory,
               tmp_path / "audit.log", jobs)


def most_at_once(held: Iterable[Held]) -> int:
    """The most intervals of ``held`` that overlap at one instant."""
    edges = sorted([(h.start, 1) for h in held] + [(h.stop, -1) for h in held])
    at_once = most = 0
    for _, step in edges:  # at equal times a stop (-1) sorts before a start: no overlap
        at_once += step
        most = max(most, at_once)
    return most


def test_twenty_concurrent_apps_never_overfill_a_host_share_a_gpu_or_exceed_a_quota(shared):
    slots = {"h1": 2, "h2": 2, "h3": 1, "h4": 2}
    gpus = {"h1": 2, "h2": 1, "h3": 1}
    test = shared({
        name: f"primus_slots={count}" + (f" primus_gpus={gpus[name]}" if name in gpus else "")
        for name, count in slots.items()})
    queues = ("default", "urgent", "capped")
    jobs = {i: test.job(f"app{i:02d}", num=1 + i % 2, gpu=int(i % 4 == 0), queue=queues[i % 3])
            for i in range(20)}
    # Four submissions at a time: each probes every host over SSH, starting Python there, and
    # twenty at once on two cores outlast the probes' timeout.
    with ThreadPoolExecutor(max_workers=4) as pool:
        app_ids = list(pool.map(test.submit, jobs.values()))
    queue_of = {app_id: queues[i % 3] for i, app_id in zip(jobs, app_ids, strict=True)}
    assert test.wait_for_end(*queue_of, timeout=120) == {"SUCCEEDED"}
    held = test.held()
    assert len(held) == sum(1 + i % 2 for i in range(20)), "every trainer ran once"
    assert all(h.stop < float("inf") for h in held), "every trainer recorded its stop"
    addresses = {h.address: h.name for h in test.cluster.hosts}
    for address, name in addresses.items():
        on_host = [h for h in held if h.address == address]
        if name not in slots:
            assert not on_host
            continue
        assert most_at_once(on_host) <= slots[name], \
            f"{name} ran more than its {slots[name]} slots at once: {on_host}"
        assert {d for h in on_host for d in h.devices} <= \
            {str(d) for d in range(gpus.get(name, 0))}, f"a device {name} does not declare"
        for device in {d for h in on_host for d in h.devices}:
            holders = [h for h in on_host if device in h.devices]
            assert most_at_once(holders) == 1, f"{name} GPU {device} held twice: {holders}"
    capped = [h for h in held if queue_of[h.app_id] == "capped"]
    assert most_at_once(capped) <= 2, f"queue capped held more than 2 executors: {capped}"


def test_the_higher_priority_app_starts_first_when_the_hosts_free_up(shared):
    test = shared({"h1": "primus_slots=1", "h2": "primus_slots=1"})
    blocker = test.submit(test.job("blocker", num=2, hold=True))
    wait_until(lambda: len(test.started(blocker)) == 2, 60, "the blocker to fill both hosts")
    low = test.submit(test.job("low", num=2))
    high = test.submit(test.job("high", num=2, queue="urgent"))
    wait_until(lambda: {low, high} <= set(test.queued()), 30, "low and high to wait")
    assert list(test.queued()) == [high, low], "primus queue shows the admission order"
    test.finish("blocker")
    wait_until(lambda: len(test.started(low)) == 2, 60, "low to start after high")
    assert test.wait_for_end(low, high) == {"SUCCEEDED"}
    last_of_high = max(h.stop for h in test.started(high))
    first_of_low = min(h.start for h in test.started(low))
    assert last_of_high <= first_of_low, \
        "high, submitted after low but of a higher priority, had both hosts first"


def test_a_small_cpu_job_backfills_hosts_the_waiting_gpu_head_cannot_use_without_delaying_it(
        shared):
    # The head is restricted by its GPU request alone; a head restricted to hosts by label is
    # the same decision, covered with the others in tests/unit/test_admission.py
    # (test_a_smaller_application_backfills_only_hosts_the_head_cannot_use).
    test = shared({"h1": "primus_slots=1 primus_gpus=1 primus_labels=gpu",
                   "h2": "primus_slots=1 primus_gpus=1 primus_labels=gpu",
                   "h3": "primus_slots=1"})
    blocker = test.submit(test.job("blocker", gpu=1, hold=True))
    wait_until(lambda: test.started(blocker), 60, "the blocker to hold one GPU host")
    head = test.submit(test.job("head", num=2, gpu=1, hold=True))
    wait_until(lambda: head in test.queued(), 30, "the head to wait for both GPU hosts")
    small = test.submit(test.job("small", hold=True))
    def decided() -> object:  # started, or a reason admission gave (not "not looked yet")
        why = test.queued().get(small)
        return test.started(small) or (why if why and why != NO_LEADER_YET else None)
    outcome = wait_until(decided, 30, "small to start, or to wait with a reason")
    assert not isinstance(outcome, str), \
        f"small waits though h3 is free and the head cannot use it: {outcome}"
    [ran] = outcome
    assert ran.address == test.cluster.hosts[2].address
    assert head in test.queued(), "the head still waits for the blocker's GPU host"

    test.finish("blocker")
    wait_until(lambda: len(test.started(head)) == 2, 60,
               "the head to start while small still runs")
    assert test.started(small)[0].stop == float("inf"), "small did not hold the head back"
    test.finish("head")
    test.finish("small")
    assert test.wait_for_end(blocker, head, small) == {"SUCCEEDED"}


def test_a_queue_over_its_executor_quota_waits_naming_the_quota(shared):
    test = shared({"h3": "primus_slots=2", "h4": "primus_slots=2"}, quota=1)
    first = test.submit(test.job("first", queue="capped", hold=True))
    wait_until(lambda: test.started(first), 60, "first to run")
    second = test.submit(test.job("second", queue="capped", hold=True))
    # Until the admission leader has decided, the reason shown is "waiting for the admission
    # leader" (a loaded machine showed it once): the quota's is the one the leader must give.
    quota = "queue capped: executors quota 1, would hold 2"
    wait_until(lambda: test.queued().get(second) == quota, 30,
               "second to wait naming the queue's quota",
               explain=lambda: f"its reason: {test.queued().get(second)!r}")
    other = test.submit(test.job("other", hold=True))
    wait_until(lambda: test.started(other), 30, "another queue's app to run on the free slots")
    assert not test.started(second), "second starts nothing while over the quota"

    test.finish("first")
    wait_until(lambda: test.started(second), 60, "second to run once first ended")
    assert test.started(first)[0].stop <= test.started(second)[0].start
    test.finish("second")
    test.finish("other")
    assert test.wait_for_end(first, second, other) == {"SUCCEEDED"}


def test_a_lost_hosts_reservation_is_freed_after_the_lease_and_a_waiting_app_admitted(shared):
    test = shared({"h1": "primus_slots=1 primus_labels=doomed", "h2": "primus_slots=1"})
    pinned = "hosts: [doomed]"
    lost = test.submit(test.job("lost", hold=True, role=pinned, policy=f"heartbeat_ttl: {TTL}s"))
    wait_until(lambda: test.started(lost), 60, "lost to run on h1")
    waiting = test.submit(test.job("waiting", hold=True, role=pinned))
    wait_until(lambda: waiting in test.queued(), 30, "waiting to wait for h1's slot")
    with link_down(test.cluster.hosts[0]):
        wait_until(lambda: waiting not in test.queued(), TTL + 30,
                   "h1's slot to be freed once lost's executor lease expired")
    [ran] = wait_until(lambda: test.started(waiting), 60, "waiting to run on h1, back online")
    assert ran.address == test.cluster.hosts[0].address
    test.finish("waiting")
    assert test.wait_for_end(waiting) == {"SUCCEEDED"}
    assert test.wait_for_end(lost) == {"FAILED"}
    events = [e["message"] for e in status_json(test.env, lost)["events"]]
    assert any(m.startswith("worker-0 LOST") for m in events), events


def test_an_elastic_job_starts_at_its_minimum_and_grows_when_a_host_frees(shared):
    test = shared({"h1": "primus_slots=1", "h2": "primus_slots=1", "h3": "primus_slots=1"})
    blocker = test.submit(test.job("blocker", hold=True))
    wait_until(lambda: test.started(blocker), 60, "the blocker to hold one host")
    elastic = test.submit(test.job("elastic", num=3, hold=True, role="min_num: 2"))

    def running() -> set[str]:  # role-index of each trainer of elastic that started
        return {h.executor.rsplit("-", 1)[0] for h in test.started(elastic)}
    wait_until(lambda: len(running()) == 2, 60, "elastic to start at its minimum, 2 of 3")
    reason = wait_until(lambda: test.queued().get(elastic), 30, "elastic's third to wait")
    assert reason.startswith("1 executor beyond the elastic minimum waits for hosts: "), reason

    test.finish("blocker")
    wait_until(lambda: len(running()) == 3, 60, "elastic to grow to 3 on the blocker's host")
    assert elastic not in test.queued()
    test.finish("elastic")
    assert test.wait_for_end(blocker, elastic) == {"SUCCEEDED"}


def test_executors_on_a_drained_host_move_to_another_when_the_site_says_so(shared):
    test = shared({"h1": "primus_slots=1", "h2": "primus_slots=1"},
                  site="health: {out_of_service: move}\n")
    mover = test.submit(test.job("mover", hold=True))
    [first] = wait_until(lambda: test.started(mover), 60, "mover to start")
    host = next(h.name for h in test.cluster.hosts if h.address == first.address)

    drained = run_primus(test.env, "hosts", "drain", host, "--reason", "new disks")
    assert drained.returncode == 0, drained.stderr
    [moved] = wait_until(lambda: [h for h in test.started(mover) if h.address != first.address],
                         60, f"mover to leave {host} for the other host")
    status = service.status(test.env, mover)
    assert status["status"]["state"] == "RUNNING"
    [worker] = status["executors"]["worker"]
    assert (worker["plan"]["attempt"], worker["plan"]["failures"]) == (2, 0), \
        "moved as a new attempt, and a move is no failure"
    messages = [event["message"] for event in status["events"]]
    assert f"{host} out of service: drained by root: new disks; its executors there move to " \
        "other hosts" in messages, messages
    assert any(f"moved off {host}: drained by root: new disks" in m for m in messages), messages
    test.finish("mover")
    assert test.wait_for_end(mover) == {"SUCCEEDED"}
