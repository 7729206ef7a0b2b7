"""Pending ranges: the input a batch engine took for a group and has not committed yet.

Exactly-once consume-transform-produce needs the same input range, and so the same batch id, after a crash
between the produce and the commit. The range's start is the committed position, but its end is wherever the
log ended when the range was taken; appends since would make a re-run's range longer, its batch id new, and
its output a duplicate. So the range is written here before it is processed and removed when its end is
committed (Spark Structured Streaming keeps an offset log for the same reason). A pending range whose starts
are no longer the committed positions is stale (its commit landed and only the removal was lost) and ignored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from sqlalchemy import and_, delete, select

from compactor.groups.model import TopicPartition
from compactor.groups.store import GroupStore
from compactor.groups.tables import PENDING, insert_missing

Ranges = dict[int, tuple[int, int]]  # partition -> [start, end)


def _where(store: GroupStore, group: str, topic: str) -> object:
    return and_(PENDING.c.catalog_name == store.catalog_name, PENDING.c.group_id == group, PENDING.c.topic == topic)


def pending_range(store: GroupStore, group: str, topic: str) -> Ranges | None:
    """The range taken for ``(group, topic)`` and not yet committed, or ``None``."""
    with store.engine.connect() as conn:
        text = conn.execute(select(PENDING.c.ranges).where(_where(store, group, topic))).scalar()  # type: ignore[arg-type]
    if text is None:
        return None
    return {int(p): (int(se[0]), int(se[1])) for p, se in json.loads(text).items()}


def set_pending(store: GroupStore, group: str, topic: str, ranges: Mapping[int, tuple[int, int]], now_ms: int) -> None:
    """Record ``ranges`` as the range being processed for ``(group, topic)``, replacing any older one."""
    row = {"catalog_name": store.catalog_name, "group_id": group, "topic": topic,
           "ranges": json.dumps({str(p): list(se) for p, se in sorted(ranges.items())}), "created_ms": now_ms}
    with store.engine.begin() as conn:
        conn.execute(delete(PENDING).where(_where(store, group, topic)))  # type: ignore[arg-type]
        insert_missing(conn, PENDING, [row])


def clear_pending(store: GroupStore, group: str, topic: str) -> None:
    with store.engine.begin() as conn:
        conn.execute(delete(PENDING).where(_where(store, group, topic)))  # type: ignore[arg-type]


def still_pending(ranges: Ranges, topic: str, positions: Mapping[TopicPartition, int | None]) -> bool:
    """Whether a pending range still starts at the current positions of every partition it covers (and only
    partitions held now): otherwise its commit landed, or the partitions moved, and it is stale."""
    return any(end > start for start, end in ranges.values()) and \
        all(positions.get(TopicPartition(topic, p)) == start for p, (start, _) in ranges.items())
