"""What the SSH launcher runs on a host: ``python -m primus.launcher.remote COMMAND``.

Requests that carry data (the environment and secrets of a process, or a list of processes)
arrive as JSON on stdin, never on the command line; a process started here gets its secrets on
an inherited descriptor, never in its environment (:mod:`primus.process_secrets`), and this
command, which holds them meanwhile, is undumpable. Answers are one JSON object on stdout.
Every command that acts on several processes does so in one invocation, so the AM needs one SSH
call per host for a launch wave, a stop or a liveness round.

Commands:
    spawn    stdin {"argv", "env", "secrets", "cwd", "log_file"}
             → {"pid", "start_time", "home"}
    launch   stdin {"version", "directory", "requests": [spawn's input, ...]}
             → {"processes": [{"pid", "start_time"} | {"error"}, ...], "cold": why | null}:
             executors forked by the application's host agent (see agent.py), or started cold
             when the agent cannot run
    signal   PID START_TIME SIGNUM GROUP(0|1)          → {"delivered": bool}
    alive    stdin [[PID, START_TIME], ...]            → {"alive": [bool, ...]}
    stop     [DIR] stdin [{"pid", "start_time", "grace", "then_kill": [[PID, START], ...]}, ...]
             → {} once every group stopped (see processes.stop_groups); with DIR, then as
             release DIR → {"agent": ...}
    release  DIR                                       → {"agent": whether one was running}
    probe [CGROUP_PARENT]                              → describe_host()
    health                 (stdin: JSON request)       → {"failure": why or null}
    check-data  stdin [[INDEX, STREAM], ...]           → {"problems": [{"field", "value",
                                                          "why"}, ...]}: the data sources
                                                          that match no file here
    unpack   DIR   stdin: a tar archive                → {"files": n}
    read     PATH [OFFSET]  the file's content (from byte OFFSET), raw bytes
    follow   PATH [OFFSET]  the file's content (from byte OFFSET), then what is appended,
                   until stdin closes (raw bytes)
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import sys
import tarfile
import threading
from typing import Any

import psutil

from primus import __version__, processes
from primus.private_files import private_dir
from primus.process_secrets import make_undumpable


def describe_host(cgroup_parent: str | None = None) -> dict[str, Any]:
    """What ``primus hosts check`` reports about this host; ``cgroups``, only where trainers
    here cannot be held to their reservations (under ``cgroup_parent``, else the executor's
    own cgroup), says why."""
    from primus.executor.cgroups import probe  # noqa: PLC0415 - the probe's alone

    why = probe(cgroup_parent)
    gpus = processes.count_gpus()
    return {
        **({"cgroups": why} if why else {}),
        "primus_version": __version__,
        "account": processes.describe_account(),
        "home": os.path.expanduser("~"),
        "cpu": psutil.cpu_count(logical=True),
        "memory": psutil.virtual_memory().total,
        "gpus": gpus,
        "load": os.getloadavg()[0],
        # Read where it is probed (primus.client.hosts): this side only has the text.
        **({"gpu_topology_matrix": processes.gpu_topology_matrix(),
            "gpu_devices": processes.gpu_devices()} if gpus else {}),
    }


def _spawn(request: dict[str, Any]) -> dict[str, Any]:
    child = processes.spawn_detached(request["argv"], request.get("env") or {},
                                     request["log_file"],
                                     os.path.expanduser(request["cwd"]) if request.get("cwd")
                                     else None, request.get("secrets"))
    return {"pid": child.pid, "start_time": processes.start_time_of(child.pid),
            "home": os.path.expanduser("~")}


def launch(wave: dict[str, Any], forked_agent: bool = False) -> dict[str, Any]:
    """Start a wave of executors on this host: forked by the host agent, else cold.
    ``forked_agent``: an agent that must be started is forked by this account's forker
    (:mod:`primus.launcher.forker`), as the local launcher asks; a command run over SSH or
    as an owner's account starts it cold, leaving no forker behind on the host."""
    if wave.get("version") != __version__:
        return {"error": f"this host runs Primus {__version__}, the AM {wave.get('version')}; "
                         "install the same version on every host"}
    if processes.describe_account() is None:
        # The account was removed while its application runs: what runs goes on under its
        # uid, but nothing more starts as an account that no longer exists.
        return {"error": f"the account of uid {os.getuid()} no longer exists on this host"}
    from primus.launcher import agent  # noqa: PLC0415 - only this command needs it

    try:
        return {"processes": agent.spawn_many(wave["directory"], wave["requests"],
                                              forked=forked_agent),
                "cold": None}
    except (agent.AgentError, OSError) as exc:
        cold = []
        for request in wave["requests"]:
            try:
                cold.append(_spawn(request))
            except OSError as error:
                cold.append({"error": f"cannot start {request['argv'][0]!r}: {error}"})
        return {"processes": cold, "cold": str(exc)}


