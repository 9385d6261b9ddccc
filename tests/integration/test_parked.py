"""A queued application is a record, not a process (issue 43): submitted through a server
(every ``primus server`` stands for the AM keeper), an application waiting for admission holds
no AM; the keeper starts one once admission grants its request.

Real etcd, a real TLS server with tokens (its admission leader and AM keeper; its site's
inventory a local host of two slots), the ``primus`` command through it as alice, real AM,
executor and trainer processes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from primus.config.site import load_settings
from primus.state.keys import AppKeys, am_keeper_key
from primus.state.records import decode_hosts, encode_hosts
from primus.store.connect import open_store
from primus.store.pki import EtcdPki, ensure_pki
from tests.support.apps import assert_nothing_left, processes_of, status_json, write_job
from tests.support.data import wait_for_end
from tests.support.primus import run_primus
from tests.support.server import RunningServer
from tests.support.tokens import start_token_server, through_server
from tests.support.waiting import wait_until

# Records its application and index, then runs until the test creates `finish-<name>`.
TRAINER = ('echo "$PRIMUS_APP_ID $PRIMUS_INDEX" >> {out}/starts;'
           ' while [ ! -e {out}/finish-{name} ]; do sleep 0.1; done')


def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.ini"
    path.write_text("box ansible_host=127.0.0.1 ansible_connection=local primus_slots=2 "
                    f"primus_python={sys.executable}\n")
    return path


@dataclass
class Site:
    """The direct environment (etcd: what the tests read) and a server's."""

    direct: dict[str, str]
    pki: EtcdPki
    tmp_path: Path
    server: RunningServer | None = None

    def start(self) -> dict[str, str]:
        """Start the server; alice's environment through it."""
        self.server = start_token_server(self.direct, self.tmp_path, self.pki)
        return through_server(self.direct, self.server, self.pki, self.tmp_path)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


@pytest.fixture
def site(primus_env: dict[str, str], tmp_path: Path) -> Iterator[Site]:
    """A server whose site's inventory is :func:`inventory`; stopped after the test."""
    running = Site({**primus_env, "PRIMUS_INVENTORY": str(inventory(tmp_path))},
                   ensure_pki(tmp_path / "pki"), tmp_path)
    yield running
    running.stop()


def submit(env: dict[str, str], tmp_path: Path, name: str, out: Path, num: int = 2,
           extra: str = "") -> str:
    job = write_job(tmp_path / f"{name}.yaml", f"""
name: {name}
policy: {{stop_grace: 2s}}
{extra}
roles:
  - name: worker
    num: {num}
    cpu: 0.1
    command: '{TRAINER.format(out=out, name=name)}'
""")
    result = run_primus(env, "submit", str(job))
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def keeper_runs(env: dict[str, str]) -> bool:
    async def read() -> bool:
        store, settings = await open_store(load_settings(env=env))
        try:
            return await store.get(am_keeper_key(settings.prefix)) is not None
        finally:
            await store.close()
    return asyncio.run(read())


def starts(out: Path) -> list[str]:
    """The applications whose trainers started, in the order they started (one line each)."""
    lines = (out / "starts").read_text().splitlines() if (out / "starts").exists() else []
    return list(dict.fromkeys(line.split()[0] for line in lines))


def ams_of(app_id: str) -> list[int]:
    """The AM processes of the application on this machine."""
    return [p.pid for p in processes_of(app_id)
            if "primus.am" in " ".join(p.info["cmdline"] or [])]


def parked(env: dict[str, str], app_id: str) -> bool:
    status = status_json(env, app_id)["status"]
    return status["state"] == "QUEUED" and status.get("parked") is True


def holding_the_host(site: Site, tmp_path: Path) -> tuple[dict[str, str], Path, str]:
    """Start the server; once its keeper runs, submit ``first``, whose two trainers hold the
    host until ``finish-first``: alice's environment, the trainers' directory, ``first``."""
    env = site.start()
    wait_until(lambda: keeper_runs(site.direct), 30, "the server's AM keeper")
    out = tmp_path / "out"
    out.mkdir()
    first = submit(env, tmp_path, "first", out)
    wait_until(lambda: starts(out) == [first], 60, "first's trainers")
    return env, out, first


