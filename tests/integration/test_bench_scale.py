"""The scale model's quick mode (bench/bench_scale.py): simulated hosts, each a lease keeper and
8 executors holding its lease, against a real etcd, a real AM taking them over, a host lost, in
a few seconds. The benchmark is not timed here (nor are issue 28's targets asserted: the test
machine is busy); this keeps it running."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_scale.py"


def test_scale_model_quick_mode_adopts_96_executors_and_decides_a_lost_host() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--quick"], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for title in ("Keepalive load on etcd", "The AM over N executors", "A host lost",
                  "Keyspace", "Issue 28's targets", "Where it breaks"):
        assert title in out, out
    # The AM marked the 8 executors of the host whose lease was revoked LOST (the run waits for
    # it) within the TTL.
    assert "within" in out, out
