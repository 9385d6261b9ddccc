"""The web UI in a real browser (Debian's Chromium driven by Playwright) against a real
``primus server``, real etcd and real applications; screenshots go to ``test-artifacts/ui``."""

from __future__ import annotations

import json
import os
import re
import signal
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from playwright.sync_api import Page, expect

from primus.store.pki import EtcdPki
from primus.ui.charts import COLOURS
from tests.support.apps import cli_status_json, status_json, write_job
from tests.support.browser import screenshot
from tests.support.primus import REPO, run_primus
from tests.support.server import RunningServer, start_server
from tests.support.tokens import TOKENS
from tests.support.waiting import wait_until

HELLO = REPO / "examples" / "hello" / "job.yaml"
FAILING = REPO / "examples" / "failing" / "job.yaml"
DATA = REPO / "examples" / "data-injection" / "job.yaml"

TICKER = """\
name: ticker
roles:
  - name: worker
    num: 2
    restart_policy: on_failure
    command: |
      python3 -u -c '
      import time
      print("<b>markup</b> from the trainer stays text")
      for i in range(100000):
          print("tick", i)
          time.sleep(0.2)
      '
"""


def _submit(env: dict[str, str], job: Path, *args: str) -> str:
    result = run_primus(env, "submit", str(job), *args)
    assert result.returncode in (0, 1), result.stderr
    return result.stdout.strip().splitlines()[-1]


def _running(env: dict[str, str], tmp_path: Path) -> str:
    app_id = _submit(env, write_job(tmp_path / "ticker.yaml", TICKER))
    wait_until(lambda: status_json(env, app_id)["status"]["state"] == "RUNNING", 60,
               f"{app_id} to run")
    return app_id


def _outcome(plan: dict) -> str:
    """How the timeline names the way an attempt ended (or goes on)."""
    if plan["exit_class"] in ("OOM_KILLED", "HUNG"):
        return plan["exit_class"]
    return "STARTING" if plan["state"] in ("PLANNED", "LAUNCHED", "REGISTERED") else plan["state"]


def _timeline_is_etcds(page: Page, env: dict[str, str], app_id: str) -> dict:
    """The timeline drawn is what etcd holds: a lane per launched executor, a bar per attempt
    (those its plan keeps, then its current one) with its host and the colour of how it
    ended. The status it was checked against."""
    status = status_json(env, app_id)
    for role, executors in status["executors"].items():
        for executor in executors:
            plan = executor.get("plan")
            if not plan or plan["launch_time"] is None:
                continue
            lane = page.locator(f"#timeline g.lane[data-executor='{role}-{executor['index']}']")
            bars = lane.locator("g.bar")
            attempts = [*plan["past"], plan]
            expect(bars).to_have_count(len(attempts))
            for n, attempt in enumerate(attempts):
                expect(bars.nth(n)).to_have_attribute("data-attempt", str(attempt["attempt"]))
                expect(bars.nth(n)).to_have_attribute("data-host", attempt["host"])
                expect(bars.nth(n)).to_have_attribute("data-outcome", _outcome(attempt))
                assert bars.nth(n).locator("rect").get_attribute("fill") == \
                    COLOURS[_outcome(attempt)]
            expect(lane.locator("path.restart")).to_have_count(len(attempts) - 1)
    return status


def _marked(page: Page) -> None:
    """Mark the loaded document: the mark is gone if the page is loaded again."""
    page.evaluate("window.__primusMark = 'still the same document'")


def _still_marked(page: Page) -> None:
    assert page.evaluate("window.__primusMark") == "still the same document", \
        "the page was loaded again; it should have changed in place"


