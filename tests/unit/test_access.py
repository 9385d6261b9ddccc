"""Identifying callers, deciding what they may do, and reading the tokens file."""

from __future__ import annotations

from pathlib import Path

import pytest

from primus.client.access import (
    Action,
    AuthConfig,
    Identity,
    TokenEntry,
    bearer_token,
    identify,
    load_tokens,
    may,
    may_scrape,
    refusal,
    token_digest,
    unsafe_site_refusal,
)
from primus.config.accounts import Trust
from primus.config.loader import SpecError
from primus.config.site import ReadAccess, load_settings

CONFIG = AuthConfig(tokens=(TokenEntry("alice", token_digest("a-token")),
                            TokenEntry("root", token_digest("r-token"))),
                    admins=frozenset({"root"}), certificate_users={"primus": "carol"})


def test_anyone_authenticated_may_read_and_submit():
    for action in (Action.READ, Action.SUBMIT):
        assert may(Identity("alice"), action, owner="bob")


def test_only_the_owner_or_an_admin_may_change_an_application():
    assert may(Identity("bob"), Action.CHANGE, owner="bob")
    assert may(Identity("root", admin=True), Action.CHANGE, owner="bob")
    assert not may(Identity("alice"), Action.CHANGE, owner="bob")


def test_refusal_names_who_what_whose_and_who_may():
    message = refusal(Identity("alice"), "kill", "train-1", "bob")
    assert message == ("alice may not kill application train-1 owned by bob; "
                       "its owner and admins may")


def test_only_the_owner_or_an_admin_may_read_an_applications_logs_by_default():
    assert may(Identity("bob"), Action.READ_PRIVATE, owner="bob")
    assert may(Identity("root", admin=True), Action.READ_PRIVATE, owner="bob")
    assert not may(Identity("alice"), Action.READ_PRIVATE, owner="bob")
    assert not may(Identity("alice"), Action.READ_PRIVATE, "bob", ReadAccess.OWNER)


def test_a_site_open_to_everyone_lets_anyone_read_logs_and_still_only_owners_change():
    assert may(Identity("alice"), Action.READ_PRIVATE, "bob", ReadAccess.EVERYONE)
    assert not may(Identity("alice"), Action.CHANGE, "bob", ReadAccess.EVERYONE)


def test_a_read_refusal_says_the_site_keeps_logs_to_their_owner():
    message = refusal(Identity("bob"), "read the logs of", "train-1", "alice",
                      Action.READ_PRIVATE)
    assert message.startswith("bob may not read the logs of application train-1 owned by "
                              "alice; its owner and admins may")
    assert "server.read_access is owner" in message


TWO_USERS = AuthConfig(tokens=(TokenEntry("alice", token_digest("a")),
                               TokenEntry("root", token_digest("r"))),
                       admins=frozenset({"root"}))
TOKENS_FILE = Path("/etc/primus/tokens.yaml")
SITE_FILE = Path("/etc/primus/defaults.yaml")


def unsafe(config: AuthConfig, accounts: bool = False, trust: Trust = Trust.OWNER_ACCOUNTS,
           client_ca: Path | None = None) -> str | None:
    return unsafe_site_refusal(config, TOKENS_FILE, client_ca, SITE_FILE, accounts, trust)


def test_a_server_of_two_users_without_accounts_is_refused_naming_the_file_users_and_ways_out():
    message = unsafe(TWO_USERS)
    assert message is not None
    assert "the tokens file /etc/primus/tokens.yaml names users alice, root" in message
    assert "(alice not admins)" in message
    assert "the site file /etc/primus/defaults.yaml has no accounts:" in message
    assert "run as this server's own account" in message
    assert "accounts:" in message and "trust: one-account" in message


def test_one_user_who_is_no_admin_is_refused_too():
    assert unsafe(AuthConfig(tokens=(TokenEntry("alice", token_digest("a")),))) is not None


def test_two_admins_are_refused_one_admin_alone_is_not():
    admins = AuthConfig(tokens=TWO_USERS.tokens, admins=frozenset({"alice", "root"}))
    assert unsafe(admins) is not None
    assert unsafe(AuthConfig(tokens=TWO_USERS.tokens[1:], admins=frozenset({"root"}))) is None


def test_accounts_or_trust_one_account_let_a_server_of_many_users_start():
    assert unsafe(TWO_USERS, accounts=True) is None
    assert unsafe(TWO_USERS, trust=Trust.ONE_ACCOUNT) is None


