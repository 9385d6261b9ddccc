"""The client layer the CLI and the API share, called directly: real etcd, real log files."""

from __future__ import annotations

from pathlib import Path

import pytest

from primus.client import service as service_module
from primus.client.api import LogSource
from primus.client.service import LOG_LINES_AHEAD, ApplicationService
from primus.config.inventory import local_inventory
from primus.config.site import Settings
from primus.config.spec import JobSpec
from primus.launcher.api import LaunchError
from primus.state.keys import AppKeys, am_keeper_key


def write_log(path: Path, name: str, lines: int) -> list[str]:
    """A log of ``lines`` lines and a last one without its line break; return its lines."""
    expected = [f"{name} {i}" for i in range(lines)] + [f"{name} last, unterminated"]
    path.write_text("\n".join(expected))
    return expected


async def test_read_logs_gives_every_line_of_each_log_in_order_however_long(store, prefix,
                                                                           tmp_path):
    service = ApplicationService(store, Settings(home=tmp_path, prefix=prefix))
    here = local_inventory()[0]
    expected = {name: write_log(tmp_path / f"{name}.log", name, 5 * LOG_LINES_AHEAD)
                for name in ("worker-0", "worker-1")}
    sources = [LogSource(name, here, str(tmp_path / f"{name}.log")) for name in expected]

    read = [line async for line in service.read_logs("app-1", sources)]

    for name, lines in expected.items():
        assert [line.text for line in read if line.source == name] == lines
    assert len(read) == sum(len(lines) for lines in expected.values())


async def test_read_logs_raises_the_error_that_made_a_log_unreadable(store, prefix, tmp_path):
    service = ApplicationService(store, Settings(home=tmp_path, prefix=prefix))
    here = local_inventory()[0]
    write_log(tmp_path / "worker-0.log", "worker-0", 3)
    sources = [LogSource("worker-0", here, str(tmp_path / "worker-0.log")),
               LogSource("worker-1", here, str(tmp_path / "missing.log"))]

    with pytest.raises(LaunchError, match="cannot read log .*missing.log"):
        async for _ in service.read_logs("app-1", sources):
            pass


async def test_a_drawn_application_id_that_is_taken_is_drawn_again(store, prefix, tmp_path,
                                                                    monkeypatch):
    """Ids carry 16 random bits after the second: an array's members submitted in one second
    can draw the same one (a 200-member array did). The submission draws again; the
    application that holds the id is untouched."""
    service = ApplicationService(store, Settings(home=tmp_path, prefix=prefix))
    await store.put(am_keeper_key(prefix), b"{}")  # a keeper leads: the submission parks
    taken = AppKeys(prefix, "hello-taken")
    await store.put(taken.status, b"theirs")
    draws = iter(["hello-taken", "hello-taken", "hello-free"])
    monkeypatch.setattr(service_module, "new_app_id", lambda name: next(draws))
    spec = JobSpec.model_validate({"name": "hello", "roles": [
        {"name": "worker", "command": "true"}]})

    assert await service.submit(spec, local_inventory(), park=True) == "hello-free"
    kv = await store.get(taken.status)
    assert kv is not None and kv.value == b"theirs"
    assert await store.get(taken.spec) is None, "nothing of the new one under the taken id"
    assert (await service.get_app("hello-free")).view.status.parked