def test_applications_page_lists_every_application_newest_first_and_filters_them(
        primus_env, server: RunningServer, page: Page):
    hello = _submit(primus_env, HELLO, "--wait")
    failing = _submit(primus_env, FAILING, "--wait")
    page.goto(server.ui_url)
    expect(page).to_have_url(re.compile(r"/apps$"))
    rows = page.locator("table.apps tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_have_attribute("data-app", failing)
    expect(rows.nth(1)).to_have_attribute("data-app", hello)
    expect(rows.nth(0)).to_contain_text("FAILED")
    expect(rows.nth(1)).to_contain_text("SUCCEEDED")
    expect(rows.nth(1)).to_contain_text("100%")
    screenshot(page, "applications")
    page.select_option("select[name=state]", "FAILED")
    page.click("form.filters button")
    expect(rows).to_have_count(1)
    expect(rows.nth(0)).to_have_attribute("data-app", failing)
    page.fill("input[name=name]", "hel")
    page.select_option("select[name=state]", "")
    page.click("form.filters button")
    expect(rows).to_have_count(1)
    expect(rows.nth(0)).to_have_attribute("data-app", hello)
    expect(page.locator(".pager")).to_contain_text("1 application; page 1 of 1")


def test_application_page_shows_summary_executors_events_and_configuration(
        primus_env, server: RunningServer, page: Page):
    app_id = _submit(primus_env, FAILING, "--wait")
    page.goto(f"{server.ui_url}apps/{app_id}")
    expect(page.locator("#app-state")).to_have_text("FAILED")
    expect(page.locator("#app-diagnosis")).to_contain_text("worker-1")
    worker_1 = page.locator("#executor-worker-1")
    expect(worker_1).to_contain_text("FAILED")
    expect(worker_1.locator("td").nth(6)).to_have_text("3")  # exit code
    # worker-0 sleeps on, so it was stopped when worker-1 failed the application (the chief's
    # echo can end either way: before that or stopped by it, under load)
    expect(page.locator("#executor-worker-0")).to_contain_text("KILLED")
    expect(page.locator("table.events")).to_contain_text("application FAILED")
    expect(page.locator("#config pre")).to_contain_text("name: failing")
    _timeline_is_etcds(page, primus_env, app_id)
    expect(page.locator("#timeline g.mark-state").first).to_be_attached()
    screenshot(page, "application-failed")
    config = page.request.get(f"{server.ui_url}apps/{app_id}/config.yaml")
    assert config.ok and "attachment" in config.headers["content-disposition"]
    assert "worker 1 gives up" in config.text()


def test_data_example_shows_its_stream_and_a_page_of_tasks_with_owner_and_checkpoint(
        primus_env, server: RunningServer, page: Page):
    app_id = _submit(primus_env, DATA, "--wait")
    page.goto(f"{server.ui_url}apps/{app_id}")
    stream = page.locator("table.streams tbody tr").first
    expect(stream).to_contain_text("exhausted")
    stats = cli_status_json(primus_env, app_id)["data"]
    name, figures = next(iter(stats.items()))
    expect(stream).to_contain_text(f"{figures['done']}/{figures['tasks']}")
    expect(page.locator("#app-progress")).to_have_attribute("value", "1.0")
    # Each reader's share adds up to the records the stream's stats count in etcd.
    figures_json = page.request.get(f"{server.ui_url}apps/{app_id}/charts.json").json()
    drawn = figures_json["streams"][name]
    readers = page.locator(f"#stream-chart-{name} g.reader")
    expect(readers).to_have_count(len(drawn["readers"]))
    shares = [int(readers.nth(i).get_attribute("data-records"))
              for i in range(readers.count())]
    assert sum(shares) == figures["records"] and len(shares) >= 1, (shares, figures)
    assert drawn["points"][-1]["done"] == figures["done"], drawn["points"]
    screenshot(page, "application-data")
    stream.locator("a", has_text="tasks").click()
    rows = page.locator("table.tasks tbody tr")
    expect(rows).to_have_count(min(figures["tasks"], 50))
    expect(rows.first).to_contain_text("done")
    expect(rows.first.locator("td").nth(4)).to_have_text(re.compile(r"\w+-\d+"))
    screenshot(page, "data-tasks")


def test_a_killed_executor_changes_its_row_without_reloading_the_page(
        primus_env, server: RunningServer, page: Page, tmp_path):
    app_id = _running(primus_env, tmp_path)
    page.goto(f"{server.ui_url}apps/{app_id}")
    state = page.locator("#executor-worker-1 .executor-state")
    expect(state).to_contain_text("RUNNING")
    _marked(page)
    plan = cli_status_json(primus_env, app_id)["executors"]["worker"][1]["plan"]
    os.kill(plan["trainer"]["pid"], signal.SIGKILL)
    # The AM records the failure and restarts the index: the row shows a second attempt.
    expect(page.locator("#executor-worker-1 td").nth(2)).to_have_text("2", timeout=30_000)
    expect(page.locator("table.events")).to_contain_text("worker-1")
    # Its timeline lane gained the second attempt's bar in place: the first ended FAILED.
    lane = page.locator("#timeline g.lane[data-executor='worker-1'] g.bar")
    expect(lane).to_have_count(2)
    expect(lane.nth(0)).to_have_attribute("data-outcome", "FAILED")
    expect(lane.nth(1)).to_have_attribute("data-outcome", re.compile("STARTING|RUNNING"))
    expect(page.locator("#timeline g.lane[data-executor='worker-1'] path.restart")
           ).to_have_count(1)
    _still_marked(page)
    screenshot(page, "application-live")
    run_primus(primus_env, "kill", app_id)


def test_a_trainer_log_is_tailed_live_as_text_and_downloadable(
        primus_env, server: RunningServer, page: Page, tmp_path):
    app_id = _running(primus_env, tmp_path)
    page.goto(f"{server.ui_url}apps/{app_id}")
    page.locator("#executor-worker-0 a", has_text="trainer").click()
    log = page.locator("#log")
    expect(log).to_contain_text("tick 3")
    expect(log).to_contain_text("<b>markup</b> from the trainer stays text")
    assert page.locator("#log b").count() == 0, "a log line was rendered as markup"
    _marked(page)
    seen = int(re.findall(r"tick (\d+)", log.inner_text())[-1])
    expect(log).to_contain_text(f"tick {seen + 5}", timeout=15_000)
    _still_marked(page)
    screenshot(page, "log")
    download = page.request.get(page.locator("#log-download").get_attribute("href") and
                                f"{server.ui_url.rstrip('/')}"
                                f"{page.locator('#log-download').get_attribute('href')}")
    assert download.ok and "tick 0" in download.text()
    run_primus(primus_env, "kill", app_id)
    expect(page.locator("#log-state")).to_contain_text("ended", timeout=30_000)


def test_the_owner_scales_then_kills_an_application_from_its_page(
        primus_env, server: RunningServer, page: Page, tmp_path):
    app_id = _running(primus_env, tmp_path)
    page.goto(f"{server.ui_url}apps/{app_id}")
    page.select_option("#scale-form select[name=role]", "worker")
    page.fill("#scale-form input[name=executors]", "3")
    page.click("#scale-form button")
    expect(page.locator("#executor-worker-2 .executor-state")).to_contain_text(
        "RUNNING", timeout=30_000)
    assert len(cli_status_json(primus_env, app_id)["executors"]["worker"]) == 3
    page.fill("#scale-form input[name=executors]", "0")
    page.evaluate("document.querySelector('#scale-form input[name=executors]')"
                  ".removeAttribute('min')")
    page.click("#scale-form button")
    expect(page.locator("#action-error")).to_contain_text("executors: got '0'")
    # Resized in place from the page: the change is recorded, its executors keep running.
    page.select_option("#resize-form select[name=role]", "worker")
    page.fill("#resize-form input[name=cpu]", "0.5")
    page.click("#resize-form button")
    expect(page.locator("table.events")).to_contain_text("role worker resized from 1 CPUs",
                                                         timeout=30_000)
    page.fill("#resize-form input[name=cpu]", "lots")
    page.click("#resize-form button")
    expect(page.locator("#action-error")).to_contain_text("cpu: got 'lots'")
    page.fill("#kill-form input[name=reason]", "stopped from the browser")
    page.click("#kill-form button")
    expect(page.locator("#app-state")).to_have_text("KILLED", timeout=30_000)
    status = cli_status_json(primus_env, app_id)["status"]
    assert status["state"] == "KILLED"
    assert "stopped from the browser" in status["diagnosis"]
    screenshot(page, "application-killed")


def test_the_owner_ends_an_application_as_succeeded_from_its_page(
        primus_env, server: RunningServer, page: Page, tmp_path):
    app_id = _running(primus_env, tmp_path)
    page.goto(f"{server.ui_url}apps/{app_id}")
    page.fill("#succeed-form input[name=reason]", "<b>good enough</b>")
    page.click("#succeed-form button")
    expect(page.locator("#app-state")).to_have_text("SUCCEEDED", timeout=30_000)
    expect(page.locator("#succeed-form")).to_have_count(0)
    status = cli_status_json(primus_env, app_id)
    assert status["status"]["exit_code"] == 0
    assert status["status"]["diagnosis"].endswith(": <b>good enough</b>")
    assert status["kill"]["outcome"] == "SUCCEEDED"
    expect(page.locator("#summary")).to_contain_text("<b>good enough</b>")  # text, not markup


def test_the_owner_suspends_and_resumes_an_application_from_its_page(
        primus_env, server: RunningServer, page: Page, tmp_path):
    app_id = _running(primus_env, tmp_path)
    page.goto(f"{server.ui_url}apps/{app_id}")
    page.click("#suspend-form button")
    expect(page.locator("#app-state")).to_have_text("SUSPENDED", timeout=30_000)
    page.goto(f"{server.ui_url}apps/{app_id}")  # its actions change with its state
    page.click("#resume-form button")
    expect(page.locator("#app-state")).to_have_text("RUNNING", timeout=30_000)
    run_primus(primus_env, "kill", app_id)


SWEEP = """\
name: sweep
array: {params: {lr: [0.1, 0.01, 0.001]}}
roles:
  - name: worker
    command: 'test "$PRIMUS_PARAM_LR" != 0.01'
"""


def test_a_job_arrays_page_counts_its_members_states_and_links_each(
        primus_env, server: RunningServer, page: Page, tmp_path):
    submitted = run_primus(primus_env, "submit", str(write_job(tmp_path / "sweep.yaml", SWEEP)),
                           "--wait")
    assert submitted.returncode == 1, submitted.stderr  # the member with lr 0.01 fails
    array = submitted.stdout.strip().splitlines()[-1]
    page.goto(f"{server.ui_url}arrays/{array}")
    expect(page.locator("#array-counts")).to_have_text(
        re.compile(r"3 members:\s*FAILED 1,\s*SUCCEEDED 2"))
    rows = page.locator("table.array-members tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(1)).to_contain_text("FAILED")
    screenshot(page, "array")
    rows.nth(1).locator("a").click()
    expect(page.locator("#app-array")).to_contain_text(f"{array}, member 1")
    page.locator("#app-array a").click()
    expect(page).to_have_url(f"{server.ui_url}arrays/{array}")
    page.goto(f"{server.ui_url}arrays/nothing-20261129-000000-0000-array")
    expect(page.locator("body")).to_contain_text("no job array")


def test_the_hosts_page_shows_each_host_what_is_reserved_and_the_queue(
        primus_env, server: RunningServer, page: Page, tmp_path):
    app_id = _running(primus_env, tmp_path)
    page.goto(f"{server.ui_url}hosts")
    row = page.locator("table.hosts tbody tr").first
    expect(row).to_contain_text(app_id)
    expect(row).to_contain_text("2 executors")
    expect(page.locator("table.queue")).to_contain_text("Nothing waits for admission.")
    # The usage grid: the host's reserved CPU as admission holds it.
    shown = page.request.get(f"{server.ui_url}hosts/charts.json").json()
    host = shown["hosts"][0]
    grid = page.locator(f"#hosts-usage g.host-row[data-host='{host['name']}']")
    expect(grid).to_have_count(1)
    if host["cpu"] is not None:
        expect(grid.locator("g.usage[data-what=cpu]")).to_have_attribute(
            "data-used", f"{host['cpu'][0]:g}")
    screenshot(page, "hosts")
    run_primus(primus_env, "kill", app_id)


def test_a_new_application_appears_on_the_open_applications_page(
        primus_env, server: RunningServer, page: Page):
    page.goto(f"{server.ui_url}apps")
    expect(page.locator("table.apps tbody")).to_contain_text("No application matches.")
    _marked(page)
    app_id = _submit(primus_env, HELLO)
    expect(page.locator(f"tr[data-app='{app_id}']")).to_be_visible(timeout=15_000)
    expect(page.locator(f"tr[data-app='{app_id}']")).to_contain_text("SUCCEEDED",
                                                                      timeout=30_000)
    _still_marked(page)


def test_an_application_whose_keys_left_etcd_is_shown_from_the_history(
        primus_env, tmp_path, page: Page):
    Path(primus_env["PRIMUS_CONF"]).write_text("history:\n  retention: 1s\n")
    archiving = start_server(primus_env, tmp_path)
    try:
        app_id = _submit(primus_env, FAILING, "--wait")
        wait_until(lambda: 'id="archived"' in _get(f"{archiving.ui_url}apps/{app_id}")[1], 30,
                   f"{app_id} to be archived and its keys deleted from etcd")
        page.goto(f"{archiving.ui_url}apps")
        row = page.locator(f"tr[data-app='{app_id}']")
        expect(row).to_contain_text("FAILED")
        expect(row.locator(".tag")).to_have_text("history")
        # Its progress as archived (how many executors succeeded depends on the race between
        # chief's echo and worker-1's failure).
        expect(row.locator("td").nth(5)).to_have_text(re.compile(r"^\d+%$"))
        row.locator("a").first.click()
        expect(page.locator("#archived")).to_contain_text("history store")
        expect(page.locator("#executor-worker-1")).to_contain_text("FAILED")
        expect(page.locator("table.events")).to_contain_text("application FAILED")
        assert page.locator("#kill-form").count() == 0
        screenshot(page, "application-archived")
        page.locator("#executor-worker-1 a", has_text="trainer").click()
        expect(page.locator("#log")).to_contain_text("worker 1 gives up")
    finally:
        archiving.stop()


def test_with_its_history_unreadable_the_ui_still_lists_what_etcd_holds_and_says_why(
        primus_env, tmp_path, page: Page):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the history's directory should be\n")
    Path(primus_env["PRIMUS_CONF"]).write_text(
        f"history:\n  url: sqlite:///{blocker}/history.db\n")
    unreadable = start_server(primus_env, tmp_path)
    try:
        app_id = _submit(primus_env, HELLO, "--wait")
        page.goto(f"{unreadable.ui_url}apps")
        expect(page.locator("#history-unavailable")).to_contain_text(str(blocker))
        expect(page.locator(f"tr[data-app='{app_id}']")).to_contain_text("SUCCEEDED")
        page.goto(f"{unreadable.ui_url}apps/{app_id}")
        expect(page.locator("#app-state")).to_have_text("SUCCEEDED")
        code, body = _get(f"{unreadable.ui_url}apps/no-such-app")
        assert code in (404, 503) and "Traceback" not in body
        assert unreadable.process.poll() is None, "the server must keep serving"
    finally:
        unreadable.stop()


# ---- Sign-in and authorization -------------------------------------------------------------

def test_a_viewer_signs_in_with_a_token_and_may_kill_only_what_it_may_change(
        primus_env, token_server: RunningServer, pki: EtcdPki, page: Page, tmp_path):
    app_id = _running(primus_env, tmp_path)  # submitted by this account, not alice
    assert token_server.ui_url.startswith("https://")
    page.goto(f"{token_server.ui_url}apps/{app_id}")
    expect(page).to_have_url(re.compile(r"/login\?next="))
    page.fill("input[name=token]", "not-a-token")
    page.click("#login-form button")
    expect(page.locator("#login-error")).to_contain_text("not known")
    page.fill("input[name=token]", TOKENS["alice"])
    page.click("#login-form button")
    expect(page).to_have_url(re.compile(rf"/apps/{app_id}$"))
    expect(page.locator("header .who")).to_contain_text("alice")
    assert page.locator("#kill-form").count() == 0, "alice may not kill another's application"
    # A form posted anyway is refused by the server.
    refused = page.request.post(f"{token_server.ui_url}apps/{app_id}/kill",
                                form={"csrf": "x", "reason": "no"})
    assert refused.status == 403
    page.context.clear_cookies()
    page.goto(f"{token_server.ui_url}login?next=/apps/{app_id}")
    page.fill("input[name=token]", TOKENS["root"])
    page.click("#login-form button")
    page.click("#kill-form button")
    expect(page.locator("#app-state")).to_have_text("KILLED", timeout=30_000)
    assert cli_status_json(primus_env, app_id)["status"]["state"] == "KILLED"


def test_an_admin_drains_and_resumes_a_host_from_the_hosts_page_and_no_one_else_may(
        token_server: RunningServer, page: Page):
    page.goto(f"{token_server.ui_url}login?next=/hosts")
    page.fill("input[name=token]", TOKENS["alice"])
    page.click("#login-form button")
    row = page.locator("table.hosts tbody tr").first
    expect(row.locator("td.condition")).to_contain_text("in service")
    assert row.locator("form.drain-host").count() == 0, "alice is no admin"
    host = row.locator("td").first.inner_text()
    refused = page.request.post(f"{token_server.ui_url}hosts/{host}/drain",
                                form={"csrf": "x", "reason": "mine"})
    assert refused.status == 403

    page.context.clear_cookies()
    page.goto(f"{token_server.ui_url}login?next=/hosts")
    page.fill("input[name=token]", TOKENS["root"])
    page.click("#login-form button")
    row.locator("form.drain-host input[name=reason]").fill("<i>new disks</i>")
    row.locator("form.drain-host button").click()
    expect(row.locator("td.condition")).to_contain_text("drained since")
    expect(row.locator("td.condition .reason")).to_have_text("<i>new disks</i>")
    assert row.locator("td.condition i").count() == 0, "a reason is text, never markup"
    drained = page.locator(f"#hosts-usage g.host-row.out[data-host='{host}']")
    expect(drained.locator("text.out")).to_have_text("drained: <i>new disks</i>")
    assert page.locator("#hosts-usage i").count() == 0, "in the picture too"
    screenshot(page, "hosts-drained")
    row.locator("form.resume-host button").click()
    expect(row.locator("td.condition")).to_contain_text("in service")


def test_embedded_ui_link_signs_the_local_account_in(tmp_path, page: Page):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIMUS_")}
    env.update(PRIMUS_HOME=str(tmp_path / "home"), PRIMUS_CONF="-")
    try:
        link = run_primus(env, "ui")
        assert link.returncode == 0, link.stderr
        url = link.stdout.strip()
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/login#token=[\w-]+", url), url
        token_file = tmp_path / "home" / "server" / "ui-token"
        assert token_file.stat().st_mode & 0o077 == 0, "the UI token must be private"
        base = url.split("login#")[0]
        page.goto(f"{base}apps")
        expect(page).to_have_url(re.compile(r"/login"))
        page.goto(url)
        expect(page).to_have_url(re.compile(r"/apps$"))
        expect(page.locator("header .who")).to_contain_text("(admin)")
        status = run_primus(env, "server", "status")
        assert f"UI {base}" in status.stdout
    finally:
        run_primus(env, "server", "stop")
        run_primus(env, "etcd", "stop")


# ---- Bad input ------------------------------------------------------------------------------

def _get(url: str, data: bytes | None = None, cookie: str = "") -> tuple[int, str]:
    request = urllib.request.Request(url, data=data, headers={"Cookie": cookie} if cookie
                                     else {})
    context = ssl._create_unverified_context()  # the test CA's certificate
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_bad_requests_get_clear_error_pages_and_the_server_keeps_serving(
        primus_env, server: RunningServer):
    app_id = _submit(primus_env, HELLO, "--wait")
    base = server.ui_url
    cases = [
        ("apps/no-such-app-1234", 404, "no application"),
        ("apps/" + "x" * 300, 404, "no application"),
        ("nowhere", 404, "no page /nowhere"),
        ("apps?page=abc", 400, "page: got &#39;abc&#39;"),
        ("apps?page=0", 400, "must be a whole number"),
        ("apps?state=DANCING", 400, "state: got &#39;DANCING&#39;; allowed: SUBMITTED"),
        ("apps?colour=red", 400, "colour: unknown parameter"),
        (f"apps?user={'u' * 300}", 400, "user: 300 characters"),
        (f"apps/{app_id}/logs/..%2F..%2F..%2Fetc%2Fpasswd", 404, "a log is"),
        (f"apps/{app_id}/logs/%2Fetc%2Fpasswd", 404, "a log is"),
        (f"apps/{app_id}/logs/worker-7", 404, "no executor"),
        (f"apps/{app_id}/logs/am?kind=shadow", 400, "kind: got"),
        (f"apps/{app_id}/data/nothing", 404, "no data stream"),
        (f"apps/{app_id}/live?after=-1", 400, "after: got"),
    ]
    for path, status, text in cases:
        code, body = _get(base + path)
        assert code == status, f"{path}: {code} {body[:300]}"
        assert text in body, f"{path}: {text!r} not in {body[:600]}"
        assert "Traceback" not in body
    code, body = _get(f"{base}apps/{app_id}/kill", data=b"csrf=" + b"x" * 70_000)
    assert code == 413, body[:200]
    code, body = _get(f"{base}apps/{app_id}/kill", data=b"reason=no")
    assert code == 403 and "expired" in body
    code, body = _get(f"{base}apps")
    assert code == 200 and app_id in body
    assert json.loads(run_primus(primus_env, "list", "-o", "json").stdout)


def test_pages_are_refused_without_a_known_token_and_forms_from_other_sites(
        primus_env, token_server: RunningServer):
    base = token_server.ui_url
    code, body = _get(f"{base}apps")
    assert code == 200 and 'id="login-form"' in body  # sent to sign in
    code, _ = _get(f"{base}apps/live")
    assert code == 401
    code, body = _get(f"{base}apps", cookie=f"primus_token={TOKENS['bob']}")
    assert code == 200 and "bob" in body
    request = urllib.request.Request(
        f"{base}logout", data=b"csrf=x", method="POST",
        headers={"Cookie": f"primus_token={TOKENS['bob']}", "Origin": "https://evil.example"})
    try:
        urllib.request.urlopen(request, timeout=10, context=ssl._create_unverified_context())
        raise AssertionError("a form from another site was accepted")
    except urllib.error.HTTPError as error:
        assert error.code == 403
        assert "evil.example" in error.read().decode()
    quoted = urllib.parse.quote("//evil.example/x", safe="")
    code, body = _get(f"{base}login?next={quoted}")
    assert 'value="/apps"' in body, "a sign-in must not lead off this site"


MARKUP_SAVEPOINT = """
from primus.data.reader import records, savepoint
stream = records()
for _ in range(10):
    next(stream)
savepoint("<b>step-1</b>")
import signal; signal.pause()  # trains on until stopped
"""


def test_a_savepoint_shows_on_its_application_page_its_name_as_text(
        primus_env, server: RunningServer, page: Page, tmp_path: Path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text("".join(f"line {i}\n" for i in range(500)))
    trainer = tmp_path / "trainer.py"
    trainer.write_text(MARKUP_SAVEPOINT)
    job = write_job(tmp_path / "job.yaml", f"""
name: saving
roles:
  - name: worker
    num: 1
    command: {json.dumps([sys.executable, str(trainer)])}
data:
  - name: train
    roles: [worker]
    sources: [{{path: {tmp_path}/data/*.txt}}]
    delivery: shm
""")
    app_id = _submit(primus_env, job)
    wait_until(lambda: any(json.loads(line)["state"] == "taken" for line in run_primus(
        primus_env, "savepoint", "list", app_id, "--json").stdout.splitlines()), 60,
        "the trainer's savepoint taken")

    page.goto(f"{server.ui_url}apps/{app_id}")
    row = page.locator("#savepoint-1")
    expect(row).to_contain_text(f"{app_id}/1")
    expect(row).to_contain_text("<b>step-1</b>")
    expect(row.locator("b")).to_have_count(0)
    expect(row).to_contain_text("10 records before the cut")

    page.click("#savepoint-form button")  # as its owner (the server's open caller here)
    expect(page.locator("#savepoint-2")).to_contain_text("taken")
    expect(page.locator("#savepoint-2")).to_contain_text("10 records before the cut")
    run_primus(primus_env, "kill", app_id)


MIXED = """\
name: mixed
roles:
  - name: hog
    memory: 64Mi
    command: python3 -c "x = bytearray(256 << 20)"
    restart_policy: on_failure
    max_failures: 2
  - name: worker
    num: 2
    command: sleep 600
"""


def test_the_timeline_draws_every_attempt_of_an_oom_killed_role_and_the_end_it_caused(
        primus_env, server: RunningServer, page: Page, tmp_path):
    app_id = _submit(primus_env, write_job(tmp_path / "mixed.yaml", MIXED), "--wait")
    page.goto(f"{server.ui_url}apps/{app_id}")
    expect(page.locator("#app-state")).to_have_text("FAILED")
    status = _timeline_is_etcds(page, primus_env, app_id)
    (hog,) = status["executors"]["hog"]
    assert [a["exit_class"] for a in [*hog["plan"]["past"], hog["plan"]]] == \
        ["OOM_KILLED", "OOM_KILLED"], hog["plan"]
    expect(page.locator("#timeline g.lane[data-executor='hog-0'] g.bar[data-outcome=OOM_KILLED]")
           ).to_have_count(2)
    expect(page.locator("#timeline g.lane[data-executor='worker-0'] g.bar").last
           ).to_have_attribute("data-outcome", "KILLED")
    screenshot(page, "timeline")


def test_the_page_of_a_jobs_run_charts_its_earlier_runs_each_a_link(
        primus_env, server: RunningServer, page: Page):
    first = _submit(primus_env, HELLO, "--wait")
    second = _submit(primus_env, HELLO, "--wait")
    page.goto(f"{server.ui_url}apps/{second}")
    runs = page.locator("#job-runs a.run")
    expect(runs).to_have_count(2)
    expect(runs.nth(0)).to_have_attribute("data-app", first)
    expect(runs.nth(1)).to_have_attribute("class", "run current")
    shown = page.request.get(f"{server.ui_url}apps/{second}/charts.json").json()
    assert [(r["app_id"], r["state"]) for r in shown["runs"]] == [
        (first, "SUCCEEDED"), (second, "SUCCEEDED")]
    screenshot(page, "job-runs")
    runs.nth(0).click()
    expect(page).to_have_url(f"{server.ui_url}apps/{first}")


def test_the_queue_picture_shows_who_waits_now_then_counts_its_wait_once_admitted(
        primus_env, tmp_path, page: Page):
    Path(primus_env["PRIMUS_CONF"]).write_text("queues: {default: {quota: {applications: 1}}}\n")
    server = start_server(primus_env, tmp_path)
    try:
        running = _running(primus_env, tmp_path)
        waiting = _submit(primus_env, HELLO)
        wait_until(lambda: waiting in [w["app_id"] for w in json.loads(
            _get(f"{server.ui_url}hosts/charts.json")[1])["waiting"]], 30,
            f"{waiting} to wait for admission")
        page.goto(f"{server.ui_url}hosts")
        expect(page.locator(f"#queue-waits g.waiting[data-app='{waiting}']")).to_have_count(1)
        # The first application waited too, if only for admission's pass.
        default = page.locator("#queue-waits g.queue-waits[data-queue=default]")
        expect(default).to_have_attribute("data-waits", "1")
        run_primus(primus_env, "kill", running)
        wait_until(lambda: status_json(primus_env, waiting)["status"]["state"] == "SUCCEEDED",
                   60, f"{waiting} to be admitted and succeed")
        page.reload()
        expect(default).to_have_attribute("data-waits", "2")
        expect(page.locator(f"#queue-waits g.waiting[data-app='{waiting}']")).to_have_count(0)
        screenshot(page, "queue-waits")
    finally:
        server.stop()
