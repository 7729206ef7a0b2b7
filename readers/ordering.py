"""Turning a partition's data files into one offset-ordered stream of Arrow batches.

Raw files of a partition hold contiguous, disjoint offset ranges (the producer writes them that way), so they
stream in order of their first offset. Compacted files may overlap when a run wrote a partition from several
tasks; overlapping files form a cluster that is read and sorted together (memory bounded by the cluster).
Files whose rows are not sorted are sorted on read. The result never depends on file planning order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

import numpy as np
import pyarrow as pa
from pyiceberg.table import FileScanTask

from compactor.iceberg.bounds import task_range
from compactor.iceberg.scan import TaskReader, stream_tasks
from compactor.schema import OFFSET

TaskT = TypeVar("TaskT")  # a file scan task, or anything with the same ``file`` statistics (tests)


def clusters(tasks: Sequence[TaskT]) -> list[list[TaskT]]:
    """Group tasks (of one partition) into runs whose offset ranges overlap, in offset order."""
    ordered = sorted(tasks, key=task_range)
    out: list[list[TaskT]] = []
    current_hi = -2
    for task in ordered:
        lo, hi = task_range(task)
        if out and lo <= current_hi:
            out[-1].append(task)
            current_hi = max(current_hi, hi)
        else:
            out.append([task])
            current_hi = hi
    return out


def _is_sorted(batches: Sequence[pa.RecordBatch], after: int) -> bool:
    previous = after
    for batch in batches:
        if batch.num_rows == 0:
            continue
        offsets = batch.column(OFFSET).to_numpy()
        if offsets[0] <= previous or (len(offsets) > 1 and not bool(np.all(np.diff(offsets) > 0))):
            return False
        previous = int(offsets[-1])
    return True


def _sorted_batches(batches: Sequence[pa.RecordBatch]) -> list[pa.RecordBatch]:
    non_empty = [b for b in batches if b.num_rows]
    if not non_empty:
        return []
    table = pa.Table.from_batches(non_empty).sort_by([(OFFSET, "ascending")])
    out: list[pa.RecordBatch] = table.to_batches()
    return out


def in_offset_order(collected: Sequence[pa.RecordBatch], one_file: bool, after: int) -> list[pa.RecordBatch]:
    """The batches read from one cluster of files (``clusters``), non-empty and in offset order: as read when
    they are one file's rows already sorted past offset ``after``, else sorted."""
    if one_file and _is_sorted(collected, after):
        return [b for b in collected if b.num_rows]
    return _sorted_batches(collected)


def ordered_batches(reader: TaskReader, tasks: Sequence[FileScanTask]) -> Iterator[pa.RecordBatch]:
    """Every row of ``tasks`` (one partition) in offset order, as Arrow batches."""
    yield from ordered_units([[(reader, task) for task in tasks]])


def ordered_units(units: Sequence[Sequence[tuple[TaskReader, FileScanTask]]]) -> Iterator[pa.RecordBatch]:
    """The rows of several units, one after the other, each unit (the files of one partition of one table,
    each with the reader to read it with) in offset order.

    Files are read through one prefetch window across all units, so a reader crossing from one partition or
    table to the next never waits for a cold start.
    """
    readers = {id(task): reader for unit in units for reader, task in unit}
    plans = [clusters([task for _, task in unit]) for unit in units]
    work = [(readers[id(task)], task) for groups in plans for group in groups for task in group]
    stream = stream_tasks(work)
    for groups in plans:
        last = -1
        for group in groups:
            collected: list[pa.RecordBatch] = []
            for _ in group:
                collected.extend(next(stream))
            for batch in in_offset_order(collected, len(group) == 1, last):
                last = int(batch.column(OFFSET)[batch.num_rows - 1].as_py())
                yield batch
