"""The consumer groups' own tables, in the catalog database (SQLite file or PostgreSQL), next to pyiceberg's.

Why a small SQL table rather than one of our own compacted topics (Kafka's ``__consumer_offsets``): a commit
here is one conditional ``UPDATE`` of a fixed row, so its cost is flat over a group's life and fencing is the
database's own row-level atomicity; an Iceberg append costs a metadata file per commit, grows with the
table's metadata and could not express "only if I still own the partition" (measured in ``bench/README.md``).

Every row carries the catalog name (``LakeConfig.catalog_name``), like pyiceberg's own tables, so several lakes
may share one database. Four tables:

* ``compactor_groups``: one row per group (created, last commit: ``offsets.retention.ms`` counts from it);
* ``compactor_group_members``: live members and their lease (``session.timeout.ms`` after their last poll);
* ``compactor_group_partitions``: per (group, topic, partition): the committed position, the owner and its
  epoch (bumped at every change of owner: the fence), and the last reset of the position;
* ``compactor_group_pending``: per (group, topic, partition), the input range a batch engine took with that
  partition and has not committed yet (``groups.pending``), so a run restarted after a crash processes exactly
  the same range.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import BigInteger, Column, Connection, Engine, Integer, MetaData, String, Table, Text
from sqlalchemy.exc import OperationalError, ProgrammingError

METADATA = MetaData()


def _keys(*names: str) -> list[Column[Any]]:
    """The primary key columns every table starts with: the catalog, the group, then ``names`` (in this order:
    ``topic`` text, ``partition`` integer, any other text)."""
    kinds: dict[str, Any] = {"partition": Integer}
    return [Column(name, kinds.get(name, String(255)), primary_key=True)
            for name in ("catalog_name", "group_id", *names)]

GROUPS = Table(
    "compactor_groups", METADATA,
    *_keys(),
    Column("created_ms", BigInteger, nullable=False),
    Column("last_commit_ms", BigInteger, nullable=False),
)

MEMBERS = Table(
    "compactor_group_members", METADATA,
    *_keys("member_id"),
    Column("topics", Text, nullable=False),  # the subscribed topics, comma-separated
    Column("client", String(255), nullable=False),  # host and process, for people
    Column("joined_ms", BigInteger, nullable=False),
    Column("lease_expires_ms", BigInteger, nullable=False),
)

PARTITIONS = Table(
    "compactor_group_partitions", METADATA,
    *_keys("topic", "partition"),
    Column("committed_offset", BigInteger, nullable=True),
    Column("committed_ms", BigInteger, nullable=True),
    Column("owner", String(255), nullable=True),
    Column("owner_epoch", BigInteger, nullable=False, default=0),
    Column("last_reset", Text, nullable=True),  # JSON: {"at_ms", "from", "to", "reason"}
    Column("reset_count", BigInteger, nullable=False, default=0),
)

PENDING = Table(  # groups/pending.py: the range a batch engine is processing, fixed until it commits
    "compactor_group_pending", METADATA,
    *_keys("topic", "partition"),
    Column("ranges", Text, nullable=False),  # the whole taken range: JSON {"<partition>": [start, end], ...}
    Column("created_ms", BigInteger, nullable=False),
)

_created: weakref.WeakSet[Engine] = weakref.WeakSet()  # engines whose database has the tables (not ids: reused)


def ensure_tables(engine: Engine) -> None:
    """Create the group tables if missing (idempotent; once per engine per process)."""
    if engine in _created:
        return
    try:
        METADATA.create_all(engine, checkfirst=True)
    except (OperationalError, ProgrammingError):  # another process created them between check and create
        METADATA.create_all(engine, checkfirst=True)
    _created.add(engine)


def insert_missing(conn: Connection, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert ``rows``, skipping those whose primary key exists (``ON CONFLICT DO NOTHING``, SQLite and
    PostgreSQL), so that racing members never abort each other's transactions."""
    if not rows:
        return
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        conn.execute(pg_insert(table).on_conflict_do_nothing(), list(rows))
    else:
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        conn.execute(sqlite_insert(table).on_conflict_do_nothing(), list(rows))
