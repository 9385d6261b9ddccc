"""etcd's space without an etcd: what is warned of, which alarms the recovery clears, how a
member's quota is read from its metrics, and how the server and the UI show it."""

from __future__ import annotations

from primus.server.metrics import EtcdSpaceCollector
from primus.store.api import Alarm, MemberSpace
from primus.store.etcd_store import quota_of
from primus.store.space import Disarm, SpaceMonitor, decide_disarm, space_warnings
from primus.ui.web import _environment
from tests.support.metrics import Samples, samples

MIB = 1 << 20


def member(name: str = "m0", size: int = 10 * MIB, in_use: int = 5 * MIB,
           quota: int | None = 100 * MIB, alarms: tuple[Alarm, ...] = (),
           error: str = "") -> MemberSpace:
    return MemberSpace(name, f"https://{name}:2379", size, in_use, quota, alarms, error)


def test_a_member_below_the_warning_fraction_without_alarms_is_not_warned_of():
    assert space_warnings([member(size=80 * MIB), member(quota=None, size=10**12)]) == []


def test_a_member_above_80_percent_of_its_quota_is_warned_of_with_its_sizes():
    (found,) = space_warnings([member("m1", size=81 * MIB, in_use=20 * MIB)])
    assert (found.member, found.what) == ("m1", "FULL")
    warning = found.text
    assert "m1" in warning and "81.0 MiB" in warning and "100.0 MiB" in warning
    assert "20.0 MiB in use" in warning and "recover-space" in warning


def test_each_raised_alarm_is_warned_of_even_from_a_member_that_did_not_answer():
    found = space_warnings([member("m0", alarms=(Alarm.NOSPACE,), error="timeout"),
                            member("m1", alarms=(Alarm.CORRUPT,))])
    assert [(w.member, w.what) for w in found] == [("m0", "NOSPACE"), ("m1", "CORRUPT")]
    warnings = [w.text for w in found]
    assert len(warnings) == 2
    assert "m0" in warnings[0] and "NOSPACE" in warnings[0] and "recover-space" in warnings[0]
    assert "m1" in warnings[1] and "CORRUPT" in warnings[1]
    assert "recover-space" not in warnings[1]


def test_nospace_is_disarmed_where_the_member_is_now_below_its_quota_or_the_quota_unknown():
    disarms, kept = decide_disarm([member("m0", alarms=(Alarm.NOSPACE,)),
                                   member("m1", quota=None, alarms=(Alarm.NOSPACE,)),
                                   member("m2")])
    assert disarms == [Disarm("m0", Alarm.NOSPACE), Disarm("m1", Alarm.NOSPACE)]
    assert kept == []


def test_nospace_stays_where_the_data_alone_fills_the_quota_saying_what_to_do():
    disarms, kept = decide_disarm([member("m0", size=100 * MIB, alarms=(Alarm.NOSPACE,))])
    assert disarms == []
    (why,) = kept
    assert "m0" in why and "delete keys or raise --quota-backend-bytes" in why


def test_corrupt_and_the_alarms_of_members_that_did_not_answer_are_never_disarmed():
    disarms, kept = decide_disarm([member("m0", alarms=(Alarm.CORRUPT,)),
                                   member("m1", alarms=(Alarm.NOSPACE,), error="refused")])
    assert disarms == []
    assert "CORRUPT" in kept[0] and "did not answer (refused)" in kept[1]


def test_the_quota_is_read_from_an_etcd_members_metrics():
    metrics = (b"# HELP etcd_server_quota_backend_bytes Current backend storage quota size\n"
               b"# TYPE etcd_server_quota_backend_bytes gauge\n"
               b"etcd_server_quota_backend_bytes_total 1\n"
               b"etcd_server_quota_backend_bytes 2.147483648e+09\n")
    assert quota_of(metrics) == 2 * 1024**3
    assert quota_of(b"etcd_server_has_leader 1\n") is None
    assert quota_of(b"etcd_server_quota_backend_bytes nonsense\n") is None


def scrape(monitor: SpaceMonitor) -> Samples:
    return samples(EtcdSpaceCollector(monitor))


def test_metrics_show_each_members_sizes_quota_and_every_alarm_as_0_or_1():
    monitor = SpaceMonitor(store=None)  # type: ignore[arg-type]  # only its reading is used
    monitor.members = (member("m0", alarms=(Alarm.NOSPACE,)),
                       member("m1", error="timed out"))
    monitor.read_at = 1000.0
    samples = scrape(monitor)
    assert samples["primus_etcd_db_size_bytes", (("member", "m0"),)] == 10 * MIB
    assert samples["primus_etcd_db_size_in_use_bytes", (("member", "m0"),)] == 5 * MIB
    assert samples["primus_etcd_quota_bytes", (("member", "m0"),)] == 100 * MIB
    assert samples["primus_etcd_alarm", (("alarm", "NOSPACE"), ("member", "m0"))] == 1.0
    assert samples["primus_etcd_alarm", (("alarm", "CORRUPT"), ("member", "m0"))] == 0.0
    assert samples["primus_etcd_alarm", (("alarm", "NOSPACE"), ("member", "m1"))] == 0.0
    assert samples["primus_etcd_member_answered", (("member", "m1"),)] == 0.0
    assert ("primus_etcd_db_size_bytes", (("member", "m1"),)) not in samples, \
        "no size for a member that did not answer"
    assert samples["primus_etcd_space_read_timestamp_seconds", ()] == 1000.0


def test_before_the_first_reading_metrics_show_no_etcd_series():
    monitor = SpaceMonitor(store=None)  # type: ignore[arg-type]
    assert scrape(monitor) == {}


def test_the_ui_banner_shows_each_warning_as_text_never_as_markup():
    page = _environment().get_template("error.html").render(
        status=503, message="x", viewer=None, csrf="",
        space_warnings=space_warnings([member("<script>alert(1)</script>",
                                              alarms=(Alarm.NOSPACE,))]))
    assert 'id="etcd-space"' in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert" not in page
    quiet = _environment().get_template("error.html").render(
        status=503, message="x", viewer=None, csrf="", space_warnings=[])
    assert 'id="etcd-space"' not in quiet
