"""Pending ranges: the input a batch engine took for a group and has not committed yet.

Exactly-once consume-transform-produce needs the same input range, and so the same batch id, after a crash
between the produce and the commit. The range's start is the committed position, but its end is wherever the
log ended when the range was taken; appends since would make a re-run's range longer, its batch id new, and
its output a duplicate. So the range is written here before it is processed and removed when its end is
committed (Spark Structured Streaming keeps an offset log for the same reason).

A range covers the partitions its member owned; it is stored once per partition (so members of one group never
overwrite each other's), each row holding the whole range. A range is replayed only whole: by a member that owns
all of its partitions, while each still starts at its partition's position. A range whose starts are no longer
the positions is stale (its commit landed and only the removal was lost, or the positions were reset).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from sqlalchemy import and_, delete, select
from sqlalchemy.sql.elements import ColumnElement

from compactor.groups.model import TopicPartition
from compactor.groups.store import GroupStore
from compactor.groups.tables import PENDING, insert_missing

Ranges = dict[int, tuple[int, int]]  # partition -> [start, end)


def _rows(store: GroupStore, group: str, topic: str, partitions: Iterable[int]) -> ColumnElement[bool]:
    return and_(PENDING.c.catalog_name == store.catalog_name, PENDING.c.group_id == group, PENDING.c.topic == topic,
                PENDING.c.partition.in_(sorted(partitions)))


def _encode(ranges: Mapping[int, tuple[int, int]]) -> str:
    return json.dumps({str(p): list(se) for p, se in sorted(ranges.items())})


def pending_ranges(store: GroupStore, group: str, topic: str, partitions: Iterable[int]) -> list[Ranges]:
    """The ranges taken for ``(group, topic)`` and not yet committed that cover any of ``partitions``."""
    query = select(PENDING.c.ranges).where(_rows(store, group, topic, partitions)).distinct()
    with store.engine.connect() as conn:
        texts = sorted(conn.execute(query).scalars().all())
    return [{int(p): (int(se[0]), int(se[1])) for p, se in json.loads(text).items()} for text in texts]


def set_pending(store: GroupStore, group: str, topic: str, ranges: Mapping[int, tuple[int, int]], now_ms: int) -> None:
    """Record ``ranges`` as taken for ``(group, topic)``: one row per partition, replacing those partitions' rows."""
    text = _encode(ranges)
    rows = [{"catalog_name": store.catalog_name, "group_id": group, "topic": topic, "partition": p, "ranges": text,
             "created_ms": now_ms} for p in sorted(ranges)]
    with store.engine.begin() as conn:
        conn.execute(delete(PENDING).where(_rows(store, group, topic, ranges)))
        insert_missing(conn, PENDING, rows)


def clear_pending(store: GroupStore, group: str, topic: str, ranges: Mapping[int, tuple[int, int]]) -> None:
    """Remove ``ranges``' rows, only where they still hold this range (another member may have taken over)."""
    with store.engine.begin() as conn:
        conn.execute(delete(PENDING).where(_rows(store, group, topic, ranges), PENDING.c.ranges == _encode(ranges)))


def replayable(candidates: Iterable[Ranges], topic: str, positions: Mapping[TopicPartition, int]) -> Ranges | None:
    """The pending range to take again: one whose partitions are all among ``positions`` (owned now) and each
    still starts at its position; ``None`` if there is none."""
    for ranges in candidates:
        if any(end > start for start, end in ranges.values()) and \
                all(positions.get(TopicPartition(topic, p)) == start for p, (start, _) in ranges.items()):
            return ranges
    return None
