"""What the pages show, worked out from the records: pure functions, no I/O.

The templates (``primus/ui/templates``) render what these return; the request handlers
(:mod:`primus.ui.web`) read the records and check the requests' parameters here, so that every
rule of the pages can be tested without a server.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlencode

from primus.client.service import ARRAY_SUFFIX
from primus.errors import PrimusError
from primus.history.api import AppQuery
from primus.state.states import AppState

PAGE_SIZE = 50
"""Applications per page of the applications page."""
MAX_PAGE = 100_000
MAX_FILTER = 253
"""Characters of a user, queue or name filter, at most (an application id's length)."""
TASKS_PER_PAGE = 50

APP_ID = re.compile(r"[A-Za-z0-9._-]{1,253}")
"""An application id (:func:`primus.client.service.new_app_id` makes them)."""
LOG_NAME = re.compile(r"am|[a-z0-9][a-z0-9_-]{0,62}-[0-9]{1,6}")
"""A log's name in a URL: ``am`` or ``<role>-<index>``; a path is never taken from a URL."""
STREAM_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
TASK_ID = re.compile(r"[0-9]{4}-[0-9]{8}")


class UiRequestError(PrimusError):
    """A page was asked for with a parameter it cannot take; the message names the parameter,
    the value and what is allowed."""


class UiNotFoundError(PrimusError):
    """A page asked for does not exist (an unknown path, stream or log)."""


@dataclass(frozen=True)
class ListRequest:
    """The applications page's parameters, checked."""

    query: AppQuery
    page: int

    def link(self, page: int) -> str:
        """The query string of page ``page`` with the same filters."""
        query = self.query
        params = {"state": query.state.value if query.state else None, "user": query.user,
                  "queue": query.queue, "name": query.name, "page": str(page)}
        return urlencode({k: v for k, v in params.items() if v})


def _filter(params: Mapping[str, str], name: str) -> str:
    value = params.get(name, "").strip()
    if len(value) > MAX_FILTER:
        raise UiRequestError(f"{name}: {len(value)} characters; at most {MAX_FILTER}")
    return value


def list_request(params: Mapping[str, str]) -> ListRequest:
    """The applications page's query parameters (``state``, ``user``, ``queue``, ``name``,
    ``page``), checked.

    Raises:
        UiRequestError: A parameter is unknown or its value is not allowed.
    """
    unknown = sorted(set(params) - {"state", "user", "queue", "name", "page"})
    if unknown:
        raise UiRequestError(f"{unknown[0]}: unknown parameter; allowed: name, page, queue, "
                             f"state, user")
    state_text = params.get("state", "").strip()
    state = None
    if state_text:
        try:
            state = AppState(state_text.upper())
        except ValueError:
            raise UiRequestError(f"state: got {state_text[:40]!r}; allowed: "
                                 + ", ".join(s.value for s in AppState)) from None
    page_text = params.get("page", "1").strip() or "1"
    if not page_text.isdigit() or not 1 <= int(page_text) <= MAX_PAGE:
        raise UiRequestError(f"page: got {page_text[:40]!r}; must be a whole number from 1 to "
                             f"{MAX_PAGE}")
    page = int(page_text)
    query = AppQuery(state=state, user=_filter(params, "user"), queue=_filter(params, "queue"),
                     name=_filter(params, "name"), offset=(page - 1) * PAGE_SIZE,
                     limit=PAGE_SIZE)
    return ListRequest(query, page)


def revision(text: str) -> int:
    """The ``after`` parameter of a live feed: the etcd revision its page was read at (empty:
    0, from now).

    Raises:
        UiRequestError: It is not a revision.
    """
    if not text:
        return 0
    if not text.isdigit() or len(text) > 19:
        raise UiRequestError(f"after: got {text[:40]!r}; must be the revision the page was "
                             f"read at, a whole number")
    return int(text)


def hang_number(text: str) -> int:
    """A hang's number in a page's address (empty: 0, the last).

    Raises:
        UiRequestError: It is not a number.
    """
    if not text:
        return 0
    if not text.isdigit() or len(text) > 9:
        raise UiRequestError(f"hang: got {text[:40]!r}; must be a hang's number")
    return int(text)


def checked_app_id(app_id: str) -> str:
    """``app_id`` if it can be an application id.

    Raises:
        UiNotFoundError: It cannot: no application has it.
    """
    if not APP_ID.fullmatch(app_id):
        raise UiNotFoundError(f"no application {app_id[:80]!r}")
    return app_id


def checked_array_id(array: str) -> str:
    """``array`` if it can be a job array's id (an application id's form, then ``-array``).

    Raises:
        UiNotFoundError: It cannot: no job array has it.
    """
    if not array.endswith(ARRAY_SUFFIX) or not APP_ID.fullmatch(array[:-len(ARRAY_SUFFIX)]):
        raise UiNotFoundError(f"no job array {array[:80]!r}")
    return array


def percent(fraction: float | None) -> str:
    """``fraction`` as a whole percentage, or ``-`` when unknown."""
    return "-" if fraction is None else f"{fraction * 100:.0f}%"


def clock(value: float | None) -> str:
    """A timestamp as local date and time to the second, or ``-``."""
    if value is None:
        return "-"
    return datetime.datetime.fromtimestamp(value).strftime("%Y-%m-%d %H:%M:%S")


def duration(start: float | None, end: float | None, now: float) -> str:
    """How long from ``start`` to ``end`` (still running: to ``now``), e.g. ``1h 02m``."""
    if start is None:
        return "-"
    seconds = max(0, int((end if end is not None else now) - start))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours:02d}h"


def size(value: float | None) -> str:
    """A byte count in binary units, or ``-``."""
    if value is None:
        return "-"
    if value == float("inf"):
        return "∞"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def amount(value: float | None) -> str:
    """A CPU count, ``∞`` when the host declares no limit."""
    return "∞" if value is None or value == float("inf") else f"{value:g}"
