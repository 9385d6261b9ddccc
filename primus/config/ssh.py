"""Client-wide SSH options: the one place every OpenSSH flag Primus passes comes from."""

from __future__ import annotations

from dataclasses import dataclass

from primus.config.inventory import Host

HOST_KEY_CHECKING = ("yes", "accept-new", "no")
SHARED_ALIVE_INTERVAL = 2
"""Seconds between keep-alive probes on a shared (multiplexed) connection."""


@dataclass(frozen=True)
class SshOptions:
    """How Primus runs the OpenSSH client.

    Host-key checking is strict unless the operator relaxes it; ``BatchMode`` makes a missing key
    or unknown host fail at once instead of prompting. Per-host settings (port, user, key,
    extra arguments) come from the inventory and are added by :meth:`argv`; the user's
    ``~/.ssh/config`` (ProxyJump, ControlMaster, agents) applies as usual.
    """

    known_hosts: str | None = None
    strict_host_key_checking: str = "yes"
    connect_timeout: int = 10
    server_alive_interval: int = 5
    server_alive_count_max: int = 3
    max_parallel: int = 16
    retries: int = 3
    multiplex: bool = True
    control_persist: int = 30

    def __post_init__(self) -> None:
        if self.strict_host_key_checking not in HOST_KEY_CHECKING:
            raise ValueError(f"strict_host_key_checking must be one of {HOST_KEY_CHECKING}")
        for name in ("connect_timeout", "server_alive_interval", "server_alive_count_max",
                     "max_parallel", "retries", "control_persist"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")

    def argv(self, host: Host, remote_command: str | None,
             control_path: str | None = None) -> list[str]:
        """The ``ssh`` command line that runs ``remote_command`` (already quoted) on ``host``
        (``None``: the options and the host alone, for ``-G`` or ``-O``), through the shared
        connection at ``control_path`` when one is given (see ``ssh_launcher``)."""
        options = {
            "BatchMode": "yes",
            "ConnectTimeout": str(self.connect_timeout),
            "ServerAliveInterval": str(self.server_alive_interval),
            "ServerAliveCountMax": str(self.server_alive_count_max),
            "StrictHostKeyChecking": self.strict_host_key_checking,
        }
        if self.known_hosts:
            options["UserKnownHostsFile"] = self.known_hosts
        if control_path:
            # A shared connection outlives the call that opened it, and a call on it waits
            # until the connection is found dead: probe it more often than a call of its own.
            options.update(ControlMaster="auto", ControlPath=control_path,
                           ControlPersist=f"{self.control_persist}s",
                           ServerAliveInterval=str(min(self.server_alive_interval,
                                                       SHARED_ALIVE_INTERVAL)))
        # ssh keeps the first value it sees for an option, so the inventory's own arguments
        # come first and override these defaults, as they would in Ansible.
        argv = ["ssh", *host.ssh.extra_args]
        for name, value in options.items():
            argv += ["-o", f"{name}={value}"]
        if host.ssh.port is not None:
            argv += ["-p", str(host.ssh.port)]
        if host.ssh.user:
            argv += ["-l", host.ssh.user]
        if host.ssh.key_file:
            argv += ["-i", host.ssh.key_file, "-o", "IdentitiesOnly=yes"]
        return [*argv, "--", host.address,
                *([remote_command] if remote_command is not None else [])]
