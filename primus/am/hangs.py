"""What the AM makes of a hang (``primus/executor/hang.py`` reports them): when the stacks are
in, where each rank stands in one sentence, and what the role's ``on_hang`` asks for. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from primus.state.records import HangReport, TrainerStacks
from primus.state.states import ExecutorState
from primus.state.view import AppView, ExecutorId

STACKS_WAIT = 15.0
"""Seconds after a hang is reported that the AM waits for the stacks of every rank; those
still missing are then named as such."""
HANGS_KEPT = 5
"""The hangs whose stacks are kept in etcd (and so in the history): the last five."""
NAMED = 4
"""Ranks a summary names in a group before it counts the rest."""
COLLECTIVE = re.compile(r"all_reduce|all_gather|allreduce|allgather|reduce_scatter|broadcast|"
                        r"barrier|all_to_all|alltoall|\brecv\b|\bsend\b|wait\b|distributed_c10d"
                        r"|nccl|gloo|horovod", re.IGNORECASE)
"""Where a rank waits for the others: a summary names the ranks that stand elsewhere first."""


@dataclass(frozen=True)
class HandleHang:
    """Record hang ``report`` handled with its ``summary`` (an event too); ``restart``: the
    role's trainers stop as hung; ``fail``: the application fails, saying where they stood.
    ``forget``: the hangs before it whose stacks are deleted (beyond :data:`HANGS_KEPT`)."""

    report: HangReport
    summary: str
    restart: bool
    fail: bool
    forget: tuple[int, ...] = ()


def ranks(view: AppView, role: str) -> list[ExecutorId]:
    """The executors of ``role`` whose trainers run: those a hang asks for stacks."""
    return [key for key, ex in sorted(view.executors.items())
            if key[0] == role and view.is_current(key) and ex.plan is not None
            and ex.plan.state is ExecutorState.RUNNING]


def hang_action(view: AppView, now: float) -> HandleHang | None:
    """The hang to handle now: reported, not handled, and every rank's stacks in or
    :data:`STACKS_WAIT` passed."""
    report = view.hang
    if report is None or report.handled:
        return None
    role = next((r for r in view.spec.roles if r.name == report.role), None)
    members = ranks(view, report.role)
    given = {(r, i): s for (hang, r, i), s in view.stacks.items() if hang == report.id}
    if any(member not in given for member in members) and now < report.time + STACKS_WAIT:
        return None
    on_hang = role.on_hang if role is not None else "report"
    summary = summarize(report, given, [m for m in members if m not in given])
    forget = tuple(sorted({hang for hang, _, _ in view.stacks if hang <= report.id - HANGS_KEPT}))
    return HandleHang(report, summary, restart=on_hang == "restart", fail=on_hang == "fail",
                      forget=forget)


def summarize(report: HangReport, given: Mapping[ExecutorId, TrainerStacks],
              missing: Sequence[ExecutorId]) -> str:
    """Where each rank stands: first those outside a collective operation, then by fewest
    ranks; ``worker-3 on h2 in `all_reduce (c10d.py:9)`; the other 7 in `barrier
    (c10d.py:40)``` (or ``all 8 in …`` when they agree)."""
    groups: dict[str, list[ExecutorId]] = {}
    for key in sorted(given):
        groups.setdefault(given[key].where or "(unknown)", []).append(key)
    ordered = sorted(groups.items(), key=lambda item: (bool(COLLECTIVE.search(item[0])),
                                                       len(item[1]), item[0]))
    parts = []
    for position, (where, keys) in enumerate(ordered):
        if len(ordered) == 1:
            parts.append(f"{_who(keys, given) if len(keys) == 1 else f'all {len(keys)}'} "
                         f"in `{where}`")
        elif position == len(ordered) - 1 and position > 0:
            parts.append(f"the other {len(keys)} in `{where}`")
        else:
            parts.append(f"{_who(keys, given)} in `{where}`")
    if missing:
        parts.append("no stacks from " + ", ".join(f"{r}-{i}" for r, i in missing[:NAMED])
                     + (f" and {len(missing) - NAMED} more" if len(missing) > NAMED else ""))
    said = "; ".join(parts) or "no stacks taken"
    return (f"{report.role}-{report.index} on {report.host} idle for {report.idle:.0f}s; "
            f"{said}")


def _who(keys: Sequence[ExecutorId], given: Mapping[ExecutorId, TrainerStacks]) -> str:
    named = [f"{role}-{index} on {given[(role, index)].host}" for role, index in keys[:NAMED]]
    more = len(keys) - NAMED
    return ", ".join(named) + (f" and {more} more" if more > 0 else "")
