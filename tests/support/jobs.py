"""Jobs the topology tests run: trainers that sleep until they are stopped."""

from __future__ import annotations

from pathlib import Path

READER_JOB = """
name: reader
policy: {stop_grace: 2s}
roles:
  - name: worker
    num: 1
    cpu: 0.1
    command: sleep 600
  - name: ps
    num: 1
    cpu: 0.1
    command: sleep 600
data:
  - name: train
    roles: [worker]
    sources:
      - path: data/day-1-*.txt
    format: text
"""
"""Two roles (worker, ps); the workers' stream ``train`` reads ``data/day-1-*.txt`` of the job
file's directory (see :func:`write_days`)."""


def write_days(directory: Path, *names: str) -> Path:
    """``directory/data`` holding the files ``names`` (two lines each); return it."""
    data = directory / "data"
    data.mkdir(exist_ok=True)
    for name in names:
        (data / name).write_text("one\ntwo\n")
    return data
