"""The benchmarks' quick runs (issue 28), as the suite runs them: each benchmark's ``--quick``
mode, the smallest sizes that still run every part of it, once, without waiting for a quiet
machine; and what each one prints, so that a benchmark that crashes after its first tables
fails. The figures are not read (the test machine is busy)."""

from __future__ import annotations

import subprocess
import sys

from tests.support.primus import REPO

PRINTS = {
    "bench_admission": (
        "single-executor requests written back to back", "One request at a time",
        "Host of 1 slot: A's reservation deleted", "Host of 1 slot, B waiting: condition",
        "whole benchmark"),
    "bench_autosize": ("fixed reservations against autosize", "Resize latency: a role of",
                       "The autosizer's look at", "whole benchmark"),
    "bench_api": (
        "concurrent callers, app of 1 executors", "One GetApplication's server side",
        "Write to etcd → update received by the client", "Trainers started through the API",
        "Seconds after the submit / the scale request"),
    "bench_cli": ("primus through a server vs direct",),
    "bench_data": ("Feed throughput: one feeder", "Shared memory against the pipe",
                   "Task claims: 2 executor processes", "Parquet: ", "Scanning 200 files"),
    "bench_deploy": ("Wall time (s): median (min); the first deployment ran once",
                     "trainers started, local launcher"),
    "bench_enforcement": ("one trainer started and ended (ms)", "cost per executor start"),
    "bench_hang": ("CPU per 100 trainers, % of one core",),
    "bench_kafka": ("Kafka, 100 B values", "Kafka, 1024 B values"),
    "bench_lifecycle": ("MiB stream, 4 readers, one host", "Suspend and resume, 2 executors"),
    "bench_metrics": ("GET /metrics: 2 applications in etcd",),
    "bench_owners": ("Applications as their owners",),
    "bench_recovery": (
        "Seconds from kill -9 to recovered", "trainer → new trainer runs (in place)",
        "torchrun worker → both workers run again", "executor, TTL 3s → new trainer runs",
        "leading AM, TTL 3s → standby leads"),
    # The scale model also says that the AM marked the revoked host's executors LOST within
    # the TTL (the run waits for it).
    "bench_scale": ("Keepalive load on etcd", "The AM over N executors", "A host lost",
                    "Keyspace", "Issue 28's targets", "Where it breaks", "within"),
    "bench_ssh": (
        "Time to all trainers started (s)", "Stop all N (s)", "Where primus spends it",
        "The AM's SSH calls", "Memory: USS (MB)", "The AM's lease while the executors started",
        "CPU seconds (user + system) until"),
    "bench_queue": ("applications queued through one server", "While 20 applications wait",
                    "one admission pass", "grant → its AM leads"),
    "bench_submit": (
        "Time to all trainers started (s)", "Where primus spends it",
        "CPU seconds (user + system) until",
        "Memory of one process, not its children"),
    "bench_topology": ("GPU placement on", "Placing one gang"),
    "bench_ui": ("GET over one keep-alive connection", "etcd write → the change arrives (ms)",
                 "application page in Chromium", "The server's memory"),
}
"""What each benchmark's quick run prints: the titles of its tables (the start of each, which
the console does not wrap), and, where a table has no title, a line of its own."""



def assert_quick_run(benchmark: str, *args: str) -> None:
    """Run ``bench/BENCHMARK.py --quick ARGS``; it must end well and print every one of its
    tables (:data:`PRINTS`)."""
    done = subprocess.run([sys.executable, str(REPO / "bench" / f"{benchmark}.py"), "--quick",
                           *args],
                          capture_output=True, text=True, timeout=540, check=False, cwd=REPO)
    said = f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-6000:]}"
    assert done.returncode == 0, said
    missing = [text for text in PRINTS[benchmark] if text not in done.stdout]
    assert not missing, f"not printed: {missing}\n{said}"
