"""Benchmark: the web UI (issue 13): its pages over 10,000 archived applications, an etcd write
reaching an open page, and the server's memory with 20 live pages open.

Against a private etcd, a history database named in the site defaults file (``history: {url:
...}``: a SQLite file in the temporary directory, or ``--postgres URL``) and one real ``primus
server run --plaintext`` with its UI on a free loopback port (no tokens: every viewer acts as the
server's account), three parts:

* **pages**: ``examples/hello`` is run once and its keys read as the archiver reads them
  (:func:`~primus.state.view.read_app_keys`); that record and ``--history`` copies of it with
  distinct ids, names, users, queues, states and times (submissions 250 s apart) are written
  through :meth:`~primus.history.sql_history.SqlHistory.archive`. Then GET of ``/apps`` (page
  1), a deep page, a page filtered by state and user and one filtered by a part of the name,
  each ``--requests`` times over one keep-alive connection, in interleaved blocks: p50, p99,
  the server's CPU per request. **Floor**: GET of ``/static/primus.css`` in the same blocks (the
  server's HTTP stack alone). Beside them, ``History.query`` and
  ``ApplicationService.find_apps`` for the same queries, timed in this process (the database's
  and the service's part of a page); and page 1 again once 10 running applications are in etcd
  (the page then reads each one's progress from etcd).
* **live**: 10 running applications recorded in etcd directly (copies of hello's keys with the
  application and its executors RUNNING and an AM leader record; no process runs), the newest
  of the deployment. One write at a time, each after the previous one arrived everywhere, and
  timed from the write's acknowledgement to its arrival: an executor plan of one application
  with a new diagnosis → the ``sections`` event of that application page's live feed
  (``/apps/<id>/live``, read as server-sent events over aiohttp); the same → the page's DOM
  changed in Chromium (Playwright, ``/usr/bin/chromium``; a ``MutationObserver`` in the page
  notes the time); the application's status with a new name → the applications page's feed
  (``/apps/live``). **Floor**: a raw etcd watch of the written key, on the same writes.
* **memory**: the server's RSS and USS when started, idle after the parts above, with 20 live
  feeds open (the application pages of the 10 running applications and 10 applications pages
  with different filters), and while ``--rounds`` changes flow to all 20 (one transaction
  rewriting the 10 applications' status; the next once all 20 feeds carried it): RSS sampled
  every 10 ms, how long until the last feed carried a change, the server's CPU per change.

Usage: ``python bench/bench_ui.py [--history 10000] [--requests 200] [--writes 50]
[--rounds 20] [--big-executors 512] [--big-events 1000] [--no-browser] [--postgres URL]``
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import getpass
import json
import os
import platform
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl

import aiohttp
import psutil
from bench_api import CpuMeter, Server, ms, percentile, verdict
from bench_submit import (
    Sandbox,
    console,
    etcd_version,
    med,
    memory_mb,
    parse_args,
    sandbox,
    wait_for_quiet,
)
from rich.table import Table

from primus.client.service import ApplicationService
from primus.config.etcd import EtcdConfig
from primus.config.site import Settings, load_settings
from primus.history.api import ArchivedApp, stored_queue
from primus.history.sql_history import open_history
from primus.state.keys import AppKeys
from primus.state.records import (
    AmLeader,
    AppEvent,
    AppOwner,
    AppStatus,
    ExecutorPlan,
    PastAttempt,
    decode,
    encode,
)
from primus.state.states import AppState, ExecutorState
from primus.state.view import read_app_keys
from primus.store.api import KeyValue, Put, WatchEvent
from primus.store.etcd_store import EtcdCoordinator
from primus.ui.pages import list_request

HELLO = Path(__file__).resolve().parent.parent / "examples" / "hello" / "job.yaml"
PREFIX = "/bench"
"""The deployment prefix of :func:`bench_submit.sandbox`."""
NAMES = ("resnet50", "bert-large", "ctr-wide-deep", "gpt-small", "recsys-dlrm", "vit-base")
USERS = 20
STATES = (AppState.SUCCEEDED, AppState.FAILED, AppState.KILLED)
STATE_WEIGHTS = (7, 2, 1)
SPREAD = 250.0
"""Seconds between two archived submissions: 10,000 span about 29 days."""
FLOOR = "floor: /static/primus.css"
PAGES = {"/apps": "apps",
         "/apps?page=150": "apps?page=150",
         "/apps?state=FAILED&user=user07": "apps?state=FAILED&user=user07",
         "/apps?name=bert": "apps?name=bert",
         FLOOR: "static/primus.css"}
BLOCKS = 5
"""Blocks the page requests are split in, each kind of page in turn within a block."""
WARM_UP = 5
"""Requests or writes before the measured ones."""
LIVE_APPS = 10
APPS_FEEDS = ("", "state=RUNNING", "user={user}", "name=live", "queue={queue}",
              "state=RUNNING&user={user}", "user={user}&name=live", "page=1",
              "state=RUNNING&name=live", "state=RUNNING&queue={queue}")
"""The filters of the 10 applications pages open in the memory part: each lists the running
applications."""
WATCHERS_METRIC = "etcd_debugging_mvcc_watcher_total"
PAGE_TARGET_MS = 50.0
BIG_EXECUTORS = 512
BIG_PAST = 3
BIG_EVENTS = 1000
BIG_TARGET_MS = 200.0
BIG_PAGE = "/apps/<one large application>"
LIVE_TARGET_MS = 200.0
ARRIVAL_TIMEOUT = 10.0
START_TIMEOUT = 30.0
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--disable-dev-shm-usage"]
"""As ``tests/support/browser.py`` launches Debian's Chromium (no way out, root)."""
OBSERVE_MARKERS = """() => {
  window.__primusSeen = {};
  const root = document.getElementById("live-root");
  new MutationObserver(() => {
    const now = performance.timeOrigin + performance.now();
    for (const found of root.textContent.matchAll(/probe-[0-9]{6}/g)) {
      if (!(found[0] in window.__primusSeen)) window.__primusSeen[found[0]] = now;
    }
  }).observe(root, {childList: true, subtree: true, characterData: true});
}"""
"""Installed in the application page: when each marker first appeared in its live sections
(milliseconds since the epoch)."""


