"""Webhooks for real: a TLS server posts an application's state changes and its long admission
wait to a real HTTP receiver on this host, that fails the first attempts, to one that never
answers in time and to one that answers megabytes; each delivery is signed (HMAC-SHA256) with
the site webhook's key or the application's own, delivered at least once, and recorded with
the application. A notifier on the session's etcd tells of a hang and the state change it
caused, read in one pass, both."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from primus.client.embedded_server import EmbeddedServer
from primus.client.server_info import ServerInfo
from primus.config.site import load_settings
from primus.server.notify import Notifier, notify_prefix
from primus.state.keys import AppKeys
from primus.state.records import (
    AppOwner,
    AppStatus,
    HangReport,
    NotifySeen,
    ServiceLeader,
    decode,
    encode,
)
from primus.state.states import AppState
from primus.store.api import Put
from primus.store.etcd_store import EtcdCoordinator
from primus.store.pki import EtcdPki, ensure_pki
from tests.support.apps import status_json, write_job
from tests.support.primus import run_primus
from tests.support.records import SPEC
from tests.support.server import RunningServer
from tests.support.service import wait_for_end
from tests.support.tokens import start_token_server, through_server
from tests.support.waiting import wait_until, wait_until_async

SITE_KEY = b"site-webhook-key-5d1e"
NO_NOTICE = ServerInfo(pid=0, address="", started=0, tls=False, client_auth=False)


@dataclass
class Receiver:
    """An HTTP receiver: ``/flaky`` answers 500 to its first ``failures`` posts, ``/slow``
    never answers in time, ``/big`` answers 200 with 8 MiB; every post is kept."""

    failures: int = 2
    posts: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    release: threading.Event = field(default_factory=threading.Event)

    def handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with receiver.lock:
                    receiver.posts.append((self.path, dict(self.headers), body))
                    flaky_seen = sum(1 for p, _, _ in receiver.posts if p == "/flaky")
                if self.path == "/slow":
                    receiver.release.wait(30)
                    return
                if self.path == "/flaky" and flaky_seen <= receiver.failures:
                    self.send_response(500)
                    self.end_headers()
                    return
                self.send_response(200)
                if self.path == "/big":
                    self.send_header("Content-Length", str(8 << 20))
                    self.end_headers()
                    with contextlib.suppress(OSError):  # the server reads 64 KiB at most
                        for _ in range(8):
                            self.wfile.write(b"x" * (1 << 20))
                    return
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        return Handler

    def bodies(self, path: str) -> list[tuple[dict[str, str], dict]]:
        with self.lock:
            return [(headers, json.loads(body)) for p, headers, body in self.posts if p == path]

    def raw(self, path: str) -> list[tuple[dict[str, str], bytes]]:
        with self.lock:
            return [(headers, body) for p, headers, body in self.posts if p == path]


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    receiver = Receiver()
    http = ThreadingHTTPServer(("127.0.0.1", 0), receiver.handler())
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    yield receiver, f"http://127.0.0.1:{http.server_address[1]}"
    receiver.release.set()
    http.shutdown()
    http.server_close()


@pytest.fixture
def pki(tmp_path: Path) -> EtcdPki:
    return ensure_pki(tmp_path / "pki")


@pytest.fixture
def server(primus_env: dict[str, str], tmp_path: Path, pki: EtcdPki,
           receiver: tuple[Receiver, str]) -> Iterator[RunningServer]:
    _, url = receiver
    key = tmp_path / "site-webhook.key"
    key.write_bytes(SITE_KEY + b"\n")
    key.chmod(0o600)
    site = tmp_path / "site.yaml"
    site.write_text(json.dumps({"notify": {
        "webhooks": [{"url": f"{url}/flaky", "secret_file": str(key)},
                     {"url": f"{url}/slow", "secret_file": str(key), "events": ["app_state"]}],
        "admission_wait": "2s", "timeout": "2s", "attempts": 3, "backoff": "1s"}}))
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"{socket.gethostname()} ansible_connection=local primus_slots=3\n")
    running = start_token_server({**primus_env, "PRIMUS_CONF": str(site),
                                  "PRIMUS_INVENTORY": str(inventory)}, tmp_path, pki)
    yield running
    running.stop()


def signed(key: bytes, headers: dict[str, str], body: bytes) -> bool:
    expected = "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers["X-Primus-Signature-256"], expected)


def test_state_changes_reach_every_webhook_signed_at_least_once_and_are_recorded(
        primus_env, server, pki, receiver, tmp_path):
    posts, url = receiver
    alice = through_server(primus_env, server, pki, tmp_path)
    job = write_job(tmp_path / "job.yaml", f"""
