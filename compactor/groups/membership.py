"""Group membership: leases renewed by polling, and one live owner per partition.

A member's heartbeat is one transaction that starts with a write (so SQLite takes its write lock first and
never deadlocks upgrading a read lock):

1. renew the member's lease to ``now + session.timeout.ms`` (if it had expired, the member re-joins and treats
   every partition it held as lost: another member may have consumed from it meanwhile);
2. read the live members; the wanted assignment of each subscribed topic is partition ``p`` -> the
   ``p % n``-th of the ``n`` live subscribers sorted by id, the same answer on every member;
3. release what it owns but no longer wants, and claim what it wants and nobody live owns, each with a
   compare-and-set on the partition's owner epoch (bumped at every change of owner: the fence that a commit
   checks).

So a member joining or leaving rebalances within a heartbeat or two; a clean close releases at once; a member
killed with ``kill -9`` stops renewing and its partitions are claimed once its lease expires.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import and_, delete, select, update

from compactor.groups.model import TopicPartition
from compactor.groups.store import GroupStore
from compactor.groups.tables import MEMBERS, PARTITIONS
from compactor.iceberg.catalog import translate_storage_errors


def new_member_id() -> str:
    """A member id that says where the member runs (like Kafka's ``client.id-uuid``)."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def wanted_partitions(member_id: str, subscribers: list[str], partitions: int) -> set[int]:
    """Partitions of a topic that ``member_id`` should own among ``subscribers`` (round-robin by sorted id)."""
    ordered = sorted(set(subscribers))
    if member_id not in ordered:
        return set()
    return {p for p in range(partitions) if ordered[p % len(ordered)] == member_id}


@dataclass(frozen=True)
class Heartbeat:
    """What a heartbeat left the member owning: tp -> owner epoch; ``rejoined`` if its lease had expired."""

    owned: dict[TopicPartition, int]
    rejoined: bool


class Membership:
    """One member of one group in the group store."""

    def __init__(self, store: GroupStore, group: str, subscriptions: Mapping[str, int], *,
                 session_timeout_ms: int, member_id: str | None = None) -> None:
        self.store = store
        self.group = group
        self.subscriptions = dict(subscriptions)  # topic -> partition count
        self.session_timeout_ms = session_timeout_ms
        self.member_id = member_id or new_member_id()
        self.client = f"{socket.gethostname()}:{os.getpid()}"
        self.owned: dict[TopicPartition, int] = {}

    def heartbeat(self, now_ms: int) -> Heartbeat:
        """Renew the lease and settle ownership (see the module docstring)."""
        store, group, me = self.store, self.group, self.member_id
        lease = now_ms + self.session_timeout_ms
        topics = ",".join(sorted(self.subscriptions))
        held = dict(self.owned)
        owned: dict[TopicPartition, int] = {}
        with translate_storage_errors(f"heartbeat of group {group}"), store.engine.begin() as conn:
            renewed = conn.execute(update(MEMBERS).where(store._group(MEMBERS, group), MEMBERS.c.member_id == me,
                                                         MEMBERS.c.lease_expires_ms > now_ms)
                                   .values(lease_expires_ms=lease, topics=topics)).rowcount
            rejoined = renewed == 0
            if rejoined:
                held = {}
                conn.execute(delete(MEMBERS).where(store._group(MEMBERS, group), MEMBERS.c.member_id == me))
                conn.execute(MEMBERS.insert().values(catalog_name=store.catalog_name, group_id=group, member_id=me,
                                                     topics=topics, client=self.client, joined_ms=now_ms,
                                                     lease_expires_ms=lease))
                store.ensure_group(conn, group, now_ms)
            live = conn.execute(select(MEMBERS.c.member_id, MEMBERS.c.topics).where(
                store._group(MEMBERS, group), MEMBERS.c.lease_expires_ms > now_ms)).all()
            live_ids = {m for m, _ in live}
            for topic, count in sorted(self.subscriptions.items()):
                subscribers = [m for m, t in live if topic in t.split(",")]
                wanted = wanted_partitions(me, subscribers, count)
                rows = conn.execute(select(PARTITIONS.c.partition, PARTITIONS.c.owner, PARTITIONS.c.owner_epoch)
                                    .where(store._group(PARTITIONS, group), PARTITIONS.c.topic == topic)).all()
                if len(rows) < count:
                    store.ensure_partitions(conn, group, [TopicPartition(topic, p) for p in range(count)])
                    rows = conn.execute(select(PARTITIONS.c.partition, PARTITIONS.c.owner, PARTITIONS.c.owner_epoch)
                                        .where(store._group(PARTITIONS, group), PARTITIONS.c.topic == topic)).all()
                for partition, owner, epoch in rows:
                    tp = TopicPartition(topic, partition)
                    mine = owner == me and held.get(tp) == epoch
                    if partition in wanted and mine:
                        owned[tp] = epoch
                    elif partition in wanted and (owner is None or owner == me or owner not in live_ids):
                        if self._swap(conn, tp, epoch, me):
                            owned[tp] = epoch + 1
                    elif partition not in wanted and owner == me:
                        self._swap(conn, tp, epoch, None)
        self.owned = owned
        return Heartbeat(dict(owned), rejoined)

    def renew(self, now_ms: int) -> bool:
        """Extend a live lease without settling ownership (a batch engine's keep-alive while it processes a
        range: partitions change hands only at its next ``heartbeat``); False if the lease already lapsed."""
        store = self.store
        with translate_storage_errors(f"renewing the lease in group {self.group}"), store.engine.begin() as conn:
            renewed = conn.execute(update(MEMBERS).where(store._group(MEMBERS, self.group),
                                                         MEMBERS.c.member_id == self.member_id,
                                                         MEMBERS.c.lease_expires_ms > now_ms)
                                   .values(lease_expires_ms=now_ms + self.session_timeout_ms)).rowcount
        return bool(renewed)

    def _swap(self, conn: object, tp: TopicPartition, epoch: int, owner: str | None) -> bool:
        """Compare-and-set the owner of ``tp`` if its epoch is still ``epoch``; True if it was set."""
        from sqlalchemy import Connection

        assert isinstance(conn, Connection)
        done = conn.execute(update(PARTITIONS).where(
            self.store._partition(tp, self.group), PARTITIONS.c.owner_epoch == epoch)
            .values(owner=owner, owner_epoch=epoch + 1))
        return bool(done.rowcount == 1)

    def leave(self) -> None:
        """Release every partition at once and remove the member (a clean close)."""
        store, group = self.store, self.group
        with translate_storage_errors(f"leaving group {group}"), store.engine.begin() as conn:
            conn.execute(update(PARTITIONS).where(and_(store._group(PARTITIONS, group),
                                                       PARTITIONS.c.owner == self.member_id))
                         .values(owner=None, owner_epoch=PARTITIONS.c.owner_epoch + 1))
            conn.execute(delete(MEMBERS).where(store._group(MEMBERS, group), MEMBERS.c.member_id == self.member_id))
        self.owned = {}

    def commit(self, offsets: Mapping[TopicPartition, int], now_ms: int,
               epochs: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit positions of owned partitions (``NotOwnerError`` for any other: nothing changes). ``epochs``:
        the ownership the positions were read under (default: the current one); a partition lost and owned
        again since then is refused, so a position from before the loss never lands."""
        under = self.owned if epochs is None else epochs
        fenced = {tp: (offset, under.get(tp, -1)) for tp, offset in offsets.items()}
        self.store.commit(self.group, self.member_id, fenced, now_ms)
