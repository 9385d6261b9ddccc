"""Fuzzed input through the command line, in process: ``primus spec check`` and ``primus hosts
list`` end with exit code 0, or 2 and an ``error:`` line, never a traceback, and start no etcd."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from hypothesis import example, given
from hypothesis import strategies as st

from primus.cli.main import cli
from primus.config.loader import SET_SOURCE
from tests.fuzz.checks import assert_standard_json, example_dir, run_bounded, write
from tests.fuzz.strategies import inventory_names, inventory_texts, job_texts, set_expressions

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.filterwarnings("ignore:Generating overly large repr")]


def invoke(directory: Path, args: list[str]) -> Result:
    """Run ``primus ARGS`` in this process with an empty site defaults file, a home of its own and
    no etcd named, so that a command that reached for etcd would start one there."""
    site = write(directory, "defaults.yaml", "")
    env = {"PRIMUS_CONF": str(site), "PRIMUS_HOME": str(directory / "home"), "PRIMUS_ETCD": None,
           "PRIMUS_INVENTORY": None, "PRIMUS_PREFIX": None, "COLUMNS": "120"}
    result = run_bounded(lambda: CliRunner().invoke(cli, args, env=env))
    assert isinstance(result, Result)
    return result


def assert_ended_cleanly(result: Result, directory: Path, sources: tuple[str, ...]) -> None:
    """Exit 0, or exit 2 with ``error:`` and one line per problem, each naming one of
    ``sources``; no exception but SystemExit, no traceback, and nothing written under
    PRIMUS_HOME (no etcd was started)."""
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}")
    assert result.exit_code in (0, 2), f"exit code {result.exit_code}: {result.output[-2000:]}"
    assert "Traceback" not in result.output
    if result.exit_code == 2:
        assert result.stderr.startswith("error: "), result.stderr[:2000]
        for line in result.stderr.removeprefix("error: ").splitlines():
            assert line.startswith(sources), f"{line[:2000]!r} names none of {sources}"
    assert not (directory / "home").exists(), "the command touched PRIMUS_HOME"


@example(text=f'name: demo\nroles: [{{name: w, command: x}}]\nfiles: ["{"x" * 300}"]\n',
         overrides=[])  # OSError from Path.exists(): a file name past 255 bytes (found while
# writing the suite; fixed in primus/client/preflight.py)
@given(text=job_texts(), overrides=st.lists(set_expressions, max_size=2))
def test_spec_check_exits_0_or_2_with_an_error_line(text, overrides):
    with example_dir() as directory:
        job = write(directory, "job.yaml", text)

        result = invoke(directory, ["spec", "check", str(job),
                                    *(f"--set={override}" for override in overrides)])

        assert_ended_cleanly(result, directory, (f"{job}:", f"{SET_SOURCE}:"))
        if result.exit_code == 0:
            assert_standard_json(result.stdout)


# Ranges of at most 99 hosts: the table of hosts list is slow to render (about 2 ms a host).
@given(text=inventory_texts(range_digits=2), name=inventory_names,
       output=st.sampled_from(("table", "json")))
def test_hosts_list_exits_0_or_2_with_an_error_line(text, name, output):
    with example_dir() as directory:
        inventory = write(directory, name, text)

        result = invoke(directory, ["hosts", "list", "-i", str(inventory), "-o", output])

        assert_ended_cleanly(result, directory, (str(directory),))
        if result.exit_code == 0 and output == "json":
            assert_standard_json(result.stdout)
