"""A trainer that tries, as its owner's account, every credential and path it can reach
(tests/integration/test_owners.py): it prints one line ``ATTACK <json>`` of what each attempt
got, and exits 0 whatever it found (the test judges).

Among the processes of its own account, it looks for its application's own identity where a
trainer would: the environment, memory and tracing of its executor, host agent, lease keeper
and AM. Where it finds none, the test may hand it the identity (a JSON file of ``endpoint``,
``prefix``, ``user``, ``password`` at ``$ATTACK_GIVEN``, waited for up to 120 s): it then
tries that and prints ``GIVEN <json>``.

Usage: owner_attacker.py VICTIM_UID VICTIM_APP FILE...   (FILEs: paths it tries to read)

Standard library only: it runs with the host's own python3, as any trainer may.
"""

import base64
import ctypes
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request

PRIMUS_PROCESSES = ("primus.executor", "primus.launcher.agent", "primus.am",
                    "primus lease keeper")
"""What a Primus process of an application has on its command line (its title)."""
SECRET_NAME = "PRIMUS_TEST_TOKEN"
"""The job's ``secret_env``: the trainer should find it in its own environment."""
PTRACE_SEIZE = 0x4206


def environ_of(pid: str) -> dict[str, str] | None:
    try:
        raw = open(f"/proc/{pid}/environ", "rb").read()
    except OSError:
        return None
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def etcd(endpoint: str, path: str, body: dict, token: str = "") -> tuple[int, str]:
    request = urllib.request.Request(
        f"http://{endpoint.split('://')[-1]}/v3/{path}", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **({"Authorization": token} if token
                                                        else {})})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, answer.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except OSError as exc:
        return 0, str(exc)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def readable(path: str, read: bool = True) -> bool:
    """Whether this process may open ``path`` (and read from it, with ``read``: ``mem`` has
    nothing at offset 0, and the kernel checks at the open)."""
    try:
        with open(path, "rb") as file:
            if read:
                file.read(1)
        return True
    except OSError:
        return False


def traceable(pid: int) -> bool:
    """Whether this process may trace ``pid`` (``PTRACE_SEIZE`` does not stop it; the
    kernel lets it go when this process exits)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    return libc.ptrace(PTRACE_SEIZE, pid, None, None) == 0


def probe_primus_process(pid: str) -> dict[str, object] | None:
    """What a process of this account that runs Primus gives away: its environment, memory,
    descriptors, tracing. ``None`` when it is no Primus process."""
    try:
        title = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(
            errors="replace")
    except OSError:
        return None
    if not any(name in title for name in PRIMUS_PROCESSES):
        return None
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        fds = None
    return {"pid": pid, "title": title[:120], "environ": readable(f"/proc/{pid}/environ"),
            "mem": readable(f"/proc/{pid}/mem", read=False), "fd_dir": fds is not None,
            "traced": traceable(int(pid))}


def try_identity(endpoint: str, prefix: str, user: str, password: str, own_app: str,
                 victim_app: str) -> dict[str, object]:
    """What an application's identity may do in etcd: its own keys, the victim's, the
    deployment's (an HTTP status per attempt)."""
    code, text = etcd(endpoint, "auth/authenticate", {"name": user, "password": password})
    token = json.loads(text).get("token", "") if code == 200 else ""
    tries = {
        "own_status": ("kv/range", {"key": b64(f"{prefix}/apps/{own_app}/status")}),
        "victim_status": ("kv/range", {"key": b64(f"{prefix}/apps/{victim_app}/status")}),
        "victim_kill": ("kv/put", {"key": b64(f"{prefix}/apps/{victim_app}/kill"),
                                   "value": b64('{"time": 0}')}),
        "shared_host": ("kv/put", {"key": b64(f"{prefix}/scheduler/hosts/evil"),
                                   "value": b64("{}")}),
        "whole_prefix": ("kv/range", {"key": b64(f"{prefix}/"),
                                      "range_end": b64(f"{prefix}0")}),
        "users": ("auth/user/list", {}),
    }
    return {name: etcd(endpoint, path, body, token)[0] if token else "no token"
            for name, (path, body) in tries.items()}


def given_identity(path: str) -> dict[str, str] | None:
    """The identity the test hands over at ``path``, once it is there (at most 120 s)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with open(path) as file:
                return json.load(file)
        except (OSError, ValueError):
            time.sleep(0.2)
    return None


def main() -> None:
    victim_uid, victim_app, files = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    me = os.getuid()
    found: dict[str, object] = {
        "uid": me, "my_etcd_env": sorted(k for k in os.environ if k.startswith("PRIMUS_ETCD")),
        "my_secret_env": os.environ.get(SECRET_NAME),
        "leaked_environ": [], "read_fd_dirs": [], "signalled": [], "read_files": [],
        "my_credentials": None, "my_primus_processes": [], "etcd": {}}
    mine = None
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            owner = os.stat(f"/proc/{pid}").st_uid
        except OSError:
            continue
        env = environ_of(pid)
        if owner == me:
            if env and "PRIMUS_ETCD_PASSWORD" in env and mine is None:
                mine = env  # this application's own executor: its own identity
            probed = probe_primus_process(pid) if pid != str(os.getpid()) else None
            if probed is not None:
                found["my_primus_processes"].append(probed)
            continue
        if env is not None and any(k.startswith("PRIMUS_ETCD") for k in env):
            found["leaked_environ"].append(pid)
        try:
            os.listdir(f"/proc/{pid}/fd")
            if owner == victim_uid:
                found["read_fd_dirs"].append(pid)
        except OSError:
            pass
        if owner == victim_uid:
            try:
                os.kill(int(pid), 0)
                found["signalled"].append(pid)
            except OSError:
                pass
    for path in files:
        try:
            with open(path, "rb") as file:
                file.read(1)
            found["read_files"].append(path)
        except OSError:
            try:
                os.listdir(path)
                found["read_files"].append(path)
            except OSError:
                pass
    own_app = os.environ["PRIMUS_APP_ID"]
    if mine is not None:
        found["my_credentials"] = mine.get("PRIMUS_ETCD_USER")
        found["etcd"] = try_identity(mine["PRIMUS_ETCD"].split(",")[0],
                                     mine.get("PRIMUS_PREFIX", "/primus"),
                                     mine["PRIMUS_ETCD_USER"], mine["PRIMUS_ETCD_PASSWORD"],
                                     own_app, victim_app)
    print("ATTACK " + json.dumps(found), flush=True)
    if os.environ.get("ATTACK_GIVEN"):
        given = given_identity(os.environ["ATTACK_GIVEN"])
        print("GIVEN " + json.dumps(try_identity(
            given["endpoint"], given["prefix"], given["user"], given["password"], own_app,
            victim_app) if given else {}), flush=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


if __name__ == "__main__":
    main()
