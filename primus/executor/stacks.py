"""A trainer's stacks, taken from outside while it runs: every Python process of its process
tree through py-spy (which reads them from memory and does not change the process), any other
process through the kernel's view in /proc (each thread's name, state, wait channel and, where
readable, kernel stack).

``where`` says in one phrase where the trainer stands: the innermost frame of the trainer's own
code in the main thread of its first Python process, then the innermost frame of the library
it called (``wait_for_ever (train.py:6) → Condition.wait (threading.py:327)``: every wait on
an Event, a Queue or a Lock would otherwise read the same), else what the main thread of its
first process waits in (``sleep waiting in hrtimer_nanosleep``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

MAX_TEXT = 64 * 1024
"""Characters of stacks kept per trainer (an etcd value; the rest is cut, saying so)."""
PY_SPY_TIMEOUT = 10.0
"""Seconds py-spy is given per process."""
LIBRARY = re.compile(r"^<frozen |/(site|dist)-packages/|/lib(64)?/python\d[^/]*/")
"""A frame's file that is no code of the trainer's: the standard library (``lib/python3.11/``,
frozen modules) and installed packages."""


@dataclass(frozen=True)
class Stacks:
    where: str
    text: str
    python: bool


def py_spy() -> str | None:
    """The py-spy beside this interpreter (Primus's own dependency), else one on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


async def take(pid: int) -> Stacks:
    """The stacks of process ``pid`` and every process under it, root first."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return Stacks("(the trainer has exited)", "", python=False)
    texts: list[str] = []
    python_where = kernel_where = ""
    for process in processes:
        threads = await _python_threads(process.pid)
        try:
            command = " ".join(process.cmdline())[:300]
        except psutil.Error:
            command = "(exited)"
        if threads is not None:
            texts.append(_render_python(process.pid, command, threads))
            python_where = python_where or where_in(_main_thread(process.pid, threads))
        else:
            text, waits = _kernel_view(process.pid, command)
            texts.append(text)
            kernel_where = kernel_where or waits
    text = "\n".join(texts)
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT] + f"\n… cut at {MAX_TEXT} characters"
    return Stacks(python_where or kernel_where, text, python=bool(python_where))


async def _python_threads(pid: int) -> list[dict[str, Any]] | None:
    """py-spy's JSON dump of ``pid``'s threads; ``None`` when it is not a Python process (or
    py-spy cannot read it)."""
    binary = py_spy()
    if binary is None:
        return None
    try:
        dump = await asyncio.create_subprocess_exec(
            binary, "dump", "--pid", str(pid), "--json", stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL)
    except OSError:
        return None
    try:
        async with asyncio.timeout(PY_SPY_TIMEOUT):
            out, _ = await dump.communicate()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            dump.kill()
        await dump.wait()
        return None
    if dump.returncode != 0:
        return None
    try:
        threads = json.loads(out)
    except ValueError:
        return None
    return threads if isinstance(threads, list) and threads else None


def _main_thread(pid: int, threads: list[dict[str, Any]]) -> dict[str, Any]:
    return next((t for t in threads if t.get("os_thread_id") == pid), threads[0])


def _frame(frame: dict[str, Any]) -> str:
    return f"{frame.get('name')} ({frame.get('short_filename') or frame.get('filename')}:" \
           f"{frame.get('line')})"


def where_in(thread: dict[str, Any]) -> str:
    """Where ``thread`` (py-spy's, innermost frame first) stands: its innermost frame outside
    the standard library and installed packages, followed by the innermost frame when that is
    in one (``wait_for_ever (train.py:6) → wait (threading.py:327)``); the innermost frame
    alone when no frame is the trainer's own."""
    frames = thread.get("frames") or []
    if not frames:
        return ""
    own = next((frame for frame in frames
                if not LIBRARY.search(str(frame.get("filename") or ""))), frames[0])
    return _frame(own) if own is frames[0] else f"{_frame(own)} → {_frame(frames[0])}"


def _render_python(pid: int, command: str, threads: list[dict[str, Any]]) -> str:
    lines = [f"Process {pid}: {command}"]
    for thread in threads:
        name = thread.get("thread_name") or ""
        state = "active" if thread.get("active") else "idle"
        lines.append(f"Thread {thread.get('os_thread_id')} {name} ({state})".replace("  ", " "))
        lines += [f"    {_frame(frame)}" for frame in thread.get("frames") or []]
    return "\n".join(lines) + "\n"


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return ""


def _kernel_view(pid: int, command: str) -> tuple[str, str]:
    """The text of ``pid``'s threads as the kernel shows them, and where its main thread
    waits."""
    lines = [f"Process {pid}: {command} (not Python: the kernel's view)"]
    waits = ""
    tasks = Path(f"/proc/{pid}/task")
    try:
        tids = sorted(int(t.name) for t in tasks.iterdir())
    except OSError:
        return f"Process {pid}: (exited)\n", "(exited)"
    for tid in tids:
        task = tasks / str(tid)
        comm = _read(task / "comm")
        stat = _read(task / "stat")
        state = stat.rsplit(")", 1)[-1].split()[0] if ")" in stat else "?"
        wchan = _read(task / "wchan") or "-"
        lines.append(f"Thread {tid} {comm} state {state} waiting in {wchan}")
        lines += [f"    {line}" for line in _read(task / "stack").splitlines()]
        if tid == pid:
            waits = f"{comm} waiting in {wchan}" if wchan not in ("-", "0") else \
                f"{comm} (state {state})"
    return "\n".join(lines) + "\n", waits