name: notified
roles:
  - name: worker
    num: 1
    command: echo done
notify:
  - url: {url}/big?token=not-shown
    events: [app_state]
""")
    submitted = run_primus(alice, "submit", str(job), "--wait")
    assert submitted.returncode == 0, submitted.stderr
    app_id = submitted.stdout.strip().splitlines()[-1]

    def final_state_at(path: str) -> bool:
        return any(body["kind"] == "app_state" and body["app"]["state"] == "SUCCEEDED"
                   for _, body in posts.bodies(path))
    wait_until(lambda: final_state_at("/flaky") and final_state_at("/big?token=not-shown"), 30,
               "the SUCCEEDED notification at the flaky receiver and the job's")
    flaky = posts.raw("/flaky")
    assert len(flaky) >= 3 and all(signed(SITE_KEY, h, b) for h, b in flaky)
    succeeded = [json.loads(b) for _, b in flaky if json.loads(b)["app"]["state"] == "SUCCEEDED"]
    assert succeeded[0]["app"]["id"] == app_id and succeeded[0]["app"]["user"] == "alice"
    assert succeeded[0]["previous"] in ("RUNNING", "STARTING", "QUEUED", "SUBMITTED")

    key_file = tmp_path / "app.key"
    shown = run_primus(alice, "notify-key", app_id, "--out", str(key_file))
    assert shown.returncode == 0, shown.stderr
    app_key = key_file.read_bytes().strip()
    assert app_key.decode() not in shown.stdout + shown.stderr
    big = posts.raw("/big?token=not-shown")
    assert big and all(signed(app_key, h, b) and not signed(SITE_KEY, h, b) for h, b in big)
    bob = through_server(primus_env, server, pki, tmp_path, user="bob")
    refused = run_primus(bob, "notify-key", app_id, "--out", str(tmp_path / "bob.key"))
    assert refused.returncode != 0 and "bob may not read the webhook key" in refused.stderr
    assert not (tmp_path / "bob.key").exists()

    def recorded() -> list[str]:
        return [e["message"] for e in status_json(primus_env, app_id)["events"]
                if e["kind"] == "notify"]
    wait_until(lambda: any("SUCCEEDED" not in m and "not delivered to" in m and "/slow" in m
                           for m in recorded()) or len(recorded()) >= 4, 60,
               "the outcomes of the notifications recorded with the application",
               explain=lambda: "\n".join(recorded()))
    said = "\n".join(recorded())
    assert "app_state: delivered to " + url + "/flaky" in said
    assert f"not delivered to {url}/slow: no answer within 2s" in said
    assert f"delivered to {url}/big;" in said or f"delivered to {url}/big (" in said
    assert "not-shown" not in said, "a webhook's query (a token) is not shown"


def test_an_application_waiting_for_admission_past_the_threshold_is_notified_once(
        primus_env, server, pki, receiver, tmp_path):
    posts, _ = receiver
    alice = through_server(primus_env, server, pki, tmp_path)
    ids = []
    for name, num in (("holder", 3), ("waiter", 1)):  # the holder takes every slot
        job = write_job(tmp_path / f"{name}.yaml", f"name: {name}\nroles:\n  - name: worker\n"
                        f"    num: {num}\n    command: sleep 60\n")
        submitted = run_primus(alice, "submit", str(job))
        assert submitted.returncode == 0, submitted.stderr
        ids.append(submitted.stdout.strip().splitlines()[-1])
        if name == "holder":  # admitted first (else the waiter's AM may ask first, and be)
            wait_until(lambda: status_json(primus_env, ids[0])["status"]["state"] in (
                "STARTING", "RUNNING"), 60, "the holder to be admitted")
    holder, app_id = ids
    def waits(app: str) -> list[dict]:
        return [b for _, b in posts.bodies("/flaky")
                if b["kind"] == "admission_wait" and b["app"]["id"] == app]

    # On a busy machine the holder may wait past the threshold too, and be told so; the
    # waiter's wait (behind the admitted holder) is then told only after the holder's start.
    wait_until(lambda: waits(app_id), 60, "the waiter's admission_wait notification")
    [wait] = waits(app_id)
    assert wait["waiting"]["seconds"] >= 2
    assert "slots" in wait["waiting"]["reason"]
    for killed in (app_id, holder):
        assert run_primus(alice, "kill", killed).returncode == 0
        wait_for_end(primus_env, killed)
    wait_until(lambda: any(b["app"]["state"] == "KILLED" for _, b in posts.bodies("/flaky")
                           if b["kind"] == "app_state"), 30, "the KILLED notification")
    assert len({b["delivery"] for b in waits(app_id)}) == 1, "told once"


def test_a_delivery_a_stopped_server_left_in_the_outbox_is_sent_by_the_next(
        primus_env, pki, receiver, tmp_path):
    posts, url = receiver
    posts.failures = 10**6  # /flaky refuses until the first server is gone
    key = tmp_path / "site-webhook.key"
    key.write_bytes(SITE_KEY)
    site = tmp_path / "site.yaml"
    site.write_text(json.dumps({"notify": {
        "webhooks": [{"url": f"{url}/flaky", "secret_file": str(key)}],
        "timeout": "2s", "attempts": 100, "backoff": "1s"}}))
    env = {**primus_env, "PRIMUS_CONF": str(site)}
    first = start_token_server(env, tmp_path, pki)
    try:
        job = write_job(tmp_path / "job.yaml", "name: once\nroles:\n  - name: w\n"
                        "    command: 'true'\n")
        submitted = run_primus(through_server(env, first, pki, tmp_path), "submit", str(job),
                               "--wait")
        assert submitted.returncode == 0, submitted.stderr
        app_id = submitted.stdout.strip().splitlines()[-1]
        wait_until(lambda: any(b["app"]["state"] == "SUCCEEDED"
                               for _, b in posts.bodies("/flaky")), 30,
                   "a refused post of the SUCCEEDED notification")
    finally:
        first.stop()
    refused = [b["delivery"] for _, b in posts.bodies("/flaky")
               if b["app"]["state"] == "SUCCEEDED"]
    posts.failures = len(posts.raw("/flaky"))  # from now on /flaky answers 200
    second = start_token_server(env, tmp_path, pki)
    try:
        wait_until(lambda: len([1 for _, b in posts.bodies("/flaky")
                                if b["delivery"] == refused[0]]) > len(refused), 60,
                   "the next server to send the delivery the first left in the outbox")

        def recorded() -> list[str]:
            return [e["message"] for e in status_json(primus_env, app_id)["events"]
                    if e["kind"] == "notify"]
        wait_until(lambda: len(recorded()) >= 1, 30, "the outcomes recorded")
        assert any(m.startswith(f"app_state: delivered to {url}/flaky") for m in recorded())
    finally:
        second.stop()


async def test_a_hang_that_failed_the_application_is_told_beside_the_state_change(
        store: EtcdCoordinator, primus_env, receiver, tmp_path):
    # With on_hang: fail the AM records the hang handled and the application FAILED at once:
    # a notifier's pass reads both, and each webhook must hear of both.
    posts, url = receiver
    key = tmp_path / "site-webhook.key"
    key.write_bytes(SITE_KEY)
    site = tmp_path / "site.yaml"
    site.write_text(json.dumps({"notify": {
        "webhooks": [{"url": f"{url}/hook", "secret_file": str(key)}], "timeout": "2s"}}))
    settings = load_settings(env={**primus_env, "PRIMUS_CONF": str(site)})
    keys, now = AppKeys(settings.prefix, "hung-1"), time.time()
    failed = AppStatus(app_id="hung-1", name="hung", state=AppState.FAILED, user="alice",
                       submit_time=now - 60, finish_time=now, diagnosis="HUNG: worker-0 …")
    hang = HangReport(id=1, role="worker", index=0, host="h1", idle=30, time=now,
                      handled=True, summary="worker-0 on h1 in `wait_for_ever (t.py:6)`")
    await store.txn([], [
        Put(keys.spec, SPEC.model_dump_json().encode()),
        Put(keys.owner, encode(AppOwner(app_id="hung-1", name="hung", user="alice",
                                        submit_host="h0", submit_time=now - 60))),
        Put(keys.status, encode(failed)), Put(keys.hang, encode(hang)),
        Put(f"{notify_prefix(settings.prefix)}seen/apps/hung-1",
            encode(NotifySeen(state="RUNNING")))])
    notifier = asyncio.ensure_future(Notifier(store, settings).run())
    try:
        told = await wait_until_async(lambda: (lambda kinds: kinds if {"app_state", "hang"} <= {
            kind for kind, _ in kinds} else None)([(body["kind"], body) for _, body in
                                                  posts.bodies("/hook")]), 30,
            "the webhook to hear of the state change and of the hang")
        leader = await store.get(f"{settings.prefix}/server/notifier")
        assert leader is not None and leader.lease
        assert decode(ServiceLeader, leader.value) == ServiceLeader.this_process()
    finally:
        notifier.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await notifier
    bodies = dict(told)
    assert bodies["app_state"]["app"]["state"] == "FAILED"
    assert bodies["app_state"]["previous"] == "RUNNING"
    assert bodies["hang"]["hang"]["summary"] == hang.summary


def test_the_embedded_server_takes_a_changed_notify_and_says_what_waits_for_its_restart(
        primus_env, receiver, tmp_path):
    """A site file changed while the embedded server runs: its notify: is used from the next
    pass, with no restart (which would lose the server's counters); a change of its queues
    waits for one, and `primus server status` and `start` say so; a file that does not read
    changes nothing and is said too."""
    posts, url = receiver
    key = tmp_path / "site-webhook.key"
    key.write_bytes(SITE_KEY)
    site = tmp_path / "site.yaml"
    site.write_text("{}\n")
    env = {k: v for k, v in primus_env.items() if k != "PRIMUS_ETCD"}
    env["PRIMUS_CONF"] = str(site)

    def server_says(command: str) -> str:
        result = run_primus(env, "server", command)
        assert result.returncode == 0, result.stderr
        return result.stderr

    try:
        assert "warning" not in server_says("start")
        site.write_text(json.dumps({"notify": {"webhooks": [
            {"url": f"{url}/reloaded", "secret_file": str(key), "events": ["app_state"]}]}}))
        job = write_job(tmp_path / "job.yaml", "name: told\nroles:\n  - name: w\n"
                        "    command: 'true'\n")
        submitted = run_primus(env, "submit", str(job), "--wait")
        assert submitted.returncode == 0, submitted.stderr
        app_id = submitted.stdout.strip().splitlines()[-1]
        wait_until(lambda: any(b["app"]["id"] == app_id and b["app"]["state"] == "SUCCEEDED"
                               for _, b in posts.bodies("/reloaded")), 60,
                   "the running server to post to the webhook the site file names now")
        assert all(signed(SITE_KEY, headers, body) for headers, body in posts.raw("/reloaded"))
        assert "warning" not in server_says("status"), "notify: took effect: nothing waits"

        site.write_text(json.dumps({"queues": {"default": {}, "urgent": {"priority": 10}},
                                    "notify": {"webhooks": []}}))
        wait_until(lambda: "queues" in server_says("status"), 30,
                   "`primus server status` to say the queues wait for a restart")
        for command in ("status", "start"):
            said = server_says(command)
            assert f"warning: the site file {site} changed queues" in said, said
            assert "`primus server stop`, then `primus server start`" in said, said

        site.write_text("queues: [")  # which every command refuses; the server says why too
        server = EmbeddedServer(Path(env["PRIMUS_HOME"]))
        wait_until(lambda: "does not read" in (server.status() or NO_NOTICE).site_notice, 30,
                   "the server to say the site file does not read")
        assert (server.status() or NO_NOTICE).site_notice.startswith(
            f"the site file {site} changed and does not read; the server goes on with the "
            f"settings it had: {site}")
    finally:
        site.write_text("{}\n")  # which the commands that stop them read
        assert run_primus(env, "server", "stop").returncode == 0
        assert run_primus(env, "etcd", "stop").returncode == 0
