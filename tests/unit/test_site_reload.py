"""A running server's site file changed: what it takes at once (notify:), what waits for its
restart, and a file that does not read (primus.server.site_reload; the server itself in
tests/integration/test_notify.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import cast

import aiohttp
import pytest

from primus.config.notify import NotifyPolicy, SiteWebhook
from primus.config.site import Settings, load_settings
from primus.config.site_changes import SITE_KEYS, changed_settings, watched_site_file
from primus.server.notify import Notifier
from primus.server.site_reload import SiteReloader
from primus.state.records import Delivery, DeliveryTarget
from primus.store.api import Coordinator


class Server:
    """What a reloader tells its server: the settings it uses, what it says."""

    def __init__(self, site: Path) -> None:
        self.env = {"PRIMUS_CONF": str(site), "PRIMUS_HOME": str(site.parent / "home")}
        self.reads = 0
        self.used: list[Settings] = []
        self.said: list[str] = []
        self.reloader = SiteReloader(site, self.read(), self.read, self.used.append,
                                     self.said.append)
        self.reads = 0

    def read(self) -> Settings:
        self.reads += 1
        return load_settings(env=self.env)


def hook(url: str, secret: Path) -> dict[str, object]:
    return {"url": url, "secret_file": str(secret)}


@pytest.fixture
def site(tmp_path: Path) -> Path:
    path = tmp_path / "site.yaml"
    path.write_text(json.dumps({"notify": {"webhooks": [hook("http://a.example/", path)]}}))
    return path


def test_a_changed_notify_is_used_at_once_and_nothing_waits(site):
    server = Server(site)
    site.write_text(json.dumps({"notify": {"webhooks": [hook("http://b.example/", site)],
                                           "attempts": 3}}))
    server.reloader.check()
    [used] = server.used
    assert [h.url for h in used.notify.webhooks] == ["http://b.example/"]
    assert used.notify.attempts == 3
    assert server.said == []


def test_a_changed_queue_waits_for_the_restart_and_the_server_says_so_until_it_is_undone(site):
    before = site.read_text()
    server = Server(site)
    site.write_text(json.dumps({**json.loads(before), "queues": {"default": {}, "b": {}},
                                "history": {"retention": "1d"}}))
    server.reloader.check()
    assert server.used == []
    [said] = server.said
    assert said == (f"the site file {site} changed queues (queues, default_queue, budget), "
                    f"history.retention since the server started: that takes effect when it "
                    f"restarts (on the embedded default: `primus server stop`, then `primus "
                    f"server start`)")
    site.write_text(before + "\n")
    server.reloader.check()
    assert server.said == [said, ""]


def test_a_changed_file_that_does_not_read_changes_nothing_and_is_said(site):
    server = Server(site)
    site.write_text(json.dumps({"notify": {"webhooks": "http://b.example/"}}))
    server.reloader.check()
    assert server.used == []
    [said] = server.said
    assert said.startswith(f"the site file {site} changed and does not read; the server goes "
                           f"on with the settings it had: {site}: notify.webhooks")


def test_an_unchanged_file_is_read_at_the_first_look_only_and_changes_nothing(site):
    server = Server(site)
    for _ in range(3):
        server.reloader.check()
    assert server.reads == 1
    assert server.used == [] and server.said == []


def test_a_change_between_the_servers_start_and_the_reloaders_is_taken_at_the_first_look(site):
    """The server reads its site file, then starts serving (and `primus server start` returns),
    then starts its reloader: a file written in between is the reloader's to take."""
    env = {"PRIMUS_CONF": str(site), "PRIMUS_HOME": str(site.parent / "home")}
    loaded = load_settings(env=env)
    site.write_text(json.dumps({"notify": {"webhooks": [hook("http://b.example/", site)]}}))
    used: list[Settings] = []
    reloader = SiteReloader(site, loaded, lambda: load_settings(env=env), used.append,
                            lambda said: None)
    reloader.check()
    [now] = used
    assert [h.url for h in now.notify.webhooks] == ["http://b.example/"]


def test_a_default_site_file_that_appears_later_is_watched_and_none_with_primus_conf_dash():
    settings = Settings(home=Path("/h"))
    assert watched_site_file(settings, {}) == Path("/etc/primus/defaults.yaml")
    assert watched_site_file(settings, {"PRIMUS_CONF": "-"}) is None
    assert watched_site_file(dataclasses.replace(settings, source=Path("/s.yaml")),
                             {"PRIMUS_CONF": "/s.yaml"}) == Path("/s.yaml")


def test_every_setting_is_named_as_the_site_file_names_it():
    named = {f.name for f in dataclasses.fields(Settings)} - {"source"}
    assert set(SITE_KEYS) == named
    settings = Settings(home=Path("/h"))
    assert changed_settings(settings, dataclasses.replace(settings, prefix="/p",
                                                          source=Path("/s"))) == ["prefix"]


async def test_a_delivery_queued_before_the_change_is_signed_with_its_webhooks_key_now_or_not_sent(
        tmp_path):
    """A delivery names its site webhook by index (``site:<n>``); the site file may since have
    reordered its webhooks or left it out."""
    keys = {name: tmp_path / f"{name}.key" for name in ("a", "b")}
    for name, path in keys.items():
        path.write_text(f"key-{name}\n")
    a, b = (SiteWebhook(url=f"http://{name}.example/", secret_file=str(keys[name]))
            for name in ("a", "b"))
    settings = Settings(home=tmp_path / "home", notify=NotifyPolicy(webhooks=(a, b)))
    notifier = Notifier(cast(Coordinator, None), settings)  # sends nothing: no store needed
    to_b = DeliveryTarget(url=b.url, key="site:1")
    delivery = Delivery(id="1", kind="app_state", body="{}", targets=[to_b], next_at=0,
                        created=0)
    notifier.use(NotifyPolicy(webhooks=(b, a)))
    assert notifier._key(to_b, "") == b"key-b"
    notifier.use(NotifyPolicy(webhooks=(a,)))
    async with aiohttp.ClientSession() as session:
        said = await notifier._post(session, to_b, delivery, b"{}")
    assert said == "the site's notify: no longer names it"
