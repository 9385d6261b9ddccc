"""The autosizer: one server of a deployment resizes the roles that ask for ``autosize``.

It is elected at ``server/autosizer`` (as the notifier is) and, while it leads, looks every
:data:`PASS_INTERVAL` at the executors' usage figures its server's metrics fold holds: each
running executor's figures at its current size make a window
(:mod:`primus.scheduler.autosize`); once every running executor of an autosized role has run
at one size for the role's interval, the policy decides, and a resize is asked for
exactly as ``primus resize`` asks (:meth:`~primus.client.service.ApplicationService.
resize_role`, by the user ``autosize``): the same checks, the same change record, admission
granting it in place or keeping it waiting. The role's bounds are read from the application's
spec, the server's own record; only the figures are the application's writes.

A leader that dies loses only its windows: the next one measures again, a resize at most one
interval later.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from primus.client.service import ApplicationService
from primus.config.spec import AutosizeSpec
from primus.errors import PrimusError
from primus.scheduler.autosize import Window, observe, resize_for
from primus.server.metrics import Fold
from primus.state.keys import autosizer_key
from primus.state.records import ServiceLeader, encode
from primus.state.states import AppState, ExecutorState
from primus.store.recipes import lead_while_elected

logger = logging.getLogger(__name__)

LEASE_TTL = 5
"""Seconds the autosizer's leadership outlives its process."""
PASS_INTERVAL = 2.0
"""Seconds between two looks at the usage figures."""
AUTOSIZE_USER = "autosize"
"""Who the change log says asked for an autosize resize."""


@dataclass
class _Roles:
    """The autosize of an application's roles, read once for a set of autosized roles."""

    roles: frozenset[str]
    autosize: dict[str, AutosizeSpec]


class Autosizer:
    """One candidate for the autosizer's leadership, over ``service``'s deployment, reading the
    figures from ``fold`` (its server's metrics, kept current by their watch)."""

    def __init__(self, service: ApplicationService, fold: Fold) -> None:
        self.service = service
        self.fold = fold
        self.me = ServiceLeader.this_process()
        self.windows: dict[tuple[str, str, int], Window] = {}
        self._specs: dict[str, _Roles] = {}

    async def run(self) -> None:
        """Stand, autosize while elected, stand again after losing the lease; until
        cancelled."""
        await lead_while_elected(self.service.store, autosizer_key(self.service.settings.prefix),
                                 encode(self.me), LEASE_TTL,
                                 lambda _leadership, _lost: self._lead(), "autosize")

    async def _lead(self) -> None:
        self.windows.clear()
        while True:
            try:
                await self.look()
            except PrimusError as exc:
                logger.warning("autosize: %s; again in %g s", exc, PASS_INTERVAL)
            await asyncio.sleep(PASS_INTERVAL)

    async def look(self) -> None:
        """One pass: fold the figures of the autosized roles into the windows, resize each
        autosized role whose windows are long enough and whose use calls for it."""
        fold = self.fold
        autosized = {app_id: app.autosized for app_id, app in fold.apps.items()
                     if app.autosized and app.state is AppState.RUNNING}
        for key, usage in fold.usage.items():
            if key[1] in autosized.get(key[0], ()):
                self.windows[key] = observe(self.windows.get(key), usage)
        for key in [k for k in self.windows if k not in fold.usage or k[0] not in autosized]:
            del self.windows[key]
        for app_id in self._specs.keys() - autosized.keys():
            del self._specs[app_id]
        running: dict[tuple[str, str], dict[int, Window | None]] = {}
        for (app_id, role, index), plan in fold.plans.items():
            if role not in autosized.get(app_id, ()) or plan.state is not ExecutorState.RUNNING:
                continue
            window = self.windows.get((app_id, role, index))
            running.setdefault((app_id, role), {})[index] = \
                window if window is not None and window.attempt == plan.attempt else None
        for (app_id, role), windows in sorted(running.items()):
            measured = [w for w in windows.values() if w is not None]
            if len(measured) < len(windows):
                continue  # an executor without figures of its attempt yet
            auto = (await self._autosize_of(app_id, autosized[app_id])).get(role)
            if auto is None or min(w.span for w in measured) < auto.interval:
                continue
            await self._resize(app_id, role, auto, measured)
            # Whatever came of it, the role is measured afresh for its next interval: what
            # it used last, not since it started, decides next.
            for index in windows:
                self.windows.pop((app_id, role, index), None)

    async def _autosize_of(self, app_id: str, roles: frozenset[str]
                           ) -> dict[str, AutosizeSpec]:
        """The autosize of each of the application's ``roles``, from its spec (read again
        when they changed: a role added)."""
        known = self._specs.get(app_id)
        if known is None or known.roles != roles:
            spec = (await self.service.get_app(app_id)).view.spec
            known = _Roles(roles, {role.name: role.autosize for role in spec.roles
                                   if role.autosize is not None})
            self._specs[app_id] = known
        return known.autosize

    async def _resize(self, app_id: str, role_name: str, auto: AutosizeSpec,
                      windows: list[Window]) -> None:
        spec = (await self.service.get_app(app_id)).view.spec
        role = next((r for r in spec.roles if r.name == role_name), None)
        if role is None:
            return
        wanted = resize_for(auto, (role.cpu, role.memory), windows)
        if wanted is None:
            return
        try:
            await self.service.resize_role(app_id, role_name, wanted.cpu, wanted.memory,
                                           AUTOSIZE_USER, why=wanted.reason)
        except PrimusError as exc:  # asked again after the next interval, if still wanted
            logger.info("autosize: %s role %s: %s", app_id, role_name, exc)
            return
        logger.info("autosize: %s role %s resized (%s)", app_id, role_name, wanted.reason)