def test_scrapers_are_no_users_of_a_server():
    config = AuthConfig(tokens=(*TWO_USERS.tokens[1:], TokenEntry("prom", token_digest("p"))),
                        admins=frozenset({"root"}), scrapers=frozenset({"prom"}))
    assert unsafe(config) is None


def test_a_client_ca_makes_users_of_everyone_it_signs_for_and_is_refused():
    message = unsafe(AuthConfig(admins=frozenset({"primus"})), client_ca=Path("/ca.pem"))
    assert message is not None and "the client CA /ca.pem" in message
    assert unsafe(AuthConfig(), client_ca=Path("/ca.pem"), trust=Trust.ONE_ACCOUNT) is None


def test_the_embedded_default_serves_its_one_local_admin():
    embedded = AuthConfig(tokens=(TokenEntry("me", token_digest("ui")),),
                          admins=frozenset({"me"}), certificate_users={"primus": "me"})
    assert unsafe_site_refusal(embedded, None, None, None, False, Trust.OWNER_ACCOUNTS) is None
    assert unsafe_site_refusal(AuthConfig(open_as="svc"), None, None, None, False,
                               Trust.OWNER_ACCOUNTS) is None


def test_a_known_token_identifies_its_user_and_admins_are_marked():
    assert identify(CONFIG, [], "a-token") == Identity("alice")
    assert identify(CONFIG, [], "r-token") == Identity("root", admin=True)


def test_no_token_or_an_unknown_one_identifies_nobody():
    assert identify(CONFIG, [], None) is None
    assert identify(CONFIG, [], "guessed") is None


def test_a_certificate_identifies_its_common_name_mapped_through_certificate_users():
    assert identify(CONFIG, ["dave"], None) == Identity("dave")
    assert identify(CONFIG, ["primus"], "a-token") == Identity("carol")


def test_with_nothing_configured_every_caller_is_the_servers_account_as_admin():
    assert identify(AuthConfig(open_as="svc"), [], None) == Identity("svc", admin=True)


def test_bearer_token_is_read_from_the_authorization_value():
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer  abc ") == "abc"
    assert bearer_token("Basic abc") is None
    assert bearer_token("Bearer ") is None
    assert bearer_token(None) is None


def test_tokens_file_gives_digests_and_admins(tmp_path):
    path = tmp_path / "tokens.yaml"
    digest = token_digest("t")
    path.write_text(f"tokens:\n  - user: alice\n    sha256: {digest}\nadmins: [alice]\n")
    assert load_tokens(path) == AuthConfig((TokenEntry("alice", digest),), frozenset({"alice"}))


@pytest.mark.parametrize(("text", "field", "words"), [
    ("- a\n", "", "must be a mapping"),
    ("users: []\n", "users", "unknown key; allowed: admins, scrapers, tokens"),
    ("tokens: {}\n", "tokens", "must be a list"),
    ("tokens: [alice]\n", "tokens[0]", "must be a mapping"),
    ("tokens:\n  - user: alice\n", "tokens[0].sha256", "is required"),
    ("tokens:\n  - user: alice\n    sha256: " + "0" * 64 + "\n    token: x\n",
     "tokens[0].token", "unknown key"),
    ("tokens:\n  - user: 'al ice'\n    sha256: " + "0" * 64 + "\n", "tokens[0].user",
     "must be a user name"),
    ("tokens:\n  - user: alice\n    sha256: my-secret-token\n", "tokens[0].sha256",
     "64 lowercase hex digits"),
    ("tokens:\n  - {user: a, sha256: '" + "0" * 64 + "'}\n  - {user: b, sha256: '" + "0" * 64
     + "'}\n", "tokens[1].sha256", "listed twice"),
    ("admins: root\n", "admins", "must be a list"),
    ("admins: [1]\n", "admins[0]", "must be a user name"),
    ("scrapers: prometheus\n", "scrapers", "must be a list"),
    ("admins: [root]\nscrapers: [root]\n", "scrapers", "must not name an admin"),
])
def test_bad_tokens_file_is_refused_naming_file_and_field(tmp_path, text, field, words):
    path = tmp_path / "tokens.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as refused:
        load_tokens(path)
    message = str(refused.value)
    assert str(path) in message and words in message
    assert f"{path}: {field}:" in message if field else message.startswith(str(path))


