"""Reading Iceberg file scan tasks as Arrow, one file at a time, in the order given.

pyiceberg's ``ArrowScan.to_record_batches`` submits every task to a thread pool at once and keeps each
task's batches in memory until consumed, so a slow consumer of a large topic would hold the whole topic.
Here tasks are read in order with a prefetch window of a few files, and delete files (position deletes in
the compacted view) are read once per plan. This module is the only one that touches pyiceberg's
file-reading internals, so a pyiceberg upgrade has one place to check.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.io.pyarrow import ArrowScan, _read_all_delete_files
from pyiceberg.table import FileScanTask

PREFETCH_FILES = 2


class TaskReader:
    """Reads tasks of one table metadata version with a shared row filter and delete-file cache."""

    def __init__(self, table: Any, tasks: Sequence[FileScanTask], row_filter: BooleanExpression | None = None,
                 projected_schema: Any = None, deletes: Any = None) -> None:
        self._scan = ArrowScan(
            table_metadata=table.metadata,
            io=table.io,
            projected_schema=projected_schema or table.schema(),
            row_filter=row_filter or AlwaysTrue(),
        )
        if deletes is not None:
            self._deletes = deletes
        else:
            self._deletes = _read_all_delete_files(table.io, tasks) if any(t.delete_files for t in tasks) else {}

    @property
    def deletes(self) -> Any:
        """The delete files read for this plan (shared with another reader of the same plan)."""
        return self._deletes

    def read(self, task: FileScanTask) -> list[pa.RecordBatch]:
        """All (filtered, delete-applied) batches of one task."""
        return list(self._scan._record_batches_from_scan_tasks_and_deletes([task], self._deletes))

    def stream(self, tasks: Sequence[FileScanTask]) -> Iterator[tuple[FileScanTask, list[pa.RecordBatch]]]:
        """Yield ``(task, batches)`` in task order, reading up to ``PREFETCH_FILES`` ahead."""
        yield from zip(tasks, stream_tasks([(self, t) for t in tasks]), strict=True)


def stream_tasks(work: Sequence[tuple[TaskReader, FileScanTask]]) -> Iterator[list[pa.RecordBatch]]:
    """The batches of each ``(reader, task)`` in order, reading up to ``PREFETCH_FILES`` files ahead."""
    if not work:
        return
    with concurrent.futures.ThreadPoolExecutor(max_workers=PREFETCH_FILES) as pool:
        pending: list[concurrent.futures.Future[list[pa.RecordBatch]]] = []
        index = 0
        while index < len(work) and len(pending) < PREFETCH_FILES:
            pending.append(pool.submit(work[index][0].read, work[index][1]))
            index += 1
        while pending:
            batches = pending.pop(0).result()
            if index < len(work):
                pending.append(pool.submit(work[index][0].read, work[index][1]))
                index += 1
            yield batches