def test_queued_applications_hold_no_am_and_run_in_order_as_their_hosts_free(
        site: Site, tmp_path):
    """Behind an application holding the host, five more wait as records: no AM process, the
    reason in ``primus status`` and ``primus queue``. One killed, one suspended and resumed,
    one scaled while queued: each carried out with an AM started for it (or none left);
    the others start in submission order as the host frees, each with an AM only then."""
    env, out, first = holding_the_host(site, tmp_path)
    waiting = [submit(env, tmp_path, f"q{n}", out) for n in range(1, 6)]
    for app_id in waiting:
        assert parked(env, app_id), status_json(env, app_id)["status"]
    assert [pid for app_id in waiting for pid in ams_of(app_id)] == [], "no AM while queued"
    queue = run_primus(env, "queue")
    assert queue.returncode == 0, queue.stderr
    assert all(app_id in queue.stdout for app_id in waiting), queue.stdout
    head = run_primus(env, "queue", "--limit", "2")  # ListQueue's limit, through the server
    assert head.returncode == 0 and head.stdout.rstrip().endswith(
        "and 3 more wait (--limit 0 shows every one)"), head.stdout
    wait_until(lambda: "not enough slots on box" in run_primus(
        env, "status", waiting[0]).stdout, 30, "the reason it waits, in its status")
    shown = run_primus(env, "status", waiting[0]).stdout
    assert "none while it waits: one starts once it is admitted" in shown, shown

    killed = run_primus(env, "kill", waiting[1])
    assert killed.returncode == 0, killed.stderr
    assert status_json(env, waiting[1])["status"]["state"] == "KILLED"
    assert run_primus(env, "suspend", waiting[2]).returncode == 0
    wait_until(lambda: status_json(env, waiting[2])["status"]["state"] == "SUSPENDED",
               30, "q3 suspended")
    assert run_primus(env, "resume", waiting[2]).returncode == 0
    wait_until(lambda: parked(env, waiting[2]), 30, "q3 queued again, with no AM")
    scaled = run_primus(env, "scale", waiting[3], "worker", "1")
    assert scaled.returncode == 0, scaled.stderr
    for app_id in waiting:
        wait_until(lambda app_id=app_id: not ams_of(app_id), 30, f"no AM of {app_id} left")

    for name, app_id in [("first", first), *((f"q{n}", a) for n, a in
                                              zip(range(1, 6), waiting, strict=True))]:
        if app_id == waiting[1]:
            continue
        wait_until(lambda app_id=app_id: app_id in starts(out), 60, f"{name}'s trainers")
        (out / f"finish-{name}").touch()
        assert wait_for_end(env, app_id)["status"]["state"] == "SUCCEEDED"

    order = [first, waiting[0], waiting[2], waiting[3], waiting[4]]
    assert starts(out) == order, "admitted in submission order"
    lines = (out / "starts").read_text().splitlines()
    assert sum(1 for line in lines if line.startswith(waiting[3])) == 1, \
        "q4 scaled to one executor while queued runs one"
    events = status_json(env, waiting[0])["events"]
    assert any("admitted while it waited with no AM" in e["message"] for e in events), events
    for app_id in [first, *waiting]:
        assert_nothing_left(app_id)


def test_a_grant_made_while_no_keeper_runs_starts_its_am_once_one_does(site: Site, tmp_path):
    """The server stops while an application waits with no AM, and the host frees: nobody
    starts its AM. A server started again finds it (granted already by the running
    application's AM, which stands for admission too, or by the new server's admission
    leader) and its keeper starts the AM."""
    env, out, first = holding_the_host(site, tmp_path)
    second = submit(env, tmp_path, "second", out)
    assert parked(site.direct, second)
    site.stop()
    wait_until(lambda: not keeper_runs(site.direct), 30, "the keeper's key gone with it")

    (out / "finish-first").touch()
    assert wait_for_end(site.direct, first)["status"]["state"] == "SUCCEEDED"
    assert parked(site.direct, second) and not ams_of(second), "no keeper: nobody starts it"

    site.start()
    wait_until(lambda: second in starts(out), 60, "second's trainers, its AM started")
    (out / "finish-second").touch()
    assert wait_for_end(site.direct, second)["status"]["state"] == "SUCCEEDED"
    assert_nothing_left(second)


# --- Job arrays ---------------------------------------------------------------------------------

# Records its application, array index and parameter, then runs until `finish-<index>`.
MEMBER = ('echo "$PRIMUS_APP_ID $PRIMUS_ARRAY_INDEX ${{PRIMUS_PARAM_LR:-}} $PRIMUS_ARRAY_ID"'
          ' >> {out}/starts; while [ ! -e {out}/finish-$PRIMUS_ARRAY_INDEX ]; do sleep 0.1;'
          ' done')


