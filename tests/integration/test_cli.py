"""End to end through the real ``primus`` command: real etcd, real AM, executors and trainers."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from primus.config.spec import JobSpec, job_schema
from primus.state.keys import EVENT_LOG_SIZE, AppKeys
from primus.state.records import (
    AmLeader,
    AppEvent,
    AppOwner,
    AppStatus,
    ClusterSpec,
    ExecutorPlan,
    ExecutorResult,
    ExecutorUsage,
    KillRequest,
    decode,
    decode_hosts,
    encode,
)
from primus.state.states import AppState, ExecutorState
from primus.store.api import Put
from primus.store.embedded import find_etcd_binary
from tests.support.apps import (
    assert_nothing_left,
    cli_status_json,
    processes_of,
    status_json,
    write_job,
)
from tests.support.primus import REPO, run_primus
from tests.support.service import call, with_store
from tests.support.waiting import wait_until

HELLO = REPO / "examples" / "hello" / "job.yaml"
FAILING = REPO / "examples" / "failing" / "job.yaml"


def test_hello_runs_to_success_and_prints_only_the_app_id(cli_env):
    result = run_primus(cli_env, "submit", str(HELLO), "--wait")
    assert result.returncode == 0, result.stderr
    app_id = result.stdout.strip()
    assert app_id.startswith("hello-") and "\n" not in app_id
    status = cli_status_json(cli_env, app_id)
    assert status["status"]["state"] == "SUCCEEDED"
    assert status["status"]["exit_code"] == 0
    plans = [e["plan"] for role in status["executors"].values() for e in role]
    assert len(plans) == 4 and all(p["state"] == "SUCCEEDED" for p in plans)
    assert_nothing_left(app_id)
    logs = run_primus(cli_env, "logs", app_id)
    assert logs.returncode == 0, logs.stderr
    for name in ("chief-0", "ps-0", "worker-0", "worker-1"):
        assert f"[{name}] hello from {name}" in logs.stdout
    tf_config = json.loads(next(line for line in logs.stdout.splitlines()
                                if line.startswith("[worker-1] TF_CONFIG:")).split(": ", 1)[1])
    assert tf_config["task"] == {"type": "worker", "index": 1}
    assert {k: len(v) for k, v in tf_config["cluster"].items()} == {"chief": 1, "ps": 1,
                                                                   "worker": 2}


def test_submit_without_wait_returns_at_once_and_the_app_still_runs(cli_env, tmp_path):
    job = write_job(tmp_path / "job.yaml", "name: bg\nroles:\n  - name: worker\n"
                    "    command: sleep 1\n")
    result = run_primus(cli_env, "submit", str(job))
    assert result.returncode == 0, result.stderr
    app_id = result.stdout.strip()
    wait_until(lambda: status_json(cli_env, app_id)["status"]["state"] == "SUCCEEDED",
               30, "the background application to succeed")
    listed = json.loads(run_primus(cli_env, "list", "-o", "json").stdout)
    assert [a["app_id"] for a in listed] == [app_id]
    assert listed[0]["state"] == "SUCCEEDED"
    assert listed[0]["progress"] == 1.0


def test_progress_counts_the_executors_that_succeeded_in_status_and_list(cli_env, tmp_path):
    job = write_job(tmp_path / "job.yaml", """
name: halfway
roles:
  - name: worker
    num: 2
    command: "[ $PRIMUS_INDEX = 0 ] || exec sleep 600"
