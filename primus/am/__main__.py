"""Entry point of an AM process: ``python -m primus.am --app APP``.

Started detached by ``primus submit``, ``primus recover``, ``primus kill`` when no AM leads, and
a command that started the embedded etcd again (see :mod:`primus.client.service`); etcd settings
come from the environment, the password and the job's ``secret_env`` on an inherited descriptor
(:mod:`primus.process_secrets`). The process stays a candidate until the application has ended,
or waits for admission with no AM (parked): after a lost lease it stands again
(:func:`~primus.am.master.stand_until_ended`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys

from primus import process_secrets
from primus.am.master import stand_until_ended
from primus.config.site import load_settings
from primus.errors import PrimusError
from primus.private_files import private_dir
from primus.scheduler.leader import AdmissionLeader
from primus.state.keys import identity_name
from primus.state.states import AppState
from primus.store.connect import open_store


async def amain(app_id: str, log_file: str, why: str = "") -> int:
    settings = load_settings(env=process_secrets.environment())
    private_dir(settings.home)  # a home left open by an older Primus is closed here
    store, settings = await open_store(settings)
    # While it runs, an AM process also stands for admission leadership, so that admission
    # needs no other process (docs/scheduling.md); ``primus server`` processes stand too. An
    # AM with its application's own identity (a shared deployment) does not: admission writes
    # every application's keys, which only Primus's identity may, and its servers lead it.
    own_identity = settings.etcd is not None and settings.etcd.user == identity_name(
        settings.prefix, app_id)
    admission = None if own_identity else asyncio.ensure_future(
        AdmissionLeader(store, settings.prefix, settings).run())
    try:
        state = await stand_until_ended(store, settings, app_id, log_file, why)
    finally:
        if admission is not None:
            admission.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await admission
        await store.close()
    # SUSPENDED, or QUEUED: parked, its request waiting as a record (docs/scheduling.md).
    return 0 if state in (AppState.SUCCEEDED, AppState.SUSPENDED, AppState.QUEUED) else 1


def main(argv: list[str] | None = None) -> int:
    process_secrets.make_undumpable()  # before it reads its secrets
    parser = argparse.ArgumentParser(prog="python -m primus.am")
    parser.add_argument("--app", required=True, help="application id")
    parser.add_argument("--log-file", default="", help="where this AM's output goes")
    parser.add_argument("--why", default="", help="who started this AM and why (recorded in "
                                                  "the event of its taking over)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return asyncio.run(amain(args.app, args.log_file, args.why))
    except PrimusError as exc:
        logging.getLogger("primus.am").error("[%s/am] %s", args.app, exc)
        return 2


if __name__ == "__main__":
    sys.exit(main())
