"""Horizons and the raw-log figures compaction decisions need, from Iceberg metadata plus a few boundary files.

Used by the compaction run (phase 0) and by ``status`` / the cleaner, so both compute the same horizon the
same way. Everything here works per partition on file statistics (offset and timestamp bounds), reading
narrow columns of at most the files that straddle a boundary, one file at a time: the driver holds per-file,
never per-key or per-record, structures.

docs/guarantees.md#compaction: ``H_p = max(H_p(C), min(N_p(S), L_p))`` where, for ``min.compaction.lag.ms > 0``,
``L_p`` is the first offset ``o >= H_p(C)`` whose ``timestamp > now - lag`` (``N_p(S)`` if none), and for lag 0
``L_p = N_p(S)``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyiceberg.table import Table

from compactor import schema as ts
from compactor.iceberg.bounds import file_bound, task_range
from compactor.iceberg.expressions import partition_range
from compactor.iceberg.scan import TaskReader
from compactor.schema import TIMESTAMP_FIELD_ID
from compactor.topics.record_rules import record_sizes


@dataclass(frozen=True)
class RawSnapshotView:
    """One pinned raw snapshot of a topic: the table (metadata) and the snapshot id (None if empty)."""

    table: Table
    snapshot_id: int | None

    def tasks(self, partition: int, lo: int, hi: int, columns: Sequence[str]) -> tuple[list[Any], Any]:
        """File scan tasks of ``[lo, hi)`` in ``partition``, in offset order, and a reader for them."""
        if self.snapshot_id is None or hi <= lo:
            return [], None
        row_filter = partition_range(partition, lo, hi)
        scan = self.table.scan(row_filter=row_filter, snapshot_id=self.snapshot_id, selected_fields=tuple(columns))
        tasks = sorted(scan.plan_files(), key=task_range)
        return tasks, TaskReader(self.table, tasks, row_filter, scan.projection())


def _batches(reader: TaskReader, task: Any) -> Iterator[pa.RecordBatch]:
    yield from (b for b in reader.read(task) if b.num_rows)


def lag_limit(raw: RawSnapshotView, partition: int, start: int, end: int, cutoff_ms: int) -> int:
    """``L_p``: the first offset in ``[start, end)`` whose timestamp > ``cutoff_ms`` (``end`` if none).

    Files whose newest record is not after the cutoff are skipped on their statistics; the others are read
    (offset and timestamp only) in offset order until the first match.
    """
    cutoff_us = cutoff_ms * 1000
    tasks, reader = raw.tasks(partition, start, end, (ts.OFFSET, ts.TIMESTAMP))
    for task in tasks:
        newest = file_bound(task.file.upper_bounds, TIMESTAMP_FIELD_ID, "ts")
        if newest is not None and newest <= cutoff_us:
            continue
        for batch in _batches(reader, task):
            stamps = batch.column(ts.TIMESTAMP).cast(pa.int64()).to_numpy()
            hits = np.nonzero(stamps > cutoff_us)[0]
            if len(hits):
                offsets = batch.column(ts.OFFSET).to_numpy()
                return int(offsets[hits].min())
    return end


def compute_horizons(raw: RawSnapshotView, previous: Sequence[int], next_offsets: Sequence[int],
                     now_ms: int, min_lag_ms: int) -> list[int]:
    """The horizon a run at ``now_ms`` computes for each partition (never below ``previous``)."""
    out: list[int] = []
    for partition, (prev, end) in enumerate(zip(previous, next_offsets, strict=True)):
        limit = end
        if min_lag_ms > 0 and end > prev:
            limit = lag_limit(raw, partition, prev, end, max(now_ms - min_lag_ms, -1))
        out.append(max(prev, min(end, limit)))
    return out


def range_bytes(raw: RawSnapshotView, partition: int, start: int, end: int) -> int:
    """Logical bytes of the raw records ``[start, end)`` of ``partition`` (read from the files)."""
    tasks, reader = raw.tasks(partition, start, end, (ts.OFFSET, ts.KEY, ts.VALUE, ts.HEADERS))
    total = 0
    for task in tasks:
        for batch in _batches(reader, task):
            total += int(record_sizes(batch.column(ts.KEY), batch.column(ts.VALUE),
                                      batch.column(ts.HEADERS)).sum())
    return total


def range_records(raw: RawSnapshotView, partition: int, start: int, end: int) -> int:
    """How many records ``[start, end)`` of ``partition`` holds, for a mirrored topic, whose offsets may have gaps (a
    produced topic's count is ``end - start``): the record counts of the files wholly inside the range, plus the
    offsets of the (at most two) files that straddle its ends, read."""
    tasks, reader = raw.tasks(partition, start, end, (ts.OFFSET,))
    total = 0
    for task in tasks:
        lo, hi = task_range(task)
        if lo >= start and hi < end and not task.delete_files:
            total += int(task.file.record_count)
        else:
            total += sum(batch.num_rows for batch in _batches(reader, task))
    return total


def bytes_at(raw: RawSnapshotView, partition: int, offset: int, next_offset: int, cumulative: int) -> int:
    """Cumulative logical bytes of offsets ``[0, offset)``, given those of ``[0, next_offset)``.

    Exact from metadata when ``offset == next_offset``; otherwise the tail ``[offset, next_offset)`` is read.
    """
    if offset >= next_offset:
        return cumulative
    return cumulative - range_bytes(raw, partition, offset, next_offset)


def min_timestamp_ms(raw: RawSnapshotView, partition: int, start: int, end: int) -> int | None:
    """The smallest record timestamp in ``[start, end)``: file statistics for files wholly inside the range,
    the timestamp column for the (at most two) files that straddle its ends."""
    tasks, reader = raw.tasks(partition, start, end, (ts.OFFSET, ts.TIMESTAMP))
    best: int | None = None
    for task in tasks:
        lo, hi = task_range(task)
        oldest = file_bound(task.file.lower_bounds, TIMESTAMP_FIELD_ID, "ts")
        if lo >= start and hi < end and oldest is not None:
            candidate = oldest
        else:
            stamps = [batch.column(ts.TIMESTAMP).cast(pa.int64()).to_numpy() for batch in _batches(reader, task)]
            if not stamps or not sum(len(s) for s in stamps):
                continue
            candidate = int(min(int(s.min()) for s in stamps if len(s)))
        best = candidate if best is None else min(best, candidate)
    return None if best is None else best // 1000
