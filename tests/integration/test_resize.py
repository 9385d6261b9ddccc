"""Resizing a running role in place (``primus resize``): real etcd, AM, admission and
executors, and real cgroup v1 limits read from inside the trainer; the trainer is never
restarted."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import psutil

from tests.support.apps import status_json, write_job
from tests.support.primus import run_primus
from tests.support.server import one_account_site, start_server
from tests.support.service import queue, wait_for_end
from tests.support.waiting import wait_until

# Four times a second, the trainer writes what its own cgroups hold it to and its resources
# file: "pid quota_us memory_limit {resources}"; it holds HOLD MiB, spins (uses all the CPU it
# may) while `spin` exists, fails (exit 3) once when `fail` appears, and ends at `finish`.
TRAINER = """\
import json, os, sys, time
out, hold = sys.argv[1], int(sys.argv[2])
held = bytearray(hold << 20)
for i in range(0, len(held), 4096):
    held[i] = 1
lines = open("/proc/self/cgroup").read().splitlines()
paths = {c: p for _, cs, p in (line.split(":", 2) for line in lines) for c in cs.split(",") if c}
def read(controller, name):
    return open(f"/sys/fs/cgroup/{controller}{paths[controller]}/{name}").read().strip()
while not os.path.exists(out + ".finish"):
    if os.path.exists(out + ".fail"):
        os.remove(out + ".fail")
        sys.exit(3)
    if os.path.exists(out + ".grow") and len(held) == hold << 20:
        held.extend(bytearray(24 << 20))
        for i in range(0, len(held), 4096):
            held[i] = 1
    if os.path.exists(out + ".shrink") and len(held) > 8 << 20:
        held = bytearray(8 << 20)
        for i in range(0, len(held), 4096):
            held[i] = 1
    resources = open(os.environ["PRIMUS_RESOURCES_FILE"]).read()
    line = f"{os.getpid()} {read('cpu', 'cpu.cfs_quota_us')} "
    line += f"{read('memory', 'memory.limit_in_bytes')} {resources}"
    with open(out, "a") as f:
        f.write(line + "\\n")
    if os.path.exists(out + ".spin"):
        end = time.time() + 0.25
        while time.time() < end:
            pass
    else:
        time.sleep(0.25)
"""


def setup(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The site (usage figures every second, a memory margin of 10 %) and the trainer."""
    (tmp_path / "site.yaml").write_text("resources: {usage_interval: 1, memory_margin: 0.1}\n")
    (tmp_path / "resizable.py").write_text(TRAINER)
    return {**env, "PRIMUS_CONF": str(tmp_path / "site.yaml")}


def submit(env: dict[str, str], tmp_path: Path, name: str, cpu: float, memory: str,
           hold: int = 16, inventory: Path | None = None, extra: str = "",
           role_extra: str = "") -> tuple[str, Path]:
    out = tmp_path / f"{name}.out"
    job = write_job(tmp_path / f"{name}.yaml", f"""\
name: {name}
{extra}roles:
  - name: worker
    cpu: {cpu}
    memory: {memory}
{role_extra}    command: {json.dumps([sys.executable, str(tmp_path / "resizable.py"), str(out),
                          str(hold)])}
""")
    args = ["-i", str(inventory)] if inventory else []
    done = run_primus(env, "submit", str(job), *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1], out


def reports(out: Path) -> list[tuple[int, int, int, dict]]:
    lines = out.read_text().splitlines() if out.exists() else []
    found = []
    for line in lines:
        pid, quota, limit, resources = line.split(" ", 3)
        try:
            found.append((int(pid), int(quota), int(limit), json.loads(resources)))
        except ValueError:
            continue  # a line being written
    return found


