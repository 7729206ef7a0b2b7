"""One partition of a pinned reader, streamed in offset order and handed out in slices (a consumer's fetch).

A consumer serves its partitions in turn, a slice of each per turn (``consumer.fetch``), so each partition
streams on its own: its segments (compacted rows below the horizon, then raw rows) are planned when it is first
read, its files read in offset order (overlapping compacted files sorted together, ``readers.ordering``) with the
next file read ahead on a pool the partitions share, so memory holds at most two files per partition.

A file that cannot be read raises ``FileReadError`` naming the file and the partition, so the consumer can
retry once on a freshly loaded snapshot and then report exactly what is missing.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyiceberg.table import FileScanTask

from compactor import schema as ts
from compactor.iceberg.scan import TaskReader
from readers.batches import to_topic_schema
from readers.ordering import clusters, in_offset_order
from readers.reader import TopicReader


class FileReadError(Exception):
    """A data file of a pinned snapshot could not be read (missing, or unreadable)."""

    def __init__(self, path: str, topic: str, partition: int, cause: BaseException) -> None:
        super().__init__(f"data file {path} of {topic} partition {partition} cannot be read: {cause}")
        self.path = path
        self.topic = topic
        self.partition = partition
        self.cause = cause


@dataclass
class Taken:
    """Rows handed out: one partition's ``batch``, and the offset after its last row."""

    partition: int
    batch: pa.RecordBatch
    next_offset: int


Unit = tuple[TaskReader, list[FileScanTask]]  # one cluster of files, and the reader that reads them


class PartitionStream:
    """Partition ``partition`` of ``reader``'s pinned view from ``start`` to the pinned end (module docstring)."""

    def __init__(self, reader: TopicReader, partition: int, start: int,
                 pool: concurrent.futures.ThreadPoolExecutor) -> None:
        self.reader = reader
        self.partition = partition
        self.start = start
        self.end = reader.pinned.end[partition]
        self.pool = pool
        self.exhausted = start >= self.end
        self._units: list[Unit] | None = None
        self._next = 0
        self._ahead: concurrent.futures.Future[list[pa.RecordBatch]] | None = None
        self._batches: list[pa.RecordBatch] = []
        self._batch: pa.RecordBatch | None = None
        self._offsets: Any = None
        self._row_bytes = 1.0
        self._at = 0
        self._last = start - 1

    def _plan(self) -> list[Unit]:
        units: list[Unit] = []
        for segment in self.reader.segments(self.partition, self.start):
            task_reader, tasks = self.reader.plan_segment(segment)
            units += [(task_reader, group) for group in clusters(tasks)]
        return units

    def _read(self, unit: Unit) -> list[pa.RecordBatch]:
        task_reader, tasks = unit
        collected: list[pa.RecordBatch] = []
        for task in tasks:
            try:
                collected += task_reader.read(task)
            except Exception as exc:  # pyarrow and the file systems raise many types
                raise FileReadError(task.file.file_path, str(self.reader.name), self.partition, exc) from exc
        return collected

    def _submit(self, units: list[Unit]) -> concurrent.futures.Future[list[pa.RecordBatch]] | None:
        if self._next >= len(units):
            return None
        unit = units[self._next]
        self._next += 1
        read: Callable[[], list[pa.RecordBatch]] = lambda: self._read(unit)  # noqa: E731
        return self.pool.submit(read)

    def _advance(self) -> bool:
        """Load the next non-empty batch; False once every file was read."""
        while not self._batches:
            if self._units is None:
                self._units = self._plan()
                self._ahead = self._submit(self._units)
            if self._ahead is None:
                return False
            current, self._ahead = self._ahead, None
            group_size = len(self._units[self._next - 1][1])
            collected = current.result()
            self._ahead = self._submit(self._units)  # the next file is read while this one is handed out
            self._batches = in_offset_order(collected, group_size == 1, self._last)
        batch = to_topic_schema(self._batches.pop(0))
        self._batch, self._at = batch, 0
        self._offsets = batch.column(ts.OFFSET).to_numpy()
        self._row_bytes = max(1.0, batch.nbytes / max(1, batch.num_rows))
        self._last = int(self._offsets[-1])
        return True

    def take(self, max_rows: int, max_bytes: int | None = None) -> Taken | None:
        """Up to ``max_rows`` rows (and about ``max_bytes``, at least one row), or None once exhausted."""
        if self.exhausted:
            return None
        if (self._batch is None or self._at >= self._batch.num_rows) and not self._advance():
            self.exhausted = True
            self.cancel()
            return None
        batch, at = self._batch, self._at
        assert batch is not None
        rows = min(max_rows, batch.num_rows - at)
        if max_bytes is not None:
            rows = max(1, min(rows, int(max_bytes / self._row_bytes)))
        self._at = at + rows
        piece = batch if rows == batch.num_rows else batch.slice(at, rows)
        return Taken(self.partition, piece, int(self._offsets[at + rows - 1]) + 1)

    def cancel(self) -> None:
        """Drop the file read ahead (the stream is done with, or replaced)."""
        if self._ahead is not None:
            self._ahead.cancel()
            self._ahead = None
