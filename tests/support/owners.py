"""Real Unix accounts for the tests of a shared deployment, where applications run as their
owners: alice and bob (in group ``primus-users``, which Primus may act as), carol (not in it),
and a Python those accounts can run Primus with.

The suite runs as root. The accounts are made once per machine (``useradd``); the Python is a
virtual environment of Debian's ``/usr/bin/python3`` that imports Primus from this checkout and
its dependencies from ``.venv`` (the interpreter ``.venv`` was made with lies under root's home,
which no other account may enter).
"""

from __future__ import annotations

import grp
import hashlib
import pwd
import shutil
import subprocess
import sysconfig
from pathlib import Path

from primus.store.embedded import exclusive_lock
from tests.support.primus import REPO

GROUP = "primus-users"
MEMBERS = ("alice", "bob")
OUTSIDER = "carol"
"""An account that exists but is not in :data:`GROUP`."""
SERVICE = "primus"
"""The service account of a deployment's server (deploy/ansible's ``primus_deploy_user``)."""
SYSTEM_PYTHON = Path("/usr/bin/python3")
OWNERS_ROOT = Path("/opt/primus-tests")
SERVICE_HOME = OWNERS_ROOT / "service-home"
"""The service account's home on this machine (a deployment's hosts each give it its own)."""


def _locks(root: Path = OWNERS_ROOT) -> Path:
    """Where the lock of these set-ups lives; ``root`` is made open to every account (the
    Python lies under it)."""
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    return root / "locks"


def missing_parts() -> list[str]:
    """What this machine lacks for these tests (each fails naming it, never skips)."""
    needed = {"sudo": shutil.which("sudo"), "useradd": shutil.which("useradd"),
              str(SYSTEM_PYTHON): SYSTEM_PYTHON.exists() or None}
    return [name for name, found in needed.items() if not found]


def ensure_accounts() -> dict[str, pwd.struct_passwd]:
    """alice, bob (members of :data:`GROUP`) and carol, made if missing, and the service
    account a deployment's server runs as (:data:`SERVICE`, as the playbook makes it); their
    entries. Made before test hosts are: their ``/etc/passwd`` is a copy of this machine's."""
    with exclusive_lock(_locks()):
        try:
            grp.getgrnam(GROUP)
        except KeyError:
            subprocess.run(["groupadd", GROUP], check=True)
        try:
            service = pwd.getpwnam(SERVICE)
        except KeyError:
            subprocess.run(["useradd", "--system", "--user-group", "--no-create-home",
                            "--home-dir", str(SERVICE_HOME), "--shell", "/bin/sh", SERVICE],
                           check=True)
        else:  # as an older checkout made it
            if (service.pw_shell, service.pw_dir) != ("/bin/sh", str(SERVICE_HOME)):
                subprocess.run(["usermod", "--shell", "/bin/sh", "--home", str(SERVICE_HOME),
                                SERVICE], check=True)
        for name in (*MEMBERS, OUTSIDER):
            try:
                pwd.getpwnam(name)
            except KeyError:
                groups = ["-G", GROUP] if name in MEMBERS else []
                subprocess.run(["useradd", "-m", "-s", "/bin/sh", *groups, name], check=True)
        for name in (*MEMBERS, SERVICE):
            _unlock(name)
        for name in MEMBERS:
            _ensure_ssh_key(pwd.getpwnam(name))
    return {name: pwd.getpwnam(name) for name in (*MEMBERS, OUTSIDER, SERVICE)}


def _unlock(name: str) -> None:
    """No password, but not locked (``*``, not useradd's ``!``): an sshd without PAM, as the
    test hosts', refuses a locked account even its keys."""
    shadow = subprocess.run(["getent", "shadow", name], capture_output=True, text=True,
                            check=True).stdout.split(":")
    if shadow[1] != "*":
        subprocess.run(["usermod", "--password", "*", name], check=True)


