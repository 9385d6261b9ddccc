"""The ``primus`` command through a real TLS ``primus server``, for a person who holds only a
token: it prints what the direct command prints, sends a job's files and secret values in the
request, and refuses a missing token, an unknown one, an unreachable or unproven server with
one line and nothing written. The commands the two modes share run in both in test_cli.py."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest

from primus.api.client import ApiError
from primus.store.embedded import find_etcd_binary
from primus.store.pki import ensure_pki
from tests.support.apps import assert_nothing_left, command_lines, status_json, write_job
from tests.support.primus import REPO, run_primus
from tests.support.service import wait_for_end
from tests.support.tokens import TOKENS, client_of, start_token_server, through_server
from tests.support.waiting import wait_until

HELLO = REPO / "examples" / "hello" / "job.yaml"


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    """This host, taking two executors at most."""
    path = tmp_path / "hosts.ini"
    path.write_text(f"{socket.gethostname()} ansible_connection=local primus_slots=2\n")
    return path


@pytest.fixture
def direct(primus_env: dict[str, str], inventory: Path) -> dict[str, str]:
    """The direct command's environment (etcd), with :func:`inventory` as the site's."""
    return {**primus_env, "PRIMUS_INVENTORY": str(inventory)}


def etcd_dump(env: dict[str, str], keys_only: bool = False) -> str:
    return subprocess.run(
        [str(find_etcd_binary("etcdctl")), "--endpoints", env["PRIMUS_ETCD"], "get",
         "--prefix", env["PRIMUS_PREFIX"] + "/apps/", *(["--keys-only"] if keys_only else [])],
        capture_output=True, text=True, check=True, env={**os.environ, "ETCDCTL_API": "3"}).stdout


def submitted(env: dict[str, str], job: Path) -> str:
    result = run_primus(env, "submit", str(job))
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_status_list_queue_and_hosts_print_what_the_direct_command_prints(direct, alice,
                                                                          tmp_path):
    holder = submitted(alice, write_job(tmp_path / "holder.yaml", """
name: holder
roles:
  - {name: worker, num: 2, command: sleep 600}
"""))
    wait_until(lambda: status_json(direct, holder)["status"]["state"] == "RUNNING", 60,
               "the first application to run")
    waiter = submitted(alice, write_job(tmp_path / "waiter.yaml", """
name: waiter
roles:
  - {name: worker, command: sleep 600}
"""))
    wait_until(lambda: status_json(direct, waiter)["admission"]["waiting"], 60,
               "admission to say why the second application waits")
    try:
        for args in (("status", holder), ("status", holder, "-o", "json"), ("status", waiter),
                     ("status", waiter, "-o", "json"), ("list",), ("list", "-o", "json"),
                     ("list", "--all", "-o", "json"),
                     ("queue",), ("queue", "-o", "json"), ("hosts", "usage"),
                     ("hosts", "usage", "-o", "json"), ("hosts", "list")):
            through, there = run_primus(alice, *args), run_primus(direct, *args)
            assert (through.returncode, through.stderr) == (0, ""), args
            assert through.stdout == there.stdout, args
        shown = run_primus(alice, "status", waiter).stdout
        assert "QUEUED" in shown and "waiting" in shown
        assert "holder" in run_primus(alice, "hosts", "usage").stdout
    finally:
        for app_id in (waiter, holder):
            assert run_primus(alice, "kill", app_id).returncode == 0


def test_files_and_secret_values_travel_in_the_request_and_never_to_etcd_logs_or_commands(
        direct, alice, token_server, tmp_path):
    secret = "s3cr3t-" + os.urandom(6).hex()
    out = tmp_path / "seen"
    out.mkdir()
    (tmp_path / "train.sh").write_text(f'echo "$PRIMUS_TEST_TOKEN" > {out}/token\n'
                                       f'cat lib/part.txt > {out}/part\n')
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "part.txt").write_text("from the submitting machine\n")
    job = write_job(tmp_path / "job.yaml", """
name: secretive
secret_env: [PRIMUS_TEST_TOKEN]
files: [train.sh, lib]
roles:
  - {name: worker, command: sh train.sh}