""")
    app_id = run_primus(cli_env, "submit", str(job)).stdout.strip()
    try:
        wait_until(lambda: (plan := status_json(cli_env, app_id)["executors"]["worker"][0]
                            ["plan"]) and plan["state"] == "SUCCEEDED", 30, "worker-0 to succeed")
        assert cli_status_json(cli_env, app_id)["progress"] == 0.5
        assert "progress   50%" in run_primus(cli_env, "status", app_id).stdout
        table = run_primus(cli_env, "list").stdout.splitlines()
        assert "PROGRESS" in table[0]
        assert "50%" in next(line for line in table if app_id in line)
        assert json.loads(run_primus(cli_env, "list", "-o", "json").stdout)[0][
            "progress"] == 0.5
    finally:
        run_primus(cli_env, "kill", app_id)


def test_failing_worker_fails_the_app_with_a_diagnosis_naming_it(cli_env):
    result = run_primus(cli_env, "submit", str(FAILING), "--wait")
    assert result.returncode == 1
    app_id = result.stdout.strip()
    status = cli_status_json(cli_env, app_id)["status"]
    assert status["state"] == "FAILED"
    assert status["exit_code"] == 3
    assert "worker-1" in status["diagnosis"] and "code 3" in status["diagnosis"]
    assert_nothing_left(app_id)
    plans = {(e["plan"]["role"], e["plan"]["index"]): e["plan"]
             for role in cli_status_json(cli_env, app_id)["executors"].values() for e in role}
    assert plans[("worker", 1)]["state"] == "FAILED"
    assert plans[("worker", 0)]["state"] == "KILLED"
    # The chief exits at once: it either finished before the failure or was stopped with the rest.
    assert plans[("chief", 0)]["state"] in ("SUCCEEDED", "KILLED")


def test_trainer_gets_the_whole_environment_contract(primus_env, tmp_path):
    out = tmp_path / "env"
    out.mkdir()
    job = write_job(tmp_path / "job.yaml", f"""
name: envcheck
env: {{SHARED: global, OVERRIDDEN: global}}
roles:
  - name: chief
    command: env > {out}/$PRIMUS_ROLE-$PRIMUS_INDEX
    env: {{OVERRIDDEN: chief}}
  - name: worker
    num: 2
    ports: 2
    command: ["/bin/sh", "-c", "env > {out}/$PRIMUS_ROLE-$PRIMUS_INDEX"]
""")
    result = run_primus(primus_env, "submit", str(job), "--wait")
    assert result.returncode == 0, result.stderr
    envs = {}
    for path in out.iterdir():
        envs[path.name] = dict(line.split("=", 1) for line in path.read_text().splitlines()
                               if "=" in line)
    worker = envs["worker-1"]
    assert worker["PRIMUS_APP_ID"] == result.stdout.strip()
    assert (worker["PRIMUS_ROLE"], worker["PRIMUS_INDEX"], worker["PRIMUS_ATTEMPT"]) == (
        "worker", "1", "1")
    assert len(worker["PRIMUS_PORTS"].split(",")) == 2
    assert (worker["WORLD_SIZE"], worker["RANK"]) == ("3", "2")
    assert worker["LOCAL_RANK"] == "2" and worker["LOCAL_WORLD_SIZE"] == "3"
    chief_port = envs["chief-0"]["PRIMUS_PORTS"]
    assert (worker["MASTER_ADDR"], worker["MASTER_PORT"]) == ("127.0.0.1", chief_port)
    tf_config = json.loads(worker["TF_CONFIG"])
    assert tf_config["cluster"]["chief"] == [f"127.0.0.1:{chief_port}"]
    assert len(tf_config["cluster"]["worker"]) == 2
    assert worker["SHARED"] == "global" and worker["OVERRIDDEN"] == "global"
    assert envs["chief-0"]["OVERRIDDEN"] == "chief"


def test_kill_stops_every_process_and_records_killed(cli_env, tmp_path):
    job = write_job(tmp_path / "job.yaml", """
name: forever
policy: {stop_grace: 2s}
roles:
  - name: worker
    num: 2
    command: sleep 600
""")
    app_id = run_primus(cli_env, "submit", str(job)).stdout.strip()
    wait_until(lambda: status_json(cli_env, app_id)["status"]["state"] == "RUNNING",
               30, "the application to run")
    result = run_primus(cli_env, "kill", app_id)
    assert result.returncode == 0, result.stderr
    status = cli_status_json(cli_env, app_id)
    assert status["status"]["state"] == "KILLED"
    assert all(e["plan"]["state"] == "KILLED" for e in status["executors"]["worker"])
    assert_nothing_left(app_id)


def test_succeed_ends_a_running_app_as_succeeded_stopping_its_trainers_gracefully(
        primus_env, tmp_path):
    job = write_job(tmp_path / "job.yaml", """
name: evaluated
policy: {stop_grace: 5s}
roles:
  - name: worker
    num: 2
    command: "trap 'echo saved on TERM; exit 0' TERM; echo ready; sleep 600 & wait"
