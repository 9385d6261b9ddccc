"""The chaos tests' application and the faults they inject.

Every trainer of :func:`submit` is ``tests/chaos/trainer.py``: it records each start and holds a
lock per executor index for as long as it lives, so a second trainer of the same index running at
the same time is caught by the kernel, not by timing.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.apps import assert_nothing_left, status_json, write_job
from tests.support.cluster import TestHost
from tests.support.primus import REPO, run_primus
from tests.support.waiting import wait_until

TRAINER = REPO / "tests" / "chaos" / "trainer.py"
TTL = 3
"""The heartbeat TTL, in seconds, of the jobs :func:`submit` writes."""

REPLACED_WITHIN = TTL + 10 + 15
"""Seconds within which an executor on a host cut off from the network is replaced elsewhere:
the AM's stop of the lost executor fails after ssh's ConnectTimeout (10 s by default) before it
relaunches; the replacement then starts and registers within a few seconds."""


@dataclass
class Run:
    """A submitted application and the evidence its trainers leave in ``records``."""

    env: dict[str, str]
    app_id: str
    records: Path

    def status(self) -> dict:
        return status_json(self.env, self.app_id)

    def executor(self, index: int, role: str = "worker") -> dict:
        return self.status()["executors"][role][index]

    def starts(self, index: int, role: str = "worker") -> list[dict]:
        path = self.records / "starts.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [s for s in map(json.loads, lines) if (s["role"], s["index"]) == (role, index)]

    def go(self) -> None:
        (self.records / "GO").touch()

    def wait_for_state(self, state: str, timeout: float = 60) -> dict:
        return wait_until(lambda: (s := self.status())["status"]["state"] == state and s,
                          timeout, f"{self.app_id} to be {state}")

    def wait_running(self, index: int, attempt: int, timeout: float = 60) -> dict:
        """Wait until attempt ``attempt`` of worker-``index`` runs its trainer, and that
        trainer has recorded its start (the executor reports RUNNING as it starts the trainer,
        which may not have run a line yet)."""
        def running() -> dict | None:
            ex = self.executor(index)
            live = ex["live"]
            ok = live and live["attempt"] == attempt and live["state"] == "RUNNING" and \
                live.get("trainer") and any(s["pid"] == live["trainer"]["pid"]
                                            for s in self.starts(index))
            return ex if ok else None
        return wait_until(running, timeout, f"worker-{index} attempt {attempt} to run")

    def messages(self) -> list[str]:
        return [e["message"] for e in self.status()["events"]]

    def assert_invariants(self, state: str, restarts: dict[int, int]) -> dict:
        """The final state, restart counts matching the policy, one start per attempt, never
        two trainers of an index at once, and nothing of the application left running."""
        status = self.wait_for_state(state)
        overlaps = self.records / "overlaps.jsonl"
        assert not overlaps.exists(), f"two trainers of one index ran at once: " \
                                      f"{overlaps.read_text()}"
        app_attempt = status["status"]["attempt"]
        for index, count in restarts.items():
            plan = status["executors"]["worker"][index]["plan"]
            assert plan["restarts"] == count, f"worker-{index}: {plan}"
            starts = [s for s in self.starts(index) if s["app_attempt"] == app_attempt]
            assert len(starts) == count + 1, starts
            assert len({s["attempt"] for s in self.starts(index)}) == len(self.starts(index)), \
                "every start is a new attempt"
        assert_nothing_left(self.app_id)
        return status


def submit(env: dict[str, str], tmp_path: Path, role: str, policy: str = "",
           trainer_args: str = "", submit_args: tuple[str, ...] = (),
           stop_grace: str = "1s", ttl: int = TTL) -> Run:
    """Submit a job with one role ``worker`` (its extra fields in ``role``) and a heartbeat TTL
    of ``ttl`` seconds; ``submit_args`` go to ``primus submit`` (``("-i", inventory)`` for
    remote hosts)."""
    records = tmp_path / "records"
    records.mkdir()
    command = json.dumps([sys.executable, str(TRAINER), str(records), *trainer_args.split()])
    job = write_job(tmp_path / "job.yaml", f"""
name: chaos
policy: {{heartbeat_ttl: {ttl}s, stop_grace: {stop_grace}, {policy}}}
roles:
  - name: worker
    command: {command}
    {role}
""")
    result = run_primus(env, "submit", str(job), *submit_args)
    assert result.returncode == 0, result.stderr
    return Run(env, result.stdout.strip(), records)


@contextmanager
def link_down(host: TestHost) -> Iterator[None]:
    """The host cut off from the network until the block ends."""
    host.link(up=False)
    try:
        yield
    finally:
        host.link(up=True)
