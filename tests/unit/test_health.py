"""Host health: what a host's check finds (run here, on real processes), and how a finding
moves the host's condition (a pure decision)."""

from __future__ import annotations

import pytest

from primus.launcher.health import REASON_CHARS, check_here
from primus.scheduler.health import HEALTH_CHECK, next_condition
from primus.state.records import HostCondition

DRAINED = HostCondition(state="drained", reason="new disks", since=1.0, by="alice")


def quarantined(reason: str = "exit 1", passes: int = 0) -> HostCondition:
    return HostCondition(state="quarantined", reason=reason, since=5.0, by=HEALTH_CHECK,
                         passes=passes)


def test_a_failing_host_is_quarantined_and_keeps_its_since_while_the_reason_changes():
    assert next_condition(None, "exit 1", 9.0, 3) == HostCondition(
        state="quarantined", reason="exit 1", since=9.0, by=HEALTH_CHECK)
    same = quarantined()
    assert next_condition(same, "exit 1", 9.0, 3) is same, "nothing to write"
    assert next_condition(same, "exit 2", 9.0, 3) == quarantined("exit 2")


def test_a_quarantined_host_is_readmitted_after_passing_readmit_after_times_in_a_row():
    once = next_condition(quarantined(), None, 9.0, 3)
    twice = next_condition(once, None, 9.0, 3)
    assert (once.passes, twice.passes) == (1, 2)
    assert next_condition(twice, None, 9.0, 3) is None
    assert next_condition(twice, "exit 1", 9.0, 3).passes == 0, "a failure starts again"
    assert next_condition(None, None, 9.0, 3) is None


def test_the_health_check_never_touches_a_drained_host():
    assert next_condition(DRAINED, "exit 1", 9.0, 3) is DRAINED
    assert next_condition(DRAINED, None, 9.0, 1) is DRAINED


@pytest.mark.parametrize(("command", "reason"), [
    ("true", None),
    ("echo disk full >&2; exit 3", "exit 3: disk full"),
    ("sleep 30", "timed out after 1s"),
    ("kill -KILL $$", "killed by SIGKILL"),
])
def test_the_sites_check_command_is_bounded_and_said_in_one_line(command, reason):
    found = check_here({"command": command, "timeout": 1})
    assert found == (None if reason is None else f"health check `{command}`: {reason}")


def test_a_check_that_prints_megabytes_keeps_the_start_of_its_first_line():
    found = check_here({"command": "yes 0123456789 | tr -d '\\n' | head -c 5000000; exit 1",
                        "timeout": 10})
    assert found is not None and "\n" not in found
    assert found.endswith("0123456789" * 20 + "…")
    assert len(found.split(": ", 2)[2]) == REASON_CHARS + 1


def test_too_little_free_space_and_a_gpu_host_without_nvidia_smi_are_unhealthy(tmp_path):
    found = check_here({"home": str(tmp_path), "min_free": 1 << 60})
    assert found is not None and found.startswith("free space: ")
    assert found.endswith(f"left in {tmp_path} (needs 1048576 TiB)")
    assert check_here({"home": str(tmp_path), "gpus": 2, "min_free": 0}) == \
        "nvidia-smi: not found, on a host that declares GPUs"
