"""Per-test CPU time, for keeping the suite inside CI's minutes (docs/testing.md): loaded with
``-p tests.support.cpu_accounting``, each test worker moves itself into a cgroup v1 ``cpuacct``
group of its own, which every process a test starts inherits (etcd, servers, AMs, executors,
sshd sessions, Ansible), and appends ``CPU-SECONDS WALL-SECONDS TEST`` per test to
``$PRIMUS_TEST_CPU_LOG`` (default ``/tmp/primus-test-cpu.log``).

A process a test leaves running (a forker, a server of a module's fixture) counts to the tests
after it on that worker. Off unless loaded; needs root and cgroup v1's cpuacct, and is a
measuring aid, never a test."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

CPUACCT = Path("/sys/fs/cgroup/cpuacct")
_group: Path | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _group  # noqa: PLW0603 - one group per worker process
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None or not CPUACCT.is_dir():
        return  # the controller process runs no test
    _group = CPUACCT / f"primus-test-{worker}"
    _group.mkdir(exist_ok=True)
    (_group / "cgroup.procs").write_text(str(os.getpid()))


def _used() -> float:
    assert _group is not None
    return int((_group / "cpuacct.usage").read_text()) / 1e9


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if _group is None:
        yield
        return
    cpu, wall = _used(), time.monotonic()
    yield
    log = os.environ.get("PRIMUS_TEST_CPU_LOG", "/tmp/primus-test-cpu.log")
    with open(log, "a") as out:
        out.write(f"{_used() - cpu:.2f} {time.monotonic() - wall:.1f} {item.nodeid}\n")
