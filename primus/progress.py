"""For trainers: tell Primus the trainer makes progress, so that a long silent step is not
taken for a hang (a role's ``hang_timeout``, docs/observability.md)::

    import primus.progress
    primus.progress.report()      # e.g. once per training step

It touches the file ``$PRIMUS_PROGRESS_FILE`` names, which is all a trainer in another
language does too (``touch "$PRIMUS_PROGRESS_FILE"``). Outside Primus it does nothing.
"""

from __future__ import annotations

import os


def report() -> None:
    """Mark progress now (a file's modification time: cheap enough for every step)."""
    path = os.environ.get("PRIMUS_PROGRESS_FILE")
    if path:
        try:
            os.utime(path)
        except FileNotFoundError:
            with open(path, "ab"):
                pass
