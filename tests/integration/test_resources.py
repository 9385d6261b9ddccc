"""Reservations enforced: each trainer in a cgroup of its own holding it to its role's memory,
cpu and processes (primus/executor/cgroups.py), on this machine's real cgroups, through the
real ``primus`` command on the embedded default's local launcher.

These machines mount cgroup v1 (memory, cpu, pids, devices); the tests run as root, which may
write it. What v2 does differently is in docs/operations.md ("Resources enforced").
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from primus.executor.cgroups import find_hierarchy
from tests.support.apps import status_json, write_job
from tests.support.primus import run_primus
from tests.support.waiting import wait_until

ENDED = ("SUCCEEDED", "FAILED", "KILLED")

HOG = """\
import time
chunks = []
while True:  # 16 MiB at a time, every page touched, until the kernel says no
    chunks.append(bytearray(16 << 20))
    time.sleep(0.01)
"""

SHOW = """\
import json, os
def cgroup(pid):
    lines = open(f"/proc/{pid}/cgroup").read().splitlines()
    return {c: path for _, cs, path in (line.split(":", 2) for line in lines)
            for c in cs.split(",") if c}
def executor():  # the trainer's shell and the trainer are its children
    pid = os.getpid()
    while b"primus.executor" not in open(f"/proc/{pid}/cmdline", "rb").read():
        pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    return pid
def read(controller, name):
    path = cgroup("self")[controller]
    return open(f"/sys/fs/cgroup/{controller}{path}/{name}").read().strip()
print("SHOW " + json.dumps({
    "mine": cgroup("self"), "executor": cgroup(executor()),
    "memory": read("memory", "memory.limit_in_bytes"),
    "cpu": read("cpu", "cpu.cfs_quota_us"), "period": read("cpu", "cpu.cfs_period_us"),
    "pids": read("pids", "pids.max"), "env": dict(os.environ)}))
