"""The embedded etcd and ``$PRIMUS_HOME`` are private to their user (issue 17, findings 1 and 7).

The second account is ``nobody``, entered with ``setpriv`` (the tests run as root). Everything
it is given is reachable by it for real: the Primus home lies in a directory it may traverse
(pytest's own temporary directories are 0700 and would keep it out whatever Primus did), and it
runs its own copy of etcdctl. A control shows the same tools do reach an etcd that has no
client certificates, so each refusal below is the embedded etcd's doing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from primus.store.embedded import (
    EtcdProcessInfo,
    find_etcd_binary,
    runs_etcd_on,
    start_etcd,
    stop_pid,
)
from primus.store.etcd_store import EtcdCoordinator
from tests.support.apps import cli_status_json
from tests.support.primus import REPO, run_primus
from tests.support.waiting import wait_until

HELLO = REPO / "examples" / "hello" / "job.yaml"
NOBODY = ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups", "--"]
NOBODY_UID = 65534

# What an account with etcdctl does to take over applications (issue 17, finding 1): watch the
# applications and, when a new spec appears, put it back with its command changed. It marks
# every event it sees and every rewrite that etcd accepted. (etcdctl hands the hook the key
# Go-quoted; the value is read again rather than unquoted.)
SPEC_REWRITE = r"""
touch "$MARKS/saw-$ETCD_WATCH_REVISION"
key=${ETCD_WATCH_KEY#\"}
key=${key%\"}
case "$key" in
  */spec)
    value=$("$ETCDCTL" get "$key" --print-value-only)
    case "$value" in
      *honest*)
        "$ETCDCTL" put "$key" "$(printf '%s' "$value" | sed s/honest/pwned/)" &&
          touch "$MARKS/rewrote"
        ;;
    esac
    ;;
esac
"""

# TLS on https endpoints without checking the server, which the account cannot check anyway.
# etcdctl 3.5 ignores --insecure-skip-tls-verify unless --insecure-transport is false.
ATTACKER_TLS = {"ETCDCTL_INSECURE_TRANSPORT": "false", "ETCDCTL_INSECURE_SKIP_TLS_VERIFY": "true"}


@dataclass(frozen=True)
class SecondAccount:
    """``nobody``, with a copy of etcdctl it can run and a directory of its own."""

    etcdctl: Path
    own_dir: Path

    def run(self, *argv: str, env: dict[str, str] | None = None, timeout: float = 30
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*NOBODY, *argv], env=self.env(env), capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, timeout=timeout)

    def start(self, *argv: str, env: dict[str, str] | None = None, log: Path
              ) -> subprocess.Popen[bytes]:
        with open(log, "wb") as output:
            return subprocess.Popen([*NOBODY, *argv], env=self.env(env), stdout=output,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)

    def env(self, extra: dict[str, str] | None) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin", "HOME": str(self.own_dir), "ETCDCTL_API": "3",
                **(extra or {})}

    def etcdctl_run(self, endpoint: str, *args: str) -> subprocess.CompletedProcess[str]:
        """etcdctl as this account: no client certificate, the server's not checked."""
        return self.run(str(self.etcdctl), "--endpoints", endpoint, "--dial-timeout", "2s",
                        "--command-timeout", "4s", *args, env=ATTACKER_TLS)

    def start_spec_rewrite(self, endpoint: str, prefix: str, name: str
                           ) -> tuple[subprocess.Popen[bytes], Path]:
        """Start the spec-rewrite attack on ``prefix``/apps/; return it and its marks dir."""
        marks = self.own_dir / name
        marks.mkdir()
        os.chown(marks, NOBODY_UID, NOBODY_UID)
        attack = self.start(
            str(self.etcdctl), "watch", "--prefix", "--rev", "1", f"{prefix}/apps/", "--",
            "/bin/sh", "-c", SPEC_REWRITE,
            env={"ETCDCTL": str(self.etcdctl), "MARKS": str(marks),
                 "ETCDCTL_ENDPOINTS": endpoint, "ETCDCTL_DIAL_TIMEOUT": "2s", **ATTACKER_TLS},
            log=self.own_dir / f"{name}.log")
        return attack, marks


def stop_group(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(10)




@pytest.fixture(scope="module")
def open_dir() -> Iterator[Path]:
    """A directory every account may enter (0755), outside pytest's 0700 temporary tree."""
    directory = Path(tempfile.mkdtemp(prefix="primus-private-etcd-"))
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory)