""")
    app_id = run_primus(primus_env, "submit", str(job)).stdout.strip()
    # Each trainer has set its trap (a shell that has not yet would die of the TERM).
    wait_until(lambda: run_primus(primus_env, "logs", app_id).stdout.count("ready") == 2,
               30, "both trainers to have set their trap")
    result = run_primus(primus_env, "succeed", app_id, "--reason", "eval loss reached 0.1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{app_id} SUCCEEDED"
    status = cli_status_json(primus_env, app_id)
    assert status["status"]["exit_code"] == 0
    assert status["status"]["diagnosis"].startswith("ended as succeeded by ")
    assert status["status"]["diagnosis"].endswith(": eval loss reached 0.1")
    assert status["kill"]["outcome"] == "SUCCEEDED"
    assert status["kill"]["reason"] == "eval loss reached 0.1"
    logs = run_primus(primus_env, "logs", app_id).stdout
    assert logs.count("saved on TERM") == 2, "each trainer was asked to stop, not killed"
    assert_nothing_left(app_id)

    before = etcd_dump(primus_env)
    again = run_primus(primus_env, "succeed", app_id)
    assert again.returncode != 0
    assert f"{app_id} has ended (SUCCEEDED); only a running application can end as " \
        "succeeded" in again.stderr
    assert etcd_dump(primus_env) == before, "a refused request changes nothing"


def etcd_dump(env: dict[str, str]) -> str:
    """Every key and value under the test's prefix."""
    return subprocess.run(
        [str(find_etcd_binary("etcdctl")), "--endpoints", env["PRIMUS_ETCD"], "get", "--prefix",
         env["PRIMUS_PREFIX"]], capture_output=True, text=True, check=True,
        env={**os.environ, "ETCDCTL_API": "3"}).stdout


def test_kill_stops_the_app_even_when_its_am_is_dead(primus_env, tmp_path):
    job = write_job(tmp_path / "job.yaml", """
name: orphaned
policy: {stop_grace: 2s, heartbeat_ttl: 3s}
roles:
  - name: worker
    command: sleep 600
""")
    app_id = run_primus(primus_env, "submit", str(job)).stdout.strip()
    wait_until(lambda: status_json(primus_env, app_id)["status"]["state"] == "RUNNING",
               30, "the application to run")
    am_pid = cli_status_json(primus_env, app_id)["am"]["pid"]
    os.kill(am_pid, signal.SIGKILL)
    wait_until(lambda: status_json(primus_env, app_id)["am"] is None, 15,
               "the dead AM's leader key to expire")
    survivors = {p.pid for p in processes_of(app_id)}
    assert {e["plan"]["process"]["pid"] for e in cli_status_json(primus_env, app_id)["executors"][
        "worker"]} <= survivors, "executors must outlive their AM"
    result = run_primus(primus_env, "kill", app_id)
    assert result.returncode == 0, result.stderr
    status = cli_status_json(primus_env, app_id)
    assert status["status"]["state"] == "KILLED"
    assert_nothing_left(app_id)
    # kill ran no AM itself: it started an AM process, which took over and stopped the app.
    app_dir = Path(primus_env["PRIMUS_HOME"]) / "apps" / app_id
    candidate_logs = [log.read_text() for log in app_dir.glob("am-*.log")]
    assert any("leading as" in log for log in candidate_logs), candidate_logs
    took_over = [e["message"] for e in status["events"] if e["kind"] == "am"][-1]
    assert "took over" in took_over and f":{am_pid} " not in took_over


