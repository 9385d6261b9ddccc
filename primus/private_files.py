"""Directories and files that only the account running Primus can open.

What Primus keeps under ``$PRIMUS_HOME`` — the embedded etcd's data, its certificates and
``etcd.json``, the logs of AMs, executors and trainers — would tell another local account how
to reach etcd or what an application runs and prints. So Primus creates its directories 0700
and its files 0600, whatever the umask. The umask itself is left alone: files a trainer
creates keep the mode its user chose.

Kept to the standard library: ``primus.processes`` imports it on remote hosts.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import stat
import struct
import tempfile
from pathlib import Path
from typing import BinaryIO

logger = logging.getLogger(__name__)

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
_OPEN_TO_OTHERS = 0o077


def private_dir(path: str | os.PathLike[str]) -> Path:
    """Create the directory ``path`` and each missing parent, with mode 0700; return it.

    An existing ``path`` owned by this account that others may open is tightened to 0700, with
    a warning in the log. One owned by another account, or shared on purpose (sticky, as
    ``/tmp``), is left as it is: its entries are what Primus makes private.
    """
    path = Path(path)
    missing = []
    probe = path
    while not os.path.lexists(probe) and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, PRIVATE_DIR_MODE)
        except FileExistsError:
            pass  # another process made it at the same moment, with this same mode
    if not missing:
        _tighten_dir(path)
    return path


def _tighten_dir(path: Path) -> None:
    status = os.stat(path)
    if (status.st_uid == os.geteuid() and status.st_mode & _OPEN_TO_OTHERS
            and not status.st_mode & stat.S_ISVTX):
        os.chmod(path, PRIVATE_DIR_MODE)
        logger.warning("%s was open to other accounts (mode %03o); it is now 0700", path,
                       stat.S_IMODE(status.st_mode))


def append_private(path: str | os.PathLike[str]) -> BinaryIO:
    """Open ``path`` for appending, creating it with mode 0600.

    An existing file of this account that others may read (written by an older Primus) is
    tightened to 0600.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
                 PRIVATE_FILE_MODE)
    try:
        status = os.fstat(fd)
        if status.st_uid == os.geteuid() and status.st_mode & _OPEN_TO_OTHERS:
            os.fchmod(fd, PRIVATE_FILE_MODE)
        return os.fdopen(fd, "ab")
    except BaseException:
        os.close(fd)
        raise


def write_private(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data`` at once, as a file of mode 0600.

    The bytes go to a temporary file beside it (``mkstemp`` makes it 0600), reach the disk,
    and are renamed over ``path``: a reader sees the old content or the new, never a part.
    """
    path = Path(path)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def socket_address(directory_fd: int, name: str) -> str:
    """A path to ``name`` in an open directory that fits a Unix socket address (108 bytes),
    however deep the directory lies (valid while the directory stays open)."""
    return f"/proc/self/fd/{directory_fd}/{name}"


def listen_private(name: str, backlog: int) -> socket.socket:
    """A Unix socket listening at ``name`` (0600), replacing one a dead listener left."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name)  # nobody answers on a socket whose listener died
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_mask = os.umask(0o177)
    try:
        listener.bind(name)
    finally:
        os.umask(old_mask)
    listener.listen(backlog)
    return listener


def peer_of(connection: socket.socket) -> tuple[int, int]:
    """The pid and uid of the process at the other end of a Unix socket connection, as the
    kernel saw it connect (``SO_PEERCRED``): a server of this account's requests refuses
    another uid."""
    pid, uid, _ = struct.unpack("3i", connection.getsockopt(
        socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return pid, uid
