"""A throwaway PostgreSQL server for the test session (the shared-catalog choice), when the machine has one.

Debian's server binaries live in ``/usr/lib/postgresql/<version>/bin`` (``infra/setup.sh`` installs the
``postgresql`` package when it runs as root). ``initdb`` refuses to run as root, so as root the server runs
as the ``postgres`` user through ``runuser``. Trust authentication on 127.0.0.1 only; the data directory is
a temporary directory removed at the end.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.s3_server import free_port


def server_binaries() -> Path | None:
    """The newest installed PostgreSQL server's bin directory, if any."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


@dataclass
class PostgresServer:
    port: int
    bin_dir: Path
    data_dir: Path
    as_user: list[str]

    def uri(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        import psycopg2

        connection = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres")
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
        connection.close()
        return self.uri(name)

    def create_login(self, user: str, password: str, database: str) -> str:
        """A role that must give ``password`` (scram over TCP; every other role keeps trust) and owns a new
        ``database``; returns the catalog URI with the password in it."""
        import psycopg2

        hba = self.data_dir / "pg_hba.conf"
        rule = f"host all {user} 127.0.0.1/32 scram-sha-256\n"
        text = self.run_output("cat", str(hba))
        if rule not in text:
            self.run_output("sh", "-c", f"printf '%s' {shlex.quote(rule + text)} > {shlex.quote(str(hba))}")
        connection = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres")
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute("SET password_encryption = 'scram-sha-256'")
            cursor.execute(f"CREATE ROLE {user} LOGIN PASSWORD %s", (password,))
            cursor.execute(f'CREATE DATABASE "{database}" OWNER {user}')
            cursor.execute("SELECT pg_reload_conf()")
        connection.close()
        return f"postgresql://{user}:{quote(password, safe='')}@127.0.0.1:{self.port}/{database}"

    def run_output(self, *args: str) -> str:
        """Run a command as the server's user (it owns the data directory) and return its output."""
        return subprocess.run([*self.as_user, *args], check=True, capture_output=True, text=True,
                              timeout=60).stdout

    def run(self, *args: str) -> None:
        subprocess.run([*self.as_user, str(self.bin_dir / args[0]), *args[1:]], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)


@contextlib.contextmanager
def running_postgres(*, fsync: bool = False) -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL server on 127.0.0.1 and a free port while the block runs (``fsync`` off for tests;
    on for a benchmark that should pay what a real server pays). ``LookupError`` if none is installed."""
    bin_dir = server_binaries()
    if bin_dir is None:
        raise LookupError("no PostgreSQL server binaries on this machine (infra/setup.sh installs the "
                          "'postgresql' Debian package when run as root)")
    root = Path(tempfile.mkdtemp(prefix="compactor-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(root, user="postgres", group="postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    server = PostgresServer(free_port(), bin_dir, root / "data", as_user)
    try:
        server.run("initdb", "-D", str(server.data_dir), "-A", "trust", "-U", "postgres", "--no-sync")
        server.run("pg_ctl", "-D", str(server.data_dir), "-w", "-l", str(root / "log"), "-o",
                   f"-p {server.port} -k {root} -c listen_addresses=127.0.0.1 -c fsync={'on' if fsync else 'off'}",
                   "start")
        yield server
    finally:
        if (server.data_dir / "postmaster.pid").exists():
            server.run("pg_ctl", "-D", str(server.data_dir), "-w", "-m", "immediate", "stop")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    try:
        with running_postgres() as server:
            yield server
    except LookupError as exc:
        pytest.skip(f"{exc}; the SQLite and S3 back-ends still run")
