"""In-memory stand-ins for Iceberg file scan tasks and a pinned raw snapshot, for testing the pure cores that
plan from file statistics and read a few columns (horizons, triggers, reader ordering) without a catalog.

A ``FakeTask`` carries what the product reads from a real one: ``file.lower_bounds`` / ``upper_bounds``
(Iceberg's binary encoding, offset and timestamp columns; either may be left out, as a writer may not record
them), ``file.file_size_in_bytes``, and its rows as Arrow batches in the topic's layout. ``FakeReader.read``
returns a task's batches, keeping only offsets in ``[lo, hi)`` (the row filter a real scan applies) and the
requested columns. ``FakeRawSnapshot`` is a ``RawSnapshotView`` over such tasks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.conversions import to_bytes
from pyiceberg.types import LongType, TimestamptzType

from compactor.compaction.horizons import RawSnapshotView
from compactor.iceberg.bounds import task_range
from compactor.schema import ARROW_SCHEMA, OFFSET, OFFSET_FIELD_ID, TIMESTAMP_FIELD_ID
from compactor.topics.records import Record


def records_batch(records: Sequence[Record]) -> pa.RecordBatch:
    """Records in the topic's Arrow layout, in the order given."""
    columns = {
        "partition": [r.partition for r in records],
        "offset": [r.offset for r in records],
        "timestamp": [r.timestamp_ms * 1000 for r in records],
        "key": [r.key for r in records],
        "value": [r.value for r in records],
        "headers": [[{"key": k, "value": v} for k, v in r.headers] for r in records],
    }
    return pa.RecordBatch.from_pydict(columns, schema=ARROW_SCHEMA)


@dataclass(frozen=True)
class FakeFile:
    lower_bounds: dict[int, bytes]
    upper_bounds: dict[int, bytes]
    file_size_in_bytes: int = 0


@dataclass(frozen=True)
class FakeTask:
    file: FakeFile
    batches: tuple[pa.RecordBatch, ...]


def fake_task(records: Sequence[Record], *, offset_stats: bool = True, timestamp_stats: bool = True,
              batch_rows: int = 4) -> FakeTask:
    """One data file holding ``records`` (in the order given), split into batches of ``batch_rows``."""
    lower: dict[int, bytes] = {}
    upper: dict[int, bytes] = {}
    if records and offset_stats:
        lower[OFFSET_FIELD_ID] = to_bytes(LongType(), min(r.offset for r in records))
        upper[OFFSET_FIELD_ID] = to_bytes(LongType(), max(r.offset for r in records))
    if records and timestamp_stats:
        lower[TIMESTAMP_FIELD_ID] = to_bytes(TimestamptzType(), min(r.timestamp_ms for r in records) * 1000)
        upper[TIMESTAMP_FIELD_ID] = to_bytes(TimestamptzType(), max(r.timestamp_ms for r in records) * 1000)
    batch = records_batch(records)
    batches = tuple(batch.slice(i, batch_rows) for i in range(0, max(len(records), 1), batch_rows))
    return FakeTask(FakeFile(lower, upper, 100 * len(records)), batches)


class FakeReader:
    """Reads fake tasks as a ``TaskReader`` would: rows with offsets in ``[lo, hi)``, the given columns."""

    def __init__(self, lo: int | None = None, hi: int | None = None, columns: Sequence[str] | None = None) -> None:
        self.lo, self.hi, self.columns = lo, hi, list(columns) if columns is not None else None
        self.reads: list[FakeTask] = []

    def read(self, task: FakeTask) -> list[pa.RecordBatch]:
        self.reads.append(task)
        out = []
        for batch in task.batches:
            offsets = batch.column(OFFSET)
            keep = pc.and_(pc.greater_equal(offsets, self.lo if self.lo is not None else -1),
                           pc.less(offsets, self.hi if self.hi is not None else 2**62))
            kept = batch.filter(keep)
            out.append(kept.select(self.columns) if self.columns is not None else kept)
        return out


@dataclass(frozen=True)
class FakeRawSnapshot(RawSnapshotView):
    """A pinned raw snapshot whose partitions are lists of fake data files."""

    partitions: tuple[tuple[FakeTask, ...], ...] = field(default=())

    def tasks(self, partition: int, lo: int, hi: int, columns: Sequence[str]) -> tuple[list[Any], Any]:
        if self.snapshot_id is None or hi <= lo:
            return [], None
        overlapping = [t for t in self.partitions[partition]
                       if task_range(t)[0] < hi and task_range(t)[1] >= lo]
        return sorted(overlapping, key=task_range), FakeReader(lo, hi, columns)


def fake_snapshot(files: Sequence[Sequence[FakeTask]]) -> FakeRawSnapshot:
    # the table is never scanned: the fake plans its own tasks
    return FakeRawSnapshot(table=None, snapshot_id=1,  # type: ignore[arg-type]
                           partitions=tuple(tuple(f) for f in files))