raise SystemExit(int(os.environ.get("SHOW_EXIT", "0")))
"""


def submit(env: dict[str, str], job: Path) -> str:
    result = run_primus(env, "submit", str(job))
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def ended(env: dict[str, str], app_id: str, timeout: float = 90) -> dict:
    return wait_until(lambda: (s := status_json(env, app_id))["status"]["state"] in ENDED and s,
                      timeout, f"{app_id} to end")


def show_job(tmp_path: Path, role: str) -> Path:
    """A job of one role ``worker`` running :data:`SHOW`, with the ``role`` fields given (YAML,
    indented as a role's)."""
    (tmp_path / "show.py").write_text(SHOW)
    return write_job(tmp_path / "show.yaml", "name: show\nfiles: [show.py]\nroles:\n"
                     "  - name: worker\n    command: python3 show.py\n" + role)


def shown(env: dict[str, str], app_id: str) -> list[dict]:
    """What each of the application's trainers printed, in order."""
    logs = run_primus(env, "logs", app_id).stdout
    return [json.loads(part.splitlines()[0]) for part in logs.split("SHOW ")[1:]]


def site(env: dict[str, str], tmp_path: Path, resources: str) -> dict[str, str]:
    (tmp_path / "site.yaml").write_text(f"resources: {resources}\n")
    return {**env, "PRIMUS_CONF": str(tmp_path / "site.yaml")}


def test_a_trainer_runs_in_a_cgroup_of_its_own_holding_its_reservation(primus_env, tmp_path):
    job = show_job(tmp_path, "    memory: 96Mi\n    cpu: 0.5\n")
    env = site(primus_env, tmp_path, "{memory_margin: 0.25, pids: 512}")
    app_id = submit(env, job)

    assert ended(env, app_id)["status"]["state"] == "SUCCEEDED"
    [seen] = shown(env, app_id)
    assert int(seen["memory"]) == int(96 * 2**20 * 1.25)
    assert (int(seen["cpu"]), int(seen["period"])) == (50_000, 100_000)
    assert seen["pids"] == "512"
    for controller in ("memory", "cpu", "pids"):
        mine, executor = seen["mine"][controller], seen["executor"][controller]
        assert mine.rsplit("/", 1)[1] == f"primus.{app_id}.worker-0.1", seen
        assert executor != mine, f"the executor must stay outside its trainer's {controller}"
    leftover = find_hierarchy().parents["memory"] / f"primus.{app_id}.worker-0.1"
    assert not leftover.exists(), "the trainer's cgroup goes with it"


def test_a_trainer_may_hold_an_eighth_of_its_hosts_processes_when_the_site_says_nothing(
        primus_env, tmp_path):
    app_id = submit(primus_env, show_job(tmp_path, ""))

    assert ended(primus_env, app_id)["status"]["state"] == "SUCCEEDED"
    [seen] = shown(primus_env, app_id)
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    assert seen["pids"] == str(pid_max // 8), f"pids.max of a host whose pid_max is {pid_max}"


def test_a_trainer_restarted_in_place_starts_in_its_attempts_cgroup_with_its_environment(
        primus_env, tmp_path):
    # Held: each next attempt's trainer joins its cgroups while the AM decides, then is told
    # its environment; the third, never wanted (max_failures), is let go with its cgroup.
    job = show_job(tmp_path, "    restart_policy: on_failure\n    max_failures: 2\n"
                   """    env: {SHOW_EXIT: "1", TRICKY: "it's $HOME\\n`x` \\"quoted\\""}\n""")
    app_id = submit(primus_env, job)

    assert ended(primus_env, app_id)["status"]["state"] == "FAILED"
    attempts = shown(primus_env, app_id)
    assert len(attempts) == 2, attempts
    for attempt, seen in enumerate(attempts, start=1):
        assert seen["mine"]["memory"].rsplit("/", 1)[1] == \
            f"primus.{app_id}.worker-0.{attempt}", seen["mine"]
        assert seen["env"]["PRIMUS_ATTEMPT"] == str(attempt)
        assert seen["env"]["TRICKY"] == "it's $HOME\n`x` \"quoted\""
        assert not [k for k in seen["env"] if k.startswith("PRIMUS_ETCD")], seen["env"]
    assert set(attempts[1]["env"]) - set(attempts[0]["env"]) <= {"PWD"}, "the same variables"
    said = run_primus(primus_env, "logs", app_id, "--executor-log").stdout
    assert "attempt 2's trainer waits in its cgroups" in said, said
    assert "attempt 3's trainer waits in its cgroups" in said, said
    parent = find_hierarchy().parents["memory"]
    assert not list(parent.glob(f"primus.{app_id}.*")), "every attempt's cgroup goes with it"


def test_a_trainer_past_its_memory_limit_is_oom_killed_while_a_co_tenant_runs_on(primus_env,
                                                                                  tmp_path):
    (tmp_path / "hog.py").write_text(HOG)
    hog = write_job(tmp_path / "hog.yaml", """\
name: hog
files: [hog.py]
roles:
  - name: worker
    memory: 64Mi
    command: python3 hog.py
    restart_policy: on_failure
    permanent_exit_codes: [OOM_KILLED]
""")
    finish = tmp_path / "finish"
    neighbour = write_job(tmp_path / "neighbour.yaml", f"""\
name: neighbour
roles:
  - name: worker
    memory: 64Mi
    command: 'python3 -c "x = bytearray(32 << 20)" && while [ ! -e {finish} ]; do sleep 0.1; done'
""")
    env = primus_env
    beside = submit(env, neighbour)
    wait_until(lambda: status_json(env, beside)["status"]["state"] == "RUNNING", 60,
               "the neighbour to run")
    hogging = submit(env, hog)

    status = ended(env, hogging)
    [worker] = status["executors"]["worker"]
    plan = worker["plan"]
    assert status["status"]["state"] == "FAILED"
    # Recorded by its executor (a LOST executor would have no result): it outlived its trainer.
    assert (plan["state"], plan["exit_class"], plan["exit_code"]) == ("FAILED", "OOM_KILLED", 137)
    assert plan["attempt"] == 1, "OOM_KILLED is permanent for this role: no restart"
    assert plan["diagnosis"].startswith(
        "OOM_KILLED: worker-0 used its 64 MiB of memory (limit 70.4 MiB"), plan["diagnosis"]
    assert "OOM_KILLED: worker-0 used its 64 MiB" in status["status"]["diagnosis"]
    assert status_json(env, beside)["status"]["state"] == "RUNNING", "the co-tenant runs on"
    finish.touch()
    assert ended(env, beside)["status"]["state"] == "SUCCEEDED"


def test_where_no_cgroup_can_be_made_submit_refuses_if_required_else_says_so(primus_env,
                                                                           tmp_path):
    job = write_job(tmp_path / "job.yaml", "name: plain\nroles:\n"
                    "  - name: worker\n    command: echo ran\n")
    where = "{cgroup_parent: /no-such-parent}"
    required = site(primus_env, tmp_path, where.replace("{", "{enforce: required, "))
    refused = run_primus(required, "submit", str(job))
    assert refused.returncode == 2
    assert "hosts not ready (resources.enforce: required):" in refused.stderr
    assert "trainers cannot be held to their reservations: " in refused.stderr
    assert "/no-such-parent does not exist" in refused.stderr
    assert run_primus(required, "list").stdout.count("plain-") == 0, "nothing was written"

    best_effort = site(primus_env, tmp_path, where)
    app_id = submit(best_effort, job)
    status = ended(best_effort, app_id)
    assert status["status"]["state"] == "SUCCEEDED"
    submitted = status["events"][0]["message"]
    assert "; resources not enforced on " in submitted and "no-such-parent" in submitted
    assert "ran" in run_primus(best_effort, "logs", app_id).stdout.splitlines()


def test_an_executor_that_cannot_make_its_trainers_cgroup_fails_the_attempt_if_required(
        primus_env, tmp_path):
    # Submit found the host fine; by the time the executor runs, the parent is gone.
    parents = find_hierarchy("/primus.vanishing").parents.values()
    for parent in parents:
        parent.mkdir()
    env = site(primus_env, tmp_path, "{enforce: required, cgroup_parent: /primus.vanishing}")
    job = write_job(tmp_path / "job.yaml", "name: late\nroles:\n"
                    "  - name: worker\n    command: echo ran\n")
    try:
        app_id = submit(env, job)
    finally:
        for parent in parents:
            parent.rmdir()
    status = ended(env, app_id)
    diagnosis = status["executors"]["worker"][0]["plan"]["diagnosis"]
    assert status["status"]["state"] == "FAILED"
    assert diagnosis.startswith("resources.enforce is required and "), diagnosis
    assert "primus.vanishing does not exist" in diagnosis, diagnosis


BURN = """\
import time
held = bytearray(48 << 20)  # touched: charged to the cgroup
for i in range(0, len(held), 4096):
    held[i] = 1
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    pass  # as much CPU as its quota lets it
"""


def test_a_trainers_usage_is_measured_against_its_reservation_while_it_runs(primus_env,
                                                                            tmp_path):
    """A trainer that spins and holds 48 MiB, in a role of half a core and 128 MiB: its
    executor writes its usage every second (the site's resources.usage_interval), from its
    cgroup: at most half a core, at least 48 MiB held, and what it reserved; ``primus status``
    shows the same, used against reserved."""
    (tmp_path / "burn.py").write_text(BURN)
    env = site(primus_env, tmp_path, "{usage_interval: 1}")
    app_id = submit(env, write_job(tmp_path / "burn.yaml", """\
name: burn
files: [burn.py]
roles:
  - name: worker
    cpu: 0.5
    memory: 128Mi
    command: python3 burn.py
"""))

    def measured() -> dict | None:  # a CPU rate: two readings at least
        (worker,) = status_json(env, app_id)["executors"]["worker"]
        usage = worker.get("usage")
        return usage if usage and usage["cpu"] is not None and \
            (usage["memory"] or 0) >= 48 << 20 else None

    usage = wait_until(measured, 60, "the trainer's usage with a CPU rate and its 48 MiB")
    # Its quota caps it at half a core (on a busy machine it may get less, never more).
    assert 0 < usage["cpu"] <= 0.6, usage
    (worker,) = status_json(env, app_id)["executors"]["worker"]
    ran = usage["time"] - worker["plan"]["launch_time"]
    assert usage["cpu_seconds"] <= 0.6 * ran + 0.2, (usage, ran)
    assert usage["cpu_reserved"] == 0.5 and usage["memory_reserved"] == 128 << 20, usage
    assert usage["memory_peak"] >= usage["memory"] >= 48 << 20, usage
    assert usage["attempt"] == 1 and usage["cpu_seconds"] > 0, usage
    shown = run_primus(env, "status", app_id)
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"\b0\.\d\d of 0\.5\b", shown.stdout), shown.stdout  # per executor
    assert re.search(r"MiB, peak \d+(\.\d)? MiB of 128 MiB", shown.stdout), shown.stdout
    assert re.search(r"worker ×1: .*; using 0\.\d\d of 0\.5 cores, \d+(\.\d)? MiB of "
                     r"128 MiB", shown.stdout), shown.stdout  # the role, summed
    run_primus(env, "kill", app_id)
    final = ended(env, app_id)
    (worker,) = final["executors"]["worker"]
    assert worker["usage"]["memory_peak"] >= 48 << 20, "its last figures keep its peak"
