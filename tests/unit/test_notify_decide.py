"""What the notifier tells its webhooks (``primus.server.notify.decide``, pure), and the site's
and a job's webhook settings refused with the field named."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from primus.config.loader import SpecError, load_job_text
from primus.config.notify import NotifyPolicy, SiteWebhook
from primus.config.site import load_settings
from primus.server.notify import AppFacts, HostFacts, decide, signature
from primus.state.records import AppStatus, HangReport, HostCondition, NotifySeen, Waiting
from primus.state.states import AppState

NOW = 1_000_000.0
SITE = NotifyPolicy(webhooks=(SiteWebhook("https://ops/hook", "/k"),), admission_wait=60)


def facts(state: AppState = AppState.RUNNING, seen: NotifySeen | None = None,
          hooks: tuple = (), hang: HangReport | None = None, waiting: Waiting | None = None,
          finished: float | None = None) -> AppFacts:
    status = AppStatus(app_id="a1", name="train", state=state, user="alice",
                       submit_time=NOW - 600, finish_time=finished)
    return AppFacts(status, "train", "default", hooks, hang, waiting, seen, 7 if seen else 0)


def test_a_new_state_is_told_once_with_the_one_before():
    [told] = decide([facts(seen=NotifySeen(state="STARTING"))], [], SITE, "/p", NOW, NOW)
    [notice] = told.notices
    assert notice.kind == "app_state" and notice.body["previous"] == "STARTING"
    assert notice.body["app"]["state"] == "RUNNING" and told.seen.state == "RUNNING"
    assert decide([facts(seen=NotifySeen(state="RUNNING"))], [], SITE, "/p", NOW, NOW) == []


def test_nothing_is_read_or_written_for_an_application_nobody_listens_to():
    assert decide([facts()], [], NotifyPolicy(), "/p", NOW, NOW) == []


def test_a_job_webhook_hears_only_the_events_it_asked_for_beside_the_sites():
    hooks = (("https://team/hook", ("hang",)),)
    [told] = decide([facts(hooks=hooks)], [], SITE, "/p", NOW, NOW)
    assert [t.url for t in told.notices[0].targets] == ["https://ops/hook"]
    hang = HangReport(id=2, role="worker", index=1, host="h1", idle=30, time=NOW,
                      handled=True, summary="worker-1 on h1 in `x`")
    [told] = decide([facts(hooks=hooks, hang=hang, seen=NotifySeen(state="RUNNING"))], [],
                    SITE, "/p", NOW, NOW)
    notices = told.notices
    assert [(n.kind, [t.key for t in n.targets]) for n in notices] == [
        ("hang", ["site:0", "app"])]
    assert notices[0].body["hang"]["summary"] == "worker-1 on h1 in `x`"


def test_a_hang_and_a_state_change_seen_in_one_pass_are_told_together_in_one_write():
    hang = HangReport(id=3, role="worker", index=0, host="h1", idle=30, time=NOW,
                      handled=True, summary="worker-0 on h1 in `x`")
    waiting = Waiting(reason="no host has 4 slots", since=NOW - 61)
    [told] = decide([facts(AppState.QUEUED, NotifySeen(state="SUBMITTED"), hang=hang,
                           waiting=waiting)], [], SITE, "/p", NOW, NOW)
    assert [n.kind for n in told.notices] == ["app_state", "hang", "admission_wait"]
    assert told.seen == NotifySeen(state="QUEUED", hang=3, waiting_since=NOW - 61)
    assert (told.seen_key, told.seen_revision) == ("/p/notify/seen/apps/a1", 7)


def test_an_application_that_ended_before_the_notifier_started_is_not_told_of():
    [told] = decide([facts(AppState.SUCCEEDED, finished=NOW - 3600)], [], SITE, "/p", NOW,
                    NOW)
    assert told.notices == () and told.seen.state == "SUCCEEDED"


def test_an_admission_wait_is_told_once_past_the_threshold():
    waiting = Waiting(reason="no host has 4 slots", since=NOW - 61)
    seen = NotifySeen(state="QUEUED")
    [told] = decide([facts(AppState.QUEUED, seen, waiting=waiting)], [], SITE, "/p", NOW, NOW)
    [notice] = told.notices
    assert notice.kind == "admission_wait" and notice.body["waiting"]["seconds"] == 61
    told = seen.model_copy(update={"waiting_since": NOW - 61})
    assert decide([facts(AppState.QUEUED, told, waiting=waiting)], [], SITE, "/p", NOW,
                  NOW) == []
    early = Waiting(reason="x", since=NOW - 30)
    assert decide([facts(AppState.QUEUED, seen, waiting=early)], [], SITE, "/p", NOW, NOW) == []


def test_a_quarantined_host_is_told_once_to_the_site_webhooks():
    condition = HostCondition(state="quarantined", reason="disk full", since=NOW, by="health")
    [told] = decide([], [HostFacts("h2", condition, None, 0)], SITE, "/p", NOW, NOW)
    [notice] = told.notices
    assert notice.kind == "host_quarantined" and notice.body["host"]["reason"] == "disk full"
    told = NotifySeen(quarantined_since=NOW)
    assert decide([], [HostFacts("h2", condition, told, 3)], SITE, "/p", NOW, NOW) == []
    drained = condition.model_copy(update={"state": "drained"})
    assert decide([], [HostFacts("h2", drained, None, 0)], SITE, "/p", NOW, NOW) == []


def test_the_signature_is_the_hmac_sha256_of_the_body():
    assert signature(b"k", b"{}") == "sha256=" + hmac.new(b"k", b"{}", hashlib.sha256
                                                          ).hexdigest()


@pytest.mark.parametrize(("notify", "field", "words"), [
    ("{webhooks: [{url: 'ftp://x/y', secret_file: /k}]}", "notify.webhooks[0].url",
     "http:// or https://"),
    ("{webhooks: [{url: 'https://x/y'}]}", "notify.webhooks[0].secret_file", "is required"),
    ("{webhooks: [{url: 'https://u:p@x/y', secret_file: /k}]}", "notify.webhooks[0].url",
     "must not hold credentials"),
    ("{webhooks: [{url: 'https://x/y', secret_file: /k, events: [everything]}]}",
     "notify.webhooks[0].events", "app_state"),
    ("{timeout: 10m}", "notify.timeout", "1s to 60s"),
    ("{attempts: 0}", "notify.attempts", "1 to 100"),
    ("{retries: 3}", "notify.retries", "unknown key"),
])
def test_bad_site_webhooks_are_refused_naming_file_and_field(tmp_path, notify, field, words):
    site = tmp_path / "defaults.yaml"
    site.write_text(f"notify: {notify}\n")
    with pytest.raises(SpecError) as refused:
        load_settings(env={"PRIMUS_CONF": str(site), "PRIMUS_HOME": str(tmp_path)})
    assert str(site) in str(refused.value) and field in str(refused.value)
    assert words in str(refused.value)


def test_a_jobs_webhook_that_is_not_http_is_refused_naming_it():
    with pytest.raises(SpecError, match=r"notify\[0\]\.url: got 'file:///etc/passwd'"):
        load_job_text("name: j\nroles:\n  - name: w\n    command: x\nnotify:\n"
                      "  - url: file:///etc/passwd\n", "job.yaml", None)


def test_a_jobs_webhook_outside_the_sites_job_urls_is_refused_before_anything_is_written():
    from primus.client.preflight import check_job  # noqa: PLC0415

    spec = load_job_text("name: j\nroles:\n  - name: w\n    command: x\nnotify:\n"
                         "  - url: http://10.0.0.1:2379/v3/kv/put\n", "job.yaml", None)
    policy = NotifyPolicy(job_urls=("https://hooks.example.com/",))
    with pytest.raises(SpecError, match=r"notify\[0\]\.url: .*must start with one of the "
                                        r"site's notify.job_urls: https://hooks.example.com/"):
        check_job("job.yaml", spec, notify=policy)
    assert check_job("job.yaml", spec) is spec, "no job_urls: any http(s) URL"


def member(index: int, state: AppState, size: int = 3, hooks: tuple = ()) -> AppFacts:
    status = AppStatus(app_id=f"m{index}", name="sweep", state=state, user="alice",
                       submit_time=NOW - 600, finish_time=NOW - 1 if state.terminal else None,
                       array="sweep-array", array_index=index, array_size=size)
    return AppFacts(status, "sweep", "default", hooks, None, None,
                    NotifySeen(state=state.value), 7)


def test_a_job_arrays_end_is_told_once_when_its_last_member_ends_with_the_count_by_state():
    hooks = (("https://team/hook", ("array_end",)),)
    running = [member(0, AppState.SUCCEEDED, hooks=hooks), member(1, AppState.FAILED, hooks=hooks),
               member(2, AppState.RUNNING, hooks=hooks)]
    assert decide(running, [], SITE, "/p", NOW, NOW) == []  # one still runs: nothing yet

    ended = [*running[:2], member(2, AppState.SUCCEEDED, hooks=hooks)]
    told = [t for t in decide(ended, [], SITE, "/p", NOW, NOW)
            if t.seen_key.endswith("/arrays/sweep-array")]
    [array_told] = told
    [notice] = array_told.notices
    assert notice.kind == "array_end" and [t.key for t in notice.targets] == ["site:0", "app"]
    assert notice.body["array"] == {"id": "sweep-array", "name": "sweep", "user": "alice",
                                    "queue": "default", "members": 3,
                                    "states": {"FAILED": 1, "SUCCEEDED": 2}}
    assert (array_told.seen, array_told.seen_revision) == (NotifySeen(state="ENDED"), 0)
    # Told once: with its seen record, no second notice.
    again = decide(ended, [], SITE, "/p", NOW, NOW,
                   {"sweep-array": (NotifySeen(state="ENDED"), 9)})
    assert not [t for t in again if "/arrays/" in t.seen_key]


def test_an_array_with_members_missing_from_etcd_is_not_called_ended():
    hooks = (("https://team/hook", ("array_end",)),)
    two_of_three = [member(0, AppState.SUCCEEDED, hooks=hooks),
                    member(1, AppState.SUCCEEDED, hooks=hooks)]
    assert decide(two_of_three, [], SITE, "/p", NOW, NOW) == []