# --- the server ---------------------------------------------------------------------------------


@dataclass
class UiServer(Server):
    url: str
    """The UI's URL, ending in ``/``."""


@contextmanager
def ui_server(box: Sandbox) -> Iterator[UiServer]:
    """``primus server run --plaintext`` with its UI, both on free loopback ports; SIGTERM and
    wait after."""
    state = box.root / "server.json"
    log_file = box.root / "server.log"
    with log_file.open("wb") as log:
        process = subprocess.Popen([*box.primus, "server", "run", "--listen", "127.0.0.1:0",
                                    "--ui-listen", "127.0.0.1:0", "--plaintext",
                                    "--state-file", str(state)],
                                   env=box.env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not state.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start: {log_file.read_text()}")
            time.sleep(0.05)
        info = json.loads(state.read_text())
        yield UiServer(process, info["address"], info["ui_url"])
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            tail = log_file.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the server did not stop within 30 s of SIGTERM (now killed); "
                               f"its log ends:\n{tail}") from None


async def connect(box: Sandbox) -> EtcdCoordinator:
    return await EtcdCoordinator.connect(EtcdConfig(endpoints=(box.etcd_url,)))


# --- applications -------------------------------------------------------------------------------


def run_hello(box: Sandbox) -> str:
    """Run ``examples/hello`` to its end; return its id."""
    return box.run("submit", str(HELLO), "--wait").strip().splitlines()[-1]


async def archived_hello(box: Sandbox, settings: Settings, app_id: str) -> ArchivedApp:
    """The finished application's record as the archiver makes it, once its AM has exited."""
    store = await connect(box)
    keys = AppKeys(PREFIX, app_id)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while await store.get(keys.leader) is not None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{app_id}: its AM still leads {START_TIMEOUT:g}s after "
                                   f"the application ended")
            await asyncio.sleep(0.05)
        snapshot = await read_app_keys(store, keys)
    finally:
        await store.close()
    spec = next(kv for kv in snapshot.kvs if kv.key == keys.spec)
    return ArchivedApp.from_snapshot(keys, snapshot,
                                     stored_queue(spec.value, settings.queues.default_queue))


def copied_keys(template: ArchivedApp, status: AppStatus, queue: str, running: bool
                ) -> tuple[KeyValue, ...]:
    """``template``'s keys as those of the application ``status`` describes: its status, its
    spec with its name and queue; with ``running``, its executors RUNNING (no result, no
    event after the application started running)."""
    old = AppKeys(PREFIX, template.app_id)
    copied = []
    for kv in template.kvs:
        value = kv.value
        if kv.key == old.status:
            value = encode(status)
        elif kv.key == old.owner:
            value = encode(owner_of(status, queue))
        elif kv.key == old.spec:
            spec = json.loads(value)
            spec.update(name=status.name, queue=queue)
            value = json.dumps(spec, separators=(",", ":")).encode()
        elif running and kv.key.endswith("/result"):
            continue
        elif running and kv.key.endswith("/plan"):
            plan = decode(ExecutorPlan, value, kv.key)
            value = encode(plan.model_copy(update={"state": ExecutorState.RUNNING,
                                                   "release_time": None, "exit_code": None}))
        elif running and kv.key.startswith(old.events) and b"SUCCEEDED" in value:
            continue
        key = kv.key.replace(f"/{template.app_id}/", f"/{status.app_id}/")
        copied.append(dataclasses.replace(kv, key=key, value=value))
    return tuple(copied)


def owner_of(status: AppStatus, queue: str = "") -> AppOwner:
    """The server's record of the application ``status`` describes."""
    return AppOwner(app_id=status.app_id, name=status.name, user=status.user,
                    account=status.account, queue=queue, submit_host=status.submit_host,
                    submit_time=status.submit_time)


def app_id_of(name: str, submitted: float, number: int) -> str:
    """An id as :func:`primus.client.service.new_app_id` makes them, unique by ``number``."""
    stamp = datetime.datetime.fromtimestamp(submitted, datetime.UTC).strftime("%Y%m%d-%H%M%S")
    return f"{name}-{stamp}-{number:04x}"


def status_of(app: ArchivedApp) -> AppStatus:
    """The status record among ``app``'s keys."""
    key = AppKeys(PREFIX, app.app_id).status
    return decode(AppStatus, next(kv.value for kv in app.kvs if kv.key == key), key)


