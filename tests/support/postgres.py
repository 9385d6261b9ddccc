"""A real PostgreSQL 15 server for the tests of the history (Debian's postgresql-15).

:func:`start_postgres` initialises a cluster in a new directory owned by the ``postgres``
account and runs the server as that account (``setpriv``), listening on 127.0.0.1 on a free
port, every loopback connection trusted. The tests get one database each
(:meth:`PostgresServer.new_database`). Missing binaries fail, never skip: ``scripts/bootstrap
--test`` installs them.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg

from primus.store.embedded import free_port
from tests.support.waiting import wait_until

BIN = Path("/usr/lib/postgresql/15/bin")
ACCOUNT = "postgres"


@dataclass
class PostgresServer:
    """A running PostgreSQL server: its data directory, port and process."""

    data_dir: Path
    port: int
    process: subprocess.Popen[bytes]

    def url(self, database: str = "postgres") -> str:
        """The SQLAlchemy URL of ``database`` (no password: loopback is trusted)."""
        return f"postgresql+psycopg://{ACCOUNT}@127.0.0.1:{self.port}/{database}"

    def _connect(self) -> psycopg.Connection:
        return psycopg.connect(host="127.0.0.1", port=self.port, user=ACCOUNT,
                               dbname="postgres", autocommit=True, connect_timeout=5)

    def answers(self) -> bool:
        """Whether the server accepts connections."""
        try:
            with self._connect():
                return True
        except psycopg.OperationalError:
            return False

    def new_database(self) -> str:
        """Create an empty database; return its URL."""
        name = f"test_{uuid.uuid4().hex[:12]}"
        with self._connect() as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        """Stop the server (a fast shutdown), then remove its data directory."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.data_dir.parent, ignore_errors=True)


def _as_postgres(argv: list[str]) -> list[str]:
    return ["setpriv", f"--reuid={ACCOUNT}", f"--regid={ACCOUNT}", "--init-groups", "--",
            *argv]


def start_postgres() -> PostgresServer:
    """Initialise a cluster and start its server; return once it answers.

    Raises:
        AssertionError: the binaries or the ``postgres`` account are missing, or the server
            did not start (the message carries its log).
    """
    missing = [name for name in ("initdb", "postgres") if not (BIN / name).exists()]
    assert not missing, (f"PostgreSQL 15 is missing ({', '.join(missing)} not in {BIN}): "
                         f"install Debian's postgresql-15 (scripts/bootstrap --test)")
    account = pwd.getpwnam(ACCOUNT)
    base = Path(tempfile.mkdtemp(prefix="primus-postgres-"))  # /tmp: the account may enter it
    os.chown(base, account.pw_uid, account.pw_gid)
    data = base / "data"
    subprocess.run(_as_postgres([str(BIN / "initdb"), "-D", str(data), "-U", ACCOUNT,
                                 "-A", "trust", "-E", "UTF8", "--no-sync"]),
                   check=True, capture_output=True)
    port = free_port()
    log = base / "postgres.log"
    with open(log, "wb") as out:
        os.chown(log, account.pw_uid, account.pw_gid)
        process = subprocess.Popen(
            _as_postgres([str(BIN / "postgres"), "-D", str(data), "-p", str(port),
                          "-c", "listen_addresses=127.0.0.1",
                          "-c", f"unix_socket_directories={base}",
                          "-c", "fsync=off", "-c", "synchronous_commit=off",
                          "-c", "full_page_writes=off"]),
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    server = PostgresServer(data, port, process)
    try:
        wait_until(lambda: server.answers() or process.poll() is not None, 60,
                   "PostgreSQL to accept connections")
        assert process.poll() is None, f"PostgreSQL exited:\n{log.read_text()[-3000:]}"
    except BaseException:
        server.stop()
        raise
    return server
