"""Reading Iceberg file scan tasks as Arrow, one file at a time, in the order given.

pyiceberg's ``ArrowScan.to_record_batches`` submits every task to a thread pool at once and keeps each
task's batches in memory until consumed, so a slow consumer of a large topic would hold the whole topic.
Here tasks are read in order with a prefetch window of a few files, and delete files (position deletes in
the compacted view) are read once per plan. The pyiceberg internals this needs are in ``iceberg.internals``.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask, Table

from compactor.iceberg.internals import metrics_evaluator, read_delete_files, task_batches

# Files read ahead of the consumer: up to PREFETCH_FILES at once, and no more than PREFETCH_BYTES of (compressed)
# file size in flight unless a single file is larger, so memory stays bounded whatever the file sizes are.
PREFETCH_FILES = 4
PREFETCH_BYTES = 192 * 1024 * 1024


class TaskReader:
    """Reads tasks of one table metadata version with a shared row filter and delete-file cache."""

    def __init__(self, table: Table, tasks: Sequence[FileScanTask], row_filter: BooleanExpression | None = None,
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
            self._deletes = read_delete_files(table.io, tasks) if any(t.delete_files for t in tasks) else {}

    @property
    def deletes(self) -> Any:
        """The delete files read for this plan (shared with another reader of the same plan)."""
        return self._deletes

    def read(self, task: FileScanTask) -> list[pa.RecordBatch]:
        """All (filtered, delete-applied) batches of one task."""
        return list(task_batches(self._scan, task, self._deletes))

    def stream(self, tasks: Sequence[FileScanTask]) -> Iterator[tuple[FileScanTask, list[pa.RecordBatch]]]:
        """Yield ``(task, batches)`` in task order, reading ahead within the prefetch bounds."""
        yield from zip(tasks, stream_tasks([(self, t) for t in tasks]), strict=True)


def stream_tasks(work: Sequence[tuple[TaskReader, FileScanTask]]) -> Iterator[list[pa.RecordBatch]]:
    """The batches of each ``(reader, task)`` in order, reading ahead up to ``PREFETCH_FILES`` files and
    ``PREFETCH_BYTES`` of file size."""
    if not work:
        return
    def size(i: int) -> int:
        return int(getattr(work[i][1].file, "file_size_in_bytes", 0) or 0)

    with concurrent.futures.ThreadPoolExecutor(max_workers=PREFETCH_FILES) as pool:
        pending: list[tuple[concurrent.futures.Future[list[pa.RecordBatch]], int]] = []
        index = 0

        def fill() -> None:
            nonlocal index
            while index < len(work) and len(pending) < PREFETCH_FILES:
                in_flight = sum(b for _, b in pending)
                if pending and in_flight + size(index) > PREFETCH_BYTES:
                    break
                pending.append((pool.submit(work[index][0].read, work[index][1]), size(index)))
                index += 1

        fill()
        while pending:
            future, _ = pending.pop(0)
            batches = future.result()
            fill()
            yield batches


def tasks_matching(schema: Schema, tasks: Sequence[FileScanTask], row_filter: BooleanExpression) -> list[FileScanTask]:
    """The tasks whose file statistics say they may hold rows matching ``row_filter`` (the test pyiceberg's own
    planning applies to manifest entries), for tasks planned earlier (files pinned at a reader's open)."""
    evaluator = metrics_evaluator(schema, row_filter)
    return [task for task in tasks if evaluator.eval(task.file)]