""")
    result = run_primus({**alice, "PRIMUS_TEST_TOKEN": secret}, "submit", str(job), "--wait")
    assert result.returncode == 0, result.stderr
    app_id = result.stdout.splitlines()[0]

    assert (out / "token").read_text().strip() == secret
    assert (out / "part").read_text() == "from the submitting machine\n"
    work = Path(direct["PRIMUS_HOME"]) / "apps" / app_id / "work"
    assert sorted(p.relative_to(work).as_posix() for p in work.rglob("*")) == [
        "lib", "lib/part.txt", "train.sh"]
    assert "PRIMUS_TEST_TOKEN" in etcd_dump(direct) and secret not in etcd_dump(direct)
    logs = [token_server.log, *Path(direct["PRIMUS_HOME"]).rglob("*.log")]
    assert [log for log in logs if secret in log.read_text(errors="replace")] == []
    assert not any(secret.encode() in cmdline for cmdline in command_lines())
    assert_nothing_left(app_id)


def test_files_that_cannot_be_sent_are_refused_naming_them_before_anything_is_written(
        direct, alice, tmp_path):
    os.mkfifo(tmp_path / "pipe")
    with (tmp_path / "huge.bin").open("wb") as huge:  # sparse: its size is what counts
        huge.truncate(65 << 20)
    for entry, words in (("pipe", "is not a regular file"),
                         ("huge.bin", "passes the 67,108,864 bytes"),
                         ("absent.txt", "cannot be read on the submitting host")):
        job = write_job(tmp_path / "job.yaml", f"name: sent\nfiles: [{entry}]\n"
                                               "roles:\n  - {name: w, command: 'true'}\n")
        result = run_primus(alice, "submit", str(job))
        assert result.returncode == 2 and result.stdout == "", result.stderr
        assert result.stderr.startswith(f"error: {job}: files[0]: ") and words in result.stderr
        assert entry in result.stderr
    assert etcd_dump(direct, keys_only=True) == ""


@pytest.mark.parametrize("case", ["no token", "token open to others", "unknown token",
                                  "unreachable server", "another CA"])
def test_a_command_that_cannot_prove_who_calls_or_reach_the_server_says_what_to_fix(
        direct, alice, tmp_path, case):
    env = {**alice, "HOME": str(tmp_path / "laptop")}
    token_file = tmp_path / "laptop" / ".primus" / "token"
    token_file.parent.mkdir(parents=True)
    if case in ("no token", "token open to others"):
        del env["PRIMUS_TOKEN"]
    if case == "token open to others":
        token_file.write_text(alice["PRIMUS_TOKEN"])
        token_file.chmod(0o644)
    if case == "unknown token":
        env["PRIMUS_TOKEN"] = "not-a-token-of-the-server"
    if case == "unreachable server":
        env["PRIMUS_SERVER"] = "127.0.0.1:9"
    if case == "another CA":
        env["PRIMUS_SERVER_CA"] = str(ensure_pki(tmp_path / "other-pki").ca_cert)

    result = run_primus(env, "submit", str(HELLO))

    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("error: ")
    expected = {"no token": "no token; give --token-file, set $PRIMUS_TOKEN",
                "token open to others": "mode 0644 lets others read it; `chmod 600",
                "unknown token": "does not know this caller",
                "unreachable server": "cannot reach the Primus server at 127.0.0.1:9",
                "another CA": "is the CA that signed its certificate"}[case]
    assert expected in result.stderr
    assert etcd_dump(direct, keys_only=True) == ""


def test_commands_that_work_beside_etcd_say_so_through_a_server(alice):
    for args in (("etcd", "status"), ("server", "start"), ("ui",),
                 ("history", "prune", "--before", "30d"), ("history", "archive")):
        result = run_primus(alice, *args)
        assert result.returncode == 2, args
        assert result.stderr.startswith(f"error: `primus {' '.join(args[:2])}` works beside "
                                        f"etcd") or args == ("ui",), result.stderr
        assert "--server -" in result.stderr
    result = run_primus(alice, "server", "run", "--plaintext")
    assert result.returncode == 2 and "run it where etcd is" in result.stderr


def test_another_user_may_not_change_an_application_and_its_owner_may_recover_it(
        direct, alice, token_server, tmp_path):
    bob = through_server(direct, token_server, ensure_pki(tmp_path / "pki"), tmp_path, user="bob")
    app_id = submitted(alice, write_job(tmp_path / "job.yaml", """
name: owned
roles:
  - {name: worker, command: sleep 600}
"""))
    wait_until(lambda: status_json(direct, app_id)["status"]["state"] == "RUNNING", 60,
               "the application to run")

    refused = run_primus(bob, "kill", app_id)
    assert refused.returncode == 2 and "bob" in refused.stderr and app_id in refused.stderr
    assert status_json(direct, app_id)["kill"] is None
    recovered = run_primus(alice, "recover", app_id)
    assert recovered.returncode == 0, recovered.stderr
    assert recovered.stdout == f"started an AM candidate for {app_id} on " \
                               f"{socket.gethostname()}\n"
    assert run_primus(alice, "kill", app_id).returncode == 0
    assert_nothing_left(app_id)


def test_logs_are_the_owners_and_the_admins_unless_the_site_opens_them_to_everyone(
        direct, alice, token_server, tmp_path):
    pki = ensure_pki(tmp_path / "pki")
    app_id = submitted(alice, write_job(tmp_path / "job.yaml", """
