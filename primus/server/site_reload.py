"""The site defaults file, watched while the server runs (docs/operations.md, "Changing the site
file while the server runs").

Every :data:`CHECK_INTERVAL` seconds the server looks at the file's inode, size and time of
change; when one differs it reads the file again, entirely, as at its start. What can change
while it serves (:data:`~primus.config.site_changes.RELOADABLE`) it uses from then on; what
cannot, it says, in its log and in its state file, which ``primus server status`` and ``primus
server start`` print: those settings take effect when it restarts. A file that no longer reads
changes nothing, and is said too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Callable
from pathlib import Path

from primus.config.loader import SpecError
from primus.config.site import Settings
from primus.config.site_changes import RELOADABLE, SITE_KEYS, changed_settings

logger = logging.getLogger(__name__)

CHECK_INTERVAL = 2.0
"""Seconds between two looks at the site file."""

_Stamp = tuple[int, int, int] | None

_UNSEEN = (-1, -1, -1)
"""The stamp before the first look: the file may have changed between the server's reading it
at its start and the reloader's start, so the first look reads it again, whatever it finds."""


def _stamp(path: Path) -> _Stamp:
    """What changes when the file is written or replaced; ``None`` when there is none."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_ino, found.st_mtime_ns, found.st_size


class SiteReloader:
    """Re-reads the site file ``path`` of a running server when it changes.

    Args:
        path: The site file (``None``: none is read, nothing is watched).
        loaded: The settings the server started with.
        read: Reads the settings again, as the server read them at its start.
        use: Takes the settings in effect once a reloadable one changed.
        say: Takes what the server has to say of its site file (``""``: nothing any more).
    """

    def __init__(self, path: Path | None, loaded: Settings, read: Callable[[], Settings],
                 use: Callable[[Settings], None], say: Callable[[str], None]) -> None:
        self.path = path
        self.loaded = loaded
        self.current = loaded
        """The settings in effect: those loaded, with the reloadable ones as last read."""
        self.read = read
        self.use = use
        self.say = say
        self.notice = ""
        self._stamp: _Stamp = _UNSEEN

    async def run(self) -> None:
        if self.path is None:
            return
        while True:
            self.check()
            await asyncio.sleep(CHECK_INTERVAL)

    def check(self) -> None:
        """Read the site file again if it changed since the last look."""
        if self.path is None:
            return
        stamp = _stamp(self.path)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            read = self.read()
        except SpecError as exc:
            self._tell(f"the site file {self.path} changed and does not read; the server goes "
                       f"on with the settings it had: {exc}")
            return
        reloaded = [name for name in changed_settings(self.current, read) if name in RELOADABLE]
        if reloaded:
            self.current = dataclasses.replace(
                self.current, **{name: getattr(read, name) for name in reloaded})
            self.use(self.current)
            logger.info("the site file %s changed: %s in use from now on", self.path,
                        ", ".join(SITE_KEYS[name] for name in reloaded))
        waiting = [SITE_KEYS[name] for name in changed_settings(self.loaded, read)
                   if name not in RELOADABLE]
        self._tell(f"the site file {self.path} changed {', '.join(waiting)} since the server "
                   f"started: that takes effect when it restarts (on the embedded default: "
                   f"`primus server stop`, then `primus server start`)" if waiting else "")

    def _tell(self, notice: str) -> None:
        if notice == self.notice:
            return
        self.notice = notice
        if notice:
            logger.warning("%s", notice)
        self.say(notice)