@pytest.fixture(scope="module")
def nobody(open_dir: Path, etcd_server: EtcdProcessInfo) -> SecondAccount:
    """The second account, checked to reach an etcd without client certificates.

    Not being root or lacking setpriv, curl or the nobody account fails the test, naming what
    to install (never a skip).
    """
    missing = [what for what, ok in (
        ("root", os.geteuid() == 0),
        ("setpriv (Debian's util-linux)", shutil.which("setpriv") is not None),
        ("the nobody user and nogroup group (Debian's base-passwd)",
         _has_account("nobody", "nogroup")),
        ("curl (Debian's curl)", shutil.which("curl") is not None)) if not ok]
    if missing:
        pytest.fail("a second local account needs " + ", ".join(missing))
    tools = open_dir / "tools"
    tools.mkdir(mode=0o755)
    etcdctl = tools / "etcdctl"
    shutil.copy(find_etcd_binary("etcdctl"), etcdctl)
    etcdctl.chmod(0o755)
    own_dir = open_dir / "nobody"
    own_dir.mkdir()
    os.chown(own_dir, NOBODY_UID, NOBODY_UID)
    account = SecondAccount(etcdctl, own_dir)
    control = account.etcdctl_run(etcd_server.client_url, "put", "/control/nobody", "was here")
    assert control.returncode == 0, f"nobody cannot use etcdctl at all:\n{control.stderr}"
    return account


def _has_account(user: str, group: str) -> bool:
    import grp  # noqa: PLC0415 - Unix-only modules, needed by this check alone
    import pwd  # noqa: PLC0415

    try:
        pwd.getpwnam(user)
        grp.getgrnam(group)
    except KeyError:
        return False
    return True


