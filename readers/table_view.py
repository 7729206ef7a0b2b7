"""``TableView``: the latest value of every live key of a topic (Pulsar's TableView), read-only and pinned.

Served from the compacted view plus the raw tail (a compacted ``TopicReader``: cursor ``C`` pinned, then the
raw snapshot ``R``). Per partition, the tail ``[H_p(C), N_p)`` holds the newest records, so a key's latest
record is its highest-offset tail record if it has one, and otherwise its (single) record in the compacted
view. A key whose latest record is a tombstone is not live.

Point look-ups (``get``) never scan the topic:

* the key's partition comes from Kafka's default partitioner (records placed on an explicit partition are
  found with ``get(key, partition=p)``, or by a view opened with ``key_partitioned=False``, which searches
  every partition and takes the newest record by timestamp);
* the tail is searched first, newest first, and the compacted view only when the tail has no record;
* within a segment, Iceberg prunes data files by partition, offset and the key column's lower/upper bounds,
  and the Parquet reader skips row groups by the key's statistics, reading only matching rows.

File pruning by key is as good as the files' key ranges are narrow: tail files written by one producer batch
of related keys prune well; compacted files, which are laid out in offset order for streaming reads, hold a
wide key range each, so a look-up there reads the key column of the partition's compacted files (see
docs/consuming.md, "Reading", for the trade-off).

Iteration (``items``/``keys``/``values``) streams one partition at a time; memory holds the tail's keys of
one partition, never the compacted view.

Under ``compaction.strategy`` ``timestamp`` or ``header`` the latest record is the one of highest rank
(``topics.strategy``), not of highest offset: a look-up then reads the key's records in the tail AND in the
compacted view and keeps the highest-ranked (the view's row beats a tail record that ranks lower), and
iteration ranks the tail's records per key and lets each compacted row compete with its key's best. The
strategy is the pinned cursor's (the one its view was built with; the topic's setting before any cursor), so
a view is never merged with its tail under another strategy than the one that built it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import EqualTo, Reference

from compactor import schema as ts
from compactor.errors import InputError
from compactor.topics.naming import TopicName
from compactor.topics.partitioner import partition_for_key
from compactor.topics.records import Record
from compactor.topics.strategy import Rank, Strategy
from readers.attached import AttachedPinnedView
from readers.batches import batch_to_records, to_topic_schema
from readers.pinned import Segment
from readers.reader import TopicReader

if TYPE_CHECKING:
    from compactor.lake import Lake


@dataclass
class LookupStats:
    """What the last ``get`` read: segments searched and data files planned after pruning."""

    segments: int = 0
    files: int = 0


def _as_key(key: bytes | str) -> bytes:
    if isinstance(key, str):
        return key.encode()
    if isinstance(key, bytes):
        return key
    raise InputError(f"a key is bytes or str, got {type(key).__name__}")


class TableView:
    """Latest live record per key of one topic, pinned at open (see the module docstring)."""

    def __init__(self, lake: Lake, topic: str | TopicName, *, as_of_cursor: int | None = None,
                 now_ms: int | None = None, key_partitioned: bool = True) -> None:
        self.reader = TopicReader(lake, topic, read_compacted=True, as_of_cursor=as_of_cursor, now_ms=now_ms)
        # an attached log's keys are JSON objects of its key columns, not the bytes its writer partitioned by
        self.attached = isinstance(self.reader.pinned, AttachedPinnedView)
        self.key_partitioned = key_partitioned and not self.attached
        self.last_lookup = LookupStats()
        cursor = self.reader.cursor
        self.strategy: Strategy = cursor.strategy if cursor is not None else self.reader.topic.settings.strategy

    def _rank(self, record: Record) -> Rank:
        return self.strategy.rank(record.offset, record.timestamp_ms, record.headers)

    @property
    def partitions(self) -> int:
        return self.reader.partitions

    # --- point look-ups ---------------------------------------------------------------------------------

    def get_record(self, key: bytes | str | Mapping[str, Any], partition: int | None = None) -> Record | None:
        """The latest live record of ``key`` (``None`` if it has none or its latest is a tombstone). An attached
        log's key is the JSON of its key columns, or a mapping of those columns to their values."""
        if isinstance(key, Mapping):
            if not isinstance(self.reader.pinned, AttachedPinnedView):
                raise InputError("a key given as a mapping of columns is for attached logs; a topic's is bytes or str")
            raw_key = self.reader.pinned.key_bytes(key)
        else:
            raw_key = _as_key(key)
        if partition is not None:
            if not 0 <= partition < self.partitions:
                raise InputError(f"partition {partition} does not exist: {self.reader.name} has "
                                 f"{self.partitions} partition(s)")
            candidates = [partition]
        elif self.key_partitioned:
            candidates = [partition_for_key(raw_key, self.partitions)]
        else:
            candidates = list(range(self.partitions))
        self.last_lookup = LookupStats()
        found = [r for r in (self._latest_in_partition(raw_key, p) for p in candidates) if r is not None]
        if not found:
            return None
        newest = max(found, key=lambda r: (self._rank(r)[:2], r.timestamp_ms, r.partition))
        return None if newest.value is None else newest

    def get(self, key: bytes | str | Mapping[str, Any], partition: int | None = None) -> bytes | None:
        """The latest value of ``key``, or ``None`` when the key is not live."""
        record = self.get_record(key, partition)
        return record.value if record is not None else None

    def __contains__(self, key: object) -> bool:
        return isinstance(key, bytes | str) and self.get_record(key) is not None

    def _latest_in_partition(self, key: bytes, partition: int) -> Record | None:
        """The winning record of ``key`` in ``partition`` (tombstones included): the highest offset, or under
        another strategy the highest rank."""
        match = EqualTo(term=Reference(ts.KEY), value=key)
        latest: Record | None = None
        for segment in reversed(self.reader.segments(partition)):  # the tail first: it is newer
            for batch in self._matching(segment, match):
                for record in batch_to_records(batch):
                    if record.key == key and (latest is None or self._rank(record) > self._rank(latest)):
                        latest = record
            if latest is not None and self.strategy.by_offset:
                return latest  # nothing older can win
        return latest

    def _matching(self, segment: Segment, match: EqualTo) -> Iterator[pa.RecordBatch]:
        reader, tasks = self.reader.plan_segment(segment, None, match)
        self.last_lookup.segments += 1
        self.last_lookup.files += len(tasks)
        for _, batches in reader.stream(tasks):
            for batch in batches:
                if batch.num_rows:
                    yield to_topic_schema(batch)

    # --- iteration ---------------------------------------------------------------------------------------

    def items(self) -> Iterator[tuple[bytes, Record]]:
        """``(key, latest live record)`` for every live key, partition by partition, in the offset order of each
        key's latest record."""
        for partition in range(self.partitions):
            yield from self._partition_items(partition)

    def keys(self) -> Iterator[bytes]:
        for key, _ in self.items():
            yield key

    def values(self) -> Iterator[bytes | None]:
        for _, record in self.items():
            yield record.value

    def __iter__(self) -> Iterator[bytes]:
        return self.keys()

    def to_dict(self) -> dict[bytes, bytes | None]:
        """Every live key and its value (collects the whole view: for small topics and tests)."""
        return {key: record.value for key, record in self.items()}

    def _partition_items(self, partition: int) -> Iterator[tuple[bytes, Record]]:
        if not self.strategy.by_offset:
            yield from self._ranked_partition_items(partition)
            return
        segments = self.reader.segments(partition)
        tail = [s for s in segments if not s.compacted]
        compacted = [s for s in segments if s.compacted]
        # The tail's latest offset per key: these keys' compacted records are superseded.
        tail_keys = pa.array([], pa.large_binary())
        tail_latest = pa.array([], pa.int64())
        if tail:
            parts = [b for b in self.reader.segment_batches(tail[0], (ts.OFFSET, ts.KEY)) if b.num_rows]
            if parts:
                table = pa.Table.from_batches(parts)
                table = table.filter(pc.is_valid(table[ts.KEY]))
                grouped = table.group_by(ts.KEY).aggregate([(ts.OFFSET, "max")])
                tail_keys = grouped[ts.KEY].combine_chunks().cast(pa.large_binary())
                tail_latest = grouped[f"{ts.OFFSET}_max"].combine_chunks()
        for segment in compacted:
            for batch in self.reader.segment_batches(segment):
                keys = batch.column(ts.KEY).cast(pa.large_binary())
                keep = pc.and_(pc.and_(pc.is_valid(keys), pc.is_valid(batch.column(ts.VALUE))),
                               pc.invert(pc.is_in(keys, value_set=tail_keys)))
                yield from self._records(batch.filter(keep))
        for segment in tail:
            for batch in self.reader.segment_batches(segment):
                offsets = batch.column(ts.OFFSET).cast(pa.int64())
                keep = pc.and_(pc.is_in(offsets, value_set=tail_latest), pc.is_valid(batch.column(ts.VALUE)))
                yield from self._records(batch.filter(pc.fill_null(keep, False)))

    def _ranked_partition_items(self, partition: int) -> Iterator[tuple[bytes, Record]]:
        """``_partition_items`` under ``timestamp`` or ``header``: the tail's best record per key competes with
        the key's compacted row (which wins only when it ranks higher, offsets aside)."""
        segments = self.reader.segments(partition)
        best: dict[bytes, tuple[Rank, int]] = {}  # the tail's winner per key: its rank and offset
        for segment in (s for s in segments if not s.compacted):
            for batch in self.reader.segment_batches(segment):  # whole rows: the rank reads headers or time
                for record in batch_to_records(to_topic_schema(batch)):
                    held = best.get(record.key) if record.key is not None else None
                    if record.key is not None and (held is None or self._rank(record) > held[0]):
                        best[record.key] = (self._rank(record), record.offset)
        for segment in (s for s in segments if s.compacted):
            for batch in self.reader.segment_batches(segment):
                for key, record in self._records(batch):
                    challenger = best.get(key)
                    if challenger is not None and challenger[0][:2] < self._rank(record)[:2]:
                        del best[key]  # the compacted row outranks the tail
                        challenger = None
                    if challenger is None and record.value is not None:
                        yield key, record
        winners = pa.array(sorted(offset for _, offset in best.values()), pa.int64())
        for segment in (s for s in segments if not s.compacted):
            for batch in self.reader.segment_batches(segment):
                offsets = batch.column(ts.OFFSET).cast(pa.int64())
                keep = pc.and_(pc.is_in(offsets, value_set=winners), pc.is_valid(batch.column(ts.VALUE)))
                yield from self._records(batch.filter(pc.fill_null(keep, False)))

    @staticmethod
    def _records(batch: pa.RecordBatch) -> Iterator[tuple[bytes, Record]]:
        for record in batch_to_records(to_topic_schema(batch)):
            assert record.key is not None
            yield record.key, record


__all__ = ["LookupStats", "TableView"]
