"""A cluster of test hosts on one machine: network namespaces on a bridge, each with its own sshd.

Each host is a namespace with a veth pair onto a bridge in the root namespace, an address on a
private test subnet, a default route to the bridge (where the test etcd listens), and an sshd
that accepts one test key. Clients reach the hosts with that key and a pinned known_hosts file.
Everything is torn down by pid and by name. Needs root (CI runs as root).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from primus.store.embedded import exclusive_lock

# Each cluster takes a /24 of its own in 10.213.0.0/16, so that concurrent clusters (the test
# workers of one run, a test run beside a benchmark) never share addresses or names. Only
# addresses of our own namespaces and bridge are ever used.
SUBNET_PREFIX = "10.213"
SSHD = "/usr/sbin/sshd"
# Its lock is held while a cluster picks its subnet and names and claims them: two clusters
# built at once would otherwise both find the same /24 free.
CLAIM_DIR = Path("/run/lock/primus-test-clusters")
# What provides each tool the cluster needs, on Debian.
PROVIDERS = {"ip": "iproute2", "sshd": "openssh-server", "ssh": "openssh-client",
             "ssh-keygen": "openssh-client"}


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def missing_tools() -> list[str]:
    """What the cluster needs and this machine lacks, each with the Debian package that
    provides it."""
    needed = {"ip": shutil.which("ip"), "sshd": SSHD if os.path.exists(SSHD) else None,
              "ssh": shutil.which("ssh"), "ssh-keygen": shutil.which("ssh-keygen")}
    missing = [f"{name} (Debian's {PROVIDERS[name]})"
               for name, path in needed.items() if path is None]
    if os.geteuid() != 0:
        missing.append("root (network namespaces)")
    return missing


@dataclass
class TestHost:
    """One test host: its namespace, address and sshd."""

    __test__ = False  # not a pytest test class

    name: str
    namespace: str
    veth: str
    address: str
    home: Path
    sshd: subprocess.Popen[bytes] | None = None

    def pids(self) -> list[int]:
        """Every process running in this host's namespace."""
        listing = subprocess.run(["ip", "netns", "pids", self.namespace], capture_output=True,
                                 text=True).stdout
        return [int(pid) for pid in listing.split()]

    def app_pids(self) -> list[int]:
        """Processes in the namespace other than its sshd and sshd's connection processes
        (what applications left there). A shared connection's session process can outlive a
        client cut off from the host until sshd notices; it runs nothing itself."""
        sshd_pid = self.sshd.pid if self.sshd else -1
        return [pid for pid in self.pids()
                if pid != sshd_pid and not self.describe([pid])[0].startswith(f"{pid}: sshd:")]

    @staticmethod
    def describe(pids: list[int]) -> list[str]:
        """Each process as ``pid: command line``, for failure messages."""
        described = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                    words = cmdline.read().split(b"\0")
                described.append(f"{pid}: {b' '.join(words).decode(errors='replace')}")
            except OSError:
                described.append(f"{pid}: (gone)")
        return described

    def kill_all(self) -> None:
        """Kill every process in the namespace: the host is gone."""
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def link(self, up: bool) -> None:
        """Take the host's network link down (a partition) or bring it back."""
        _ip("link", "set", self.veth, "up" if up else "down")


