"""Reading ranges ``[position, end)`` per partition through ``TopicReader``, and cheap change detection.

A ``Fetch`` is one pinned ``TopicReader`` (SEMANTICS section 5) whose start offsets are the consumer's
positions: the reader applies Pulsar's readCompacted rule (compacted rows ``>= position`` below ``H_p``, then
raw rows from ``H_p``), reads each pinned table once for all partitions and streams files in offset order.
The fetch ends at the reader's pinned ends (``N_p`` of its raw snapshot); a later fetch picks up from there.

``MetadataWatch`` is what an idle consumer reads: one query of the catalog database for the current metadata
locations of the topics' raw and compacted tables. Nothing else is read while they do not change.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from sqlalchemy import and_, or_, select
from sqlalchemy.sql import column, table

from compactor import schema as ts
from compactor.iceberg.catalog import translate_storage_errors
from compactor.topics.naming import TopicName
from readers.reader import TopicReader

if TYPE_CHECKING:
    from compactor.lake import Lake

_ICEBERG_TABLES = table("iceberg_tables", column("catalog_name"), column("table_namespace"), column("table_name"),
                        column("metadata_location"))


class MetadataWatch:
    """The metadata locations of some topics' raw and compacted tables, read in one catalog query."""

    def __init__(self, lake: Lake, names: Sequence[TopicName]) -> None:
        self.lake = lake
        self.names = list(names)
        self.reads = 0  # catalog queries made (the idle cost)
        wanted = []
        for name in self.names:
            for identifier in (name.identifier, name.compacted_identifier):
                namespace, _, short = identifier.rpartition(".")
                wanted.append(and_(_ICEBERG_TABLES.c.table_namespace == namespace,
                                   _ICEBERG_TABLES.c.table_name == short))
        self._query = select(_ICEBERG_TABLES.c.table_namespace, _ICEBERG_TABLES.c.table_name,
                             _ICEBERG_TABLES.c.metadata_location).where(
            _ICEBERG_TABLES.c.catalog_name == lake.config.catalog_name, or_(*wanted))

    def marks(self) -> dict[str, tuple[str | None, str | None]]:
        """topic -> (raw metadata location, compacted metadata location or None)."""
        self.reads += 1
        with translate_storage_errors("watching topics for changes"), self.lake.sql_engine().connect() as conn:
            rows = conn.execute(self._query).all()
        found = {f"{ns}.{name}": location for ns, name, location in rows}
        return {str(n): (found.get(n.identifier), found.get(n.compacted_identifier)) for n in self.names}


@dataclass
class Taken:
    """Rows handed out by a fetch: one partition's ``batch``, and the offset after its last row."""

    partition: int
    batch: pa.RecordBatch
    next_offset: int


@dataclass
class Fetch:
    """One pinned read of a topic from the consumer's positions to the reader's ends, batch by batch.

    ``take`` hands out at most ``limit`` rows at a time and keeps the rest of a batch for the next call (the
    batch's partition and a zero-copy view of its offsets are read once per batch, not per call: polls of
    Kafka's default 500 records stay cheap). ``done`` lists the partitions fully read so far (their positions
    may move to ``ends``, which matters in the compacted view, whose last rows may be gone: a trailing
    tombstone dropped, say).
    """

    reader: TopicReader
    starts: dict[int, int]
    ends: dict[int, int]
    marks: tuple[str | None, str | None]
    _batches: Iterator[pa.RecordBatch] | None = None
    _batch: pa.RecordBatch | None = None
    _offsets: Any = None  # numpy view of the current batch's offsets
    _at: int = 0  # rows of the current batch already handed out
    _current: int | None = None
    done: set[int] = field(default_factory=set)
    exhausted: bool = False

    def _advance_batch(self) -> bool:
        if self._batches is None:
            self._batches = self.reader.batches()
        for batch in self._batches:
            if batch.num_rows:
                partition = int(batch.column(ts.PARTITION)[0].as_py())
                if self._current is not None and partition != self._current:
                    self.done.update(p for p in self.starts if p < partition)
                self._batch, self._at, self._current = batch, 0, partition
                self._offsets = batch.column(ts.OFFSET).to_numpy()
                return True
        self._batch = None
        return False

    def take(self, limit: int) -> Taken | None:
        """Up to ``limit`` rows of one partition (None once the fetch is exhausted)."""
        if self.exhausted:
            return None
        if (self._batch is None or self._at >= self._batch.num_rows) and not self._advance_batch():
            self.exhausted = True
            self.done.update(self.starts)
            return None
        batch, at = self._batch, self._at
        assert batch is not None and self._current is not None
        rows = min(limit, batch.num_rows - at)
        self._at = at + rows
        piece = batch if rows == batch.num_rows else batch.slice(at, rows)
        return Taken(self._current, piece, int(self._offsets[at + rows - 1]) + 1)


def open_fetch(lake: Lake, name: TopicName, starts: Mapping[int, int], *, read_compacted: bool,
               marks: tuple[str | None, str | None] = (None, None),
               reader: TopicReader | None = None) -> Fetch:
    """A fetch of ``name`` from ``starts`` (partition -> offset, already inside the reader's view) to the
    pinned ends; partitions not in ``starts`` are not read."""
    reader = reader or TopicReader(lake, name, read_compacted=read_compacted)
    ends = {p: reader.pinned.end[p] for p in starts}
    reader.start_offsets = {p: starts.get(p, reader.pinned.end[p]) for p in range(reader.partitions)}
    return Fetch(reader, dict(starts), ends, marks)


def range_reader(lake: Lake, name: TopicName | str, ranges: Mapping[int, tuple[int, int]], *,
                 read_compacted: bool) -> TopicReader:
    """A pinned ``TopicReader`` of exactly ``[start, end)`` per partition in ``ranges`` (other partitions: nothing),
    for a batch engine that read ``Consumer.ranges()``: ``reader.batches()`` gives Arrow, and
    ``readers.spark.dataframe_of(lake, reader)`` a Spark DataFrame of the same records. A raw range that
    retention removed meanwhile is an ``OffsetOutOfRangeError`` (ask ``ranges()`` again); a compacted one is
    read from the view (SEMANTICS section 7)."""
    from compactor.errors import OffsetOutOfRangeError

    reader = TopicReader(lake, name, read_compacted=read_compacted)
    ends = list(reader.pinned.end)
    starts: dict[int, int] = {}
    for partition in range(reader.partitions):
        start, end = ranges.get(partition, (ends[partition], ends[partition]))
        first = reader.view_start(partition)
        if not 0 <= start <= end <= ends[partition]:
            raise OffsetOutOfRangeError(f"range [{start}, {end}) of partition {partition} of {reader.name} is not "
                                        f"within its log (next offset {ends[partition]})")
        if start < first and (not read_compacted or reader.cursor is None) and start < end:
            raise OffsetOutOfRangeError(f"range [{start}, {end}) of partition {partition} of {reader.name} starts "
                                        f"below the log start {first}: retention removed it; ask for ranges again")
        starts[partition], ends[partition] = max(start, first) if read_compacted else start, end
    reader.pinned.end = tuple(ends)
    reader.start_offsets = starts
    return reader
