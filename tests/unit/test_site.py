"""Site settings: the site defaults file, the environment and ``--etcd``, in that order."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from primus.config.health import HealthPolicy
from primus.config.loader import SpecError
from primus.config.queues import Budget
from primus.config.resources import ResourcePolicy
from primus.config.site import Settings, load_settings

Load = Callable[..., Settings]

FULL_SITE = """
    home: /srv/primus
    prefix: /site
    etcd:
      endpoints: [etcd1:2379, etcd2:2379]
      ca_cert: /tls/ca.pem
      cert: /tls/client.pem
      key: /tls/client.key
      user: primus
      password_file: {password_file}
      request_timeout: 2.5
    job:
      policy: {{register_timeout: 300}}
"""


@pytest.fixture
def site_path(tmp_path: Path) -> Path:
    return tmp_path / "defaults.yaml"


@pytest.fixture
def load(site_path: Path) -> Load:
    """``load(site_text, etcd_endpoints, **env)``: settings from only that site file and env."""
    def load_with(site: str = "", etcd_endpoints: str | None = None, **env: str) -> Settings:
        site_path.write_text(textwrap.dedent(site))
        return load_settings(etcd_endpoints, env={"PRIMUS_CONF": str(site_path), **env})
    return load_with


@pytest.fixture
def password_file(tmp_path: Path) -> Path:
    path = tmp_path / "etcd-password"
    path.write_text("s3cret-from-file\n")
    return path


@pytest.fixture
def full_site(password_file: Path) -> str:
    """A site file that sets everything, its password in ``password_file``."""
    return FULL_SITE.format(password_file=password_file)


# --- etcd -------------------------------------------------------------------------------------


def test_no_etcd_configured_means_the_embedded_etcd(load):
    assert load().etcd is None


def test_site_file_endpoints_are_used(load):
    assert load("etcd: {endpoints: [a:1, b:2]}").etcd.endpoints == ("a:1", "b:2")


def test_primus_etcd_beats_the_site_file(load):
    settings = load("etcd: {endpoints: [a:1]}", PRIMUS_ETCD="c:3, d:4")

    assert settings.etcd.endpoints == ("c:3", "d:4")


def test_etcd_option_beats_primus_etcd(load):
    settings = load("etcd: {endpoints: [a:1]}", "e:5", PRIMUS_ETCD="c:3")

    assert settings.etcd.endpoints == ("e:5",)


def test_tls_paths_user_and_timeout_are_read_from_the_site_file(load, full_site):
    etcd = load(full_site).etcd

    assert (etcd.ca_cert, etcd.cert, etcd.key, etcd.user, etcd.request_timeout) == (
        "/tls/ca.pem", "/tls/client.pem", "/tls/client.key", "primus", 2.5)


def test_tls_paths_and_user_from_the_environment_beat_the_site_file(load, full_site):
    etcd = load(full_site, PRIMUS_ETCD_CACERT="/env/ca.pem", PRIMUS_ETCD_CERT="/env/c.pem",
                PRIMUS_ETCD_KEY="/env/c.key", PRIMUS_ETCD_USER="alice").etcd

    assert (etcd.ca_cert, etcd.cert, etcd.key, etcd.user) == (
        "/env/ca.pem", "/env/c.pem", "/env/c.key", "alice")


def test_password_is_read_from_the_environment(load):
    settings = load(PRIMUS_ETCD="a:1", PRIMUS_ETCD_PASSWORD="s3cret-from-env")

    assert settings.etcd.password == "s3cret-from-env"


def test_password_is_read_from_the_site_password_file(load, full_site):
    assert load(full_site).etcd.password == "s3cret-from-file"


def test_password_from_the_environment_beats_the_password_file(load, full_site):
    settings = load(full_site, PRIMUS_ETCD_PASSWORD="s3cret-from-env")

    assert settings.etcd.password == "s3cret-from-env"


def test_repr_of_the_etcd_settings_never_shows_the_password(load, full_site):
    settings = load(full_site)

    assert "s3cret" not in repr(settings.etcd)
    assert "s3cret" not in repr(settings)


# --- Home and prefix --------------------------------------------------------------------------


def test_home_and_prefix_are_read_from_the_site_file(load, full_site):
    settings = load(full_site)

    assert (settings.home, settings.prefix) == (Path("/srv/primus"), "/site")


def test_primus_home_and_primus_prefix_beat_the_site_file(load, full_site):
    settings = load(full_site, PRIMUS_HOME="/env/home", PRIMUS_PREFIX="/env/")

    assert (settings.home, settings.prefix) == (Path("/env/home"), "/env")


def test_prefix_defaults_to_primus(load):
    assert load().prefix == "/primus"


def test_job_defaults_are_read_from_the_site_file(load, full_site):
    assert load(full_site).job_defaults == {"policy": {"register_timeout": 300}}


# --- Passing settings to children -------------------------------------------------------------


def test_to_env_and_to_secrets_make_a_child_resolve_the_same_settings(load, full_site):
    settings = load(full_site, "e:5", PRIMUS_ETCD_USER="alice")

    child = load_settings(env={**settings.to_env(), **settings.to_secrets()})

    assert (child.etcd, child.prefix, child.home, child.ssh) == (
        settings.etcd, settings.prefix, settings.home, settings.ssh)
    assert child.source is None, "children may run where the site file does not exist"


def test_the_password_is_among_the_secrets_never_in_the_environment_of_a_child(load, full_site):
    settings = load(full_site, "e:5")
    assert settings.etcd is not None and settings.etcd.password

    assert settings.to_secrets() == {"PRIMUS_ETCD_PASSWORD": settings.etcd.password}
    assert settings.etcd.password not in settings.to_env().values()
    assert "PRIMUS_ETCD_PASSWORD" not in settings.to_env()


def test_a_connection_over_every_member_is_passed_whole_to_children(load):
    settings = load("""\
        etcd:
          endpoints: [https://10.0.0.1:2379, https://10.0.0.2:2379]
          ca_cert: /tls/ca.pem
          server_name: primus-etcd
    """)
    assert settings.etcd is not None and settings.etcd.server_name == "primus-etcd"
    assert settings.with_endpoint("https://10.0.0.1:2379") is settings, \
        "children must get every member, not the one that answered first"
    child = load_settings(env=settings.to_env())
    assert child.etcd == settings.etcd


def test_without_a_server_name_children_use_the_endpoint_that_answered(load):
    settings = load("etcd: {endpoints: [a:2379, b:2379]}\n")
    assert settings.with_endpoint("b:2379").etcd.endpoints == ("b:2379",)


def test_to_env_of_embedded_settings_names_no_etcd(load):
    settings = load(PRIMUS_HOME="/env/home")

    assert load_settings(env=settings.to_env()).etcd is None


# --- Malformed site files ---------------------------------------------------------------------


@pytest.mark.parametrize(("site", "field"), [
    ("colour: red", "colour"),
    ("etcd: {endpoints: [a:1], colour: red}", "etcd.colour"),
])
def test_unknown_site_key_is_an_error_naming_the_file_and_key(load, site_path, site, field):
    with pytest.raises(SpecError) as caught:
        load(site)

    assert (caught.value.source, caught.value.field) == (str(site_path), field)


def test_missing_site_file_is_an_error_naming_it(tmp_path):
    missing = tmp_path / "nowhere.yaml"

    with pytest.raises(SpecError) as caught:
        load_settings(env={"PRIMUS_CONF": str(missing)})

    assert caught.value.source == str(missing)


def test_site_endpoints_as_a_string_are_split_on_commas(load):
    assert load('etcd: {endpoints: "a:1,b:2"}').etcd.endpoints == ("a:1", "b:2")


@pytest.mark.parametrize(("site", "field"), [
    ("etcd: {endpoints: [a:1], request_timeout: fast}", "etcd.request_timeout"),
    ("prefix: 5", "prefix"),
    ("prefix: primus", "prefix"),
    ("etcd: {endpoints: [1, 2]}", "etcd.endpoints"),
])
def test_wrongly_typed_site_values_are_spec_errors_naming_the_key(load, site, field):
    with pytest.raises(SpecError) as error:
        load(site)
    assert error.value.field == field


def test_ssh_options_from_the_site_file_reach_children(load, tmp_path):
    settings = load("ssh: {max_parallel: 4, known_hosts: /k, strict_host_key_checking: accept-new}")

    child = load_settings(env=settings.to_env())

    assert (child.ssh.max_parallel, child.ssh.known_hosts,
            child.ssh.strict_host_key_checking) == (4, "/k", "accept-new")


def test_ssh_integers_below_one_are_rejected(load):
    with pytest.raises(SpecError) as error:
        load("ssh: {max_parallel: 0}")
    assert error.value.field == "ssh.max_parallel"


# --- Queues -----------------------------------------------------------------------------------


def test_without_queues_the_default_queue_alone_admits_everything(load):
    queues = load().queues

    assert (list(queues.queues), queues.default_queue) == (["default"], "default")
    assert queues.queues["default"].quota.gpus is None


def test_queues_are_read_with_priorities_and_quotas(load):
    queues = load("""
        queues:
          default: {priority: 0}
          urgent: {priority: 10, quota: {gpus: 8, cpu: 12.5}, user_quota: {executors: 16}}
    """).queues

    urgent = queues.queues["urgent"]
    assert (urgent.priority, urgent.quota.gpus, urgent.quota.cpu, urgent.quota.executors,
            urgent.user_quota.executors) == (10, 8, 12.5, None, 16)
    assert queues.default_queue == "default"


def test_an_applications_budget_is_its_queues_field_by_field_over_the_sites(load):
    queues = load("""
        budget: {keys: 5000}
        queues:
          default: {}
          big: {budget: {bytes: 1073741824}}
    """).queues

    assert (queues.budget_of("").keys, queues.budget_of("").bytes) == (5000, 256 << 20)
    assert (queues.budget_of("big").keys, queues.budget_of("big").bytes) == (5000, 1 << 30)
    assert load("").queues.budget_of("") == Budget(keys=1_000_000, bytes=256 << 20)


def test_default_queue_names_the_queue_of_jobs_that_name_none(load):
    queues = load("queues: {batch: {}, urgent: {priority: 5}}\ndefault_queue: batch").queues

    assert (sorted(queues.queues), queues.default_queue) == (["batch", "urgent"], "batch")


def test_queues_do_not_reach_children_who_read_them_from_etcd(load):
    settings = load("queues: {batch: {}}\ndefault_queue: batch")

    assert "batch" not in "".join(settings.to_env().values())


@pytest.mark.parametrize(("site", "field", "value", "allowed"), [
    ("queues: {default: {prio: 1}}", "queues.default.prio", 1,
     "unknown key; allowed: priority, quota, budget, user_quota, max_array"),
    ("queues: {default: {budget: {keys: 0}}}", "queues.default.budget.keys", 0,
     "must be an integer >= 1 and <= 100,000,000"),
    ("budget: {values: 1}", "budget.values", 1, "unknown key; allowed: keys, bytes"),
    ("budget: {bytes: 256Mi}", "budget.bytes", "256Mi",
     "must be an integer >= 1 and <= 1,099,511,627,776"),
    ("budget: 5", "budget", 5, "must be a mapping with keys, bytes"),
    ("queues: {default: {quota: {disks: 1}}}", "queues.default.quota.disks", 1,
     "unknown key; allowed: gpus, cpu, executors, applications"),
    ("queues: {default: {quota: {gpus: -1}}}", "queues.default.quota.gpus", -1,
     "must be an integer >= 0 and <= 1,000,000"),
    ("queues: {default: {user_quota: {cpu: -0.5}}}", "queues.default.user_quota.cpu", -0.5,
     "must be a number >= 0 and <= 1,000,000,000"),
    ("queues: {default: {quota: {executors: 2.5}}}", "queues.default.quota.executors", 2.5,
     "must be an integer >= 0 and <= 10,000,000"),
    ("queues: {default: {priority: high}}", "queues.default.priority", "high",
     "must be an integer >= -1,000 and <= 1,000"),
    ("queues: {Urgent: {}}", "queues.Urgent", "Urgent",
     "a queue name must match ^[a-z][a-z0-9_-]{0,31}$"),
    ("queues: [default]", "queues", ["default"], "must be a mapping of queue names to queues"),
    ("queues: {default: {quota: 8}}", "queues.default.quota", 8,
     "must be a mapping with gpus, cpu, executors, applications"),
    ("queues: {batch: {}}\ndefault_queue: urgent", "default_queue", "urgent",
     "must name a queue; queues: batch"),
    ("queues: {batch: {}}", "default_queue", "default",
     "queues defines no queue 'default': set default_queue to one; queues: batch"),
    ("default_queue: batch", "default_queue", "batch", "must name a queue; queues: default"),
])
def test_bad_queues_are_errors_naming_the_file_field_value_and_what_is_allowed(
        load, site_path, site, field, value, allowed):
    with pytest.raises(SpecError) as caught:
        load(site)

    assert (caught.value.source, caught.value.field, caught.value.value,
            caught.value.allowed) == (str(site_path), field, value, allowed)


def test_history_defaults_to_a_sqlite_file_under_home_kept_seven_days(load, tmp_path):
    settings = load("", PRIMUS_HOME=str(tmp_path))
    assert settings.history_url is None and settings.history_retention == 7 * 86_400
    assert settings.default_history_file == tmp_path / "history" / "history.db"


def test_history_url_and_retention_are_read_and_kept_from_children(load):
    settings = load("history: {url: 'postgresql+psycopg://primus:secret@db/primus', "
                    "retention: 30d}")
    assert settings.history_url == "postgresql+psycopg://primus:secret@db/primus"
    assert settings.history_retention == 30 * 86_400
    assert "secret" not in repr(settings) and "secret" not in str(settings.to_env())


@pytest.mark.parametrize(("site", "field", "value", "allowed"), [
    ("history: {urls: x}", "history.urls", "x", "unknown key; allowed: retention, url"),
    ("history: [url]", "history", ["url"], "must be a mapping with retention, url"),
    ("history: {url: 'mysql://root:hunter2@db/primus'}", "history.url",
     "mysql://root:***@db/primus",
     "must be a database URL: sqlite:///PATH or postgresql+psycopg://USER@HOST/DB"),
    ("history: {retention: 1w}", "history.retention", "1w",
     "must be a whole number of seconds, or a whole number with a unit s, m, h or d (90s, 2h, "
     "7d)"),
    ("history: {retention: 0}", "history.retention", 0, "must be at least 1 second"),
])
def test_bad_history_settings_are_errors_naming_the_file_field_value_and_what_is_allowed(
        load, site_path, site, field, value, allowed):
    with pytest.raises(SpecError) as caught:
        load(site)

    assert (caught.value.source, caught.value.field, caught.value.value,
            caught.value.allowed) == (str(site_path), field, value, allowed)


def test_resources_default_to_best_effort_with_a_tenth_of_margin_and_reach_children(load):
    assert load().resources == ResourcePolicy("best_effort", 0.1, "auto", None)
    site = load("resources: {enforce: required, memory_margin: 0.5, pids: null}")
    assert site.resources == ResourcePolicy("required", 0.5, None, None)
    assert load(**site.to_env()).resources == site.resources


def test_a_trainers_default_pids_is_an_eighth_of_its_hosts_pid_max_resolved_on_that_host(
        load):
    by_default = load().resources
    assert load(**load().to_env()).resources.pids == "auto", "resolved on the trainer's host"
    assert by_default.pids_limit(32768) == 4096
    assert by_default.pids_limit(4194304) == 524288
    assert load("resources: {pids: auto}").resources == by_default
    assert load("resources: {pids: 512}").resources.pids_limit(32768) == 512
    assert load("resources: {pids: null}").resources.pids_limit(32768) is None


@pytest.mark.parametrize(("resources", "field", "allowed"), [
    ("{enforce: always}", "resources.enforce", "must be one of best_effort, required, off"),
    ("{memory_margin: -1}", "resources.memory_margin", "must be a fraction"),
    ("{pids: 8}", "resources.pids", "an integer >= 16, auto (the default: an eighth of"),
    ("{pids: half}", "resources.pids", "an integer >= 16, auto (the default: an eighth of"),
    ("{cgroup_parent: primus}", "resources.cgroup_parent", "starting with /"),
    ("{cgroup_parent: /a/../b}", "resources.cgroup_parent", "starting with /"),
    ("{swap: 0}", "resources.swap", "unknown key; allowed: enforce"),
    ("[]", "resources", "must be a mapping"),
])
def test_bad_resources_are_errors_naming_the_field_and_what_is_allowed(load, site_path,
                                                                       resources, field,
                                                                       allowed):
    with pytest.raises(SpecError) as caught:
        load(f"resources: {resources}")
    assert str(site_path) in str(caught.value) and field in str(caught.value)
    assert allowed in str(caught.value)


def test_health_defaults_to_a_check_a_minute_and_reaches_children(load):
    assert load().health == HealthPolicy(60.0, 10.0, 3, 1 << 30)
    site = load("health: {interval: 5m, timeout: 30s, readmit_after: 5, min_free_space: 10Gi}")
    assert site.health == HealthPolicy(300.0, 30.0, 5, 10 << 30)
    assert load(**site.to_env()).health == site.health


@pytest.mark.parametrize(("health", "field"), [
    ("{interval: often}", "health.interval"), ("{timeout: 0}", "health.timeout"),
    ("{readmit_after: 0}", "health.readmit_after"), ("{min_free_space: lots}",
                                                      "health.min_free_space"),
    ("{ecc: true}", "health.ecc"), ("[]", "health"),
])
def test_bad_health_settings_are_errors_naming_the_field(load, site_path, health, field):
    with pytest.raises(SpecError) as caught:
        load(f"health: {health}")
    assert str(site_path) in str(caught.value) and field in str(caught.value)
