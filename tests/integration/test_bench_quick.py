"""Every benchmark in bench/ runs at HEAD (issue 28): each one's ``--quick`` mode
(``tests/support/benchmarks.py``). ``bench_deploy``'s runs in ``test_deploy.py``, over the
deployment the tests there made, instead of deploying a site of its own.

A benchmark that needs a component (the SSH test hosts, pdsh, Ansible, Chromium, cgroups, the
owners' accounts, torch) exits non-zero without it, naming it: the test fails, never skips."""

from __future__ import annotations

import pytest

from tests.support.benchmarks import PRINTS, assert_quick_run
from tests.support.primus import REPO

ELSEWHERE = {"bench_deploy": "tests/integration/test_deploy.py"}
"""Benchmarks whose quick run is a test of another module: where."""


def test_every_benchmark_has_a_quick_run_here() -> None:
    assert sorted(PRINTS) == sorted(path.stem for path in (REPO / "bench").glob("bench_*.py"))
    for benchmark, module in ELSEWHERE.items():
        assert f'assert_quick_run("{benchmark}"' in (REPO / module).read_text(), module


@pytest.mark.timeout(600)
@pytest.mark.parametrize("benchmark", sorted(set(PRINTS) - set(ELSEWHERE)))
def test_quick_mode_of_the_benchmark_runs_every_part_and_prints_every_table(
        benchmark: str) -> None:
    assert_quick_run(benchmark)
