"""``GroupStore``: committed positions per (group, topic, partition), fenced commits, and the group admin.

A commit is one transaction of conditional ``UPDATE`` statements, one per partition: a member's commit lands
only where it is still the owner under the epoch it acquired the partition with, and while its lease is live
(SEMANTICS section 7). If any partition fails that test, the whole commit is rolled back and the member gets
``NotOwnerError``: nothing changes. A commit writes fixed rows (no history), so its cost is flat over a
group's life. Membership (leases, assignment) is ``groups.membership``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from sqlalchemy import Connection, and_, delete, exists, func, not_, or_, select, update

from compactor.errors import GroupNotFoundError, InputError, NotOwnerError
from compactor.groups.model import (
    DEFAULT_OFFSETS_RETENTION_MS,
    GroupSummary,
    MemberState,
    PartitionState,
    Reset,
    TopicPartition,
)
from compactor.groups.tables import GROUPS, MEMBERS, PARTITIONS, PENDING, ensure_tables, insert_missing
from compactor.iceberg.catalog import translate_storage_errors

if TYPE_CHECKING:
    from sqlalchemy import ColumnElement, Engine

    from compactor.lake import Lake

OFFSETS_RETENTION_ENV = "COMPACTOR_OFFSETS_RETENTION_MS"


def offsets_retention_ms(env: Mapping[str, str] | None = None) -> int:
    """The lake-wide ``offsets.retention.ms`` (env ``COMPACTOR_OFFSETS_RETENTION_MS``, default 7 days)."""
    text = (os.environ if env is None else env).get(OFFSETS_RETENTION_ENV)
    if not text:
        return DEFAULT_OFFSETS_RETENTION_MS
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"{OFFSETS_RETENTION_ENV} must be milliseconds, got {text!r}") from None
    if value < 1:
        raise InputError(f"{OFFSETS_RETENTION_ENV} must be positive, got {value}")
    return value


def check_group_name(group: str) -> str:
    if not isinstance(group, str) or not group.strip() or len(group) > 255:
        raise InputError(f"a group name must be non-empty text of at most 255 characters, got {group!r}")
    return group


class GroupStore:
    """The group tables of one lake's catalog database."""

    def __init__(self, lake: Lake) -> None:
        self.catalog_name = lake.config.catalog_name
        with translate_storage_errors("opening the consumer group tables"):
            self.engine: Engine = lake.sql_engine()
            ensure_tables(self.engine)

    # --- helpers ---------------------------------------------------------------------------------

    def _group(self, table: object, group: str) -> ColumnElement[bool]:
        t = table  # a Table with catalog_name and group_id
        return and_(t.c.catalog_name == self.catalog_name, t.c.group_id == group)  # type: ignore[attr-defined]

    def _partition(self, tp: TopicPartition, group: str) -> ColumnElement[bool]:
        return and_(self._group(PARTITIONS, group), PARTITIONS.c.topic == tp.topic,
                    PARTITIONS.c.partition == tp.partition)

    def _live_member(self, group: str, member: object, now_ms: int) -> ColumnElement[bool]:
        return exists().where(self._group(MEMBERS, group), MEMBERS.c.member_id == member,
                              MEMBERS.c.lease_expires_ms > now_ms)

    def ensure_group(self, conn: Connection, group: str, now_ms: int) -> None:
        """Create the group's row if missing (a group comes into being when a consumer first joins it)."""
        insert_missing(conn, GROUPS, [{"catalog_name": self.catalog_name, "group_id": group,
                                       "created_ms": now_ms, "last_commit_ms": now_ms}])

    def ensure_partitions(self, conn: Connection, group: str, tps: Iterable[TopicPartition]) -> None:
        insert_missing(conn, PARTITIONS, [{"catalog_name": self.catalog_name, "group_id": group, "topic": tp.topic,
                                           "partition": tp.partition, "owner_epoch": 0, "reset_count": 0}
                                          for tp in tps])

    # --- positions --------------------------------------------------------------------------------

    def exists(self, group: str) -> bool:
        with translate_storage_errors(f"reading group {group}"), self.engine.connect() as conn:
            return conn.execute(select(GROUPS.c.group_id).where(self._group(GROUPS, group))).first() is not None

    def require(self, group: str) -> None:
        if not self.exists(group):
            raise GroupNotFoundError(f"unknown consumer group '{group}' (see `compactor group list`)")

    def partitions(self, group: str, topic: str | None = None) -> list[PartitionState]:
        """Every (topic, partition) row of ``group`` (of ``topic`` only, if given), in topic, partition order."""
        query = select(PARTITIONS).where(self._group(PARTITIONS, group))
        if topic is not None:
            query = query.where(PARTITIONS.c.topic == topic)
        with translate_storage_errors(f"reading group {group}"), self.engine.connect() as conn:
            rows = conn.execute(query.order_by(PARTITIONS.c.topic, PARTITIONS.c.partition)).mappings().all()
        return [PartitionState(r["topic"], r["partition"], r["committed_offset"], r["committed_ms"], r["owner"],
                               r["owner_epoch"], Reset.from_json(r["last_reset"]), r["reset_count"]) for r in rows]

    def committed(self, group: str, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The committed positions of ``tps`` (``None`` where the group never committed)."""
        wanted = set(tps)
        found = {s.topic_partition: s.committed_offset for s in self.partitions(group) if s.topic_partition in wanted}
        return {tp: found.get(tp) for tp in sorted(wanted)}

    def commit(self, group: str, member_id: str | None, offsets: Mapping[TopicPartition, tuple[int, int]],
               now_ms: int) -> None:
        """Commit ``offsets`` (tp -> (position, owner epoch)) all or nothing.

        ``member_id`` set: only partitions it owns under that epoch, while its lease is live (else
        ``NotOwnerError``). ``member_id`` None (a static assignment): only partitions no live member owns.
        """
        if not offsets:
            return
        with translate_storage_errors(f"committing positions of group {group}"), self.engine.begin() as conn:
            touched = conn.execute(update(GROUPS).where(self._group(GROUPS, group)).values(last_commit_ms=now_ms))
            if touched.rowcount == 0:
                if member_id is not None:
                    raise GroupNotFoundError(f"consumer group '{group}' was deleted; nothing was committed")
                self.ensure_group(conn, group, now_ms)
            if member_id is None:
                self.ensure_partitions(conn, group, offsets)
            for tp, (position, epoch) in sorted(offsets.items()):
                if member_id is not None:
                    fence = and_(PARTITIONS.c.owner == member_id, PARTITIONS.c.owner_epoch == epoch,
                                 self._live_member(group, member_id, now_ms))
                else:
                    fence = or_(PARTITIONS.c.owner.is_(None),
                                not_(self._live_member(group, PARTITIONS.c.owner, now_ms)))
                done = conn.execute(update(PARTITIONS).where(self._partition(tp, group), fence)
                                    .values(committed_offset=position, committed_ms=now_ms))
                if done.rowcount != 1:
                    who = f"member {member_id}" if member_id else "a static assignment"
                    raise NotOwnerError(
                        f"not the owner: {who} of group '{group}' does not own {tp} under a live lease (it was "
                        "reassigned, or the session.timeout.ms lease expired); nothing was committed")

    def record_reset(self, group: str, tp: TopicPartition, reset: Reset, *, commit: bool = False) -> None:
        """Remember a reset of ``tp``'s position (counted; ``group describe`` shows the last one). With
        ``commit``, the reset position becomes the committed one (``group reset``)."""
        values: dict[str, object] = {"last_reset": reset.to_json(), "reset_count": PARTITIONS.c.reset_count + 1}
        if commit:
            values.update(committed_offset=reset.to_offset, committed_ms=reset.at_ms)
        with translate_storage_errors(f"recording a reset of group {group}"), self.engine.begin() as conn:
            if commit:
                self.ensure_group(conn, group, reset.at_ms)
                conn.execute(update(GROUPS).where(self._group(GROUPS, group)).values(last_commit_ms=reset.at_ms))
            self.ensure_partitions(conn, group, [tp])
            conn.execute(update(PARTITIONS).where(self._partition(tp, group)).values(**values))

    # --- admin ------------------------------------------------------------------------------------

    def members(self, group: str, now_ms: int) -> list[MemberState]:
        """The members of ``group`` whose lease is live at ``now_ms``."""
        query = select(MEMBERS).where(self._group(MEMBERS, group), MEMBERS.c.lease_expires_ms > now_ms)
        with translate_storage_errors(f"reading group {group}"), self.engine.connect() as conn:
            rows = conn.execute(query.order_by(MEMBERS.c.member_id)).mappings().all()
        return [MemberState(r["member_id"], [t for t in r["topics"].split(",") if t], r["client"], r["joined_ms"],
                            r["lease_expires_ms"]) for r in rows]

    def list_groups(self) -> list[GroupSummary]:
        with translate_storage_errors("listing consumer groups"), self.engine.connect() as conn:
            names = conn.execute(select(GROUPS.c.group_id).where(GROUPS.c.catalog_name == self.catalog_name)
                                 .order_by(GROUPS.c.group_id)).scalars().all()
            pairs = conn.execute(select(PARTITIONS.c.group_id, PARTITIONS.c.topic).distinct()
                                 .where(PARTITIONS.c.catalog_name == self.catalog_name,
                                        PARTITIONS.c.committed_offset.is_not(None))).all()
        topics: dict[str, list[str]] = {}
        for group, topic in pairs:
            topics.setdefault(group, []).append(topic)
        return [GroupSummary(name, sorted(topics.get(name, []))) for name in names]

    def groups_on_topic(self, topic: str) -> dict[str, dict[int, int]]:
        """group -> partition -> committed offset, for every group with a committed position on ``topic``."""
        query = select(PARTITIONS.c.group_id, PARTITIONS.c.partition, PARTITIONS.c.committed_offset).where(
            PARTITIONS.c.catalog_name == self.catalog_name, PARTITIONS.c.topic == topic,
            PARTITIONS.c.committed_offset.is_not(None))
        out: dict[str, dict[int, int]] = {}
        with translate_storage_errors(f"reading the groups of {topic}"), self.engine.connect() as conn:
            for group, partition, offset in conn.execute(query):
                out.setdefault(group, {})[partition] = offset
        return out

    def delete(self, group: str) -> None:
        """Remove ``group``, its members and its positions (``GroupNotFoundError`` if unknown)."""
        with translate_storage_errors(f"deleting group {group}"), self.engine.begin() as conn:
            gone = conn.execute(delete(GROUPS).where(self._group(GROUPS, group))).rowcount
            conn.execute(delete(MEMBERS).where(self._group(MEMBERS, group)))
            conn.execute(delete(PARTITIONS).where(self._group(PARTITIONS, group)))
            conn.execute(delete(PENDING).where(self._group(PENDING, group)))
            if not gone:
                raise GroupNotFoundError(f"unknown consumer group '{group}' (see `compactor group list`)")

    def expire(self, now_ms: int, retention_ms: int) -> list[str]:
        """Remove the groups with no commit for ``retention_ms`` and no live member (Kafka's
        ``offsets.retention.ms``); returns their names."""
        cutoff = now_ms - retention_ms
        live = exists().where(MEMBERS.c.catalog_name == GROUPS.c.catalog_name,
                              MEMBERS.c.group_id == GROUPS.c.group_id, MEMBERS.c.lease_expires_ms > now_ms)
        query = select(GROUPS.c.group_id).where(GROUPS.c.catalog_name == self.catalog_name,
                                               GROUPS.c.last_commit_ms < cutoff, not_(live))
        with translate_storage_errors("expiring consumer groups"), self.engine.connect() as conn:
            names = list(conn.execute(query).scalars().all())
        expired = []
        for name in names:  # each removal re-checks the condition: a commit in between keeps the group
            with translate_storage_errors(f"expiring group {name}"), self.engine.begin() as conn:
                if conn.execute(delete(GROUPS).where(self._group(GROUPS, name), GROUPS.c.last_commit_ms < cutoff,
                                                     not_(live))).rowcount:
                    conn.execute(delete(MEMBERS).where(self._group(MEMBERS, name)))
                    conn.execute(delete(PARTITIONS).where(self._group(PARTITIONS, name)))
                    conn.execute(delete(PENDING).where(self._group(PENDING, name)))
                    expired.append(name)
        return expired

    def commit_count(self) -> int:
        """How many position rows the lake holds (for people and benches)."""
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(PARTITIONS)).scalar_one())