def _ensure_ssh_key(account: pwd.struct_passwd) -> None:
    """The account's own SSH key, authorized for itself: as a site's people reach its hosts
    (their AMs launch their executors over SSH as them)."""
    ssh = Path(account.pw_dir) / ".ssh"
    key = ssh / "id_ed25519"
    if key.exists():
        return
    as_owner = ["setpriv", "--reuid", account.pw_name, "--regid", str(account.pw_gid),
                "--init-groups"]
    subprocess.run([*as_owner, "mkdir", "-p", "-m", "0700", str(ssh)], check=True)
    subprocess.run([*as_owner, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C",
                    account.pw_name, "-f", str(key)], check=True)
    subprocess.run([*as_owner, "cp", f"{key}.pub", str(ssh / "authorized_keys")], check=True)


def owners_python(root: Path = OWNERS_ROOT, site: Path | None = None) -> Path:
    """A Python that every account can run, with Primus and its dependencies importable: a
    virtual environment of :data:`SYSTEM_PYTHON` under ``root`` whose ``.pth`` names this
    checkout and ``site`` (the running Python's site-packages: ``.venv``'s).

    It is made once and kept under a name made from what it is made of (the system Python,
    the checkout and ``site``, real paths), so that a new test environment gets a Python of its
    own. One kept is used again only if its ``.pth`` still names what it was made for and it
    imports Primus: else (a build cut short, a site-packages deleted under it) it is made
    again.

    Raises:
        RuntimeError: a Python just made does not import Primus (the message says why).
    """
    paths = f"{REPO.resolve()}\n{Path(site or _running_site()).resolve()}\n"
    made_of = f"{SYSTEM_PYTHON.resolve()}\n{paths}"
    venv = root / f"python-{hashlib.sha1(made_of.encode()).hexdigest()[:10]}"
    python = venv / "bin" / "python"
    with exclusive_lock(_locks(root)):
        if _unusable(venv, paths):
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([str(SYSTEM_PYTHON), "-m", "venv", "--without-pip", str(venv)],
                           check=True)
            site_packages = Path(subprocess.run(
                [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                check=True, capture_output=True, text=True).stdout.strip())
            (site_packages / PTH_NAME).write_text(paths)
            if problem := _unusable(venv, paths):
                raise RuntimeError(f"the owners' Python {python}, just made, {problem}")
    return python


def _running_site() -> Path:
    """The site-packages an owners' Python is made to import from: the running Python's
    (``.venv``'s), or, where an owners' Python runs this itself (``bench/bench_owners.py``
    executes itself again as one), the one its ``.pth`` names: its own site-packages hold
    nothing but that file."""
    purelib = Path(sysconfig.get_path("purelib"))
    pth = purelib / PTH_NAME
    return Path(pth.read_text().split()[1]) if pth.exists() else purelib


PTH_NAME = "primus-tests.pth"
"""The file in the owners' Python's site-packages that names the checkout and ``.venv``'s."""
IMPORTS_PRIMUS = "import primus.am.__main__, primus.executor.__main__"
"""What an owner's AM and executors import, their dependencies with them (``primus.am`` alone
imports none of them: it would import with no site-packages at all)."""


def _unusable(venv: Path, paths: str) -> str:
    """Why the kept Python in ``venv`` cannot be used for ``paths`` (its ``.pth`` must say
    them, each must exist, and Primus must import); empty when it can."""
    python = venv / "bin" / "python"
    if not python.exists():
        return "does not exist"
    pth = next(venv.glob(f"lib/python*/site-packages/{PTH_NAME}"), None)
    said = pth.read_text() if pth is not None else ""
    if said != paths:
        return f"names {said.split() or 'nothing'} in its {PTH_NAME}, not {paths.split()}"
    if gone := [path for path in paths.split() if not Path(path).is_dir()]:
        return f"names {gone}, which no longer exist"
    imports = subprocess.run([str(python), "-I", "-c", IMPORTS_PRIMUS],
                             capture_output=True, text=True, timeout=120)
    return "" if imports.returncode == 0 else \
        f"does not import Primus ({IMPORTS_PRIMUS}): {imports.stderr[-2000:]}"


def owners_python_ok(python: Path) -> str:
    """Empty when ``python`` imports Primus as another account, else what went wrong."""
    result = subprocess.run(["setpriv", "--reuid", MEMBERS[0], "--regid", GROUP,
                             "--clear-groups", str(python), "-I", "-c", IMPORTS_PRIMUS],
                            capture_output=True, text=True, timeout=60)
    return "" if result.returncode == 0 else result.stderr[-2000:]
