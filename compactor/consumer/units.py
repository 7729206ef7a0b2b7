"""Exactly once for consume-transform-produce (docs/guarantees.md#consumers-and-groups), without Spark: units of replay.

The unit of replay is one (group, topic, partition, start, end): a range of one partition. Its batch id derives
from that alone (``batch_id_of``), so whoever produces the unit's output with that id, whichever member and
however often, appends it once (the output topic's batch ids, docs/guarantees.md#the-raw-log). ``take_unit``:

1. settles the group (the member may have gained or lost partitions);
2. replays a pending unit first: one of a partition it owns whose recorded start is the partition's position
   (the member that took it crashed or lost the partition before committing, or this member restarted). The
   replay reads the very snapshots the unit was first read from (while the topic retains them), so it returns
   the same records even after a compaction or retention run under the range;
3. otherwise takes ``[position, N_p)`` of the next owned partition with new records (in turn), and records it as
   the partition's pending unit under the owner epoch (a member that lost the partition is refused and takes
   nothing), then moves the position past it.

``Consumer.commit({tp: end})`` then commits the end under the same epoch, which also retires the unit. A
partition with nothing new forms no unit. A static consumer (``assign``, no lease) takes units only of
partitions no live member owns.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from compactor.errors import CursorExpiredError, InputError, OffsetOutOfRangeError, SnapshotExpiredError
from compactor.groups import PendingRange, TopicPartition
from compactor.topics.naming import TopicName
from readers.pinned import Pins
from readers.reader import TopicReader

if TYPE_CHECKING:
    from compactor.consumer.consumer import Consumer
    from compactor.lake import Lake

log = logging.getLogger("compactor.consumer")

BATCH_ID_PREFIX = "increment"


def batch_id_of(group: str, tp: TopicPartition, start: int, end: int) -> str:
    """The batch id of one unit: the group, the topic, the partition and the range (hashed to fit)."""
    text = json.dumps([group, tp.topic, tp.partition, start, end])
    return f"{BATCH_ID_PREFIX}:{hashlib.sha256(text.encode()).hexdigest()[:40]}"


@dataclass(frozen=True)
class Unit:
    """One range ``[start, end)`` of one partition taken for a group, and how to read it again."""

    group: str
    tp: TopicPartition
    start: int
    end: int
    replayed: bool  # taken before (by this member or another) and not committed: read and produced again
    reader: TopicReader  # a pinned reader of exactly this range

    @property
    def batch_id(self) -> str:
        return batch_id_of(self.group, self.tp, self.start, self.end)

    @property
    def offsets(self) -> int:
        return self.end - self.start


def range_reader(lake: Lake, name: TopicName | str, ranges: dict[int, tuple[int, int]], *, read_compacted: bool,
                 pins: Pins | None = None) -> TopicReader:
    """A pinned ``TopicReader`` of exactly ``[start, end)`` per partition in ``ranges`` (other partitions:
    nothing): ``reader.batches()`` gives Arrow, ``readers.spark.dataframe_of(lake, reader)`` a Spark DataFrame
    of the same records. A raw range below the log start of the pinned snapshot is an ``OffsetOutOfRangeError``
    (retention removed it; ask again); a compacted one is read from the view
    (docs/guarantees.md#consumers-and-groups)."""
    reader = TopicReader(lake, name, read_compacted=read_compacted, pins=pins)
    ends = list(reader.pinned.end)
    starts: dict[int, int] = {}
    for partition in range(reader.partitions):
        start, end = ranges.get(partition, (ends[partition], ends[partition]))
        first = reader.view_start(partition)
        if not 0 <= start <= end <= ends[partition]:
            raise OffsetOutOfRangeError(f"range [{start}, {end}) of partition {partition} of {reader.name} is not "
                                        f"within its log (next offset {ends[partition]})")
        pinned_old = pins is not None and pins.raw_snapshot_id is not None
        if start < first and start < end and not pinned_old and (not read_compacted or reader.cursor is None):
            raise OffsetOutOfRangeError(f"range [{start}, {end}) of partition {partition} of {reader.name} starts "
                                        f"below the log start {first}: retention removed it; ask for ranges again")
        starts[partition] = max(start, first) if read_compacted and not pinned_old else start
        ends[partition] = end
    reader.pinned.end = tuple(ends)
    reader.start_offsets = starts
    return reader


def _replay_reader(consumer: Consumer, name: TopicName, tp: TopicPartition, pending: PendingRange) -> TopicReader:
    """A reader of a pending unit on the snapshots it was first read from; on the current view when those are
    no longer retained (the output then matches the first run's only if nothing under the range changed)."""
    ranges = {tp.partition: (pending.start, pending.end)}
    pins = Pins(raw_snapshot_id=pending.raw_snapshot_id, cursor_id=pending.cursor_id)
    try:
        return range_reader(consumer.lake, name, ranges, read_compacted=pending.read_compacted, pins=pins)
    except (SnapshotExpiredError, CursorExpiredError) as exc:
        log.warning("event=replay-on-current-view unit=%s:[%d,%d) reason=%r", tp, pending.start, pending.end,
                    str(exc))
        return range_reader(consumer.lake, name, ranges, read_compacted=pending.read_compacted)


def take_unit(consumer: Consumer, topic: str) -> Unit | None:
    """The next unit of ``topic`` for ``consumer``'s group (see the module docstring); None when nothing is
    new in the partitions it owns."""
    store, group = consumer.store, consumer.group
    if store is None or group is None:
        raise InputError("exactly-once ranges need a consumer with a group: a range is recorded there")
    name = TopicName.parse(topic)
    if str(name) not in consumer.names:
        raise InputError(f"the consumer does not follow {name} (it follows {', '.join(consumer.subscription())})")
    consumer.settle()
    owned = consumer.turns(str(name))
    if not owned:
        return None
    slots = {s.topic_partition: s for s in store.partitions(group, str(name))}
    for tp in owned:
        pending = slots[tp].pending if tp in slots else None
        position = consumer.positions.get(tp)
        if pending is not None and pending.end > pending.start and position in (None, pending.start, pending.end):
            reader = _replay_reader(consumer, name, tp, pending)
            consumer.move(tp, pending.end)
            return Unit(group, tp, pending.start, pending.end, True, reader)
    table = consumer.fetcher.load(name)
    reader = consumer.fetcher.open(name, table, [tp.partition for tp in owned])
    starts = consumer.start_positions(str(name), owned, reader)  # out of range: the policy applies, recorded
    for tp in owned:
        start, end = starts[tp.partition], reader.pinned.end[tp.partition]
        if end <= start:
            continue
        pending = PendingRange(start, end, consumer.epochs.get(tp, -1), 0, consumer.read_compacted,
                               reader.raw_snapshot_id, reader.cursor.snapshot_id if reader.cursor else None)
        consumer.take_range(tp, pending)
        pins = Pins(table=table, raw_tasks=reader.raw_files)
        unit_reader = range_reader(consumer.lake, name, {tp.partition: (start, end)},
                                   read_compacted=consumer.read_compacted, pins=pins)
        consumer.move(tp, end)
        return Unit(group, tp, start, end, False, unit_reader)
    return None