def history_copy(template: ArchivedApp, status: AppStatus, number: int, rng: random.Random,
                 queues: list[str], newest: float) -> ArchivedApp:
    """The ``number``-th archived application: submitted ``number`` × :data:`SPREAD` seconds
    before ``newest``, of a random name, user, queue, final state and duration; ``status`` is
    ``template``'s."""
    name = rng.choice(NAMES)
    submitted = newest - number * SPREAD - rng.uniform(0, SPREAD / 2)
    started = submitted + rng.uniform(1, 60)
    state = rng.choices(STATES, STATE_WEIGHTS)[0]
    status = status.model_copy(update={
            "app_id": app_id_of(name, submitted, number), "name": name, "state": state,
            "user": f"user{rng.randrange(USERS):02d}", "submit_time": submitted,
            "start_time": started, "finish_time": started + rng.uniform(60, 36_000),
            "exit_code": 0 if state is AppState.SUCCEEDED else 1,
            "diagnosis": "" if state is AppState.SUCCEEDED else "worker-1 exited 1"})
    queue = rng.choice(queues)
    return ArchivedApp(app_id=status.app_id, name=status.name, user=status.user, queue=queue,
                       state=state, submit_time=submitted, start_time=started,
                       finish_time=status.finish_time, exit_code=status.exit_code,
                       diagnosis=status.diagnosis,
                       archived_revision=template.archived_revision,
                       kvs=copied_keys(template, status, queue, running=False))


async def fill_history(settings: Settings, template: ArchivedApp, count: int) -> float:
    """Archive ``template`` and ``count`` copies of it; return the seconds it took."""
    history = open_history(settings)
    queues = [settings.queues.default_queue, "research", "prod"]
    rng = random.Random(13)
    status = status_of(template)
    newest = time.time() - 3600.0
    started = time.monotonic()
    try:
        await history.archive(template)
        for number in range(count):
            await history.archive(history_copy(template, status, number, rng, queues,
                                               newest))
            if (number + 1) % 2000 == 0:
                console.print(f"history: {number + 1:,} of {count:,} archived", style="dim")
    finally:
        await history.close()
    return time.monotonic() - started


def live_status(status: AppStatus, number: int, marker: str = "") -> AppStatus:
    """``status`` of running application ``number`` with its name and diagnosis carrying
    ``marker``."""
    return status.model_copy(update={"name": f"live-{number} {marker}".strip(),
                                      "diagnosis": marker})


async def record_running_apps(box: Sandbox, settings: Settings, template: ArchivedApp,
                              count: int) -> list[AppStatus]:
    """Record ``count`` running applications in etcd (the newest of the deployment), each led
    by an AM record; return their statuses."""
    store = await connect(box)
    now = time.time()
    hello = status_of(template)
    statuses = []
    try:
        for number in range(count):
            submitted = now - 600.0 + number
            status = live_status(hello.model_copy(update={
                "app_id": app_id_of(f"live-{number}", submitted, number),
                "state": AppState.RUNNING, "user": getpass.getuser(),
                "submit_time": submitted, "start_time": submitted + 1.0, "finish_time": None,
                "exit_code": None}), number)
            keys = AppKeys(PREFIX, status.app_id)
            kvs = copied_keys(template, status, settings.queues.default_queue, running=True)
            leader = AmLeader(am_id=f"{status.app_id}-am", host="bench", pid=1,
                              since=status.start_time or now)
            await store.txn([], [*(Put(kv.key, kv.value) for kv in kvs),
                                 Put(keys.leader, encode(leader))])
            statuses.append(status)
    finally:
        await store.close()
    return statuses


async def record_big_app(box: Sandbox, settings: Settings, template: ArchivedApp,
                         executors: int, events: int) -> str:
    """Record a running application of ``executors`` executors in etcd (hello's roles, its
    worker role grown), each in its fourth attempt after :data:`BIG_PAST` failed ones on other
    hosts, with ``events`` events: the application page's worst case the issue budgets (512
    and 1,000; its timeline draws every lane and attempt it may). Its id."""
    now = time.time()
    status = live_status(status_of(template).model_copy(update={
        "app_id": app_id_of("big", now - 900.0, 1), "state": AppState.RUNNING,
        "user": getpass.getuser(), "submit_time": now - 900.0, "start_time": now - 899.0,
        "finish_time": None, "exit_code": None}), 0).model_copy(update={"name": "big"})
    keys = AppKeys(PREFIX, status.app_id)
    kvs = copied_keys(template, status, settings.queues.default_queue, running=True)
    ops = [Put(kv.key, kv.value) for kv in kvs if not kv.key.endswith("/plan")
           and not kv.key.startswith(keys.events)]
    spec_key = keys.spec
    spec = json.loads(next(op.value for op in ops if op.key == spec_key))
    others = sum(role["num"] for role in spec["roles"] if role["name"] != "worker")
    for role in spec["roles"]:
        if role["name"] == "worker":
            role["num"] = executors - others
    ops = [op if op.key != spec_key else Put(spec_key, json.dumps(spec).encode())
           for op in ops]
    template_plan = next(decode(ExecutorPlan, kv.value, kv.key) for kv in kvs
                         if kv.key.endswith("/plan"))
    for role in spec["roles"]:
        for index in range(role["num"]):
            past = [PastAttempt(attempt=a, host=f"host-{(index + a) % 64:02d}",
                                state=ExecutorState.FAILED,
                                launch_time=status.start_time + a * 60,
                                release_time=status.start_time + a * 60 + 50, exit_code=1)
                    for a in range(1, BIG_PAST + 1)]
            plan = template_plan.model_copy(update={
                "role": role["name"], "index": index, "attempt": BIG_PAST + 1,
                "host": f"host-{index % 64:02d}", "state": ExecutorState.RUNNING,
                "launch_time": status.start_time + 300, "release_time": None,
                "exit_code": None, "past": past})
            ops.append(Put(keys.executor(role["name"], index, "plan"), encode(plan)))
    ops += [Put(keys.event(seq), encode(AppEvent(
        seq=seq, time=status.start_time + seq * 0.5, kind=("cluster", "executor-state")[seq % 2],
        message=f"event {seq}"))) for seq in range(events)]
    ops.append(Put(keys.leader, encode(AmLeader(am_id=f"{status.app_id}-am", host="bench",
                                                pid=1, since=now))))
    store = await connect(box)
    try:
        for start in range(0, len(ops), 100):  # etcd takes 128 operations a transaction
            await store.txn([], ops[start:start + 100])
    finally:
        await store.close()
    return status.app_id


