"""The harness's check that an application left nothing behind (``tests/support/apps.py``),
tested itself: it must find each kind of process an application runs where the product puts
it, or every test that ends with it passes whatever the application left."""

from __future__ import annotations

import secrets
import signal
from collections.abc import Iterator

import psutil
import pytest

from primus.config.inventory import local_inventory
from primus.config.site import load_settings
from primus.launcher import agent
from primus.launcher.layout import agent_dir
from tests.support.apps import (
    agents_of,
    assert_nothing_left,
    host_services_of,
    status_json,
    write_job,
)
from tests.support.primus import run_primus
from tests.support.waiting import wait_until


@pytest.fixture
def stopped_agent(primus_env: dict[str, str]) -> Iterator[tuple[str, psutil.Process]]:
    """An application id and a real host agent of it, started in the application's directory
    for this host as the AM has it started (:func:`primus.launcher.layout.agent_dir`) and then
    stopped (SIGSTOP): an agent that never exits, as one no AM released and whose idle exit is
    broken would be. Killed at the end."""
    app_id = f"left-{secrets.token_hex(4)}"
    directory = str(agent_dir(local_inventory()[0], load_settings(env=primus_env), app_id))
    agent.spawn_many(directory, [])  # no executor: the agent alone
    [started] = [child for child in psutil.Process().children()
                 if "primus.launcher.agent" in child.cmdline()]
    started.send_signal(signal.SIGSTOP)
    try:
        yield app_id, started
    finally:
        started.kill()
        started.wait(10)


def test_a_host_agent_left_in_the_applications_host_directory_fails_the_check_naming_it(
        stopped_agent):
    app_id, left = stopped_agent
    with pytest.raises(AssertionError) as failure:
        assert_nothing_left(app_id)
    message = str(failure.value)
    assert f"host agents, lease keepers or launcher commands of {app_id} left" in message, \
        message
    assert f"{left.pid}: " in message and "-m primus.launcher.agent" in message, message
    assert f"/apps/{app_id}/hosts/" in message, message


def test_a_running_applications_host_agent_and_lease_keeper_are_found_then_gone_after_kill(
        primus_env, tmp_path):
    job = write_job(tmp_path / "job.yaml", """
name: watched
roles:
  - name: worker
    command: sleep 600
""")
    submitted = run_primus(primus_env, "submit", str(job))
    assert submitted.returncode == 0, submitted.stderr
    app_id = submitted.stdout.strip()
    wait_until(lambda: status_json(primus_env, app_id)["status"]["state"] == "RUNNING", 30,
               f"{app_id} to run")
    directory = agent_dir(local_inventory()[0], load_settings(env=primus_env), app_id)
    agents = agents_of(app_id)
    assert len(agents) == 1, f"one host agent of {app_id} expected, found {agents}"
    found = agents[0]
    assert found.cmdline()[3] == str(directory)
    titles = sorted(" ".join(p.cmdline()).strip() for p in host_services_of(app_id))
    assert titles == sorted([" ".join(found.cmdline()), f"primus lease keeper {app_id}"])

    killed = run_primus(primus_env, "kill", app_id)
    assert killed.returncode == 0, killed.stderr
    assert_nothing_left(app_id)
