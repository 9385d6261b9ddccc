"""Entry point of an executor process: ``python -m primus.executor --app ... --role ...``.

etcd settings come from the environment (``PRIMUS_ETCD``, ``PRIMUS_PREFIX``...), which the AM
sets when it launches the executor; the password and the job's ``secret_env`` values come on an
inherited descriptor, or in memory from the host agent (:mod:`primus.process_secrets`): never on
this command line, nor in the environment.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable

from primus import process_secrets
from primus.config.site import app_dir, load_settings
from primus.errors import PrimusError
from primus.executor import host_lease
from primus.executor.executor import Executor, ExecutorIdentity
from primus.private_files import private_dir
from primus.state.keys import AppKeys
from primus.store.api import StoreError
from primus.store.etcd_store import EtcdCoordinator


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m primus.executor")
    parser.add_argument("--app", required=True)
    parser.add_argument("--role", required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--attempt", type=int, required=True)
    parser.add_argument("--host", required=True, help="inventory name of this host")
    parser.add_argument("--address", required=True, help="address other hosts reach it at")
    parser.add_argument("--log-file", required=True, help="where the trainer's output goes")
    return parser.parse_args(argv)


async def amain(args: argparse.Namespace, ready: Callable[[], None] | None = None) -> int:
    settings = load_settings(env=process_secrets.environment())
    if settings.etcd is None:
        raise StoreError("PRIMUS_ETCD is not set; executors are launched by the AM")
    private_dir(settings.home)  # a home left open by an older Primus is closed here
    store = await EtcdCoordinator.connect(settings.etcd)
    executor = Executor(store, AppKeys(settings.prefix, args.app), ExecutorIdentity(
        args.role, args.index, args.attempt, args.host, args.address, args.log_file,
        str(app_dir(str(settings.home), args.app))), registered=ready,
        resources=settings.resources, host_lease=os.environ.get(host_lease.ENV),
        secrets=process_secrets.received())
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(signum, executor.request_stop,
                                f"executor stopped by {signal.Signals(signum).name}")
    try:
        return await executor.run()
    finally:
        await store.close()


def main(argv: list[str] | None = None, ready: Callable[[], None] | None = None) -> int:
    """Run an executor; ``ready`` is called once it registered (see ``launcher/agent.py``)."""
    process_secrets.make_undumpable()  # before it reads its secrets (forked: already is)
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return asyncio.run(amain(args, ready))
    except PrimusError as exc:
        logging.getLogger("primus.executor").error("[%s/%s-%s] %s", args.app, args.role,
                                                   args.index, exc)
        return 2


if __name__ == "__main__":
    sys.exit(main())