def held_to(out: Path, quota: int, limit: int, says: dict | None = None):
    """The trainer's latest report once its cgroups hold it to ``quota`` and ``limit`` (the
    kernel keeps a memory limit in whole pages) and, where given, its resources file
    ``says`` so (the executor rewrites that file just after the limits)."""
    last = reports(out)[-1:] if out.exists() else []
    if not last or (last[0][1], last[0][2] // 4096) != (quota, limit // 4096):
        return None
    return last[0] if says is None or last[0][3] == says else None


def test_a_role_resized_up_gets_its_new_limits_live_and_its_trainer_runs_on(primus_env,
                                                                             tmp_path):
    env = setup(primus_env, tmp_path)
    app_id, out = submit(env, tmp_path, "grow", 0.5, "64Mi")
    first = wait_until(lambda: held_to(out, 50_000, int((64 << 20) * 1.1)), 60,
                       "the trainer held to half a core and 64 MiB + 10 %")
    assert first[3] == {"cpu": 0.5, "memory": 64 << 20}

    resized = run_primus(env, "resize", app_id, "worker", "--cpu", "1", "--memory", "128Mi")
    assert resized.returncode == 0, resized.stderr
    assert "role worker resized from 0.5 CPUs, 64 MiB to 1 CPUs, 128 MiB" in resized.stdout

    after = wait_until(lambda: held_to(out, 100_000, int((128 << 20) * 1.1),
                                       {"cpu": 1.0, "memory": 128 << 20}), 60,
                       "the trainer held to a core and 128 MiB + 10 %, its resources file "
                       "saying so")
    assert after[0] == first[0], "the same trainer: it was not restarted"
    (worker,) = status_json(env, app_id)["executors"]["worker"]
    assert (worker["plan"]["attempt"], worker["plan"]["restarts"]) == (1, 0)
    (out.parent / f"{out.name}.finish").touch()
    ended = wait_for_end(env, app_id)
    assert ended["status"]["state"] == "SUCCEEDED"
    assert any("role worker resized" in e["message"] for e in ended["events"])


def test_a_resize_is_refused_with_the_reason_and_nothing_changes(primus_env, tmp_path):
    env = setup(primus_env, tmp_path)
    host = tmp_path / "hosts.ini"
    host.write_text(f"box ansible_host=127.0.0.1 ansible_connection=local primus_cpu=2 "
                    f"primus_memory=1Gi primus_python={sys.executable}\n")
    app_id, out = submit(env, tmp_path, "refusals", 0.5, "64Mi", hold=40, inventory=host)
    # Its usage figures (every second) show the 40 MiB it holds.
    wait_until(lambda: ((status_json(env, app_id)["executors"]["worker"][0].get("usage") or {})
                        .get("memory") or 0) >= 40 << 20, 60, "its usage figures")
    refusals = {
        ("--memory", "16Mi"): "is below what worker-0 holds now",
        ("--cpu", "4"): "fit on none of the application's hosts",
        ("--cpu", "0"): "cpu",
        (): "give cpu, memory or both",
        ("--cpu", "0.5"): "already",
    }
    for args, said in refusals.items():
        refused = run_primus(env, "resize", app_id, "worker", *args)
        assert refused.returncode != 0 and said in refused.stderr, (args, refused.stderr)
    unknown = run_primus(env, "resize", app_id, "ps", "--cpu", "1")
    assert unknown.returncode != 0 and "has no role 'ps'" in unknown.stderr
    assert "resize" not in json.dumps(status_json(env, app_id)["pending_changes"])
    assert held_to(out, 50_000, int((64 << 20) * 1.1)) is not None, "the limits as they were"
    (out.parent / f"{out.name}.finish").touch()
    wait_for_end(env, app_id)
    ended = run_primus(env, "resize", app_id, "worker", "--cpu", "1")
    assert ended.returncode != 0 and "has ended" in ended.stderr


def test_a_grow_that_does_not_fit_waits_saying_why_and_is_applied_once_room_frees(
        primus_env, tmp_path):
    env = setup(primus_env, tmp_path)
    host = tmp_path / "hosts.ini"
    host.write_text(f"box ansible_host=127.0.0.1 ansible_connection=local primus_cpu=2 "
                    f"primus_memory=1Gi primus_python={sys.executable}\n")
    app_id, out = submit(env, tmp_path, "grower", 1, "64Mi", inventory=host)
    other, other_out = submit(env, tmp_path, "neighbour", 1, "64Mi", inventory=host)
    first = wait_until(lambda: held_to(out, 100_000, int((64 << 20) * 1.1)), 60,
                       "the first trainer at one core")
    wait_until(lambda: reports(other_out), 60, "the neighbour running")

    resized = run_primus(env, "resize", app_id, "worker", "--cpu", "2")
    assert resized.returncode == 0, resized.stderr
    waiting = wait_until(lambda: next((q for q in queue(env) if q["app_id"] == app_id
                                       and "resize" in (q.get("reason") or "")), None),
                         60, "the resize waiting in the queue")
    assert "host box has 0 CPUs free, 1 more needed" in waiting["reason"], waiting
    assert held_to(out, 100_000, int((64 << 20) * 1.1)) is not None, "not applied yet"

    (tmp_path / f"{other_out.name}.finish").touch()
    assert wait_for_end(env, other)["status"]["state"] == "SUCCEEDED"
    after = wait_until(lambda: held_to(out, 200_000, int((64 << 20) * 1.1)), 60,
                       "the trainer at two cores once the neighbour ended")
    assert after[0] == first[0], "the same trainer"
    (tmp_path / f"{out.name}.finish").touch()
    assert wait_for_end(env, app_id)["status"]["state"] == "SUCCEEDED"


def test_less_memory_waits_until_the_trainer_holds_less_then_applies(primus_env, tmp_path):
    """A shrink the server allowed (no usage figure yet showed more) that the trainer has
    outgrown by the time its executor applies it: the executor waits, saying so, until the
    trainer holds less, then writes the limit; the trainer runs on."""
    (tmp_path / "site.yaml").write_text("resources: {usage_interval: 3600}\n")
    (tmp_path / "resizable.py").write_text(TRAINER)
    env = {**primus_env, "PRIMUS_CONF": str(tmp_path / "site.yaml")}
    app_id, out = submit(env, tmp_path, "shrinker", 0.5, "128Mi", hold=16)
    first = wait_until(lambda: held_to(out, 50_000, int((128 << 20) * 1.1)), 60,
                       "the trainer at 128 MiB + 10 %")
    (tmp_path / f"{out.name}.grow").touch()  # it now holds 40 MiB
    log = next((tmp_path / "home" / "apps").glob(f"{app_id}*")) / "worker-0.executor.log"
    wait_until(lambda: _holds(first[0]) >= 40 << 20, 30, "the trainer holding 40 MiB")

    resized = run_primus(env, "resize", app_id, "worker", "--memory", "32Mi")
    assert resized.returncode == 0, resized.stderr
    wait_until(lambda: "resize waits: the trainer holds" in log.read_text(), 30,
               "the executor saying the resize waits")
    assert held_to(out, 50_000, int((128 << 20) * 1.1)) is not None, "not applied yet"
    (tmp_path / f"{out.name}.shrink").touch()
    after = wait_until(lambda: held_to(out, 50_000, int((32 << 20) * 1.1)), 60,
                       "the new limit once the trainer holds less")
    assert after[0] == first[0], "the same trainer"
    (tmp_path / f"{out.name}.finish").touch()
    assert wait_for_end(env, app_id)["status"]["state"] == "SUCCEEDED"


def _holds(pid: int) -> int:
    """Bytes the process holds resident."""
    return psutil.Process(pid).memory_info().rss


def test_an_am_killed_while_a_resize_waits_leaves_the_next_am_to_carry_it_out(primus_env,
                                                                             tmp_path):
    env = setup(primus_env, tmp_path)
    host = tmp_path / "hosts.ini"
    host.write_text(f"box ansible_host=127.0.0.1 ansible_connection=local primus_cpu=2 "
                    f"primus_memory=1Gi primus_python={sys.executable}\n")
    app_id, out = submit(env, tmp_path, "failover", 1, "64Mi", inventory=host,
                         extra="am: {replicas: 2}\npolicy: {heartbeat_ttl: 3s}\n")
    other, other_out = submit(env, tmp_path, "taker", 1, "64Mi", inventory=host)
    first = wait_until(lambda: held_to(out, 100_000, int((64 << 20) * 1.1)), 60,
                       "the trainer at one core")
    wait_until(lambda: reports(other_out), 60, "the other application running")
    assert run_primus(env, "resize", app_id, "worker", "--cpu", "2").returncode == 0
    wait_until(lambda: any(q["app_id"] == app_id and "resize" in (q.get("reason") or "")
                           for q in queue(env)), 60, "the resize waiting")
    leader = status_json(env, app_id)["am"]
    os.kill(leader["pid"], signal.SIGKILL)
    wait_until(lambda: (status_json(env, app_id)["am"] or {}).get("pid") not in
               (None, leader["pid"]), 60, "another AM leading")

    (tmp_path / f"{other_out.name}.finish").touch()
    after = wait_until(lambda: held_to(out, 200_000, int((64 << 20) * 1.1)), 60,
                       "the resize carried out by the next AM once room freed")
    assert after[0] == first[0], "the same trainer"
    reservation = status_json(env, app_id)["executors"]["worker"][0]
    assert reservation["plan"]["attempt"] == 1
    (tmp_path / f"{out.name}.finish").touch()
    assert wait_for_end(env, app_id)["status"]["state"] == "SUCCEEDED"
    assert wait_for_end(env, other)["status"]["state"] == "SUCCEEDED"


def test_a_grow_with_resize_move_moves_the_executor_to_a_host_with_room(primus_env, tmp_path):
    env = setup(primus_env, tmp_path)
    two = tmp_path / "two.ini"
    two.write_text("".join(
        f"{name} ansible_connection=local primus_cpu=2 primus_memory=1Gi "
        f"primus_python={sys.executable} primus_home={tmp_path}/{name}\n" for name in "ab"))
    one = tmp_path / "one.ini"
    one.write_text(two.read_text().splitlines()[0] + "\n")
    other, other_out = submit(env, tmp_path, "holder", 1, "64Mi", inventory=one)
    wait_until(lambda: reports(other_out), 60, "the other application running on a")
    app_id, out = submit(env, tmp_path, "mover", 1, "64Mi", inventory=two,
                         extra="placement: pack\n", role_extra="    resize: move\n")
    first = wait_until(lambda: held_to(out, 100_000, int((64 << 20) * 1.1)), 60,
                       "the trainer at one core")
    (worker,) = status_json(env, app_id)["executors"]["worker"]
    assert worker["plan"]["host"] == "a", worker["plan"]  # packed beside the other one

    assert run_primus(env, "resize", app_id, "worker", "--cpu", "2").returncode == 0
    moved = wait_until(lambda: held_to(out, 200_000, int((64 << 20) * 1.1)), 60,
                       "a trainer at two cores")
    assert moved[0] != first[0], "moved: a new trainer"
    (worker,) = status_json(env, app_id)["executors"]["worker"]
    plan = worker["plan"]
    assert (plan["host"], plan["attempt"], plan["failures"]) == ("b", 2, 0), plan
    assert "moved off a: no room there for its new size" in \
        json.dumps(status_json(env, app_id)["events"])
    for done in (out, other_out):
        (tmp_path / f"{done.name}.finish").touch()
    assert wait_for_end(env, app_id)["status"]["state"] == "SUCCEEDED"
    assert wait_for_end(env, other)["status"]["state"] == "SUCCEEDED"


def test_a_resize_racing_a_trainer_failure_leaves_the_restarted_trainer_at_the_new_size(
        primus_env, tmp_path):
    env = setup(primus_env, tmp_path)
    app_id, out = submit(env, tmp_path, "racer", 0.5, "64Mi",
                         role_extra="    restart_policy: on_failure\n")
    first = wait_until(lambda: held_to(out, 50_000, int((64 << 20) * 1.1)), 60,
                       "the first trainer at half a core")
    (tmp_path / f"{out.name}.fail").touch()  # it exits 3 within a quarter second
    resized = run_primus(env, "resize", app_id, "worker", "--cpu", "1", "--memory", "96Mi")
    assert resized.returncode == 0, resized.stderr
    after = wait_until(lambda: held_to(out, 100_000, int((96 << 20) * 1.1),
                                       {"cpu": 1.0, "memory": 96 << 20}), 60,
                       "a trainer at the new size, its resources file saying so")
    assert after[0] != first[0], "the failed trainer was restarted"
    (worker,) = status_json(env, app_id)["executors"]["worker"]
    assert (worker["plan"]["attempt"], worker["plan"]["failures"]) == (2, 1), worker["plan"]
    (tmp_path / f"{out.name}.finish").touch()
    assert wait_for_end(env, app_id)["status"]["state"] == "SUCCEEDED"


def test_autosize_shrinks_an_idle_role_then_grows_it_when_it_gets_busy(primus_env, tmp_path):
    """The server's autosizer, from the executors' real usage figures: an idle trainer's
    role goes down to autosize's least CPU and to its memory held plus headroom; spinning
    (held to its new quota), it is grown again; the same trainer throughout."""
    env = setup(primus_env, tmp_path)
    server = start_server(one_account_site(env, tmp_path), tmp_path)  # its autosizer leads
    try:
        autosized(env, tmp_path)
    finally:
        server.stop()


def autosized(env: dict[str, str], tmp_path: Path) -> None:
    bad = write_job(tmp_path / "bad.yaml", f"""\
name: badly-sized
roles:
  - name: worker
    command: [{json.dumps(sys.executable)}, -c, pass]
    autosize: {{cpu: {{min: 2, max: 1}}}}
""")
    refused = run_primus(env, "submit", str(bad))
    assert refused.returncode != 0 and "roles[0].autosize.cpu" in refused.stderr and \
        "min 2 is above max 1" in refused.stderr, refused.stderr
    assert "badly-sized" not in run_primus(env, "list").stdout, "nothing was submitted"

    app_id, out = submit(env, tmp_path, "sized", 1, "256Mi", role_extra=(
        "    autosize: {cpu: {target: 0.8}, memory: {headroom: 0.5}, interval: 3}\n"))
    first = wait_until(lambda: held_to(out, 100_000, int((256 << 20) * 1.1)), 60,
                       "the trainer at one core and 256 MiB + 10 %")
    beyond = run_primus(env, "resize", app_id, "worker", "--cpu", "2")
    assert beyond.returncode != 0 and "outside autosize.cpu's min 0.1 and max 1" in \
        beyond.stderr, beyond.stderr

    def shrunk():
        last = reports(out)[-1:]
        return last[0] if last and last[0][1] == 10_000 and last[0][3]["cpu"] == 0.1 and \
            last[0][3]["memory"] < 256 << 20 and \
            last[0][2] // 4096 == int(last[0][3]["memory"] * 1.1) // 4096 else None

    small = wait_until(shrunk, 60, "autosize taking the idle role to 0.1 CPUs and less memory")
    assert small[0] == first[0], "the same trainer"
    assert small[3]["memory"] >= 64 << 20, "not below autosize's least memory"
    (tmp_path / f"{out.name}.spin").touch()
    grown = wait_until(lambda: next((r for r in reports(out)[-1:] if r[1] > 10_000), None), 60,
                       "autosize growing the role again once its trainer uses all it has")
    assert grown[0] == first[0], "the same trainer"
    assert grown[1] <= 100_000, "never above the role's own cpu (autosize's max unset)"
    (tmp_path / f"{out.name}.finish").touch()
    ended = wait_for_end(env, app_id)
    assert ended["status"]["state"] == "SUCCEEDED"
    resized = [e["message"] for e in ended["events"] if "role worker resized" in e["message"]]
    assert len(resized) >= 2, resized
    assert all(" by autosize: role worker resized" in m for m in resized), resized
    assert "(autosize: the busiest executor used" in resized[0], resized