def test_logs_follow_prints_until_the_app_ends(cli_env, tmp_path):
    job = write_job(tmp_path / "job.yaml", """
name: chatty
roles:
  - name: worker
    command: for i in 1 2 3; do echo line $i; sleep 0.5; done
""")
    app_id = run_primus(cli_env, "submit", str(job)).stdout.strip()
    wait_until(lambda: status_json(cli_env, app_id)["executors"]["worker"][0]["plan"],
               30, "the worker to be planned")
    result = run_primus(cli_env, "logs", app_id, "worker-0", "-f", timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["line 1", "line 2", "line 3"]
    missing = run_primus(cli_env, "logs", app_id, "worker-7")
    assert missing.returncode == 2 and "worker-7" in missing.stderr


def test_every_value_of_a_finished_app_parses_when_read_with_etcdctl(primus_env, etcd_server):
    app_id = run_primus(primus_env, "submit", str(HELLO), "--wait").stdout.strip()
    root = f"{primus_env['PRIMUS_PREFIX']}/apps/{app_id}/"
    listing = subprocess.run(
        [str(find_etcd_binary("etcdctl")), "--endpoints", etcd_server.client_url, "get",
         "--prefix", root, "-w", "json"],
        capture_output=True, text=True, check=True, env={**os.environ, "ETCDCTL_API": "3"})
    import base64

    kvs = {base64.b64decode(kv["key"]).decode(): base64.b64decode(kv["value"])
           for kv in json.loads(listing.stdout)["kvs"]}
    models = {"status": AppStatus, "owner": AppOwner, "cluster": ClusterSpec, "kill": KillRequest,
              "am/leader": AmLeader, "plan": ExecutorPlan, "result": ExecutorResult,
              "usage": ExecutorUsage}
    seen = set()
    for key, value in kvs.items():
        rel = key[len(root):]
        json.loads(value)  # every value is JSON
        kind = rel.rsplit("/", 1)[-1]
        if rel.startswith("events/"):
            decode(AppEvent, value)
            seen.add("events")
        elif rel in models:
            decode(models[rel], value)
            seen.add(rel)
        elif kind in models:
            decode(models[kind], value)
            seen.add(kind)
        elif rel == "hosts":
            assert [h.name for h in decode_hosts(value)] == [socket.gethostname()]
            seen.add(rel)
        else:
            assert rel == "spec" or rel.startswith("roles/"), f"undocumented key {key}"
            seen.add(rel.split("/")[0])
    assert {"spec", "owner", "status", "hosts", "cluster", "plan", "result", "usage", "events",
            "roles"} <= seen
    assert decode(AppStatus, kvs[root + "status"]).state is AppState.SUCCEEDED
    assert decode(ExecutorPlan, kvs[root + "executors/worker/1/plan"]).state is \
        ExecutorState.SUCCEEDED


@pytest.mark.parametrize(("body", "field", "fragment"), [
    ("name: x\nroles:\n  - name: w\n    command: 'true'\n    cpus: 2\n", "roles[0].cpus",
     "unknown field"),
    ("name: x\nroles:\n  - name: w\n    num: 0\n    command: 'true'\n", "roles[0].num", "got 0"),
    ("name: x\nroles:\n  - {name: w, command: a}\n  - {name: w, command: b}\n", "roles",
     "'w'"),
    ("name: x\nroles:\n  - name: w\n    command: '  '\n", "roles[0].command", "got '  '"),
    ("name: x\nroles:\n  - name: w\n    num: many\n    command: 'true'\n", "roles[0].num",
     "got 'many'"),
    ("name: x\nworkdir: /nonexistent/dir\nroles:\n  - name: w\n    command: 'true'\n",
     "workdir", "must be an existing directory"),
])
def test_bad_job_file_is_rejected_before_anything_is_written(cli_env, primus_env, tmp_path,
                                                             etcd_server, body, field, fragment):
    job = write_job(tmp_path / "bad.yaml", body)
    result = run_primus(cli_env, "submit", str(job))
    assert result.returncode == 2
    assert result.stdout == ""
    assert str(job) in result.stderr and field in result.stderr and fragment in result.stderr
    listing = subprocess.run(
        [str(find_etcd_binary("etcdctl")), "--endpoints", etcd_server.client_url, "get",
         "--prefix", primus_env["PRIMUS_PREFIX"], "--keys-only"],
        capture_output=True, text=True, check=True, env={**os.environ, "ETCDCTL_API": "3"})
    written = listing.stdout.split()
    if cli_env is not primus_env:  # the server writes its own keys (its candidacies) as it starts
        written = [key for key in written if "/scheduler/" not in key and "/server/" not in key]
    assert written == [], "nothing may be written for a bad job file"
    assert not (Path(primus_env["PRIMUS_HOME"]) / "apps").exists(), "nothing may be launched"


def test_spec_check_prints_the_normalised_spec_and_schema_lists_fields(primus_env):
    checked = run_primus(primus_env, "spec", "check", str(HELLO), "--set", "roles.worker.num=3")
    assert checked.returncode == 0, checked.stderr
    spec = json.loads(checked.stdout)
    assert [r["num"] for r in spec["roles"]] == [1, 1, 3]
    assert spec["policy"]["heartbeat_ttl"] == 10
    schema = json.loads(run_primus(primus_env, "spec", "schema").stdout)
    assert "roles" in schema["properties"]


def test_unreachable_etcd_fails_fast_naming_the_endpoint(primus_env):
    env = {**primus_env, "PRIMUS_ETCD": "127.0.0.1:9"}
    started = time.monotonic()
    result = run_primus(env, "list")
    assert result.returncode == 2
    assert "127.0.0.1:9" in result.stderr
    assert time.monotonic() - started < 15


def test_status_of_unknown_app_is_a_clear_error(cli_env):
    result = run_primus(cli_env, "status", "nope-1")
    assert result.returncode == 2 and "nope-1" in result.stderr


def test_embedded_etcd_is_started_reused_and_stopped(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIMUS_")}
    env.update(PRIMUS_HOME=str(tmp_path / "home"), PRIMUS_CONF=str(tmp_path / "none.yaml"))
    (tmp_path / "none.yaml").write_text("{}\n")
    try:
        assert run_primus(env, "etcd", "status").returncode == 1
        first = run_primus(env, "submit", str(HELLO), "--wait")
        assert first.returncode == 0, first.stderr
        status = run_primus(env, "etcd", "status")
        assert status.returncode == 0 and status.stdout.startswith("https://127.0.0.1:")
        pid_line = status.stderr
        second = run_primus(env, "submit", str(HELLO), "--wait")
        assert second.returncode == 0, second.stderr
        assert run_primus(env, "etcd", "status").stderr == pid_line, "etcd must be reused"
        listed = json.loads(run_primus(env, "list", "-o", "json").stdout)
        assert {a["app_id"] for a in listed} == {first.stdout.strip(), second.stdout.strip()}
    finally:
        assert run_primus(env, "etcd", "stop").returncode == 0
    assert run_primus(env, "etcd", "status").returncode == 1


def test_wait_reports_a_dead_am_instead_of_hanging(primus_env, tmp_path):
    # Direct mode only: through a server, the server starts an AM for the application
    # (test_cli_server.py).
    job = write_job(tmp_path / "job.yaml", """
name: abandoned
policy: {stop_grace: 2s, heartbeat_ttl: 3s}
roles:
  - name: worker
    command: sleep 600
""")
    waiting = subprocess.Popen([sys.executable, "-m", "primus.cli", "submit", str(job), "--wait"],
                               env=primus_env, cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    app_id = waiting.stdout.readline().strip()
    wait_until(lambda: status_json(primus_env, app_id)["status"]["state"] == "RUNNING",
               30, "the application to run")
    os.kill(cli_status_json(primus_env, app_id)["am"]["pid"], signal.SIGKILL)
    try:
        _, stderr = waiting.communicate(timeout=60)
    finally:
        waiting.kill()
    assert waiting.returncode == 2
    assert "AM is gone" in stderr and f"primus kill {app_id}" in stderr
    assert run_primus(primus_env, "kill", app_id).returncode == 0
    assert_nothing_left(app_id)


@pytest.mark.parametrize("name", ["Bad Name", "[bold red]w[/bold red]", "[/x]", ":smile:"])
def test_a_bad_name_error_prints_the_value_and_the_whole_pattern_on_one_line(primus_env, tmp_path,
                                                                             name):
    job = write_job(tmp_path / "job.yaml", f"name: {json.dumps(name)}\n"
                                           "roles:\n  - {name: w, command: x}\n")
    result = run_primus(primus_env, "spec", "check", str(job))
    assert result.returncode == 2
    pattern = job_schema()["properties"]["name"]["pattern"]
    assert result.stderr == f"error: {job}: name: got {name!r}; must match {pattern}\n"


def test_an_error_is_not_wrapped_when_stderr_is_a_pipe(primus_env, tmp_path):
    """rich assumes 80 columns when stderr is no terminal; each problem must still be one line."""
    env = {k: v for k, v in primus_env.items() if k not in ("COLUMNS", "LINES")}
    job = write_job(tmp_path / ("a-job-file-with-a-long-name-" * 3 + ".yaml"), f"""
name: {"N" * 70}
roles:
  - {{name: W, command: x, num: 0}}
""")
    result = run_primus(env, "spec", "check", str(job))
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 3, result.stderr
    assert lines[0].startswith(f"error: {job}: ")
    assert all(line.startswith(f"{job}: ") for line in lines[1:]), result.stderr
    assert all(len(line) > 80 for line in lines)


async def test_status_piped_prints_a_long_diagnosis_on_one_line(primus_env, store):
    """stdout a pipe and no $COLUMNS: the summary and the executors' tables are not wrapped at
    the 80 columns rich would otherwise take."""
    keys = AppKeys(primus_env["PRIMUS_PREFIX"], "wide-1")
    spec = JobSpec.model_validate({"name": "wide", "roles": [{"name": "w", "command": "x"}]})
    diagnosis = ("worker-0 exited with code 137 (killed: out of memory, 8.0GiB of 8.0GiB) "
                 "after 3 restarts; max_failures 3 reached")
    await store.put(keys.spec, spec.model_dump_json().encode())
    await store.put(keys.status, encode(AppStatus(
        app_id=keys.app_id, name="wide", state=AppState.FAILED, submit_time=1.0,
        diagnosis=diagnosis)))
    await store.put(keys.executor("w", 0, "plan"), encode(ExecutorPlan(
        role="w", index=0, attempt=1, host="localhost", address="127.0.0.1",
        state=ExecutorState.FAILED, exit_code=137, diagnosis=diagnosis)))
    env = {k: v for k, v in primus_env.items() if k not in ("COLUMNS", "LINES")}

    result = run_primus(env, "status", keys.app_id)

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.split() == ["diagnosis", *diagnosis.split()] for line in lines), \
        result.stdout
    assert any(line.split()[:1] == ["0"] and line.rstrip().endswith(diagnosis)
               for line in lines), result.stdout


def test_markup_in_an_inventory_error_is_printed_as_written(primus_env, tmp_path):
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[gpu:members]\nh1\n")
    result = run_primus(primus_env, "hosts", "list", "-i", str(inventory))
    assert result.returncode == 2
    assert result.stderr == (f"error: {inventory}:1: section [gpu:members] has an unknown type "
                             "'members'; allowed: [gpu], [gpu:children], [gpu:vars]\n")


@pytest.mark.parametrize("command", ["status", "kill", "logs"])
def test_an_app_id_that_looks_like_markup_gets_a_clear_error(primus_env, command):
    result = run_primus(primus_env, command, "[/x]")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == (f"error: no application '[/x]' under "
                             f"{primus_env['PRIMUS_PREFIX']}\n")


def test_hosts_list_prints_labels_that_look_like_markup_as_written(primus_env, tmp_path):
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("h1 ansible_connection=local"
                         " primus_labels='[\"[/x]\", \"[bold red]w[/bold red]\", \":smile:\"]'\n")
    result = run_primus(primus_env, "hosts", "list", "-i", str(inventory))
    assert result.returncode == 0, result.stderr
    assert ":smile:,[/x],[bold red]w[/bold red]" in result.stdout


async def test_status_shows_stored_times_no_calendar_holds_as_numbers(primus_env, store):
    keys = AppKeys(primus_env["PRIMUS_PREFIX"], "far-1")
    spec = JobSpec.model_validate({"name": "far", "roles": [{"name": "w", "command": "x"}]})
    await store.put(keys.spec, spec.model_dump_json().encode())
    await store.put(keys.status, encode(AppStatus(
        app_id=keys.app_id, name="[bold red]w[/bold red]", state=AppState.FAILED,
        submit_time=1e20, start_time=-1e20, finish_time=1e15, diagnosis="[/x] :smile:")))
    result = run_primus(primus_env, "status", keys.app_id)
    assert result.returncode == 0, result.stderr
    for shown in ("1e+20", "-1e+20", "1000000000000000.0", "[bold red]w[/bold red]",
                  "[/x] :smile:"):
        assert shown in result.stdout, result.stdout


def test_an_application_that_writes_thousands_of_events_is_read_as_its_newest_thousand(
        primus_env):
    """Its identity may write its event log: 3,000 events written past its AM's are read as
    the newest 1,000 (the log the AM keeps), by status as by the UI, not all of them."""
    app_id = run_primus(primus_env, "submit", str(HELLO), "--wait").stdout.strip()
    keys = AppKeys(primus_env["PRIMUS_PREFIX"], app_id)

    async def forge(store, settings) -> None:
        for start in range(0, 3000, 100):
            await store.txn([], [Put(keys.event(10_000 + seq), encode(AppEvent(
                seq=10_000 + seq, time=2e9 + seq, kind="forged", message=f"forged {seq}")))
                for seq in range(start, start + 100)])
    with_store(primus_env, forge)
    report = call(primus_env, "get_app", app_id)
    forged = [e.seq for e in report.events if e.kind == "forged"]
    assert len(report.events) <= EVENT_LOG_SIZE + 10  # beside notifications, refusals
    assert forged == list(range(12_000, 13_000)), (forged[:3], len(forged))
