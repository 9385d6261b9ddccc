"""Benchmark: topology-aware GPU placement (issue 44) against today's first fit, in one run.

A stream of jobs of 1, 2, 4 and 8 GPUs (40, 30, 20 and 10 %) arrives on ``--hosts`` (128)
simulated 8-GPU hosts, half NVSwitch nodes (every pair NVLinked, four GPUs a socket), half PCIe
hosts (switches of two GPUs, two switches a socket); each job runs for a random time and ends.
2-GPU jobs ask for ``switch`` locality, 4-GPU ones for ``numa``. Both policies see the same
stream (same seed), a job that fits nowhere is turned away:

* **spread** (Primus's default ``placement``): the host with the most free GPUs, its lowest
  free indices;
* **first fit** (``placement: pack``): the first host with as many free GPUs, its lowest free
  indices;
* **topology-aware**: among the hosts where :func:`~primus.scheduler.gpu_topology.choose_devices`
  finds a set within the locality, the one with the fewest free GPUs (best fit), that set.

Reported once the stream has run (``--jobs``, 3,000; ``--load``, 0.7, the share of the GPUs
the arrivals keep busy): whole hosts free (a slot for an 8-GPU job) at the end and on average
as the jobs arrived, 8-GPU jobs turned away, the mean link level between the GPUs of each
multi-GPU job (0 NVLink, 1 switch, 2 NUMA node, 3 across sockets) and the share of locality
requests met.
Target: at least twice the whole hosts free of today's placement, and every locality met
where a free set existed. Then the time to place one gang (8 executors of 2 GPUs, ``switch``) on
``--gang-hosts`` (1,000) hosts partly used. Target: ≤ 10 ms.

Usage: ``python bench/bench_topology.py [--hosts 128] [--jobs 3000] [--gang-hosts 1000]``
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bench_submit import console, parse_args
from rich.table import Table

from primus.scheduler.gpu_topology import GpuTopology, Link, choose_devices

NVSWITCH = GpuTopology.of_tree([[[0, 1, 2, 3]], [[4, 5, 6, 7]]], nvlink=[range(8)])
PCIE = GpuTopology.of_tree([[[0, 1], [2, 3]], [[4, 5], [6, 7]]])
SIZES = ((1, Link.ANY, 0.4), (2, Link.SWITCH, 0.3), (4, Link.NUMA, 0.2), (8, Link.ANY, 0.1))
TARGET_WHOLE = 2.0
TARGET_GANG_MS = 10.0


@dataclass
class Host:
    topology: GpuTopology
    free: set[int] = field(default_factory=lambda: set(range(8)))


Policy = Callable[[Sequence[Host], int, Link], tuple[Host, tuple[int, ...]] | None]


def first_fit(hosts: Sequence[Host], count: int, within: Link
              ) -> tuple[Host, tuple[int, ...]] | None:
    for host in hosts:
        if len(host.free) >= count:
            return host, tuple(sorted(host.free)[:count])
    return None


def spread(hosts: Sequence[Host], count: int, within: Link
           ) -> tuple[Host, tuple[int, ...]] | None:
    """Primus's default placement (``placement: spread``): the host with the most free."""
    fitting = [h for h in hosts if len(h.free) >= count]
    if not fitting:
        return None
    host = max(fitting, key=lambda h: len(h.free))
    return host, tuple(sorted(host.free)[:count])


def topology_aware(hosts: Sequence[Host], count: int, within: Link
                   ) -> tuple[Host, tuple[int, ...]] | None:
    for host in sorted((h for h in hosts if len(h.free) >= count), key=lambda h: len(h.free)):
        chosen = choose_devices(host.topology, host.free, count, within)
        if chosen is not None:
            return host, chosen
    return None


@dataclass
class Outcome:
    whole_free: int = 0
    whole_seen: list[int] = field(default_factory=list)
    """Whole hosts free as each job arrived."""
    turned_away: dict[int, int] = field(default_factory=dict)
    levels: list[float] = field(default_factory=list)
    asked: int = 0
    met: int = 0
    possible: int = 0


