"""Which account an application runs as, and its etcd identity: the pure decisions
(``primus.config.accounts``, ``primus.client.identities``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from primus.client.identities import (
    AppIdentity,
    app_identity,
    identity_grants,
    owner_settings,
    stale_identities,
)
from primus.config.accounts import AccountFacts, AccountPolicy, read_policy, refusal
from primus.config.loader import SpecError
from primus.config.site import load_settings
from primus.state.keys import identity_name, identity_start

POLICY = AccountPolicy(map={"ml-bot": "mlbot"})
ALICE = AccountFacts(uid=1001, groups=("alice", "primus-users"), home="/home/alice")


def test_a_user_runs_as_the_same_name_unless_the_map_says_otherwise():
    assert POLICY.account_of("alice") == "alice"
    assert POLICY.account_of("ml-bot") == "mlbot"


@pytest.mark.parametrize(("account", "facts", "why"), [
    ("alice", ALICE, None),
    ("root", AccountFacts(0, ("root", "primus-users"), "/root"), "account 'root' is banned"),
    ("primus", ALICE, "account 'primus' is banned"),
    ("Bad Name", ALICE, "is not a valid account name"),
    ("alice", None, "account 'alice' does not exist on gpu01"),
    ("alice", dataclasses.replace(ALICE, uid=999),
     "has uid 999 on gpu01, under accounts.min_uid 1000"),
    ("alice", dataclasses.replace(ALICE, groups=("alice",)),
     "is not in group 'primus-users' on gpu01"),
])
def test_refusal_names_the_user_the_account_the_host_and_the_rule(account, facts, why):
    found = refusal("alice", account, POLICY, facts, "gpu01")
    if why is None:
        assert found is None
    else:
        assert found is not None and why in found and found.startswith("user 'alice'")


@pytest.mark.parametrize(("text", "field", "allowed"), [
    ("accounts: [alice]", "accounts", "must be a mapping"),
    ("accounts: {owner: x}", "accounts.owner", "unknown key"),
    ("accounts: {map: {alice: 'Bad Name'}}", "accounts.map.alice", "Unix account name"),
    ("accounts: {min_uid: 0}", "accounts.min_uid", "integer >= 1"),
    ("accounts: {banned: [bin]}", "accounts.banned", "must name root"),
    ("accounts: {etcd_cert: /c.crt}", "accounts.etcd_key", "go together"),
])
def test_a_bad_accounts_section_names_the_file_and_the_field(tmp_path, text, field, allowed):
    site = tmp_path / "site.yaml"
    site.write_text(text + "\n")
    with pytest.raises(SpecError) as caught:
        load_settings(env={"PRIMUS_CONF": str(site)})
    message = str(caught.value)
    assert str(site) in message and field in message and allowed in message


def test_without_accounts_applications_run_as_whoever_submits_them(tmp_path):
    assert load_settings(env={"PRIMUS_CONF": "-", "PRIMUS_HOME": str(tmp_path)}).accounts \
        is None


def test_read_policy_keeps_what_the_file_says():
    refused = []
    policy = read_policy({"map": {"a": "b"}, "min_uid": 500, "banned": ["root", "x"],
                          "group": "ml", "etcd_cert": "/c", "etcd_key": "/k"},
                         lambda *problem: refused.append(problem))  # type: ignore[arg-type]
    assert not refused
    assert policy == AccountPolicy(map={"a": "b"}, min_uid=500,
                                   banned=frozenset({"root", "x"}), group="ml",
                                   etcd_cert="/c", etcd_key="/k")


def test_an_identity_reads_its_own_application_and_writes_only_its_run_time_keys():
    grants = identity_grants("/primus", "app-1")
    reads = {(g.key, g.prefix) for g in grants if not g.write}
    writes = {(g.key, g.prefix) for g in grants if g.write}
    assert reads == {("/primus/apps/app-1/", True), ("/primus/scheduler/config", False),
                     ("/primus/server/am-keeper", False)}
    app = "/primus/apps/app-1/"
    assert writes == {
        *((app + key, False) for key in ("status", "am/leader", "cluster", "blacklist",
                                         "hang")),
        *((app + start, True) for start in ("executors/", "events/", "stacks/",
                                            "savepoints/", "data/")),
        ("/primus/scheduler/apps/app-1/", True)}

    def writable(key: str) -> bool:
        return any(key == g.key or g.prefix and key.startswith(g.key)
                   for g in grants if g.write)

    # The server's record and people's requests are under no write grant.
    for key in ("owner", "spec", "hosts", "kill", "suspend", "roles/w/desired",
                "sources/s/000000000001", "changes/000000000001", "notifications/x",
                "status-x", "ownerx"):
        assert not writable(app + key), key
    assert identity_name("/primus", "app-1") == "primus.app.app-1"
    assert identity_start("/team/a") == "team.a.app."


def test_the_password_is_derived_from_the_server_key_and_never_shown(tmp_path: Path):
    settings = load_settings(env={"PRIMUS_CONF": "-", "PRIMUS_HOME": str(tmp_path)})
    first, again = app_identity(settings, "app-1"), app_identity(settings, "app-1")
    assert first == again and first.password != app_identity(settings, "app-2").password
    assert len(first.password) >= 40 and first.password not in repr(first)
    key = tmp_path / "server" / "identity.key"
    assert key.stat().st_mode & 0o777 == 0o600


def test_an_owners_environment_carries_the_identity_instead_of_primus_credentials():
    settings = load_settings(env={
        "PRIMUS_CONF": "-", "PRIMUS_HOME": "/h", "PRIMUS_ETCD": "https://e:2379",
        "PRIMUS_ETCD_CACERT": "/ca", "PRIMUS_ETCD_CERT": "/primus.crt",
        "PRIMUS_ETCD_KEY": "/primus.key", "PRIMUS_ETCD_USER": "primus",
        "PRIMUS_ETCD_PASSWORD": "secret"})
    policy = AccountPolicy(etcd_cert="/apps.crt", etcd_key="/apps.key")
    owned = owner_settings(settings, AppIdentity("primus.app.a", "pw"), policy).to_env()
    assert owned["PRIMUS_ETCD_USER"] == "primus.app.a" and owned["PRIMUS_ETCD_KEY"] == \
        "/apps.key" and "secret" not in owned.values()
    assert owned["PRIMUS_ETCD_CACERT"] == "/ca" and owned["PRIMUS_ETCD"] == "https://e:2379"
    assert not {"/primus.crt", "/primus.key", "primus"} & set(owned.values())
    bare = owner_settings(settings, AppIdentity("primus.app.a", "pw"), AccountPolicy()).to_env()
    assert "PRIMUS_ETCD_CERT" not in bare and "PRIMUS_ETCD_KEY" not in bare


def test_ended_applications_lose_their_identity_at_once_and_missing_ones_at_the_second_look():
    start = "primus.app."
    names = [start + "live", start + "ended", start + "gone", start + "new"]
    apps = {"live": True, "ended": False}
    remove, unclaimed = stale_identities(names, start, apps, {start + "gone"})
    assert remove == [start + "ended", start + "gone"]
    assert unclaimed == {start + "new"}  # made just before its application is recorded
    remove, _ = stale_identities([start + "new"], start, {}, unclaimed)
    assert remove == [start + "new"]