@dataclass
class TestCluster:
    """The bridge, the hosts, the client key and known_hosts, and an inventory file."""

    __test__ = False  # not a pytest test class

    root: Path
    bridge: str
    subnet: str
    hosts: list[TestHost] = field(default_factory=list)
    key_file: Path | None = None
    known_hosts: Path | None = None

    homes: Mapping[str, Path] = field(default_factory=dict)
    """Accounts whose home on the hosts is not this machine's (root's is each host's own)."""

    @classmethod
    def create(cls, root: Path, count: int, python: str,
               homes: Mapping[str, Path] | None = None) -> TestCluster:
        """Build ``count`` hosts under ``root``, the accounts of ``homes`` with those homes on
        them; tear down with :meth:`destroy`."""
        with exclusive_lock(CLAIM_DIR):
            taken = subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True).stdout
            links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
            tag = secrets.token_hex(2)
            while f"pbr{tag}" in links:
                tag = secrets.token_hex(2)
            free = [n for n in range(1, 255) if f"{SUBNET_PREFIX}.{n}." not in taken]
            cluster = cls(root=root, bridge=f"pbr{tag}",
                          subnet=f"{SUBNET_PREFIX}.{secrets.choice(free)}", homes=homes or {})
            try:
                # The bridge and its address claim the subnet and the tag for the others.
                _ip("link", "add", cluster.bridge, "type", "bridge")
                _ip("addr", "add", f"{cluster.gateway}/24", "dev", cluster.bridge)
            except BaseException:
                cluster.destroy()
                raise
        try:
            cluster._build(count, tag, python)
        except BaseException:
            cluster.destroy()
            raise
        return cluster

    def _build(self, count: int, tag: str, python: str) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        _ip("link", "set", self.bridge, "up")
        self.key_file = self.root / "id_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key_file)],
                       check=True)
        authorized = self.root / "authorized_keys"
        authorized.write_text(Path(f"{self.key_file}.pub").read_text())
        authorized.chmod(0o600)
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
        known = []
        for index in range(1, count + 1):
            host = TestHost(name=f"h{index}", namespace=f"p{tag}h{index}",
                            veth=f"p{tag}v{index}", address=f"{self.subnet}.{10 + index}",
                            home=self.root / f"h{index}" / "home")
            self.hosts.append(host)
            host.home.mkdir(parents=True)
            _ip("netns", "add", host.namespace)
            # No name server in the test hosts' world: look-ups fail at once instead of timing
            # out against one they cannot reach (ip netns exec mounts this over resolv.conf).
            resolv = Path("/etc/netns") / host.namespace / "resolv.conf"
            resolv.parent.mkdir(parents=True, exist_ok=True)
            resolv.write_text("options timeout:1 attempts:1\n")
            self._give_root_a_home(host)
            _ip("link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns",
                host.namespace)
            _ip("link", "set", host.veth, "master", self.bridge, "up")
            for args in (("addr", "add", f"{host.address}/24", "dev", "eth0"),
                         ("link", "set", "eth0", "up"), ("link", "set", "lo", "up"),
                         ("route", "add", "default", "via", self.gateway)):
                _ip("-n", host.namespace, *args)
            known.append(self._start_sshd(host, authorized))
        self.known_hosts = self.root / "known_hosts"
        self.known_hosts.write_text("".join(known))
        self._write_inventory(python)
        for host in self.hosts:
            self.wait_for_ssh(host)

    def _give_root_a_home(self, host: TestHost) -> None:
        """Root's home on the host is a directory of its own, as on a real host, not this
        machine's: a login there runs none of this machine's shell start-up files (a pyenv
        ``.bashrc`` costs 0.14 s on every ssh command and Ansible task, and its shims' lock can
        stall every login). ``ip netns exec`` mounts this passwd over ``/etc/passwd`` for sshd
        and everything it starts; the accounts of :attr:`homes` get theirs there too."""
        home = self.root / host.name / "root-home"
        home.mkdir(parents=True, mode=0o700, exist_ok=True)
        accounts = []
        for line in Path("/etc/passwd").read_text().splitlines():
            fields = line.split(":")
            if len(fields) == 7 and fields[2] == "0":
                fields[5] = str(home)
            elif len(fields) == 7 and fields[0] in self.homes:
                fields[5] = str(self.homes[fields[0]])
            accounts.append(":".join(fields))
        (Path("/etc/netns") / host.namespace / "passwd").write_text("\n".join(accounts) + "\n")

    def _start_sshd(self, host: TestHost, authorized: Path, max_sessions: int = 64) -> str:
        directory = self.root / host.name
        host_key = directory / "ssh_host_ed25519_key"
        if not host_key.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)],
                           check=True)
        config = directory / "sshd_config"
        config.write_text("\n".join([
            f"ListenAddress {host.address}", "Port 22", f"HostKey {host_key}",
            f"PidFile {directory / 'sshd.pid'}",
            # The test key for root; accounts' own keys (the owners') from their homes.
            f"AuthorizedKeysFile {authorized} .ssh/authorized_keys",
            "PermitRootLogin prohibit-password", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
            "MaxStartups 64:30:128", f"MaxSessions {max_sessions}", "LogLevel ERROR",
            "AcceptEnv NONE",
            # As a distribution's sshd: Ansible copies files over SFTP (without it, each copy
            # first fails over SFTP and SCP, then pipes the file through a shell).
            "Subsystem sftp internal-sftp", "",
        ]))
        host.sshd = subprocess.Popen(
            ["ip", "netns", "exec", host.namespace, SSHD, "-D", "-e", "-f", str(config)],
            stdout=subprocess.DEVNULL, stderr=open(directory / "sshd.log", "ab"))  # noqa: SIM115
        public = Path(f"{host_key}.pub").read_text().split()
        return f"{host.address} {public[0]} {public[1]}\n"

    def restart_sshd(self, host: TestHost, max_sessions: int = 64) -> None:
        """Restart the host's sshd allowing ``max_sessions`` sessions per connection (1: no
        multiplexed session beside the first); its host key stays."""
        assert host.sshd is not None
        host.sshd.kill()
        host.sshd.wait()
        self._start_sshd(host, self.root / "authorized_keys", max_sessions)
        self.wait_for_ssh(host)

    @property
    def gateway(self) -> str:
        """The bridge's address: where the test etcd listens for every host."""
        return f"{self.subnet}.1"

    def unused_address(self) -> str:
        """An address on the cluster's subnet that no host has (an unreachable host)."""
        return f"{self.subnet}.99"

    def wait_for_ssh(self, host: TestHost, timeout: float = 20.0) -> None:
        """Wait until ``ssh host true`` succeeds (sshd has no readiness signal to await)."""
        deadline = time.monotonic() + timeout
        while True:
            result = subprocess.run(self.ssh_argv(host, "true"), capture_output=True, text=True)
            if result.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd on {host.name} not ready: {result.stderr.strip()}")
            time.sleep(0.1)

    def ssh_argv(self, host: TestHost, command: str) -> list[str]:
        """A plain ``ssh`` command line to the host, as the peer benchmarks use it."""
        return ["ssh", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={self.known_hosts}",
                "-o", "StrictHostKeyChecking=yes", "-i", str(self.key_file), "-l", "root",
                host.address, command]

    def _write_inventory(self, python: str) -> None:
        lines = ["[primus]"]
        for host in self.hosts:
            lines.append(f"{host.name} ansible_host={host.address} primus_home={host.home}")
        lines += ["", "[primus:vars]", "ansible_user=root",
                  f"ansible_ssh_private_key_file={self.key_file}",
                  f"ansible_python_interpreter={python}", ""]
        self.inventory.write_text("\n".join(lines))

    @property
    def inventory(self) -> Path:
        """An Ansible INI inventory of every host (group ``primus``)."""
        return self.root / "inventory.ini"

    def destroy(self) -> None:
        """Kill everything in the namespaces, then delete them and the bridge."""
        for host in self.hosts:
            host.kill_all()
            if host.sshd is not None:
                host.sshd.kill()
                host.sshd.wait()
            subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True)
            shutil.rmtree(Path("/etc/netns") / host.namespace, ignore_errors=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