def run(policy: Policy, hosts_count: int, jobs: int, seed: int, load: float) -> Outcome:
    rng = random.Random(seed)
    hosts = [Host(NVSWITCH if i % 2 == 0 else PCIE) for i in range(hosts_count)]
    ending: list[tuple[float, Host, tuple[int, ...]]] = []
    out = Outcome()
    now = 0.0
    # Arrivals keep the hosts about `load` busy: mean GPUs a job 2.6, mean duration 10.
    rate = load * 8 * hosts_count / (2.6 * 10.0)
    for _ in range(jobs):
        now += rng.expovariate(rate)
        for item in [e for e in ending if e[0] <= now]:
            item[1].free |= set(item[2])
            ending.remove(item)
        count, within = rng.choices([(c, w) for c, w, _ in SIZES],
                                    weights=[p for _, _, p in SIZES])[0]
        out.whole_seen.append(sum(len(h.free) == 8 for h in hosts))
        if within < Link.ANY:
            out.asked += 1
            out.possible += any(choose_devices(h.topology, h.free, count, within) is not None
                                for h in hosts)
        placed = policy(hosts, count, within)
        if placed is None:
            out.turned_away[count] = out.turned_away.get(count, 0) + 1
            continue
        host, devices = placed
        host.free -= set(devices)
        level = host.topology.level_of(devices)
        if count > 1:
            out.levels.append(float(level))
        if within < Link.ANY and level <= within:
            out.met += 1
        ending.append((now + rng.expovariate(1 / 10.0), host, devices))
    out.whole_free = sum(len(h.free) == 8 for h in hosts)
    return out


def mean_whole(out: Outcome) -> float:
    """Whole hosts free, on average over the arrivals (at least 0.1: a ratio's divisor)."""
    return max(statistics.fmean(out.whole_seen), 0.1)


def gang_ms(hosts_count: int, seed: int, repeat: int) -> float:
    """Median ms to place 8 executors of 2 GPUs (``switch``) on ``hosts_count`` hosts, each
    with a random half of its GPUs taken."""
    rng = random.Random(seed)
    template = [Host(NVSWITCH if i % 2 == 0 else PCIE,
                     set(rng.sample(range(8), rng.randint(0, 8)))) for i in range(hosts_count)]
    times = []
    for _ in range(repeat):
        hosts = [Host(h.topology, set(h.free)) for h in template]
        began = time.perf_counter()
        for _ in range(8):
            placed = topology_aware(hosts, 2, Link.SWITCH)
            if placed is None:
                raise RuntimeError("the gang does not fit: more hosts are needed")
            placed[0].free -= set(placed[1])
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=128)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--gang-hosts", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=44)
    parser.add_argument("--load", type=float, default=0.7,
                        help="share of the GPUs the arrivals keep busy (default 0.7)")
    args = parse_args(parser, argv, hosts=16, jobs=300, gang_hosts=100)
    console.print(f"2 cores, Python {platform.python_version()}: {args.hosts} hosts of 8 GPUs, "
                  f"{args.jobs} jobs, load {args.load:g}, seed {args.seed}")
    outcomes = {name: run(policy, args.hosts, args.jobs, args.seed, args.load)
                for name, policy in (("spread (today's default)", spread),
                                     ("first fit (today's pack)", first_fit),
                                     ("topology-aware", topology_aware))}
    base = outcomes["first fit (today's pack)"]
    table = Table(title=f"GPU placement on {args.hosts} simulated 8-GPU hosts "
                        f"(half NVSwitch, half PCIe), {args.jobs} jobs", title_justify="left")
    for column in ("policy", "whole hosts free at the end", "on average", "÷ first fit",
                   "8-GPU jobs turned away", "mean link level of multi-GPU jobs",
                   "locality met / possible"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for name, out in outcomes.items():
        table.add_row(name, str(out.whole_free), f"{mean_whole(out):.1f}",
                      f"{mean_whole(out) / mean_whole(base):.2f}×",
                      str(out.turned_away.get(8, 0)),
                      f"{statistics.fmean(out.levels):.2f}" if out.levels else "-",
                      f"{out.met} / {out.possible} (of {out.asked})")
    console.print(table)
    aware = outcomes["topology-aware"]
    gang = gang_ms(args.gang_hosts, args.seed, 5)
    targets = Table(title="Placing one gang, and issue 44's targets", title_justify="left")
    for column in ("measure", "value", "target"):
        targets.add_column(column, justify="left" if column == "measure" else "right")
    for name in ("spread (today's default)", "first fit (today's pack)"):
        ratio = mean_whole(aware) / mean_whole(outcomes[name])
        targets.add_row(f"whole hosts free on average, topology-aware ÷ {name}",
                        f"{ratio:.2f}×",
                        f"≥ {TARGET_WHOLE:g}×: {'met' if ratio >= TARGET_WHOLE else 'missed'}")
    targets.add_row("locality requests met where a free set existed",
                    f"{aware.met} / {aware.possible}",
                    f"all: {'met' if aware.met >= aware.possible else 'missed'}")
    targets.add_row(f"one gang of 8 × 2 GPUs (switch) on {args.gang_hosts} hosts (ms, p50)",
                    f"{gang:.2f}", f"≤ {TARGET_GANG_MS:g} ms: "
                    f"{'met' if gang <= TARGET_GANG_MS else 'missed'}")
    console.print(targets)
    return 0


if __name__ == "__main__":
    sys.exit(main())
