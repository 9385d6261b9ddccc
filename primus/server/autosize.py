"""The autosizer: one server of a deployment resizes the roles that ask for ``autosize``.

It is elected at ``server/autosizer`` (as the notifier is) and, while it leads, looks every
:data:`PASS_INTERVAL` at the executors' usage figures its server's metrics fold holds: each
running executor's figures at its current size make a window
(:mod:`primus.scheduler.autosize`); once every running executor of an autosized role has run
at one size for the role's interval, the policy decides, and a resize is asked for
exactly as ``primus resize`` asks (:meth:`~primus.client.service.ApplicationService.
resize_role`, by the user ``autosize``): the same checks, the same change record, admission
granting it in place or keeping it waiting. The role's size and bounds are read from the
application's spec and topology, the server's own records; the figures and the executors'
plans are the application's writes, and decide only how its own role moves within its bounds.

A leader that dies loses only its windows: the next one measures again, a resize at most one
interval later.
"""

from __future__ import annotations

import asyncio
import logging
import time

from primus.client.service import ApplicationService
from primus.errors import PrimusError
from primus.scheduler.autosize import Window, measured_roles, observe, resize_for, ripe
from primus.server.metrics import Fold
from primus.state.keys import AppKeys, autosizer_key
from primus.state.records import ServiceLeader, encode
from primus.state.states import AppState, ExecutorState
from primus.state.view import read_spec
from primus.store.recipes import lead_while_elected

logger = logging.getLogger(__name__)

LEASE_TTL = 5
"""Seconds the autosizer's leadership outlives its process."""
PASS_INTERVAL = 2.0
"""Seconds between two looks at the usage figures."""
MIN_INTERVAL = 1.0
"""Seconds: the least ``autosize.interval`` a spec may say."""
AUTOSIZE_USER = "autosize"
"""Who the change log says asked for an autosize resize."""


class Autosizer:
    """One candidate for the autosizer's leadership, over ``service``'s deployment, reading the
    figures from ``fold`` (its server's metrics, kept current by their watch)."""

    def __init__(self, service: ApplicationService, fold: Fold) -> None:
        self.service = service
        self.fold = fold
        self.me = ServiceLeader.this_process()
        self.windows: dict[tuple[str, str, int], Window] = {}
        self._intervals: dict[tuple[str, str], float] = {}  # each role's, as last read

    async def run(self) -> None:
        """Stand, autosize while elected, stand again after losing the lease; until
        cancelled."""
        await lead_while_elected(self.service.store, autosizer_key(self.service.settings.prefix),
                                 encode(self.me), LEASE_TTL,
                                 lambda _leadership, _lost: self._lead(), "autosize")

    async def _lead(self) -> None:
        self.windows.clear()
        while True:
            await self.look()
            await asyncio.sleep(PASS_INTERVAL)

    async def look(self) -> None:
        """One pass: fold the figures of the autosized roles into the windows, resize each
        autosized role whose windows are long enough and whose use calls for it. One
        application's failure (etcd, a record it cannot read) is logged and leaves the others
        to be looked at."""
        fold, now = self.fold, time.time()
        autosized = {app_id: app.autosized for app_id, app in fold.apps.items()
                     if app.autosized and app.state is AppState.RUNNING}
        for key, usage in fold.usage.items():
            if key[1] in autosized.get(key[0], ()):
                window = observe(self.windows.get(key), usage, now)
                if window is not None:
                    self.windows[key] = window
        for key in [k for k in self.windows if k not in fold.usage or k[0] not in autosized]:
            del self.windows[key]
        for role_key in [k for k in self._intervals if k[0] not in autosized]:
            del self._intervals[role_key]
        running = ((app_id, role, index, plan.attempt)
                   for (app_id, role, index), plan in fold.plans.items()
                   if plan.state is ExecutorState.RUNNING)
        for (app_id, role), windows in measured_roles(autosized, running, self.windows).items():
            if not ripe(windows, self._intervals.get((app_id, role), MIN_INTERVAL), now):
                continue  # its spec is read once its windows could be long enough
            try:
                decided = await self._resize(app_id, role, windows, now)
            except Exception:  # noqa: BLE001 - one application's trouble is its own
                logger.exception("[%s/%s] autosize failed; looked at again next interval",
                                 app_id, role)
                decided = True
            if decided:  # measured afresh: its next interval's use decides next
                for key in [k for k in self.windows if k[:2] == (app_id, role)]:
                    del self.windows[key]

    async def _resize(self, app_id: str, role_name: str, windows: list[Window], now: float
                      ) -> bool:
        """Decide the role from its windows, read its spec (the server's record: its size
        and bounds) and ask for the resize it wants; whether it was decided (the interval
        had passed)."""
        spec = await read_spec(self.service.store, AppKeys(self.service.settings.prefix, app_id))
        role = next((r for r in spec.roles if r.name == role_name), None) if spec else None
        if role is None or role.autosize is None:
            return True
        self._intervals[(app_id, role_name)] = role.autosize.interval
        if not ripe(windows, role.autosize.interval, now):
            return False
        wanted = resize_for(role.autosize, (role.cpu, role.memory), windows, now)
        if wanted is None:
            return True
        try:
            await self.service.resize_role(app_id, role_name, wanted.cpu, wanted.memory,
                                           AUTOSIZE_USER, why=wanted.reason)
        except PrimusError as exc:  # asked again after the next interval, if still wanted
            logger.info("[%s/%s] autosize: %s", app_id, role_name, exc)
            return True
        logger.info("[%s/%s] resized (%s)", app_id, role_name, wanted.reason)
        return True