def submit_array(env: dict[str, str], tmp_path: Path, out: Path, array: str,
                 *args: str) -> tuple[str, list[str]]:
    job = write_job(tmp_path / "sweep.yaml", f"""
name: sweep
policy: {{stop_grace: 2s}}
{array}
roles:
  - name: worker
    num: 1
    cpu: 0.1
    command: '{MEMBER.format(out=out)}'
""")
    result = run_primus(env, "submit", str(job), *args)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip(), result.stderr.split()


def member_lines(out: Path) -> list[list[str]]:
    path = out / "starts"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def test_a_job_array_runs_each_member_with_its_parameters_at_most_max_running_at_once(
        site: Site, tmp_path):
    """Three members with a learning rate each, max_running 1 on a host of two slots: one
    runs while the others wait as records, saying why; each member's trainer has its index,
    its parameter and the array's id; ``primus status ARRAY`` counts them by state and
    ``primus list --array`` lists them by index."""
    env = site.start()
    wait_until(lambda: keeper_runs(site.direct), 30, "the server's AM keeper")
    out = tmp_path / "out"
    out.mkdir()
    array, members = submit_array(env, tmp_path, out, """
array:
  params: [{lr: 0.1}, {lr: 0.01}, {lr: 0.001}]
  max_running: 1""")
    assert array.endswith("-array") and len(members) == 3, (array, members)

    for index, app_id in enumerate(members):
        wait_until(lambda app_id=app_id: app_id in {m[0] for m in member_lines(out)}, 60,
                   f"member {index}'s trainer")
        assert len(member_lines(out)) == index + 1, "a second member ran beside the first"
        if index == 0:
            wait_until(lambda: "max_running 1" in run_primus(env, "queue").stdout, 30,
                       "the reason the others wait")
            counts = json.loads(
                run_primus(env, "status", array, "-o", "json").stdout)
            assert (counts["members"], counts["states"]) == (3, {"QUEUED": 2, "RUNNING": 1})
            assert [parked(env, m) for m in members[1:]] == [True, True]
        (out / f"finish-{index}").touch()
        assert wait_for_end(env, app_id)["status"]["state"] == "SUCCEEDED"

    assert member_lines(out) == [[app_id, str(index), lr, array] for index, (app_id, lr) in
                                 enumerate(zip(members, ["0.1", "0.01", "0.001"], strict=True))]
    listed = json.loads(run_primus(env, "list", "--array", array, "-o",
                                                 "json").stdout)
    assert [(a["app_id"], a["array"], a["array_index"], a["state"]) for a in listed] == [
        (app_id, array, index, "SUCCEEDED") for index, app_id in enumerate(members)]
    for app_id in members:
        assert_nothing_left(app_id)


def test_killing_a_job_array_kills_every_member_running_or_queued(site: Site, tmp_path):
    env = site.start()
    wait_until(lambda: keeper_runs(site.direct), 30, "the server's AM keeper")
    out = tmp_path / "out"
    out.mkdir()
    array, members = submit_array(env, tmp_path, out, "", "--array", "0-2")
    wait_until(lambda: len(member_lines(out)) == 2, 60, "two members on the host's two slots")

    killed = run_primus(env, "kill", array)

    assert killed.returncode == 0, killed.stderr
    assert sorted(killed.stdout.split()) == sorted([*members, *["KILLED"] * 3])
    for app_id in members:
        assert status_json(env, app_id)["status"]["state"] == "KILLED"
        wait_until(lambda app_id=app_id: not processes_of(app_id), 30, f"{app_id}'s processes")
    bad = run_primus(env, "submit", str(tmp_path / "sweep.yaml"), "--array", "5-2")
    assert bad.returncode == 2 and "a range runs upwards" in bad.stderr, bad.stderr