def home_env(home: Path, conf: Path) -> dict[str, str]:
    """Environment of the ``primus`` command with this home and the embedded etcd."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIMUS_")}
    conf.write_text("{}\n")
    env.update(PRIMUS_HOME=str(home), PRIMUS_CONF=str(conf), COLUMNS="200")
    return env


def embedded_info(home: Path) -> EtcdProcessInfo:
    return EtcdProcessInfo(**json.loads((home / "etcd" / "etcd.json").read_text()))


@dataclass(frozen=True)
class PrivateHome:
    """A Primus home in a directory others may enter, its embedded etcd running."""

    home: Path
    env: dict[str, str]
    hello_app: str

    @property
    def etcd(self) -> EtcdProcessInfo:
        return embedded_info(self.home)


@pytest.fixture(scope="module")
def private_home(open_dir: Path, nobody: SecondAccount) -> Iterator[PrivateHome]:
    """examples/hello run end to end with the embedded etcd (no PRIMUS_ETCD)."""
    home = open_dir / "home"
    env = home_env(home, open_dir / "site-defaults.yaml")
    try:
        result = run_primus(env, "submit", str(HELLO), "--wait")
        assert result.returncode == 0, result.stderr
        yield PrivateHome(home, env, result.stdout.strip())
    finally:
        stopped = run_primus(env, "etcd", "stop")
        left = embedded_info(home)
        if runs_etcd_on(left.pid, Path(left.data_dir)):
            stop_pid(left.pid)
        assert stopped.returncode == 0, stopped.stderr


async def all_keys(info: EtcdProcessInfo, prefix: str = "/") -> dict[str, bytes]:
    """Every key under ``prefix`` of the etcd of ``info``, read as its own user does."""
    store = await EtcdCoordinator.connect(info.client_config())
    try:
        return {kv.key: kv.value for kv in (await store.get_prefix(prefix)).kvs}
    finally:
        await store.close()


# --- Reaching etcd -------------------------------------------------------------------------------


def test_another_account_cannot_read_any_key_of_the_embedded_etcd(private_home, nobody):
    url = private_home.etcd.client_url
    assert url.startswith("https://127.0.0.1:")
    for endpoint in (url, url.replace("https://", "http://")):
        attempt = nobody.etcdctl_run(endpoint, "get", "--prefix", "/")
        assert attempt.returncode != 0, f"nobody read keys over {endpoint}:\n{attempt.stdout}"
        assert private_home.hello_app not in attempt.stdout


def test_another_account_cannot_talk_to_the_peer_port(private_home, nobody, etcd_server):
    control = nobody.run("curl", "-sS", "--max-time", "5", f"{etcd_server.peer_url}/members")
    assert control.returncode == 0 and "peerURLs" in control.stdout, control.stderr
    peer = private_home.etcd.peer_url
    assert peer.startswith("https://")
    for url in (peer, peer.replace("https://", "http://")):
        attempt = nobody.run("curl", "-sS", "-k", "--max-time", "5", f"{url}/members")
        assert attempt.returncode != 0 and "peerURLs" not in attempt.stdout, attempt.stdout


def test_another_account_cannot_forge_a_kill(private_home, nobody, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("name: unkillable\nroles:\n  - name: worker\n    command: "
                   "touch started; while [ ! -e release ]; do sleep 0.1; done\n")
    submitted = run_primus(private_home.env, "submit", str(job))
    assert submitted.returncode == 0, submitted.stderr
    app_id = submitted.stdout.strip()
    try:
        wait_until(lambda: (tmp_path / "started").exists(), 60, "the trainer to start")
        forged = json.dumps({"time": time.time(), "user": "nobody",
                             "reason": "forged by nobody"})
        url = private_home.etcd.client_url
        for endpoint in (url, url.replace("https://", "http://")):
            attempt = nobody.etcdctl_run(endpoint, "put", f"/primus/apps/{app_id}/kill", forged)
            assert attempt.returncode != 0, f"nobody wrote a kill over {endpoint}"
    finally:
        (tmp_path / "release").touch()
    wait_until(lambda: cli_status_json(private_home.env, app_id)["status"]["state"] not in (
        "SUBMITTED", "STARTING", "RUNNING"), 60, "the application to end")
    assert cli_status_json(private_home.env, app_id)["status"]["state"] == "SUCCEEDED"


def test_the_spec_rewrite_attack_takes_over_an_etcd_without_client_certificates(
        nobody, etcd_server, prefix):
    """The control: the attack below does work where nothing keeps the account out."""
    etcdctl = [str(find_etcd_binary("etcdctl")), "--endpoints", etcd_server.client_url]
    attack, marks = nobody.start_spec_rewrite(etcd_server.client_url, prefix, "control")
    try:
        subprocess.run([*etcdctl, "put", f"{prefix}/apps/a/spec", '{"command": "echo honest"}'],
                       env={**os.environ, "ETCDCTL_API": "3"}, check=True, capture_output=True)
        wait_until(lambda: (marks / "rewrote").exists(), 30, "the attack to rewrite the spec")
    finally:
        stop_group(attack)
    spec = subprocess.run([*etcdctl, "get", f"{prefix}/apps/a/spec", "--print-value-only"],
                          env={**os.environ, "ETCDCTL_API": "3"}, check=True,
                          capture_output=True, text=True).stdout
    assert "pwned" in spec


async def test_another_account_cannot_rewrite_the_spec_of_a_new_application(private_home, nobody,
                                                                            tmp_path):
    url = private_home.etcd.client_url
    attacks = [nobody.start_spec_rewrite(endpoint, "/primus", f"attack-{scheme}")
               for scheme, endpoint in (("https", url),
                                        ("http", url.replace("https://", "http://")))]
    try:
        job = tmp_path / "job.yaml"
        job.write_text("name: target\nroles:\n  - name: worker\n"
                       "    command: echo honest > said.txt\n")
        result = run_primus(private_home.env, "submit", str(job), "--wait")
        assert result.returncode == 0, result.stderr
    finally:
        for attack, _ in attacks:
            stop_group(attack)
    assert (tmp_path / "said.txt").read_text() == "honest\n"
    for _, marks in attacks:
        assert list(marks.iterdir()) == [], "the attack saw events of the embedded etcd"
    stored = await all_keys(private_home.etcd, f"/primus/apps/{result.stdout.strip()}/spec")
    assert [json.loads(spec)["roles"][0]["command"] for spec in stored.values()] == [
        "echo honest > said.txt"]


# --- Files ---------------------------------------------------------------------------------------


def test_every_directory_under_primus_home_is_0700_and_every_file_0600(private_home):
    found = {}
    for root, _, files in os.walk(private_home.home):
        for name in [root, *(os.path.join(root, f) for f in files)]:
            found[name] = stat.S_IMODE(os.lstat(name).st_mode)
    wrong = {path: f"{mode:o}" for path, mode in found.items()
             if mode != (0o700 if os.path.isdir(path) else 0o600)}
    assert wrong == {}, "open to others"
    names = {os.path.relpath(path, private_home.home) for path in found}
    app = f"apps/{private_home.hello_app}"
    assert {"etcd/etcd.json", "etcd/etcd.log", "etcd/pki/client.key", "etcd/pki/server.key",
            f"{app}/am.log", f"{app}/worker-1.log", f"{app}/worker-1.executor.log"} <= names


def test_another_account_cannot_read_any_file_under_primus_home(private_home, nobody):
    files = [os.path.join(root, name) for root, _, names in os.walk(private_home.home)
             for name in names]
    assert len(files) > 10
    listing = nobody.run("ls", str(private_home.home))
    assert listing.returncode != 0 and "Permission denied" in listing.stderr
    reading = nobody.run("cat", *files)
    assert reading.returncode != 0 and reading.stdout == ""
    assert reading.stderr.count("Permission denied") == len(files)


# --- The pid in etcd.json ------------------------------------------------------------------------


@pytest.fixture(params=["sleep", "another etcd"])
def unrelated_process(request, tmp_path) -> Iterator[psutil.Process]:
    """A process of this account that a stale etcd.json could name."""
    if request.param == "sleep":
        process = subprocess.Popen(["sleep", "600"], start_new_session=True)
        yield psutil.Process(process.pid)
        process.kill()
        process.wait()
    else:
        _, info = start_etcd(tmp_path / "other" / "data", tmp_path / "other" / "etcd.log")
        yield psutil.Process(info.pid)
        stop_pid(info.pid)


def test_a_stale_pid_in_etcd_json_is_never_signalled(tmp_path, unrelated_process):
    home = tmp_path / "home"
    env = home_env(home, tmp_path / "site-defaults.yaml")
    try:
        assert run_primus(env, "list").returncode == 0  # starts the embedded etcd
        assert run_primus(env, "etcd", "stop").returncode == 0
        record = json.loads((home / "etcd" / "etcd.json").read_text())
        (home / "etcd" / "etcd.json").write_text(json.dumps({**record,
                                                             "pid": unrelated_process.pid}))

        stop = run_primus(env, "etcd", "stop")
        assert stop.returncode == 0 and "it was not running" in stop.stderr, stop.stderr
        assert f"pid {unrelated_process.pid}" in stop.stderr and "stale" in stop.stderr
        assert unrelated_process.is_running()

        restarted = run_primus(env, "list")
        assert restarted.returncode == 0, restarted.stderr
        assert unrelated_process.is_running()
        running = embedded_info(home)
        assert running.pid != unrelated_process.pid
        assert runs_etcd_on(running.pid, home / "etcd" / "data")
    finally:
        stopped = run_primus(env, "etcd", "stop")
        left = embedded_info(home)
        if runs_etcd_on(left.pid, Path(left.data_dir)):
            stop_pid(left.pid)
    assert stopped.returncode == 0, stopped.stderr
    assert unrelated_process.is_running()


# --- Upgrade -------------------------------------------------------------------------------------


async def test_a_plain_embedded_etcd_of_an_older_primus_is_restarted_with_tls_keeping_its_data(
        tmp_path):
    home = tmp_path / "home"
    etcd_dir = home / "etcd"
    etcd_dir.mkdir(parents=True)
    # What an older Primus left: a plain etcd, everything readable by all, an app it ran.
    process, old = start_etcd(etcd_dir / "data", etcd_dir / "etcd.log")
    # The older Primus's command has exited, so its etcd is nobody's child and is reaped as
    # soon as it ends; here this test is its parent and must reap it.
    threading.Thread(target=process.wait, daemon=True).start()
    try:
        record = {k: v for k, v in old.__dict__.items() if k != "pki_dir"}
        (etcd_dir / "etcd.json").write_text(json.dumps(record))
        for path in (home, etcd_dir, etcd_dir / "data"):
            path.chmod(0o755)
        for path in (etcd_dir / "etcd.json", etcd_dir / "etcd.log"):
            path.chmod(0o644)
        env = home_env(home, tmp_path / "site-defaults.yaml")
        ran = run_primus({**env, "PRIMUS_ETCD": old.client_url}, "submit", str(HELLO),
                         "--wait")
        assert ran.returncode == 0, ran.stderr
        before = await all_keys(old)

        listed = run_primus(env, "list", "-o", "json")
        assert listed.returncode == 0, listed.stderr
        assert [(a["app_id"], a["state"]) for a in json.loads(listed.stdout)] == [
            (ran.stdout.strip(), "SUCCEEDED")]
        assert "without TLS" in listed.stderr
        assert not psutil.pid_exists(old.pid) or not runs_etcd_on(old.pid, etcd_dir / "data")

        new = embedded_info(home)
        assert new.client_url == old.client_url.replace("http://", "https://")
        assert new.pki is not None
        after = await all_keys(new)
        assert {key: after.get(key) for key in before} == before
        plain = subprocess.run(
            [str(find_etcd_binary("etcdctl")), "--endpoints", old.client_url,
             "--dial-timeout", "2s", "--command-timeout", "4s", "get", "--prefix", "/"],
            env={**os.environ, "ETCDCTL_API": "3"}, capture_output=True, text=True,
            timeout=30)
        assert plain.returncode != 0, "the upgraded etcd still answers plain http"
        for path in (home, etcd_dir, etcd_dir / "data"):
            assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
        for path in (etcd_dir / "etcd.json", etcd_dir / "etcd.log"):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    finally:
        run_primus(home_env(home, tmp_path / "site-defaults.yaml"), "etcd", "stop")
        for left in (old, embedded_info(home)):
            if runs_etcd_on(left.pid, etcd_dir / "data"):
                stop_pid(left.pid)