name: private
roles:
  - {name: worker, command: echo said-by-alice}
"""))
    assert wait_for_end(alice, app_id)["status"]["state"] == "SUCCEEDED"
    shown = run_primus(alice, "logs", app_id, "worker-0")
    assert shown.returncode == 0 and "said-by-alice" in shown.stdout, shown.stderr

    bob = through_server(direct, token_server, pki, tmp_path, user="bob")
    for args in ((), ("worker-0",), ("worker-0", "--executor-log"), ("am",)):
        refused = run_primus(bob, "logs", app_id, *args)
        assert refused.returncode == 2 and refused.stdout == "", args
        assert f"bob may not read the logs of application {app_id} owned by alice; its owner " \
               f"and admins may" in refused.stderr and "server.read_access is owner" in \
               refused.stderr, refused.stderr
    with client_of(token_server, pki, tmp_path, "bob") as api, pytest.raises(ApiError) as denied:
        list(api.logs(app_id, ("worker", 0)))
    assert denied.value.code is grpc.StatusCode.PERMISSION_DENIED and app_id in \
        denied.value.details
    with client_of(token_server, pki, tmp_path, "root") as admin:
        assert "said-by-alice" in [line.text for line in admin.logs(app_id, ("worker", 0))]
    with client_of(token_server, pki, tmp_path, "bob") as api:
        assert [a.status.app_id for a in api.list_apps()] == [app_id], \
            "the application itself is everyone's to see"
    # The UI: bob sees the application without links to its logs, and its log page is 403.
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    as_bob = {"Cookie": f"primus_token={TOKENS['bob']}"}
    page = urllib.request.urlopen(urllib.request.Request(
        f"{token_server.ui_url}apps/{app_id}", headers=as_bob), context=context).read().decode()
    assert app_id in page and f"/apps/{app_id}/logs/" not in page
    with pytest.raises(urllib.error.HTTPError) as forbidden:
        urllib.request.urlopen(urllib.request.Request(
            f"{token_server.ui_url}apps/{app_id}/logs/worker-0", headers=as_bob), context=context)
    assert forbidden.value.code == 403
    assert "bob may not read the logs of application" in forbidden.value.read().decode()

    site = tmp_path / "open.yaml"
    site.write_text("server:\n  read_access: everyone\n")
    opened = start_token_server({**direct, "PRIMUS_CONF": str(site)}, tmp_path, pki)
    try:
        shown = run_primus(through_server(direct, opened, pki, tmp_path, user="bob"),
                           "logs", app_id, "worker-0")
        assert shown.returncode == 0 and "said-by-alice" in shown.stdout, shown.stderr
    finally:
        opened.stop()


def test_an_am_killed_with_etcd_up_is_replaced_by_the_server_and_no_executor_restarts(
        direct, alice, tmp_path):
    go = tmp_path / "go"
    app_id = submitted(alice, write_job(tmp_path / "job.yaml", f"""
name: kept
policy: {{heartbeat_ttl: 3s}}
roles:
  - {{name: worker, num: 2, command: "while [ ! -e {go} ]; do sleep 0.2; done"}}
"""))
    wait_until(lambda: status_json(direct, app_id)["status"]["state"] == "RUNNING", 60,
               "the application to run")
    am = status_json(direct, app_id)["am"]

    os.kill(am["pid"], signal.SIGKILL)

    # Its key expires within the TTL (3 s); the server starts an AM within 10 s of that.
    wait_until(lambda: (led := status_json(direct, app_id)["am"]) and led["pid"] != am["pid"],
               3 + 10, "the server to start an AM that leads the application")
    go.touch()
    final = wait_for_end(direct, app_id)
    assert final["status"]["state"] == "SUCCEEDED"
    assert [e["plan"]["attempt"] for e in final["executors"]["worker"]] == [1, 1], \
        "the new AM adopts the running executors"
    assert any("(took over; started by server " in e["message"] and
               "no AM led the application" in e["message"] for e in final["events"])
    assert_nothing_left(app_id)


def test_a_data_source_is_checked_where_the_am_lists_its_files_before_anything_is_written(
        direct, alice, tmp_path):
    job = write_job(tmp_path / "job.yaml", f"""
name: reader
roles:
  - {{name: worker, command: cat}}
data:
  - name: train
    roles: [worker]
    sources: [{{path: {tmp_path}/none/*.txt}}]
""")
    result = run_primus(alice, "submit", str(job))
    assert result.returncode == 2 and result.stdout == ""
    assert f"{job}: data[0].sources[0].path: got '" in result.stderr
    assert f"'; matches no file on {socket.gethostname()}\n" in result.stderr
    assert etcd_dump(direct, keys_only=True) == ""
