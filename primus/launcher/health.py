"""A host's health as the host itself sees it: run there by ``primus.launcher.remote health``
(or in process for the local launcher), for the admission leader's health check
(``primus.scheduler.health``).

Built in: free space where applications write (the host's Primus home), and on a host that
declares GPUs, ``nvidia-smi`` answering with no uncorrectable ECC error. Then the site's own
check (``primus_health_check``, a shell command) with a timeout; its output is bounded (what
it prints goes to a file, of which the reason keeps the first line).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from typing import Any

from primus.config.spec import size_text

REASON_CHARS = 200
"""The most of a check's output a reason keeps (its first line)."""


def check_here(request: dict[str, Any]) -> str | None:
    """Why this host is not healthy, in one line; ``None`` when it is.

    ``request``: ``home`` (where applications write), ``min_free`` (bytes), ``gpus`` (the
    devices the host declares), ``command`` (the site's check, or empty) and ``timeout``
    (seconds, for the command and ``nvidia-smi`` each).
    """
    home = os.path.expanduser(str(request.get("home") or "~/.primus"))
    where = home if os.path.isdir(home) else os.path.dirname(home.rstrip("/")) or "/"
    try:
        free = shutil.disk_usage(where).free
    except OSError as exc:
        return f"free space: cannot read {where}: {exc.strerror}"
    if free < int(request.get("min_free") or 0):
        return (f"free space: {size_text(free)} left in {where} (needs "
                f"{size_text(int(request['min_free']))})")
    timeout = float(request.get("timeout") or 10)
    if int(request.get("gpus") or 0) > 0:
        why = _gpus(timeout)
        if why is not None:
            return why
    command = str(request.get("command") or "")
    return _command(command, timeout) if command else None


def _gpus(timeout: float) -> str | None:
    """``nvidia-smi`` answers, and no GPU counts an uncorrectable ECC error."""
    if shutil.which("nvidia-smi") is None:
        return "nvidia-smi: not found, on a host that declares GPUs"
    failed, output = _run(["nvidia-smi", "--query-gpu=index,ecc.errors.uncorrected.volatile.total",
                           "--format=csv,noheader,nounits"], timeout)
    if failed:
        return f"nvidia-smi: {failed}"
    for line in output.splitlines():
        index, _, errors = (part.strip() for part in line.partition(","))
        if errors.isdigit() and int(errors) > 0:
            return f"GPU {index}: {errors} uncorrectable ECC error(s)"
    return None


def _command(command: str, timeout: float) -> str | None:
    failed, _ = _run(["/bin/sh", "-c", command], timeout)
    return f"health check `{_shorten(command)}`: {failed}" if failed else None


def _run(argv: list[str], timeout: float) -> tuple[str, str]:
    """Run ``argv`` in a session of its own, its output in a file; what went wrong (empty when
    it exited 0) and the start of what it printed."""
    with tempfile.TemporaryFile() as output:
        try:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=output,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            return f"cannot run: {exc.strerror}", ""
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return f"timed out after {timeout:g}s", ""
        output.seek(0)
        said = output.read(4096).decode(errors="replace")
    first = next((line.strip() for line in said.splitlines() if line.strip()), "")
    if code < 0:
        return f"killed by {signal.Signals(-code).name}" + (f": {_shorten(first)}"
                                                             if first else ""), said
    if code > 0:
        return f"exit {code}" + (f": {_shorten(first)}" if first else ""), said
    return "", said


def _shorten(text: str) -> str:
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS] + "…"