def test_a_scrapers_token_reads_the_metrics_and_identifies_nobody_on_the_api_or_ui():
    config = AuthConfig(tokens=(*CONFIG.tokens, TokenEntry("prometheus", token_digest("p"))),
                        admins=CONFIG.admins, scrapers=frozenset({"prometheus"}))
    assert may_scrape(config, "p")
    assert identify(config, [], "p") is None
    assert may_scrape(config, "r-token"), "an admin may read the metrics"
    assert not may_scrape(config, "a-token"), "a user who is neither may not"
    assert not may_scrape(config, None) and not may_scrape(config, "unknown")
    assert may_scrape(AuthConfig(open_as="svc"), None), "nobody identified: everyone may"


def test_tokens_file_lists_scrapers(tmp_path):
    path = tmp_path / "tokens.yaml"
    digest = token_digest("p")
    path.write_text(f"tokens:\n  - user: prometheus\n    sha256: {digest}\n"
                    "scrapers: [prometheus]\n")
    assert load_tokens(path).scrapers == {"prometheus"}


def test_a_token_pasted_in_place_of_its_digest_is_not_repeated_in_the_error(tmp_path):
    path = tmp_path / "tokens.yaml"
    path.write_text("tokens:\n  - user: alice\n    sha256: my-secret-token\n")
    with pytest.raises(SpecError) as refused:
        load_tokens(path)
    assert "my-secret-token" not in str(refused.value)


def test_unreadable_tokens_file_is_refused_naming_it(tmp_path):
    with pytest.raises(SpecError, match="missing.yaml"):
        load_tokens(tmp_path / "missing.yaml")


def settings_of(tmp_path, text):
    site = tmp_path / "defaults.yaml"
    site.write_text(text)
    return site, lambda: load_settings(env={"PRIMUS_CONF": str(site),
                                            "PRIMUS_HOME": str(tmp_path)})


def test_site_defaults_say_who_may_read_and_whom_to_trust(tmp_path):
    _, load = settings_of(tmp_path, "trust: one-account\nserver:\n  read_access: everyone\n")
    settings = load()
    assert (settings.trust, settings.server_read_access) == (Trust.ONE_ACCOUNT,
                                                             ReadAccess.EVERYONE)
    _, load = settings_of(tmp_path, "{}\n")
    assert (load().trust, load().server_read_access) == (Trust.OWNER_ACCOUNTS,
                                                         ReadAccess.OWNER)


def test_site_defaults_set_the_largest_submission_through_the_server(tmp_path):
    _, load = settings_of(tmp_path, "server:\n  max_upload: 256Mi\n")
    assert load().server_max_upload == 256 << 20


def test_site_defaults_name_the_servers_tokens_file_address_and_ca(tmp_path):
    _, load = settings_of(tmp_path, "server:\n  tokens: /etc/primus/api-tokens.yaml\n"
                                    "  address: primus.example:7447\n  ca_cert: /etc/ca.pem\n")
    settings = load()
    assert settings.server_tokens == "/etc/primus/api-tokens.yaml"
    assert settings.server_max_upload == 64 << 20
    assert (settings.server_address, settings.server_ca_cert) == ("primus.example:7447",
                                                                  "/etc/ca.pem")


@pytest.mark.parametrize(("text", "field", "words"), [
    ("server: [a]\n", "server", "must be a mapping"),
    ("server:\n  token: x\n", "server.token",
     "unknown key; allowed: address, ca_cert, max_upload, read_access, tokens"),
    ("server:\n  read_access: all\n", "server.read_access", "must be one of owner, everyone"),
    ("trust: everyone\n", "trust", "must be one of owner-accounts, one-account"),
    ("trust: one-account\naccounts: {}\n", "trust", "must not be one-account beside accounts:"),
    ("server:\n  tokens: 3\n", "server.tokens", "must be the path of the API server's tokens"),
    ("server:\n  address: ''\n", "server.address", "must be the API server's HOST:PORT"),
    ("server:\n  max_upload: 2Gi\n", "server.max_upload", "at most 1Gi"),
    ("server:\n  max_upload: lots\n", "server.max_upload", "(bytes, or a size such as 256Mi)"),
])
def test_bad_server_section_of_the_site_defaults_names_file_and_field(tmp_path, text, field,
                                                                     words):
    site, load = settings_of(tmp_path, text)
    with pytest.raises(SpecError) as refused:
        load()
    assert f"{site}: {field}:" in str(refused.value) and words in str(refused.value)