def test_a_grant_whose_am_cannot_start_is_kept_and_the_start_tried_again(site: Site, tmp_path):
    """Admission grants a parked application whose host cannot start its AM (its interpreter
    gone, as an operator would see a host's Python removed): the keeper's start fails, the
    grant and its reservations stay, and once the host is mended the keeper's next try starts
    the AM, which runs the application on that grant."""
    env, out, first = holding_the_host(site, tmp_path)
    second = submit(env, tmp_path, "second", out, extra="am: {host: box}")
    assert parked(env, second)

    async def set_python(python: str) -> None:
        store, settings = await open_store(load_settings(env=site.direct))
        try:
            keys = AppKeys(settings.prefix, second)
            hosts = decode_hosts((await store.get(keys.hosts)).value)
            await store.put(keys.hosts, encode_hosts(
                [dataclasses.replace(h, python=python) for h in hosts]))
        finally:
            await store.close()
    asyncio.run(set_python("/nonexistent/python3"))
    (out / "finish-first").touch()
    assert wait_for_end(env, first)["status"]["state"] == "SUCCEEDED"
    assert site.server is not None
    wait_until(lambda: f"{second}: no AM could be started on any of its hosts" in
               site.server.log.read_text(), 60, "the keeper's failed start")
    assert parked(env, second) and not ams_of(second)
    assert status_json(env, second)["admission"], "the grant kept (its reservations)"

    asyncio.run(set_python(sys.executable))
    wait_until(lambda: second in starts(out), 60, "second's trainers, its AM started on retry")
    (out / "finish-second").touch()
    assert wait_for_end(env, second)["status"]["state"] == "SUCCEEDED"
    assert_nothing_left(second)


def test_two_hundred_queued_on_the_embedded_default_hold_no_am_and_run_in_order_five_at_most(
        primus_env, tmp_path):
    """The embedded default (its own etcd and server, no site): an array of 200 one-executor
    members, ``max_running`` 5, on a host of eight slots. While they wait, their AMs are
    counted: never more than twice the slots' worth (running ones, and ones ending), never one
    per waiting member. Every trainer records when it starts and ends: at no moment do more
    than five run; all 200 succeed, each started no more than five places from its submission
    order."""
    env = {k: v for k, v in primus_env.items() if k != "PRIMUS_ETCD"}
    slots, most_running = 8, 5
    host = tmp_path / "hosts.ini"
    host.write_text(f"box ansible_host=127.0.0.1 ansible_connection=local primus_slots={slots}"
                    f" primus_python={sys.executable}\n")
    out = tmp_path / "out"
    out.mkdir()
    job = write_job(tmp_path / "many.yaml", f"""
name: twohundred
policy: {{stop_grace: 2s}}
roles:
  - name: worker
    num: 1
    cpu: 0.1
    command: 'echo "$PRIMUS_ARRAY_INDEX start $(date +%s.%N)" >> {out}/starts; sleep 0.1;
      echo "$PRIMUS_ARRAY_INDEX end $(date +%s.%N)" >> {out}/starts'
""")
    try:
        result = run_primus(env, "submit", str(job), "-i", str(host), "--array",
                            f"0-199%{most_running}")
        assert result.returncode == 0, result.stderr
        assert len(result.stderr.split()) == 200
        most, most_waiting = 0, 0

        def lines() -> list[list[str]]:
            path = out / "starts"
            return [line.split() for line in path.read_text().splitlines()] \
                if path.exists() else []

        def all_ended() -> bool:
            nonlocal most, most_waiting
            ams = [p for p in psutil.process_iter(["cmdline"])
                   if "primus.am" in (line := " ".join(p.info["cmdline"] or []))
                   and "--app twohundred-" in line]
            ended = sum(1 for line in lines() if line[1] == "end")
            waiting = 200 - ended - most_running  # at least: five may run
            assert len(ams) <= 2 * slots, f"{len(ams)} AMs while {waiting} members wait"
            most, most_waiting = max(most, len(ams)), max(most_waiting, waiting)
            return ended == 200
        wait_until(all_ended, 600, "every member's trainer to end", interval=0.25)
        wait_until(lambda: json.loads(run_primus(env, "status", result.stdout.strip(), "-o",
                                                 "json").stdout)["states"] == {"SUCCEEDED": 200},
                   60, "every member to succeed", interval=1.0)
    finally:
        assert run_primus(env, "etcd", "stop").returncode == 0
    assert 2 <= most <= 2 * slots and most_waiting >= 150, (most, most_waiting)
    started = [int(index) for index, kind, _ in lines() if kind == "start"]
    assert sorted(started) == list(range(200))
    assert all(abs(place - index) <= most_running for place, index in enumerate(started)), \
        started
    running = peak = 0
    for _, step in sorted((float(when), 1 if kind == "start" else -1)
                          for _, kind, when in lines()):  # an end before a start at a tie
        running += step
        peak = max(peak, running)
    assert 2 <= peak <= most_running, peak
