"""One partition of a pinned reader, streamed in offset order and handed out in slices (a consumer's fetch).

A consumer serves its partitions in turn, a slice of each per turn (``consumer.fetch``), so each partition
streams on its own: its segments (compacted rows below the horizon, then raw rows) are planned when it is first
read, its files read in offset order (overlapping compacted files sorted together, ``readers.ordering``) with the
next ``ahead`` files read ahead on a pool the partitions share (the consumer spreads a read-ahead of a few
files over its partitions, so memory holds a few files however many partitions it reads).

A file that cannot be read raises ``FileReadError`` naming the file and the partition, so the consumer can
retry once on a freshly loaded snapshot and then report exactly what is missing.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyiceberg.table import FileScanTask

from compactor import schema as ts
from compactor.errors import DataFileMissingError
from compactor.iceberg.scan import TaskReader
from readers.batches import to_topic_schema
from readers.ordering import clusters, in_offset_order
from readers.reader import TopicReader


class FileReadError(DataFileMissingError):
    """A data file of a pinned snapshot could not be read (missing, or unreadable): the consumer retries once
    on a freshly loaded snapshot, then reports a ``DataFileMissingError`` (or the outage)."""

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


Unit = list[tuple[TaskReader, FileScanTask]]  # one cluster of files, each with the reader that reads it


class PartitionStream:
    """Partition ``partition`` of ``reader``'s pinned view from ``start`` to the pinned end (module docstring),
    with ``ahead`` files read ahead on ``pool``."""

    def __init__(self, reader: TopicReader, partition: int, start: int,
                 pool: concurrent.futures.ThreadPoolExecutor, ahead: int = 1) -> None:
        self.reader = reader
        self.partition = partition
        self.start = start
        self.end = reader.pinned.end[partition]
        self.pool = pool
        self.ahead = max(1, ahead)
        self.exhausted = start >= self.end
        self._units: list[Unit] | None = None
        self._next = 0
        self._reading: collections.deque[tuple[int, concurrent.futures.Future[list[pa.RecordBatch]]]] = \
            collections.deque()
        self._batches: collections.deque[pa.RecordBatch] = collections.deque()
        self._batch: pa.RecordBatch | None = None
        self._rows = 0
        self._offsets: Any = None
        self._row_bytes = 1.0
        self._at = 0
        self._last = start - 1

    def _plan(self) -> list[Unit]:
        units: list[Unit] = []
        for segment in self.reader.segments(self.partition, self.start):
            pairs = self.reader.pinned.segment_units(segment)
            readers = {id(task): reader for reader, task in pairs}
            units += [[(readers[id(task)], task) for task in group] for group in clusters([t for _, t in pairs])]
        return units

    def _read(self, unit: Unit) -> list[pa.RecordBatch]:
        collected: list[pa.RecordBatch] = []
        for task_reader, task in unit:
            try:
                collected += task_reader.read(task)
            except Exception as exc:  # pyarrow and the file systems raise many types
                raise FileReadError(task.file.file_path, str(self.reader.name), self.partition, exc) from exc
        return collected

    def _fill(self, units: list[Unit]) -> None:
        """Keep ``ahead`` files being read (each cluster of overlapping files counts as one)."""
        while len(self._reading) < self.ahead and self._next < len(units):
            unit = units[self._next]
            self._next += 1
            self._reading.append((len(unit), self.pool.submit(functools.partial(self._read, unit))))

    def _advance(self) -> bool:
        """Load the next non-empty batch; False once every file was read."""
        while not self._batches:
            if self._units is None:
                self._units = self._plan()
                self._fill(self._units)
            if not self._reading:
                return False
            files, future = self._reading.popleft()
            collected = future.result()
            self._fill(self._units)  # the next files are read while this one is handed out
            self._batches.extend(in_offset_order(collected, files == 1, self._last))
        batch = to_topic_schema(self._batches.popleft())
        self._batch, self._at, self._rows = batch, 0, batch.num_rows
        self._offsets = batch.column(ts.OFFSET).to_numpy()
        self._row_bytes = max(1.0, batch.nbytes / max(1, self._rows))
        self._last = int(self._offsets[-1])
        return True

    def take(self, max_rows: int, max_bytes: int | None = None) -> Taken | None:
        """Up to ``max_rows`` rows (and about ``max_bytes``, at least one row), or None once exhausted."""
        if self.exhausted:
            return None
        at = self._at
        if at >= self._rows:
            if not self._advance():
                self.exhausted = True
                self.cancel()
                return None
            at = 0
        rows = min(self._rows - at, max_rows)
        if max_bytes is not None and rows * self._row_bytes > max_bytes:
            rows = max(1, int(max_bytes / self._row_bytes))
        self._at = at + rows
        batch = self._batch
        assert batch is not None
        piece = batch if rows == self._rows else batch.slice(at, rows)
        return Taken(self.partition, piece, int(self._offsets[at + rows - 1]) + 1)

    def cancel(self) -> None:
        """Drop the files read ahead (the stream is done with, or replaced)."""
        while self._reading:
            self._reading.popleft()[1].cancel()
