"""``TopicReader``: read a topic raw or compacted, pinned at open, seekable, streamed in offset order.

docs/guarantees.md#readers. A compacted reader loads the current cursor ``C`` and then the current raw snapshot
``R``, and returns per partition ``C``'s compacted rows below the horizon ``H_p(C)`` followed by ``R``'s rows
from ``H_p(C)`` on. Before any compaction (no cursor), or while the topic's policy lacks ``compact``, a
compacted reader returns exactly the raw view. Both snapshots are pinned at open: what an open reader returns
does not change under later appends, compactions or retention for its lease (``compaction.cursor.retain-ms``);
past that it may fail with ``SnapshotExpiredError``, never with partial results.

An attached log (a table another tool writes, ``compactor.attach``) is read by the same reader through its own
pinned view (``readers.attached``): the view's rows below each horizon, then the source's rows.

No JVM: planning and reading use pyiceberg and pyarrow. Files are pruned by partition and offset from Iceberg
metadata and read one at a time (with a small prefetch), so memory does not grow with the topic.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypedDict

import pyarrow as pa
from pyiceberg.expressions import BooleanExpression
from pyiceberg.table import FileScanTask

from compactor import schema as ts
from compactor.clock import resolve_now_ms
from compactor.cursor import Cursor
from compactor.errors import InputError, OffsetOutOfRangeError
from compactor.iceberg.bounds import file_bound
from compactor.iceberg.expressions import partition_range
from compactor.iceberg.scan import TaskReader
from compactor.schema import TIMESTAMP_FIELD_ID
from compactor.topics.naming import TopicName
from compactor.topics.records import Record
from compactor.topics.topic import Topic
from readers.attached import AttachedPinnedView, pin_view
from readers.batches import batch_to_records, to_topic_schema
from readers.ordering import ordered_batches, ordered_units
from readers.pinned import PinnedView, Pins, Segment, expired_if_missing
from readers.positions import ResetPolicy, StartPosition, StartSpec, normalise_start

if TYPE_CHECKING:
    import pandas as pd

    from compactor.lake import Lake


class ReaderOptions(TypedDict, total=False):
    """``TopicReader``'s options, for APIs that open one on the caller's behalf (``read_topic_dataframe``)."""

    read_compacted: bool
    start: Mapping[int, StartSpec] | None
    reset: ResetPolicy | None
    as_of_cursor: int | None
    now_ms: int | None


class TopicReader:
    """A pinned, seekable reader of one topic (see the module docstring)."""

    def __init__(
        self,
        lake: Lake,
        topic: str | TopicName,
        *,
        read_compacted: bool = False,
        start: Mapping[int, StartSpec] | None = None,
        reset: ResetPolicy | None = None,
        as_of_cursor: int | None = None,
        now_ms: int | None = None,
        pins: Pins | None = None,
    ) -> None:
        name = topic if isinstance(topic, TopicName) else TopicName.parse(topic)
        if reset not in (None, "earliest", "latest"):
            raise InputError(f"reset policy must be 'earliest' or 'latest', got {reset!r}")
        if as_of_cursor is not None and not read_compacted:
            raise InputError("--as-of-cursor reads the compacted view: use it with --compacted")
        self.name = name
        self.read_compacted = read_compacted
        self.reset = reset
        self.pinned: PinnedView = pin_view(lake, name, read_compacted=read_compacted, as_of_cursor=as_of_cursor,
                                           now_ms=resolve_now_ms(now_ms), pins=pins)
        self.topic: Topic = self.pinned.topic
        self.partitions = self.pinned.partitions
        self.next_offsets = self.pinned.next_offsets
        self.log_start_offsets = self.pinned.log_start_offsets
        self.raw_snapshot_id = self.pinned.raw_snapshot_id
        self.cursor: Cursor | None = self.pinned.cursor
        starts = {p: normalise_start(s) for p, s in (start or {}).items()}
        for partition in starts:
            if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition < self.partitions:
                raise InputError(f"partition {partition} does not exist: {name} has {self.partitions} partition(s)")
        self.start_offsets: dict[int, int] = {
            p: self._resolve_start(p, starts.get(p, StartPosition.earliest())) for p in range(self.partitions)
        }

    # --- positions ------------------------------------------------------------------------------------

    @property
    def horizons(self) -> tuple[int, ...]:
        """``H_p(C)`` of the pinned cursor (zeros when there is none: the whole view is raw)."""
        return self.cursor.horizons if self.cursor else tuple(0 for _ in range(self.partitions))

    def view_start(self, partition: int) -> int:
        """The first offset the view being read can hold for ``partition``.

        Compacted: the cursor's compacted start (the first run's log start, advanced by retention under
        ``delete,compact``), which may lie above the raw log start when the trim removed rows that raw
        retention (file-granular) kept.
        """
        if self.cursor is not None:
            return self.cursor.compacted_start[partition]
        return self.log_start_offsets[partition]

    def _resolve_start(self, partition: int, position: StartPosition) -> int:
        first, end = self.view_start(partition), self.pinned.end[partition]
        if position.kind == "earliest":
            return first
        if position.kind == "latest":
            return end
        if position.kind == "timestamp":
            assert position.value is not None
            return self._offset_for_timestamp(partition, position.value, first, end)
        assert position.value is not None
        offset = position.value
        if first <= offset <= end:
            return offset
        if self.reset == "earliest":
            return first
        if self.reset == "latest":
            return end
        view = "compacted" if self.read_compacted else "raw"
        raise OffsetOutOfRangeError(
            f"offset {offset} is out of range for partition {partition} of {self.name} ({view} view holds "
            f"[{first}, {end})); choose a reset policy (earliest or latest) to start elsewhere")

    # --- planning -------------------------------------------------------------------------------------

    def segments(self, partition: int, start: int | None = None) -> list[Segment]:
        """The pieces of ``partition``'s view from ``start`` (default: its start offset) to its end, in order."""
        if start is None:
            start = self.start_offsets[partition]
        end = self.pinned.end[partition]
        out: list[Segment] = []
        if self.cursor is not None:
            horizon = self.cursor.horizons[partition]
            if start < horizon:
                out.append(Segment(partition, start, horizon, True))
            start = max(start, horizon)
        if start < end:
            out.append(Segment(partition, start, end, False))
        return out

    @property
    def raw_files(self) -> list[FileScanTask]:
        """The raw data files pinned at open (every file of the raw snapshot ``R``; none for an attached log, whose
        reads plan the source's files per segment)."""
        return list(self.pinned.raw_tasks)

    def plan_segment(self, segment: Segment, columns: tuple[str, ...] | None = None,
                     extra_filter: BooleanExpression | None = None) -> tuple[TaskReader, list[FileScanTask]]:
        """The file tasks that can hold rows of ``segment`` (pruned by partition, offset and ``extra_filter``)."""
        return self.pinned.plan_segment(segment, columns, extra_filter)

    def segment_batches(self, segment: Segment, columns: tuple[str, ...] | None = None,
                        extra_filter: BooleanExpression | None = None) -> Iterator[pa.RecordBatch]:
        """The rows of ``segment`` (optionally only ``columns``, and only rows matching ``extra_filter``),
        in offset order."""
        _, snapshot_id = self.pinned.table_for(segment.compacted)
        what = f"{'compacted' if segment.compacted else 'raw'} snapshot {snapshot_id} of {self.name}"
        with expired_if_missing(what):
            reader, tasks = self.plan_segment(segment, columns, extra_filter)
            yield from ordered_batches(reader, tasks)

    def _offset_for_timestamp(self, partition: int, timestamp_ms: int, first: int, end: int) -> int:
        """Kafka's offsetsForTimes: the smallest offset whose timestamp >= ``timestamp_ms`` in this view."""
        threshold = timestamp_ms * 1000
        for segment in self.segments(partition, first):
            for batch in self._segment_batches_pruned(segment, threshold):
                stamps = batch.column(ts.TIMESTAMP).cast(pa.int64()).to_numpy()
                hits = (stamps >= threshold).nonzero()[0]
                if len(hits):
                    return int(batch.column(ts.OFFSET)[int(hits[0])].as_py())
        return end

    def _segment_batches_pruned(self, segment: Segment, threshold_us: int) -> Iterator[pa.RecordBatch]:
        """Offset and timestamp columns of ``segment``, skipping files whose newest record is too old."""
        table, snapshot_id = self.pinned.table_for(segment.compacted)
        if snapshot_id is None:
            return
        if isinstance(self.pinned, AttachedPinnedView):  # its files hold no topic columns to prune by
            yield from self.segment_batches(segment)
            return
        row_filter = partition_range(segment.partition, segment.lo, segment.hi)
        scan = table.scan(row_filter=row_filter, snapshot_id=snapshot_id, selected_fields=(ts.OFFSET, ts.TIMESTAMP))
        tasks = [t for t in self.pinned.tasks(segment.compacted, scan, row_filter)
                 if (file_bound(t.file.upper_bounds, TIMESTAMP_FIELD_ID, "ts") or threshold_us) >= threshold_us]
        yield from ordered_batches(TaskReader(table, tasks, row_filter, scan.projection()), tasks)

    # --- output -----------------------------------------------------------------------------------------

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Record batches in partition, offset order, in the topic's Arrow schema.

        Each table is planned once for all of its segments (one manifest pass, delete files read once), and
        files stream through one prefetch window across partitions and tables.
        """
        segments = [s for p in range(self.partitions) for s in self.segments(p)]
        plans: dict[bool, tuple[TaskReader, dict[int, list[tuple[TaskReader, FileScanTask]]]]] = {}
        cursor = self.cursor.snapshot_id if self.cursor else None
        with expired_if_missing(f"a pinned snapshot of {self.name} (raw snapshot {self.raw_snapshot_id}, "
                                f"cursor {cursor})"):
            for compacted in (True, False):
                chosen = {s.partition: (s.lo, s.hi) for s in segments if s.compacted == compacted}
                if chosen and self.pinned.table_for(compacted)[1] is not None:
                    plans[compacted] = self.pinned.plan_table(compacted, chosen)
            units = []
            for segment in segments:
                if segment.compacted in plans:
                    _, by_partition = plans[segment.compacted]
                    units.append(by_partition.get(segment.partition, []))
            for batch in ordered_units(units):
                yield to_topic_schema(batch)

    def to_arrow(self) -> pa.Table:
        return pa.Table.from_batches(list(self.batches()), schema=ts.ARROW_SCHEMA)

    def to_pandas(self) -> pd.DataFrame:
        frame: pd.DataFrame = self.to_arrow().to_pandas()
        return frame

    def records(self) -> Iterator[Record]:
        for batch in self.batches():
            yield from batch_to_records(batch)

    def __iter__(self) -> Iterator[Record]:
        return self.records()

    def describe(self) -> dict[str, Any]:
        return {
            "topic": str(self.name),
            "mode": "compacted" if self.read_compacted else "raw",
            "raw_snapshot_id": self.raw_snapshot_id,
            "cursor": self.cursor.snapshot_id if self.cursor else None,
            "horizons": {str(p): h for p, h in enumerate(self.horizons)},
            "start_offsets": {str(p): o for p, o in self.start_offsets.items()},
            "end_offsets": {str(p): o for p, o in enumerate(self.pinned.end)},
        }


__all__ = ["Pins", "ReaderOptions", "Segment", "TopicReader", "batch_to_records", "to_topic_schema"]
