"""A trainer that tries, as its owner's account, every credential and path it can reach
(tests/integration/test_owners.py): it prints one line ``ATTACK <json>`` of what each attempt
got, and exits 0 whatever it found (the test judges).

Usage: owner_attacker.py VICTIM_UID VICTIM_APP FILE...   (FILEs: paths it tries to read)

Standard library only: it runs with the host's own python3, as any trainer may.
"""

import base64
import json
import os
import signal
import sys
import urllib.error
import urllib.request


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


def main() -> None:
    victim_uid, victim_app, files = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    me = os.getuid()
    found: dict[str, object] = {
        "uid": me, "my_etcd_env": sorted(k for k in os.environ if k.startswith("PRIMUS_ETCD")),
        "leaked_environ": [], "read_fd_dirs": [], "signalled": [], "read_files": [],
        "my_credentials": None, "etcd": {}}
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
    if mine is not None:
        found["my_credentials"] = mine.get("PRIMUS_ETCD_USER")
        endpoint = mine["PRIMUS_ETCD"].split(",")[0]
        prefix = mine.get("PRIMUS_PREFIX", "/primus")
        code, text = etcd(endpoint, "auth/authenticate", {
            "name": mine["PRIMUS_ETCD_USER"], "password": mine["PRIMUS_ETCD_PASSWORD"]})
        token = json.loads(text).get("token", "") if code == 200 else ""
        tries = {
            "own_status": ("kv/range", {"key": b64(f"{prefix}/apps/{os.environ['PRIMUS_APP_ID']}"
                                                   f"/status")}),
            "victim_status": ("kv/range", {"key": b64(f"{prefix}/apps/{victim_app}/status")}),
            "victim_kill": ("kv/put", {"key": b64(f"{prefix}/apps/{victim_app}/kill"),
                                       "value": b64('{"time": 0}')}),
            "shared_host": ("kv/put", {"key": b64(f"{prefix}/scheduler/hosts/evil"),
                                       "value": b64("{}")}),
            "whole_prefix": ("kv/range", {"key": b64(f"{prefix}/"),
                                          "range_end": b64(f"{prefix}0")}),
            "users": ("auth/user/list", {}),
        }
        for name, (path, body) in tries.items():
            found["etcd"][name] = etcd(endpoint, path, body, token)[0] if token else "no token"
    print("ATTACK " + json.dumps(found), flush=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


if __name__ == "__main__":
    main()