def _unpack(target: str, archive: bytes) -> dict[str, Any]:
    target = os.path.expanduser(target)
    private_dir(target)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = tar.getmembers()
        if hasattr(tarfile, "data_filter"):
            tar.extractall(target, filter="data")  # refuses absolute paths, .., device files
        else:  # Python before 3.11.4 (Debian 12's 3.11.2): the same refusals, by hand
            tar.extractall(target, members=[_plain_member(m) for m in members])
    return {"files": len(members)}


def _plain_member(member: tarfile.TarInfo) -> tarfile.TarInfo:
    """``member`` when it is a file or directory that stays inside the target directory."""
    parts = member.name.split("/")
    if member.name.startswith("/") or ".." in parts or not (member.isfile() or member.isdir()):
        raise ValueError(f"refused archive member {member.name!r}: only files and directories "
                         "inside the target directory")
    member.mode &= 0o755
    return member


def _follow(path: str, offset: int = 0) -> None:
    """Copy ``path`` from byte ``offset`` to stdout as it grows, until our stdin closes.

    The SSH client closing its end is the only signal that reliably reaches a command without
    a terminal, so the reader ends with the connection instead of lingering on the host.
    """
    closed = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.buffer.read()
        closed.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    out = sys.stdout.buffer
    for chunk in processes.follow_file(os.path.expanduser(path),
                                       lambda timeout: not closed.wait(timeout), offset=offset):
        out.write(chunk)
        out.flush()


def main(argv: list[str]) -> int:
    make_undumpable()  # what arrives on stdin may be secrets
    command, args = argv[0], argv[1:]
    if command == "spawn":
        answer = _spawn(json.load(sys.stdin))
    elif command == "launch":
        answer = launch(json.load(sys.stdin))
    elif command == "signal":
        answer = {"delivered": processes.send_signal(int(args[0]), float(args[1]),
                                                     int(args[2]), args[3] == "1")}
    elif command == "alive":
        answer = {"alive": [bool(processes.identity(int(pid), float(start)))
                            for pid, start in json.load(sys.stdin)]}
    elif command == "stop":
        processes.stop_groups([processes.StopOrder(
            int(order["pid"]), float(order["start_time"]), float(order["grace"]),
            [(int(pid), float(start)) for pid, start in order.get("then_kill", [])])
            for order in json.load(sys.stdin)])
        answer = {}
        if args:  # the application is done with the host: its agent goes too
            from primus.launcher import agent  # noqa: PLC0415 - only this case needs it

            answer = {"agent": agent.tell_exit(args[0])}
    elif command == "release":
        from primus.launcher import agent  # noqa: PLC0415 - only this command needs it

        answer = {"agent": agent.tell_exit(args[0])}
    elif command == "probe":
        answer = describe_host(args[0] if args else None)
    elif command == "health":
        from primus.launcher.health import check_here  # noqa: PLC0415 - only this command

        answer = {"failure": check_here(json.load(sys.stdin))}
    elif command == "check-data":
        from primus.data.sources import check_streams_here  # noqa: PLC0415 - loads fsspec

        answer = {"problems": [dataclasses.asdict(problem) for problem in
                               check_streams_here(json.load(sys.stdin))]}
    elif command == "unpack":
        answer = _unpack(args[0], sys.stdin.buffer.read())
    elif command == "read":
        try:
            with processes.open_log(os.path.expanduser(args[0])) as log:
                log.seek(int(args[1]) if len(args) > 1 else 0)
                shutil.copyfileobj(log, sys.stdout.buffer)
        except OSError as exc:
            print(exc.strerror, file=sys.stderr)
            return 1
        return 0
    elif command == "follow":
        _follow(args[0], int(args[1]) if len(args) > 1 else 0)
        return 0
    else:
        print(f"unknown command {command!r}", file=sys.stderr)
        return 2
    json.dump(answer, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
