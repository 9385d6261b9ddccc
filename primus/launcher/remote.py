"""What the SSH launcher runs on a host: ``python -m primus.launcher.remote COMMAND``.

Requests that carry data (the environment of a process, which may hold secrets) arrive as JSON
on stdin, never on the command line; answers are one JSON object on stdout.

Commands:
    spawn   stdin {"argv", "env", "cwd", "log_file"} → {"pid", "start_time", "home"}
    signal  PID START_TIME SIGNUM GROUP(0|1)          → {"delivered": bool}
    alive   PID START_TIME                            → {"alive": bool}
    stop    GRACE PID:START [PID:START...]            → {} once stopped (see processes.stop_group)
    probe                                             → processes.describe_host()
    unpack  DIR   stdin: a tar archive                → {"files": n}
    follow  PATH  the file's content, then what is appended, until stdin closes (raw bytes)
"""

from __future__ import annotations

import io
import json
import os
import sys
import tarfile
import threading
from typing import Any

from primus.launcher import processes
from primus.private_files import private_dir


def _spawn(request: dict[str, Any]) -> dict[str, Any]:
    child = processes.spawn_detached(request["argv"], request.get("env") or {},
                                     request["log_file"],
                                     os.path.expanduser(request["cwd"]) if request.get("cwd")
                                     else None)
    return {"pid": child.pid, "start_time": processes.start_time_of(child.pid),
            "home": os.path.expanduser("~")}


def _unpack(target: str, archive: bytes) -> dict[str, Any]:
    target = os.path.expanduser(target)
    private_dir(target)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = tar.getmembers()
        tar.extractall(target, filter="data")  # refuses absolute paths, .., device files
    return {"files": len(members)}


def _follow(path: str) -> None:
    """Copy ``path`` to stdout as it grows, until our stdin closes.

    The SSH client closing its end is the only signal that reliably reaches a command without
    a terminal, so the reader ends with the connection instead of lingering on the host.
    """
    closed = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.buffer.read()
        closed.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    out = sys.stdout.buffer
    path = os.path.expanduser(path)
    while not os.path.exists(path):  # the trainer may not have started yet
        if closed.wait(0.2):
            return
    with open(path, "rb") as log:
        while not closed.is_set():
            chunk = log.read(64 * 1024)
            if chunk:
                out.write(chunk)
                out.flush()
            else:
                closed.wait(0.2)


def main(argv: list[str]) -> int:
    command, args = argv[0], argv[1:]
    if command == "spawn":
        answer = _spawn(json.load(sys.stdin))
    elif command == "signal":
        answer = {"delivered": processes.send_signal(int(args[0]), float(args[1]),
                                                     int(args[2]), args[3] == "1")}
    elif command == "alive":
        answer = {"alive": bool(processes.identity(int(args[0]), float(args[1])))}
    elif command == "stop":
        groups = [(int(pid), float(start)) for pid, start in (a.split(":") for a in args[1:])]
        processes.stop_group(*groups[0], float(args[0]), then_kill=groups[1:])
        answer = {}
    elif command == "probe":
        answer = processes.describe_host()
    elif command == "unpack":
        answer = _unpack(args[0], sys.stdin.buffer.read())
    elif command == "follow":
        _follow(args[0])
        return 0
    else:
        print(f"unknown command {command!r}", file=sys.stderr)
        return 2
    json.dump(answer, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
