"""The pinned view of an attached log (docs/attaching.md, "Reading"): what ``TopicReader``, ``TableView`` and the
consumers read when the name they are given is an attached log instead of a topic.

It pins the cursor ``C`` first (the view's current snapshot, or a retained one with ``as_of_cursor``), then the
source's snapshot ``S``, and plans each segment of a partition as the data files of one table that can hold it:
below the horizon the view's files (pruned by ``_compactor_partition`` and ``_compactor_offset``), from the
horizon on the source's files (pruned by the mapping's partition and offset columns, whatever the source is
partitioned by). Each file is read with the segment's row filter, turned into records of the topic's Arrow schema
(``attach.records``) and handed to the readers' own ordering and streaming as a ``LogTask``: a scan task whose
statistics say the offsets its rows can hold in the topic's terms, so files that mix partitions or overlapping
offset ranges are sorted together (``readers.ordering``) and every reader, stream and consumer works unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

import pyarrow as pa
from pyiceberg.conversions import to_bytes
from pyiceberg.expressions import And, BooleanExpression, EqualTo, Reference
from pyiceberg.table import FileScanTask, Table
from pyiceberg.types import LongType

from compactor import schema as ts
from compactor.attach.cursor import AttachedCursor, cursor_at, retained_cursor
from compactor.attach.guard import int_bound
from compactor.attach.log import AttachedTopic, source_offsets
from compactor.attach.records import RecordMaker, key_of, key_predicate
from compactor.attach.registry import OFFSET, PARTITION, AttachedLog, load_attached
from compactor.cursor.model import Cursor
from compactor.cursor.stats import CompactionStats, ViewStats
from compactor.errors import CursorExpiredError, NotATopicError, SnapshotExpiredError
from compactor.iceberg.expressions import at_least, below, equal
from compactor.iceberg.scan import TaskReader, tasks_matching
from compactor.schema import OFFSET_FIELD_ID
from compactor.topics.naming import TopicName
from compactor.topics.records import Record, encode_bytes
from compactor.topics.topic import Topic
from readers.pinned import PinnedView, Pins, Segment, expired_if_missing

if TYPE_CHECKING:
    from compactor.lake import Lake


@dataclass(frozen=True)
class LogFile:
    """What the readers look at of a data file: its path and size, the partition it is read for, and the offsets
    its rows can hold (in the topic schema's field id)."""

    file_path: str
    file_size_in_bytes: int
    partition: tuple[int]
    lower_bounds: dict[int, bytes]
    upper_bounds: dict[int, bytes]


class LogTask(FileScanTask):
    """A data file of an attached log's source or view, read for one partition (see the module docstring)."""

    def __init__(self, task: FileScanTask, partition: int, first: int | None, last: int | None) -> None:
        super().__init__(task.file, task.delete_files, task.residual)
        self.source_task = task
        bounds = [{OFFSET_FIELD_ID: to_bytes(LongType(), b)} if b is not None else {} for b in (first, last)]
        self.file = LogFile(task.file.file_path, task.file.file_size_in_bytes, (partition,),  # type: ignore[assignment]
                            bounds[0], bounds[1])


class LogTaskReader(TaskReader):
    """Reads ``LogTask`` files of one table with a row filter, as records of the topic's Arrow schema."""

    def __init__(self, table: Table, tasks: list[FileScanTask], row_filter: BooleanExpression, projection: Any,
                 convert: Callable[[pa.Table], pa.Table]) -> None:
        super().__init__(table, tasks, row_filter, projection)
        self.convert = convert

    def read(self, task: FileScanTask) -> list[pa.RecordBatch]:
        inner = task.source_task if isinstance(task, LogTask) else task
        batches = [b for b in super().read(inner) if b.num_rows]
        if not batches:
            return []
        out: list[pa.RecordBatch] = self.convert(pa.Table.from_batches(batches)).to_batches()
        return out


class AttachedPinnedView(PinnedView):
    """``PinnedView`` of an attached log (see the module docstring); its ``topic`` is an ``AttachedTopic``."""

    def __init__(self, lake: Lake, name: TopicName, attached: AttachedLog, *, read_compacted: bool,
                 as_of_cursor: int | None, now_ms: int, pins: Pins | None = None) -> None:
        pins = pins or Pins()
        self.name = name
        self.attached = attached
        view = attached.view
        chosen: AttachedCursor | None = None
        if read_compacted:  # C first, then S (S is then at least as new as C's source snapshot)
            if pins.cursor_id is not None or as_of_cursor is not None:
                chosen = self._retained(pins.cursor_id if pins.cursor_id is not None else as_of_cursor, now_ms)
            elif view.current_snapshot() is not None and "compact" in attached.settings.cleanup_policy:
                chosen = cursor_at(view, view.current_snapshot())  # type: ignore[arg-type]
        elif as_of_cursor is not None:
            raise CursorExpiredError(f"cursor {as_of_cursor} is not retained: --as-of-cursor reads the compacted view")
        source = pins.table if pins.table is not None else attached.source()
        self.topic = AttachedTopic(attached, source)
        self.raw_table = source
        if pins.raw_snapshot_id is not None:
            if source.snapshot_by_id(pins.raw_snapshot_id) is None:
                raise SnapshotExpiredError(f"source snapshot {pins.raw_snapshot_id} of {name} is no longer in its "
                                           "metadata")
            self.raw_snapshot_id: int | None = pins.raw_snapshot_id
        else:
            snapshot = source.current_snapshot()
            self.raw_snapshot_id = snapshot.snapshot_id if snapshot else None
        self._files: dict[bool, list[FileScanTask]] = {}  # each pinned table's files, planned once
        self.compacted_table = view if chosen is not None else None
        offsets = source_offsets(source, attached.mapping, self.raw_snapshot_id, chosen.horizons if chosen else {},
                                 self.files(False))
        self.partitions = offsets.partitions
        self.next_offsets = offsets.next_offsets
        self.log_start_offsets = offsets.log_start_offsets
        self.raw_index = None
        self._raw_tasks = []
        self.cursor = self._as_cursor(chosen, self.partitions) if chosen is not None else None
        self.end = self.next_offsets
        if chosen is not None and as_of_cursor is not None and pins.cursor_id is None:
            self.end = self.cursor.raw_next_offsets  # type: ignore[union-attr]
        schema = source.schema()
        self.maker = RecordMaker(attached.mapping, schema)

    def key_bytes(self, values: Mapping[str, Any]) -> bytes:
        """The record key of the key columns' ``values`` (as the records carry it)."""
        return key_of(self.attached.mapping, values)

    def _retained(self, snapshot_id: int | None, now_ms: int) -> AttachedCursor:
        assert snapshot_id is not None
        return retained_cursor(self.attached.view, snapshot_id, now_ms, self.attached.settings.cursor_retain_ms)

    def files(self, compacted: bool) -> list[FileScanTask]:
        """Every data file of one pinned table (planned once: a segment's files are picked from these by their
        statistics, so a reader of many partitions reads the table's manifests once)."""
        if compacted not in self._files:
            table, snapshot_id = self.table_for(compacted)
            planned: list[FileScanTask] = []
            if snapshot_id is not None:
                with expired_if_missing(f"snapshot {snapshot_id} of {self.name}"):
                    planned = list(table.scan(snapshot_id=snapshot_id).plan_files())
            self._files[compacted] = planned
        return self._files[compacted]

    def _as_cursor(self, chosen: AttachedCursor, partitions: int) -> Cursor:
        """The attached cursor in the readers' terms: horizons per partition (0 where it has none), the compacted
        view starting at offset 0 (it keeps what the source's owner deleted since), ends at the horizons."""
        horizons = tuple(chosen.horizons.get(p, 0) for p in range(partitions))
        return Cursor(chosen.snapshot_id, horizons, (0,) * partitions, chosen.source_snapshot_id, horizons,
                      chosen.now_ms, {}, CompactionStats(), ViewStats(), None, "")

    @property
    def raw_tasks(self) -> list[FileScanTask]:
        return []

    def tasks(self, compacted: bool, scan: Any, row_filter: BooleanExpression | None = None) -> list[FileScanTask]:
        return list(scan.plan_files())

    def plan_segment(self, segment: Segment, columns: tuple[str, ...] | None = None,
                     extra_filter: BooleanExpression | None = None) -> tuple[TaskReader, list[FileScanTask]]:
        """The files that can hold ``segment``, as ``LogTask``. Records are made from whole rows, so ``columns``
        is not applied; of ``extra_filter`` (in the topic's terms) only a key look-up (``TableView.get``) is,
        as a filter on the key columns that prunes files by their statistics (callers check keys again)."""
        table, snapshot_id = self.table_for(segment.compacted)
        if segment.compacted:
            part, offset, convert = PARTITION, OFFSET, self.maker.view_batch
        else:
            mapping = self.attached.mapping
            part, offset, convert = mapping.partition, mapping.offset, self.maker.source_batch
        row_filter = And(equal(part, segment.partition), And(at_least(offset, segment.lo), below(offset, segment.hi)))
        looked_up = self._key_filter(extra_filter)
        if looked_up is not None:
            row_filter = And(row_filter, looked_up)
        if snapshot_id is None or segment.hi <= segment.lo:
            return LogTaskReader(table, [], row_filter, None, convert), []
        scan = table.scan(row_filter=row_filter, snapshot_id=snapshot_id)
        planned = tasks_matching(table.schema(), self.files(segment.compacted), row_filter)
        field = table.schema().find_field(offset)
        tasks: list[FileScanTask] = [LogTask(t, segment.partition, int_bound(t.file.lower_bounds, field),
                                             int_bound(t.file.upper_bounds, field)) for t in planned]
        return LogTaskReader(table, planned, row_filter, scan.projection(), convert), tasks

    def _key_filter(self, extra_filter: BooleanExpression | None) -> BooleanExpression | None:
        if not isinstance(extra_filter, EqualTo) or not isinstance(extra_filter.term, Reference) \
                or extra_filter.term.name != ts.KEY or not isinstance(extra_filter.literal.value, bytes):
            return None
        return key_predicate(self.attached.mapping, self.raw_table.schema(), extra_filter.literal.value)

    def segment_units(self, segment: Segment) -> list[tuple[TaskReader, FileScanTask]]:
        reader, tasks = self.plan_segment(segment)
        return [(reader, task) for task in tasks]

    def plan_table(self, compacted: bool, chosen: dict[int, tuple[int, int]]
                   ) -> tuple[TaskReader, dict[int, list[tuple[TaskReader, FileScanTask]]]]:
        by_partition: dict[int, list[tuple[TaskReader, FileScanTask]]] = {}
        reader: TaskReader | None = None
        for partition, (lo, hi) in sorted(chosen.items()):
            reader, tasks = self.plan_segment(Segment(partition, lo, hi, compacted))
            by_partition[partition] = [(reader, task) for task in tasks]
        if reader is None:
            reader = self.plan_segment(Segment(0, 0, 0, compacted))[0]
        return reader, by_partition


def record_object(record: Record) -> dict[str, Any]:
    """The record JSON of an attached log's record (``compactor read``'s): ``key`` and ``value`` as the JSON objects
    of the key and value columns (``value`` null for a tombstone), header values as text or base64."""
    return {"partition": record.partition, "offset": record.offset, "timestamp_ms": record.timestamp_ms,
            "key": json.loads(record.key) if record.key is not None else None,
            "value": json.loads(record.value) if record.value is not None else None,
            "headers": [[k, encode_bytes(v) if v is not None else None] for k, v in record.headers]}


def write_record_objects(records: Iterable[Record], out: TextIO) -> int:
    """Write an attached log's records as JSON Lines of ``record_object`` (``read``'s and ``consume``'s output);
    returns how many were written."""
    count = 0
    for record in records:
        out.write(json.dumps(record_object(record), separators=(",", ":")))
        out.write("\n")
        count += 1
    return count


def open_log(lake: Lake, name: str | TopicName) -> Topic:
    """``lake.topic(name)``, or an ``AttachedTopic`` when ``name`` is an attached log (for readers and consumers:
    its offsets and settings; it refuses every write)."""
    try:
        return lake.topic(name)
    except NotATopicError:
        attached = load_attached(lake.catalog, name)
        if attached is None:
            raise
    return AttachedTopic(attached)


def pin_view(lake: Lake, name: TopicName, *, read_compacted: bool, as_of_cursor: int | None, now_ms: int,
             pins: Pins | None = None) -> PinnedView:
    """The pinned view of ``name``: a topic's, or an attached log's when ``name`` is one (tried second, so reading a
    topic costs nothing more)."""
    try:
        return PinnedView(lake, name, read_compacted=read_compacted, as_of_cursor=as_of_cursor, now_ms=now_ms,
                          pins=pins)
    except NotATopicError:
        attached = load_attached(lake.catalog, name)
        if attached is None:
            raise
    return AttachedPinnedView(lake, name, attached, read_compacted=read_compacted, as_of_cursor=as_of_cursor,
                              now_ms=now_ms, pins=pins)


__all__ = ["AttachedPinnedView", "LogFile", "LogTask", "LogTaskReader", "open_log", "pin_view", "record_object",
           "write_record_objects"]
