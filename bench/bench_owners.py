"""Benchmark: what running applications as their owners costs (site ``accounts:``).

On an etcd with auth on (a root user, which Primus's identity is), it measures, ``--repeat``
times each and interleaved:

* **identity**: making an application's etcd identity (a role, its two grants and one read, a
  user, the role granted) and removing it, against the floor of one plain ``put`` and
  ``delete`` on the same connection;
* **submit to running**: ``ApplicationService.submit`` of a job of ``--executors`` executors
  (``sleep``) until every one is RUNNING, as ``alice`` with ``accounts:`` (the AM entered
  through ``sudo``, an identity made, every process as alice) against the same job with the
  one shared identity (everything as this account). Target: at most 1.1x.

Run as root on a machine with ``sudo`` and the accounts of the owners' tests
(tests/support/owners.py makes them, and a Python alice can run).

Usage: ``python bench/bench_owners.py [--repeat 5] [--executors 4]``
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_submit import parse_args
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
TARGET = 1.1
ROOT_PASSWORD = "bench-root-7c1e"
JOB = """\
name: owners-bench
roles:
  - name: worker
    num: {executors}
    command: sleep 30
"""


async def identity_costs(config, repeat: int) -> tuple[list[float], list[float]]:
    from primus.client.identities import identity_grants  # noqa: PLC0415
    from primus.store.etcd_store import EtcdCoordinator  # noqa: PLC0415

    store = await EtcdCoordinator.connect(config)
    made, floor = [], []
    try:
        for round_ in range(repeat):
            started = time.perf_counter()
            await store.put(f"/primus/bench/{round_}", b"x")
            await store.delete(f"/primus/bench/{round_}")
            floor.append(time.perf_counter() - started)
            name = f"primus.app.bench-{round_}"
            grants = identity_grants("/primus", f"bench-{round_}")
            started = time.perf_counter()
            await store.add_identity(name, "pw-" + str(round_), grants)
            await store.remove_identity(name)
            made.append(time.perf_counter() - started)
    finally:
        await store.close()
    return made, floor


async def submit_to_running(store, settings, spec, user: str | None) -> float:
    from primus.client.service import ApplicationService  # noqa: PLC0415
    from primus.config.inventory import local_inventory  # noqa: PLC0415

    service = ApplicationService(store, settings)
    try:
        started = time.perf_counter()
        app_id = await service.submit(spec, local_inventory(), user=user)
        while True:
            report = await service.get_app(app_id)
            states = [ex.live.state.value for ex in report.view.executors.values()
                      if ex.live is not None]
            if len(states) == spec.roles[0].num and all(s == "RUNNING" for s in states):
                took = time.perf_counter() - started
                break
            if report.view.status.state.terminal:
                raise SystemExit(f"{app_id} ended: {report.view.status.diagnosis}")
            await asyncio.sleep(0.02)
        await service.request_kill(app_id, "benchmark done", "bench")
        await service.wait_for_end(app_id)
        return took
    finally:
        await service.close()


async def submissions(shared, owners, spec, repeat: int) -> dict[str, list[float]]:
    """Both modes, interleaved, on one connection; this process leads admission throughout
    (a server does on a shared deployment, where an owner's AM does not)."""
    from primus.scheduler.leader import AdmissionLeader  # noqa: PLC0415
    from primus.store.connect import open_store  # noqa: PLC0415

    store, shared = await open_store(shared)
    owners = dataclasses.replace(owners, etcd=shared.etcd)
    admission = asyncio.ensure_future(AdmissionLeader(store, shared.prefix).run())
    times: dict[str, list[float]] = {"shared identity": [], "owners": []}
    try:
        for _ in range(repeat):
            times["shared identity"].append(await submit_to_running(store, shared, spec, None))
            times["owners"].append(await submit_to_running(store, owners, spec, "alice"))
    finally:
        admission.cancel()
        await store.close()
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--executors", type=int, default=4)
    parser.add_argument("--bcrypt-cost", type=int, default=4,
                        help="etcd's --bcrypt-cost (the playbook deploys 4; etcd's default: 10)")
    args = parse_args(parser, argv, repeat=1, executors=1)
    from primus.config.accounts import AccountPolicy  # noqa: PLC0415
    from primus.config.etcd import EtcdConfig  # noqa: PLC0415
    from primus.config.loader import load_job_text  # noqa: PLC0415
    from primus.config.site import load_settings  # noqa: PLC0415
    from primus.store.embedded import find_etcd_binary, start_etcd, stop_pid  # noqa: PLC0415
    from tests.support.owners import ensure_accounts, missing_parts, owners_python  # noqa: PLC0415

    if missing_parts() or os.getuid() != 0:
        raise SystemExit(f"run as root with {missing_parts() or 'sudo and useradd'}")
    ensure_accounts()
    python = owners_python()
    if Path(sys.executable).resolve() != python.resolve():
        # The AM host's interpreter is this process's: alice must be able to run it.
        os.execv(str(python), [str(python), *sys.argv])
    with tempfile.TemporaryDirectory(prefix="primus-bench-owners-") as tmp:
        root = Path(tmp)
        process, info = start_etcd(root / "etcd-data", root / "etcd.log",
                                   extra_args=("--bcrypt-cost", str(args.bcrypt_cost)))
        try:
            etcdctl = [str(find_etcd_binary("etcdctl")), "--endpoints", info.client_url]
            subprocess.run([*etcdctl, "user", "add", f"root:{ROOT_PASSWORD}"], check=True,
                           capture_output=True)
            subprocess.run([*etcdctl, "auth", "enable"], check=True, capture_output=True)
            config = EtcdConfig(endpoints=(info.client_url,), user="root",
                                password=ROOT_PASSWORD)
            made, floor = asyncio.run(identity_costs(config, args.repeat * 4))
            shared = load_settings(env={
                "PRIMUS_CONF": "-", "PRIMUS_HOME": str(root / "home"),
                "PRIMUS_ETCD": info.client_url, "PRIMUS_ETCD_USER": "root",
                "PRIMUS_ETCD_PASSWORD": ROOT_PASSWORD})
            owners = dataclasses.replace(shared, accounts=AccountPolicy())
            spec = load_job_text(JOB.format(executors=args.executors), "bench", None)
            times = asyncio.run(submissions(shared, owners, spec, args.repeat))
        finally:
            stop_pid(process.pid)
    table = Table(title=f"Applications as their owners ({args.executors} executors, "
                        f"{args.repeat} runs each; identity: {args.repeat * 4}; etcd "
                        f"--bcrypt-cost {args.bcrypt_cost})")
    for column in ("measure", "median (ms)", "min (ms)", "ratio"):
        table.add_column(column, justify="right" if column != "measure" else "left")
    floor_median = statistics.median(floor)
    table.add_row("put + delete (floor)", f"{floor_median * 1e3:.1f}",
                  f"{min(floor) * 1e3:.1f}", "1.00")
    table.add_row("identity made + removed", f"{statistics.median(made) * 1e3:.1f}",
                  f"{min(made) * 1e3:.1f}", f"{statistics.median(made) / floor_median:.2f}")
    base = statistics.median(times["shared identity"])
    for name, values in times.items():
        ratio = statistics.median(values) / base
        table.add_row(f"submit → running, {name}", f"{statistics.median(values) * 1e3:.0f}",
                      f"{min(values) * 1e3:.0f}", f"{ratio:.2f}" + (
                          f" (target ≤ {TARGET})" if name == "owners" else ""))
    Console().print(table)


if __name__ == "__main__":
    main()
