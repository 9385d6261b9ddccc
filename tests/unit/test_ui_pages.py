"""The UI's rules for its requests and figures, without a server."""

from __future__ import annotations

import pytest

from primus.state.states import AppState
from primus.ui import pages


def test_list_request_reads_filters_and_page_into_a_query():
    listed = pages.list_request({"state": "running", "user": " alice ", "queue": "gpu",
                                 "name": "bert", "page": "3"})
    query = listed.query
    assert (query.state, query.user, query.queue, query.name) == (
        AppState.RUNNING, "alice", "gpu", "bert")
    assert (query.offset, query.limit) == (2 * pages.PAGE_SIZE, pages.PAGE_SIZE)
    assert listed.link(4) == "state=RUNNING&user=alice&queue=gpu&name=bert&page=4"


def test_list_request_without_parameters_is_the_first_page_of_everything():
    listed = pages.list_request({})
    assert listed.query.state is None and listed.query.offset == 0
    assert listed.link(2) == "page=2"


@pytest.mark.parametrize(("params", "message"), [
    ({"state": "DANCING"}, "state: got 'DANCING'; allowed: SUBMITTED, QUEUED"),
    ({"page": "0"}, "page: got '0'; must be a whole number from 1"),
    ({"page": "-1"}, "page: got '-1'"),
    ({"page": "1e3"}, "page: got '1e3'"),
    ({"page": str(pages.MAX_PAGE + 1)}, "page: got"),
    ({"user": "u" * 254}, "user: 254 characters; at most 253"),
    ({"sort": "name"}, "sort: unknown parameter; allowed: name, page, queue, state, user"),
])
def test_list_request_refuses_what_it_cannot_take_naming_the_parameter(params, message):
    with pytest.raises(pages.UiRequestError, match="^" + message.replace("(", r"\(")
                       .replace("[", r"\[")):
        pages.list_request(params)


@pytest.mark.parametrize("app_id", ["../etc", "a/b", "", "x" * 254, "app id", "<b>"])
def test_a_string_that_cannot_be_an_application_id_is_not_found(app_id):
    with pytest.raises(pages.UiNotFoundError, match="no application"):
        pages.checked_app_id(app_id)


@pytest.mark.parametrize(("name", "ok"), [
    ("am", True), ("worker-0", True), ("data_reader-12", True), ("../am", False),
    ("worker", False), ("/etc/passwd", False), ("worker-0/../x", False), ("Worker-1", False)])
def test_log_names_are_am_or_role_and_index_and_never_paths(name, ok):
    assert bool(pages.LOG_NAME.fullmatch(name)) is ok


@pytest.mark.parametrize(("start", "end", "shown"), [
    (None, None, "-"), (100.0, 105.4, "5s"), (0.0, 125.0, "2m 05s"),
    (0.0, 3 * 3600 + 120, "3h 02m"), (0.0, 3 * 86400 + 7200, "3d 02h")])
def test_durations_read_at_a_glance(start, end, shown):
    assert pages.duration(start, end, now=0.0) == shown


def test_a_running_application_lasts_until_now():
    assert pages.duration(10.0, None, now=70.0) == "1m 00s"


@pytest.mark.parametrize(("value", "shown"), [
    (None, "-"), (512, "512 B"), (2048, "2.0 KiB"), (3 * 1024**3, "3.0 GiB"),
    (float("inf"), "∞")])
def test_sizes_in_binary_units(value, shown):
    assert pages.size(value) == shown


def test_percent_and_amount():
    assert pages.percent(None) == "-" and pages.percent(0.256) == "26%"
    assert pages.amount(None) == "∞" and pages.amount(float("inf")) == "∞"
    assert pages.amount(2.5) == "2.5"
