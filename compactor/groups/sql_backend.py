"""Groups in a SQL database (SQLite or PostgreSQL): one versioned row per group.

A change is one transaction: it locks the group's row first (``SELECT ... FOR UPDATE`` on PostgreSQL; SQLite's
``BEGIN IMMEDIATE`` takes the database's write lock before reading), reads the database server's clock in the
same transaction, and writes the row back with ``version = version + 1 WHERE version = <read>``; a group's
first row is inserted with ``ON CONFLICT DO NOTHING``, and a lost race runs the change again. Rows carry the
catalog name, so several lakes can share one database (the catalog's own, by default).

PostgreSQL fences across hosts (one server judges the leases on its own clock). SQLite fences the processes of
one machine; on a shared or network file system its locks are not reliable, so it does not fence across hosts.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import BigInteger, Column, Connection, MetaData, String, Table, Text, create_engine, event, select
from sqlalchemy.exc import OperationalError, ProgrammingError

from compactor.config import CatalogUri, mask_password
from compactor.groups.backend import MAX_ATTEMPTS, UNCHANGED, Change, Clock, T, backoff, conflict
from compactor.groups.legacy import import_legacy_groups
from compactor.iceberg.catalog import translate_storage_errors

log = logging.getLogger("compactor.groups")

METADATA = MetaData()
GROUP_STATE = Table(
    "compactor_group_state", METADATA,
    Column("catalog_name", String(255), primary_key=True),
    Column("group_id", String(255), primary_key=True),
    Column("version", BigInteger, nullable=False),
    Column("state", Text, nullable=False),  # groups.state.GroupState as JSON
    Column("updated_ms", BigInteger, nullable=False),
)
SQLITE_TIMEOUT_S = 60
_NOW = {"sqlite": "SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
        "postgresql": "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"}


class SqlBackend:
    """Groups in the database ``uri`` names (see the module docstring)."""

    def __init__(self, uri: CatalogUri, catalog_name: str, *, clock: Clock | None = None) -> None:
        self.catalog_name = catalog_name
        self.clock = clock
        self.is_sqlite = uri.is_sqlite
        self.fences_across_hosts = not uri.is_sqlite
        self.description = f"the database {mask_password(uri.sqlalchemy_url)}"
        args: dict[str, Any] = {"timeout": SQLITE_TIMEOUT_S} if uri.is_sqlite else {}
        if uri.is_sqlite:
            Path(uri.sqlalchemy_url.split("///", 1)[1]).parent.mkdir(parents=True, exist_ok=True)
        with translate_storage_errors(f"opening the group store ({self.description})"):
            self.engine = create_engine(uri.sqlalchemy_url, connect_args=args, pool_pre_ping=not uri.is_sqlite)
            if uri.is_sqlite:
                _immediate_transactions(self.engine)
            try:
                METADATA.create_all(self.engine, checkfirst=True)
            except (OperationalError, ProgrammingError):  # another process created it between check and create
                METADATA.create_all(self.engine, checkfirst=True)
            import_legacy_groups(self.engine, catalog_name, insert_if_absent)

    def _where(self, group: str) -> Any:
        return (GROUP_STATE.c.catalog_name == self.catalog_name) & (GROUP_STATE.c.group_id == group)

    def _server_now(self, conn: Connection) -> int:
        if self.clock is not None:
            return int(self.clock())
        return int(conn.exec_driver_sql(_NOW[conn.dialect.name]).scalar_one())

    @contextlib.contextmanager
    def _connection(self, action: str, write: bool) -> Iterator[Connection]:
        with translate_storage_errors(f"{action} ({self.description})"), self.engine.connect() as opened:
            conn = opened if write else opened.execution_options(compactor_read_only=True)
            with conn.begin():
                yield conn

    def now_ms(self) -> int:
        with self._connection("reading the group store's clock", write=False) as conn:
            return self._server_now(conn)

    def transact(self, group: str, change: Change[T]) -> T:
        for attempt in range(MAX_ATTEMPTS):
            with self._connection(f"updating group {group}", write=True) as conn:
                query = select(GROUP_STATE.c.version, GROUP_STATE.c.state).where(self._where(group))
                if conn.dialect.name == "postgresql":
                    query = query.with_for_update()
                row = conn.execute(query).first()
                now = self._server_now(conn)
                outcome, result = change(row.state if row else None, now)
                if outcome is UNCHANGED:
                    return result
                if outcome is None:
                    if row is not None:
                        conn.execute(GROUP_STATE.delete().where(self._where(group),
                                                                GROUP_STATE.c.version == row.version))
                    return result
                assert isinstance(outcome, str)
                if row is not None:
                    done = conn.execute(GROUP_STATE.update().where(self._where(group),
                                                                   GROUP_STATE.c.version == row.version)
                                        .values(version=row.version + 1, state=outcome, updated_ms=now)).rowcount
                else:
                    done = insert_if_absent(conn, {"catalog_name": self.catalog_name, "group_id": group,
                                                   "version": 1, "state": outcome, "updated_ms": now})
                if done == 1:
                    return result
            backoff(attempt)
        raise conflict(self.description, group)

    def read(self, group: str) -> tuple[str | None, int]:
        with self._connection(f"reading group {group}", write=False) as conn:
            text = conn.execute(select(GROUP_STATE.c.state).where(self._where(group))).scalar_one_or_none()
            return text, self._server_now(conn)

    def documents(self) -> tuple[list[tuple[str, str]], int]:
        query = (select(GROUP_STATE.c.group_id, GROUP_STATE.c.state)
                 .where(GROUP_STATE.c.catalog_name == self.catalog_name).order_by(GROUP_STATE.c.group_id))
        with self._connection("listing consumer groups", write=False) as conn:
            rows = [(str(g), str(s)) for g, s in conn.execute(query)]
            return rows, self._server_now(conn)

    def close(self) -> None:
        self.engine.dispose()


def insert_if_absent(conn: Connection, row: dict[str, Any]) -> int:
    """Insert ``row`` unless its key exists (``ON CONFLICT DO NOTHING``); the number of rows inserted."""
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return int(conn.execute(pg_insert(GROUP_STATE).on_conflict_do_nothing(), [row]).rowcount)
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return int(conn.execute(sqlite_insert(GROUP_STATE).on_conflict_do_nothing(), [row]).rowcount)


def _immediate_transactions(engine: Any) -> None:
    """SQLite: writers take the write lock when their transaction begins (``BEGIN IMMEDIATE``), so two members
    never both read and then deadlock upgrading to write; readers begin a deferred transaction."""

    @event.listens_for(engine, "connect")
    def no_implicit_transactions(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None  # the driver begins nothing by itself

    @event.listens_for(engine, "begin")
    def begin(conn: Connection) -> None:
        read_only = conn.get_execution_options().get("compactor_read_only")
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")