async def forget_app(box: Sandbox, app_id: str) -> None:
    """Delete the application's keys from etcd."""
    store = await connect(box)
    try:
        await store.delete(AppKeys(PREFIX, app_id).root, prefix=True)
    finally:
        await store.close()


# --- pages --------------------------------------------------------------------------------------


@dataclass
class PageRuns:
    """GETs of each page, in blocks."""

    latencies: dict[str, list[float]]
    """Seconds of each request, by page."""
    server_cpu: dict[str, float]
    """Seconds of CPU the server used while each page was requested."""
    others_share: list[float]
    """Per block and page, the share of the CPU that processes other than this one, the server
    and etcd used."""
    rows: dict[str, int]
    total: dict[str, int]
    size: dict[str, int]


def page_figures(body: bytes) -> tuple[int, int]:
    """The applications a page lists and how many match in all (its pager's figure)."""
    total = re.search(rb'<p class="pager">\s*(\d+) application', body)
    return body.count(b"<tr data-app="), int(total.group(1)) if total else 0


async def time_pages(box: Sandbox, server: UiServer, pages: dict[str, str], requests: int
                     ) -> PageRuns:
    """GET each of ``pages`` ``requests`` times over one keep-alive connection, in
    :data:`BLOCKS` blocks, each page in turn within a block."""
    meter = CpuMeter(box, server)
    runs = PageRuns({name: [] for name in pages}, dict.fromkeys(pages, 0.0), [], {}, {}, {})
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as session:
        async def get(path: str) -> bytes:
            async with session.get(server.url + path) as response:
                body = await response.read()
                if response.status != 200:
                    said = re.search(rb"<main>(.*?)</main>", body, re.S)
                    raise RuntimeError(f"GET /{path}: HTTP {response.status}: "
                                       f"{(said.group(1) if said else body)[:600]!r}")
                return body

        for name, path in pages.items():
            for _ in range(WARM_UP):
                body = await get(path)
            runs.rows[name], runs.total[name] = page_figures(body)
            runs.size[name] = len(body)
        per_block = max(requests // BLOCKS, 1)
        for _ in range(BLOCKS):
            wait_for_quiet()
            for name, path in pages.items():
                meter.start()
                started = time.perf_counter()
                for _ in range(per_block):
                    before = time.perf_counter()
                    await get(path)
                    runs.latencies[name].append(time.perf_counter() - before)
                used = meter.read()
                runs.server_cpu[name] += used["server"]
                ours = used["client"] + used["server"] + used["etcd"]
                runs.others_share.append(max(used["machine"] - ours, 0.0) / (
                    (time.perf_counter() - started) * (os.cpu_count() or 1)))
    return runs


async def page_breakdown(box: Sandbox, settings: Settings, pages: dict[str, str], calls: int
                         ) -> dict[str, tuple[float, float]]:
    """Median seconds of ``History.query`` and of ``ApplicationService.find_apps`` for each
    page's query, called one at a time in this process."""
    store = await connect(box)
    history = open_history(settings)
    service = ApplicationService(store, settings, history)
    found: dict[str, tuple[float, float]] = {}
    try:
        for name, path in pages.items():
            query = list_request(dict(parse_qsl(path.partition("?")[2]))).query
            times: tuple[list[float], list[float]] = ([], [])
            for _ in range(calls):
                for spent, call in zip(times, (history.query, service.find_apps),
                                       strict=True):
                    before = time.perf_counter()
                    await call(query)
                    spent.append(time.perf_counter() - before)
            found[name] = med(times[0]), med(times[1])
    finally:
        await history.close()
        await store.close()
    return found


# --- live ---------------------------------------------------------------------------------------


class Receiver:
    """Texts read by a task of its own (each kind's ``open`` starts it); tells when those
    carrying awaited markers arrived (``time.time()``)."""

    def __init__(self) -> None:
        self.awaited: dict[str, asyncio.Future[float]] = {}
        self.reading: asyncio.Task[None] | None = None

    def expect(self, marker: str) -> asyncio.Future[float]:
        """The time the first text carrying ``marker`` arrives after this call."""
        future = asyncio.get_running_loop().create_future()
        self.awaited[marker] = future
        return future

    def received(self, text: str) -> None:
        now = time.time()
        for marker, future in list(self.awaited.items()):
            if marker in text:
                del self.awaited[marker]
                if not future.done():
                    future.set_result(now)

    async def close(self) -> None:
        """Stop reading."""
        if self.reading is not None:
            self.reading.cancel()
            await asyncio.gather(self.reading, return_exceptions=True)


class Feed(Receiver):
    """One open server-sent-events feed of the UI; every ``sections`` event's data is
    received."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        super().__init__()
        self.session = session
        self.url = url

    async def open(self) -> None:
        """Connect; return once the server answered."""
        response = await self.session.get(self.url, headers={"Accept": "text/event-stream"},
                                          timeout=aiohttp.ClientTimeout(total=None))
        if response.status != 200 or \
                not response.headers.get("Content-Type", "").startswith("text/event-stream"):
            body = await response.text()
            raise RuntimeError(f"GET {self.url}: HTTP {response.status}: {body[:300]!r}")
        self.reading = asyncio.ensure_future(self._read(response))

    async def _read(self, response: aiohttp.ClientResponse) -> None:
        buffer = b""
        event, data = "message", list[str]()
        try:
            async for chunk in response.content.iter_any():
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for raw in lines:
                    line = raw.rstrip(b"\r").decode()
                    if not line:
                        if event == "sections" and data:
                            self.received("\n".join(data))
                        event, data = "message", []
                    elif not line.startswith(":"):
                        field, _, value = line.partition(":")
                        value = value.removeprefix(" ")
                        if field == "event":
                            event = value
                        elif field == "data":
                            data.append(value)
        finally:
            response.release()


class RawWatch(Receiver):
    """The floor: a raw etcd watch of every key under a prefix; each value is received."""

    def __init__(self, store: EtcdCoordinator, prefix: str) -> None:
        super().__init__()
        self.store = store
        self.prefix = prefix

    async def open(self) -> None:
        revision = (await self.store.txn([], [])).revision
        self.reading = asyncio.ensure_future(self._read(revision))

    async def _read(self, revision: int) -> None:
        async for event in self.store.watch_prefix(self.prefix, revision + 1):
            if isinstance(event, WatchEvent):
                self.received(event.value.decode(errors="replace"))


class Markers:
    """Unique markers: ``probe-000001``, ``probe-000002``, …"""

    def __init__(self) -> None:
        self.number = 0

    def next(self) -> str:
        self.number += 1
        return f"probe-{self.number:06d}"


@dataclass
class LiveRun:
    """Seconds from each write's acknowledgement (and from just before it) to its arrival, by
    receiver."""

    after_ack: dict[str, list[float]]
    after_write: dict[str, list[float]]


async def arrive(what: str, future: Awaitable[float], marker: str) -> float:
    try:
        return await asyncio.wait_for(future, ARRIVAL_TIMEOUT)
    except TimeoutError:
        raise RuntimeError(f"{what}: the write of {marker} did not arrive within "
                           f"{ARRIVAL_TIMEOUT:g}s") from None


async def probe_writes(store: EtcdCoordinator,
                       write: Callable[[str], list[tuple[str, bytes]]],
                       receivers: dict[str, Callable[[str], Awaitable[float]]],
                       markers: Markers, writes: int) -> LiveRun:
    """``writes`` writes (after :data:`WARM_UP`), one at a time: ``write(marker)`` names the
    keys and their values, written in one transaction; each receiver is given the marker
    before the write and returns the time it arrived."""
    run = LiveRun({name: [] for name in receivers}, {name: [] for name in receivers})
    wait_for_quiet()
    for number in range(WARM_UP + writes):
        marker = markers.next()
        ops = [Put(key, value) for key, value in write(marker)]
        waiting = {name: asyncio.ensure_future(arrive(name, receive(marker), marker))
                   for name, receive in receivers.items()}
        before = time.time()
        await store.txn([], ops)
        acknowledged = time.time()
        try:
            arrived = dict(zip(waiting, await asyncio.gather(*waiting.values()), strict=True))
        finally:
            for task in waiting.values():
                task.cancel()
        if number >= WARM_UP:
            for name, at in arrived.items():
                run.after_ack[name].append(at - acknowledged)
                run.after_write[name].append(at - before)
    return run


async def browser_page(url: str) -> tuple[Callable[[str], Awaitable[float]],
                                          Callable[[], Awaitable[None]]]:
    """Open ``url`` in headless Chromium with :data:`OBSERVE_MARKERS` installed; return a
    function awaiting a marker's arrival in the page, and one closing the browser."""
    from playwright.async_api import async_playwright

    if not CHROMIUM.exists():
        raise RuntimeError(f"{CHROMIUM} is missing (scripts/bootstrap --test installs Debian's "
                           f"chromium); or run with --no-browser")
    playwright = await async_playwright().start()
    browser = await playwright.chromium.launch(executable_path=str(CHROMIUM),
                                               args=CHROMIUM_FLAGS)
    page = await browser.new_page()
    await page.goto(url)
    await page.evaluate(OBSERVE_MARKERS)

    async def seen(marker: str) -> float:
        await page.wait_for_function("m => window.__primusSeen[m] !== undefined", arg=marker,
                                     timeout=ARRIVAL_TIMEOUT * 1000)
        return float(await page.evaluate("m => window.__primusSeen[m]", marker)) / 1000

    async def close() -> None:
        await browser.close()
        await playwright.stop()

    return seen, close


async def live_url(session: aiohttp.ClientSession, server: UiServer, app_id: str) -> str:
    """The live feed the application page names (``data-live``)."""
    async with session.get(f"{server.url}apps/{app_id}") as response:
        body = await response.text()
    found = re.search(r'data-live="([^"]+)"', body)
    if response.status != 200 or not found or not found.group(1):
        raise RuntimeError(f"the page of {app_id} names no live feed (HTTP {response.status})")
    return server.url + found.group(1).lstrip("/").replace("&amp;", "&")


async def bench_live(box: Sandbox, server: UiServer, running: list[AppStatus], writes: int,
                     browser: bool) -> dict[str, LiveRun]:
    """The three series of writes of the live part."""
    store = await connect(box)
    markers = Markers()
    app = running[0]
    keys = AppKeys(PREFIX, app.app_id)
    plan_key = keys.executor("worker", 1, "plan")
    plan_kv = await store.get(plan_key)
    if plan_kv is None:
        raise RuntimeError(f"{app.app_id}: no executor plan {plan_key} to change")
    plan = decode(ExecutorPlan, plan_kv.value, plan_key)

    def plan_write(marker: str) -> list[tuple[str, bytes]]:
        return [(plan_key, encode(plan.model_copy(update={"diagnosis": marker})))]

    def status_write(marker: str) -> list[tuple[str, bytes]]:
        # The name the table shows is the server's record's; the status write is what the
        # applications page follows.
        status = live_status(app, 0, marker)
        return [(keys.owner, encode(owner_of(status))), (keys.status, encode(status))]

    runs: dict[str, LiveRun] = {}
    async with aiohttp.ClientSession() as session:
        floor = RawWatch(store, keys.prefix)
        await floor.open()
        try:
            for name, url, write in (
                    ("application page", await live_url(session, server, app.app_id),
                     plan_write),
                    ("applications page", f"{server.url}apps/live", status_write)):
                feed = Feed(session, url)
                await feed.open()
                try:
                    runs[name] = await probe_writes(store, write, {
                        "ui": feed.expect, "floor": floor.expect}, markers, writes)
                finally:
                    await feed.close()
                console.print(f"live: {name}: median "
                              f"{statistics.median(runs[name].after_ack['ui']) * 1000:.1f} ms",
                              style="dim")
            if browser:
                seen, close = await browser_page(f"{server.url}apps/{app.app_id}")
                try:
                    runs["application page in Chromium"] = await probe_writes(
                        store, plan_write, {"ui": seen, "floor": floor.expect}, markers, writes)
                finally:
                    await close()
        finally:
            await floor.close()
            await store.close()
    return runs


# --- memory -------------------------------------------------------------------------------------


@dataclass
class MemoryResult:
    points: dict[str, tuple[float, float, int, int]]
    """RSS and USS in MB, the server's threads and etcd's watchers, at each point."""
    peak_rss: float
    to_last: list[float]
    """Per change: seconds from its acknowledgement until the last of the feeds carried it."""
    to_each: dict[str, list[float]]
    """By kind of page, per change and feed: seconds from its acknowledgement until the feed
    carried it."""
    cpu_per_change: float
    """Seconds of the server's CPU per change."""


class RssSampler:
    """The peak RSS of a process, sampled every 10 ms in a thread."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.peak = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self.stopped.wait(0.01):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def __enter__(self) -> RssSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join()


def etcd_watchers(box: Sandbox) -> int:
    """The watchers etcd holds (``etcd_debugging_mvcc_watcher_total``), every client's."""
    with urllib.request.urlopen(f"{box.etcd_url}/metrics", timeout=10) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith(f"{WATCHERS_METRIC} "):
                return int(float(line.split()[1]))
    raise RuntimeError(f"etcd's /metrics has no {WATCHERS_METRIC}")


def wait_for_watchers(box: Sandbox, most: int) -> None:
    """Wait (a while) until etcd holds no more than ``most`` watchers."""
    deadline = time.monotonic() + ARRIVAL_TIMEOUT
    while etcd_watchers(box) > most and time.monotonic() < deadline:
        time.sleep(0.1)


async def bench_memory(box: Sandbox, server: UiServer, settings: Settings,
                       running: list[AppStatus], rounds: int,
                       started: tuple[float, float, int, int]) -> MemoryResult:
    """Open 20 live feeds, then change all 10 running applications ``rounds`` times; close
    them."""
    pid = server.process.pid

    def now() -> tuple[float, float, int, int]:
        return (*memory_mb(pid), psutil.Process(pid).num_threads(), etcd_watchers(box))

    idle = now()
    points = {"started": started, "idle (after the parts above)": idle}
    store = await connect(box)
    queue, user = settings.queues.default_queue, running[0].user
    markers = Markers()
    async with aiohttp.ClientSession() as session:
        feeds: list[Feed] = []

        async def change() -> list[float]:
            """One change of every running application: seconds from the write's
            acknowledgement until each open feed carried it."""
            marker = markers.next()
            waiting = [asyncio.ensure_future(arrive(feed.url, feed.expect(marker), marker))
                       for feed in feeds]
            changed = [live_status(s, number, marker) for number, s in enumerate(running)]
            await store.txn([], [put for status in changed for put in (
                Put(AppKeys(PREFIX, status.app_id).owner, encode(owner_of(status))),
                Put(AppKeys(PREFIX, status.app_id).status, encode(status)))])
            acknowledged = time.time()
            return [at - acknowledged for at in await asyncio.gather(*waiting)]

        try:
            # The application pages first, then the applications pages, each group measured
            # once changes have flowed through it (a feed's watch starts with its first read).
            for what, urls in (
                    (f"{len(running)} application pages' feeds open",
                     [await live_url(session, server, status.app_id) for status in running]),
                    (f"and {len(APPS_FEEDS)} applications pages' feeds",
                     [f"{server.url}apps/live?{query.format(user=user, queue=queue)}"
                      for query in APPS_FEEDS])):
                for url in urls:
                    feeds.append(Feed(session, url))
                    await feeds[-1].open()
                for _ in range(WARM_UP):
                    await change()
                points[what] = now()
            wait_for_quiet()
            server_process = psutil.Process(pid)
            cpu_before = sum(server_process.cpu_times()[:2])
            delays = []
            with RssSampler(pid) as sampler:
                for _ in range(rounds):
                    delays.append(await change())
            cpu = sum(server_process.cpu_times()[:2]) - cpu_before
            points[f"after {rounds} changes to all {len(feeds)}"] = now()
        finally:
            for feed in feeds:
                await feed.close()
    try:
        # A feed's handler learns that its viewer left when it next sends: one more change.
        feeds.clear()
        await change()
        await asyncio.to_thread(wait_for_watchers, box, idle[3])
        points["the feeds closed, one more change"] = now()
    finally:
        await store.close()
    return MemoryResult(points, sampler.peak / 1024 / 1024, [max(d) for d in delays],
                        {"application page": [x for d in delays for x in d[:len(running)]],
                         "applications page": [x for d in delays for x in d[len(running):]]},
                        cpu / rounds)


# --- report -------------------------------------------------------------------------------------


def report_pages(runs: PageRuns, breakdown: dict[str, tuple[float, float]],
                 with_running: PageRuns, history_rows: int, big_page: PageRuns,
                 big: tuple[int, int]) -> None:
    table = Table(title=f"GET over one keep-alive connection, {history_rows:,} applications in "
                  f"the history ({len(runs.latencies[FLOOR])} requests each, ms)",
                  title_justify="left")
    for column in ("GET", "rows / matching", "bytes", "p50", "p99", "p50 / floor",
                   "server CPU ms/req", "History.query p50", "find_apps p50"):
        table.add_column(column, justify="left" if column == "GET" else "right")
    floor = statistics.median(runs.latencies[FLOOR])

    def row(name: str, source: PageRuns, label: str) -> None:
        latencies = source.latencies[name]
        query, found = breakdown.get(name, (None, None))
        table.add_row(label, f"{source.rows[name]} / {source.total[name]:,}"
                      if name != FLOOR else "", f"{source.size[name]:,}",
                      ms(statistics.median(latencies)), ms(percentile(latencies, 0.99)),
                      f"{statistics.median(latencies) / floor:.1f}×" if name != FLOOR else "",
                      f"{source.server_cpu[name] / len(latencies) * 1000:.2f}",
                      ms(query) if query is not None else "",
                      ms(found) if found is not None else "")

    for name in runs.latencies:
        row(name, runs, name)
    first = next(iter(with_running.latencies))
    row(first, with_running, f"{first}, {LIVE_APPS} running in etcd")
    row(BIG_PAGE, big_page, f"an application page: {big[0]} executors, {BIG_PAST} past "
                            f"attempts each, {big[1]:,} events")
    console.print(table)
    console.print("Other processes' share of the CPU during the blocks: max "
                  f"{max([*runs.others_share, *with_running.others_share]):.0%}", style="dim")
    page_p50 = statistics.median(runs.latencies[first]) * 1000
    console.print(f"/apps page 1 p50 {page_p50:.1f} ms (target ≤ {PAGE_TARGET_MS:g} ms: "
                  f"{verdict(page_p50 <= PAGE_TARGET_MS, f'{page_p50 - PAGE_TARGET_MS:.1f} ms')})")
    big_p50 = statistics.median(big_page.latencies[BIG_PAGE]) * 1000
    console.print(f"application page of {big[0]} executors p50 {big_p50:.1f} ms (target "
                  f"≤ {BIG_TARGET_MS:g} ms: "
                  f"{verdict(big_p50 <= BIG_TARGET_MS, f'{big_p50 - BIG_TARGET_MS:.1f} ms')})")


def report_live(runs: dict[str, LiveRun]) -> None:
    table = Table(title="etcd write → the change arrives (ms)", title_justify="left")
    for column in ("receiver", "writes", "after ack: median", "p99", "max",
                   "after write start: median"):
        table.add_column(column, justify="left" if column == "receiver" else "right")
    for series, run in runs.items():
        for kind, label in (("ui", series), ("floor", "  floor: raw etcd watch, same writes")):
            after_ack = run.after_ack[kind]
            table.add_row(label, str(len(after_ack)), ms(statistics.median(after_ack)),
                          ms(percentile(after_ack, 0.99)), ms(max(after_ack)),
                          ms(statistics.median(run.after_write[kind])))
    console.print(table)
    for series, run in runs.items():
        median_ms = statistics.median(run.after_ack["ui"]) * 1000
        console.print(f"{series}: median {median_ms:.1f} ms (target ≤ {LIVE_TARGET_MS:g} ms: "
                      f"{verdict(median_ms <= LIVE_TARGET_MS, f'{median_ms - 200:.1f} ms')})")


def report_memory(result: MemoryResult) -> None:
    table = Table(title="The server's memory (primus server: API and UI in one process)",
                  title_justify="left")
    for column in ("when", "RSS MB", "USS MB", "server threads", "etcd watchers"):
        table.add_column(column, justify="left" if column == "when" else "right")
    for name, (rss, uss, threads, watchers) in result.points.items():
        table.add_row(name, f"{rss:.1f}", f"{uss:.1f}", str(threads), str(watchers))
    table.add_row("peak while the changes flowed (RSS every 10 ms)", f"{result.peak_rss:.1f}",
                  "", "", "")
    console.print(table)
    console.print(f"{len(result.to_last)} changes to all feeds: write acknowledged → the last "
                  f"feed carried it median {ms(statistics.median(result.to_last))} ms, max "
                  f"{ms(max(result.to_last))} ms; server CPU "
                  f"{result.cpu_per_change * 1000:.1f} ms per change; each feed: " + "; ".join(
                      f"{kind} median {ms(statistics.median(delays))} ms, p99 "
                      f"{ms(percentile(delays, 0.99))} ms"
                      for kind, delays in result.to_each.items()))


# --- main ---------------------------------------------------------------------------------------


async def measure(box: Sandbox, args: argparse.Namespace) -> None:
    settings = load_settings(env=box.env)
    hello = await archived_hello(box, settings, run_hello(box))
    filled = await fill_history(settings, hello, args.history)
    console.print(f"history: {args.history + 1:,} applications archived in {filled:.0f}s "
                  f"({len(hello.kvs)} keys, {sum(len(kv.value) for kv in hello.kvs):,} bytes "
                  f"each)", style="dim")
    with ui_server(box) as server:
        started = (*memory_mb(server.process.pid),
                   psutil.Process(server.process.pid).num_threads(), etcd_watchers(box))
        runs = await time_pages(box, server, PAGES, args.requests)
        breakdown = await page_breakdown(box, settings,
                                         {k: v for k, v in PAGES.items() if k != FLOOR},
                                         max(args.requests // 4, 10))
        running = await record_running_apps(box, settings, hello, LIVE_APPS)
        first = next(iter(PAGES))
        with_running = await time_pages(box, server, {first: PAGES[first]},
                                        max(args.requests // 2, BLOCKS))
        big = await record_big_app(box, settings, hello, args.big_executors, args.big_events)
        big_page = await time_pages(box, server, {BIG_PAGE: f"apps/{big}"},
                                    max(args.requests // 4, BLOCKS))
        await forget_app(box, big)  # the parts after it measure what they did before it
        live = await bench_live(box, server, running, args.writes, not args.no_browser)
        memory = await bench_memory(box, server, settings, running, args.rounds, started)
    report_pages(runs, breakdown, with_running, args.history + 1, big_page,
                 (args.big_executors, args.big_events))
    report_live(live)
    report_memory(memory)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=int, default=10_000,
                        help="archived copies of hello written to the history (default: "
                             "10000)")
    parser.add_argument("--requests", type=int, default=200,
                        help="GETs of each page (default: 200)")
    parser.add_argument("--writes", type=int, default=50,
                        help="timed writes of each live series (default: 50)")
    parser.add_argument("--rounds", type=int, default=20,
                        help="changes flowing to the 20 open feeds (default: 20)")
    parser.add_argument("--big-executors", type=int, default=BIG_EXECUTORS,
                        help=f"executors of the one large application whose page is timed "
                             f"(default: {BIG_EXECUTORS})")
    parser.add_argument("--big-events", type=int, default=BIG_EVENTS,
                        help=f"its events (default: {BIG_EVENTS})")
    parser.add_argument("--no-browser", action="store_true",
                        help="leave out the series in Chromium")
    parser.add_argument("--postgres", metavar="URL",
                        help="the history in this (empty) PostgreSQL database instead of a "
                             "SQLite file")
    args = parse_args(parser, argv, history=2, requests=1, writes=1, rounds=1, big_executors=8,
                      big_events=20)
    if args.quick:
        # A smoke run beside the test suite on a loaded machine: a write slow to arrive is
        # not its concern (its figures mean nothing), one that never arrives still is.
        global ARRIVAL_TIMEOUT  # noqa: PLW0603 - the quick run's one setting
        ARRIVAL_TIMEOUT = 60.0
    began = time.monotonic()
    console.print(f"[bold]Primus web UI[/] — {os.cpu_count()} cores, Python "
                  f"{platform.python_version()}, {etcd_version()}; UI plaintext on loopback, "
                  f"etcd http on loopback")
    with sandbox() as box:
        url = args.postgres or f"sqlite:///{box.root / 'history.db'}"
        (box.root / "site.yaml").write_text(json.dumps({"history": {"url": url}}))
        console.print(f"history database: {'PostgreSQL' if args.postgres else url}",
                      style="dim")
        asyncio.run(measure(box, args))
    console.print(f"whole benchmark {time.monotonic() - began:.0f}s", style="dim")
    return 0


if __name__ == "__main__":
    sys.exit(main())
