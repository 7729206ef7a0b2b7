"""The data files of one batch, written before its commit: per partition, contiguous offset ranges.

Rows arrive in chunks (a whole in-memory batch is one or a few chunks; a streamed file many). Each chunk's rows
are grouped by partition and appended to that partition's open Parquet file, with offsets ``base_p + rank``.
A file therefore holds one partition and a contiguous, increasing offset range (docs/guarantees.md#the-raw-log, last
rule); it is closed and a new one started past ``write.target-file-size-bytes`` (uncompressed). Nothing is
visible until the commit references the files; files of a batch that never commits are deleted (or, after a
crash, left to orphan cleanup).

If the batch loses the race to another appender, ``rebase`` rewrites the files of every partition whose
``N_p`` moved, reading them back in chunks and shifting the offset column, so memory stays bounded by a chunk
whatever the batch size.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import IO, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionFieldValue, PartitionKey
from pyiceberg.table import Table

from compactor import schema as ts
from compactor.iceberg.catalog import translate_storage_errors
from compactor.iceberg.internals import parquet_writer_kwargs
from compactor.iceberg.manifests import topic_data_file
from compactor.iceberg.storage import delete_uncommitted
from compactor.producing.arrow_input import HEADERS, HEADERS_TYPE, KEY, TIMESTAMP_MS, VALUE
from compactor.producing.partitioning import Grouping
from compactor.workers import pool

# The topic's Arrow schema with Parquet field ids, so Iceberg readers map columns by id.
FILE_SCHEMA = schema_to_pyarrow(ts.TOPIC_SCHEMA)
TARGET_FILE_BYTES_PROPERTY = "write.target-file-size-bytes"
DEFAULT_TARGET_FILE_BYTES = 512 * 1024 * 1024
ROW_GROUP_LIMIT_PROPERTY = "write.parquet.row-group-limit"
DEFAULT_ROW_GROUP_ROWS = 1_048_576  # pyiceberg's default, for topics created before the property was set
MAX_OPEN_FILES = 64
REWRITE_CHUNK_ROWS = 65_536
STAMP_TYPE = pa.timestamp("us", tz="UTC")
_NO_HEADERS = pa.array([], HEADERS_TYPE.value_type)
log = logging.getLogger(__name__)


# Leaf columns of a data file, as Parquet names them: those holding the records' own bytes, and the small ones.
_PAYLOAD_COLUMNS = ("key", "value", "headers.list.element.key", "headers.list.element.value")
_DENSE_COLUMNS = ("partition", "offset", "timestamp")


def file_writer_kwargs(properties: Mapping[str, str]) -> dict[str, Any]:
    """The ``ParquetWriter`` options of a topic's data file: pyiceberg's for the table's ``write.parquet.*``
    properties, per column. The records' bytes (key, value, headers) get the table's codec and no dictionary
    (values and offsets are unique, keys mostly so, and zstd compresses what repeats: measured both faster to
    write and smaller than a dictionary per column chunk). The columns a plain append of key and value would
    not have are cheap to encode and need no codec: ``partition`` (one value per file) and ``timestamp``
    (mostly one value per batch) as a dictionary, ``offset`` (dense, increasing) as ``DELTA_BINARY_PACKED``."""
    kwargs = parquet_writer_kwargs(properties)
    codec, level = kwargs.pop("compression"), kwargs.pop("compression_level", None)
    kwargs["compression"] = {**dict.fromkeys(_PAYLOAD_COLUMNS, codec), **dict.fromkeys(_DENSE_COLUMNS, "none")}
    if level is not None and codec != "none":
        kwargs["compression_level"] = dict.fromkeys(_PAYLOAD_COLUMNS, level)
    kwargs["use_dictionary"] = ["partition", "timestamp"]
    kwargs["column_encoding"] = {"offset": "DELTA_BINARY_PACKED"}
    return kwargs


class _PartitionFile:
    """One Parquet data file being written for one partition."""

    def __init__(self, table: Table, partition: int, name: str) -> None:
        spec = table.metadata.spec()
        key = PartitionKey(field_values=[PartitionFieldValue(spec.fields[0], partition)], partition_spec=spec,
                           schema=ts.TOPIC_SCHEMA)
        self.partition = partition
        self.path = table.location_provider().new_data_location(name, key)
        self.table = table
        self.rows = 0
        self.bytes = 0
        self._stream = table.io.new_output(self.path).create(overwrite=True)
        self._writer = pq.ParquetWriter(cast(IO[Any], self._stream), schema=FILE_SCHEMA,
                                        **file_writer_kwargs(table.metadata.properties))
        # Row groups of at most the table's row-group limit, so a large batch's file stays splittable (Spark
        # reads its row groups in parallel tasks: compaction's sliced layout relies on it).
        self._row_group_rows = int(table.metadata.properties.get(ROW_GROUP_LIMIT_PROPERTY, DEFAULT_ROW_GROUP_ROWS))

    def write(self, batch: pa.RecordBatch) -> None:
        self._writer.write_batch(batch, row_group_size=self._row_group_rows)
        self.rows += batch.num_rows
        self.bytes += batch.nbytes

    def close(self) -> DataFile:
        self._writer.close()
        size = self._stream.tell()
        self._stream.close()
        return topic_data_file(self.table, self.path, self.partition, size, self._writer.writer.metadata)

    def abandon(self) -> None:
        try:
            self._writer.close()
            self._stream.close()
        except Exception:  # best effort: the file is deleted next
            log.debug("could not close %s", self.path, exc_info=True)


def file_rows(batch: pa.RecordBatch, partitions: np.ndarray, offsets: np.ndarray, now_ms: int) -> pa.RecordBatch:
    """Normalised input rows as rows of a data file (the topic's columns; no timestamp means ``now_ms``).
    ``batch`` may lack the timestamp and headers columns (``carried``): they are then all null."""
    count = batch.num_rows
    names = batch.schema.names
    if TIMESTAMP_MS in names:
        stamps = pc.multiply(batch.column(TIMESTAMP_MS).fill_null(now_ms), 1000).cast(STAMP_TYPE)
    else:
        stamps = pa.array(np.full(count, now_ms * 1000, np.int64), STAMP_TYPE)
    if HEADERS in names:
        headers = batch.column(HEADERS)
        if headers.null_count:  # no headers is stored as an empty list (as pyiceberg always wrote it)
            headers = pa.LargeListArray.from_arrays(headers.offsets, headers.values, type=headers.type)
    else:
        headers = pa.LargeListArray.from_arrays(pa.array(np.zeros(count + 1, np.int64)), _NO_HEADERS,
                                                type=HEADERS_TYPE)
    return pa.RecordBatch.from_arrays([
        pa.array(partitions, pa.int32()), pa.array(offsets, pa.int64()), stamps,
        batch.column(KEY), batch.column(VALUE), headers,
    ], schema=FILE_SCHEMA)


def carried(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The columns of a normalised batch a data file takes from it: key and value, and the timestamp and
    headers only where some row has one (``file_rows`` fills them otherwise), so gathering a partition's rows
    copies no all-null column."""
    names = [KEY, VALUE] + [n for n in (TIMESTAMP_MS, HEADERS) if batch.column(n).null_count < batch.num_rows]
    return batch.select(names)


class StagedFiles:
    """The data files of one batch (see the module docstring)."""

    def __init__(self, table: Table, base: Sequence[int] | np.ndarray, now_ms: int) -> None:
        self.table = table
        self.base = np.asarray(base, np.int64).copy()
        self.now_ms = now_ms
        self.closed: dict[int, list[DataFile]] = {}
        self._open: dict[int, _PartitionFile] = {}
        self._written: list[str] = []
        self._target = int(table.metadata.properties.get(TARGET_FILE_BYTES_PROPERTY, DEFAULT_TARGET_FILE_BYTES))
        self._batch_uuid = uuid.uuid4().hex
        self._sequence = 0
        self._pending: dict[int, Future[None]] = {}  # partition -> its file's write in flight

    def _new_file(self, partition: int) -> _PartitionFile:
        self._sequence += 1
        name = f"{self._batch_uuid}-{partition}-{self._sequence:05d}.parquet"
        with translate_storage_errors(f"writing a data file of {self.table.name()}"):
            handle = _PartitionFile(self.table, partition, name)
        self._written.append(handle.path)
        return handle

    def _close(self, partition: int) -> None:
        self._settle(partition)
        handle = self._open.pop(partition)
        with translate_storage_errors(f"writing a data file of {self.table.name()}"):
            self.closed.setdefault(partition, []).append(handle.close())

    def _handle(self, partition: int) -> _PartitionFile:
        """The open file of ``partition`` (a new one past the target size or when none is open)."""
        handle = self._open.get(partition)
        if handle is not None and handle.bytes >= self._target:
            self._close(partition)
            handle = None
        if handle is None:
            if len(self._open) >= MAX_OPEN_FILES:
                self._close(next(iter(self._open)))  # the longest-open file: a later one continues its range
            handle = self._open[partition] = self._new_file(partition)
        else:
            self._open[partition] = self._open.pop(partition)  # most recently used last
        return handle

    def _write(self, partition: int, rows: pa.RecordBatch) -> None:
        handle = self._handle(partition)
        with translate_storage_errors(f"writing a data file of {self.table.name()}"):
            handle.write(rows)


    def add(self, batch: pa.RecordBatch, ranks: np.ndarray, grouping: Grouping) -> None:
        """Append one chunk of normalised rows, given each row's rank within its partition and the rows grouped
        by partition. Each partition's rows are gathered and written by a worker, the partitions side by side
        (pyarrow releases the GIL while it copies, encodes and compresses), and without waiting: the caller
        reads and plans the next chunk meanwhile. A partition's next write (or its file's close) waits for
        its previous one, so each file's rows stay in order; ``finish`` waits for all."""
        if batch.num_rows == 0:
            return
        batch = carried(batch)

        def write(handle: _PartitionFile, partition: int, rows: np.ndarray) -> None:
            piece = batch.take(pa.array(rows)) if len(rows) < batch.num_rows else batch
            offsets = self.base[partition] + ranks[rows]
            with translate_storage_errors(f"writing a data file of {self.table.name()}"):
                handle.write(file_rows(piece, np.full(len(rows), partition, np.int32), offsets, self.now_ms))

        for p, rows in grouping.groups():
            self._settle(p)
            self._pending[p] = pool().submit(write, self._handle(p), p, rows)

    def _settle(self, partition: int | None = None) -> None:
        """Wait for the pending write of ``partition`` (of every partition: ``None``); raise its error."""
        for p in [partition] if partition is not None else list(self._pending):
            future = self._pending.pop(p, None)
            if future is not None:
                future.result()

    def finish(self) -> None:
        """Close every open file (the batch is complete)."""
        self._settle()
        for partition in list(self._open):
            self._close(partition)

    @property
    def data_files(self) -> list[DataFile]:
        return [f for partition in sorted(self.closed) for f in self.closed[partition]]

    def files_for(self, table: Table, base: np.ndarray) -> list[DataFile]:
        """The data files with offsets starting at ``base[p]`` (``producing.commit.Staged``): rebased first if
        another append moved a partition's ``N_p`` since they were written."""
        self.rebase(table, base)
        return self.data_files

    def rebase(self, table: Table, new_base: Sequence[int] | np.ndarray) -> None:
        """Shift every partition's offsets to start at ``new_base[p]``, rewriting its files in chunks."""
        target = np.asarray(new_base, np.int64)
        self.table = table
        for partition in sorted(self.closed):
            delta = int(target[partition] - self.base[partition])
            if delta == 0:
                continue
            old_files = self.closed.pop(partition)
            for data_file in old_files:
                self._shift_file(partition, data_file, delta)
                self._close(partition)
            self._delete([f.file_path for f in old_files])
        self.base = target.copy()

    def _shift_file(self, partition: int, data_file: DataFile, delta: int) -> None:
        with (translate_storage_errors(f"rewriting a data file of {self.table.name()}"),
              self.table.io.new_input(data_file.file_path).open() as stream):
            for chunk in pq.ParquetFile(stream).iter_batches(batch_size=REWRITE_CHUNK_ROWS):
                columns = [chunk.column(name) for name in FILE_SCHEMA.names]
                columns[1] = pc.add(columns[1], delta)
                self._write(partition, pa.RecordBatch.from_arrays(columns, schema=FILE_SCHEMA))

    def discard(self) -> None:
        """Delete every file this batch wrote (it will not be committed)."""
        for future in self._pending.values():
            with contextlib.suppress(BaseException):  # the write's error, if any, was or will be reported
                future.result()
        self._pending.clear()
        for handle in self._open.values():
            handle.abandon()
        self._open.clear()
        self.closed.clear()
        self._delete(self._written)
        self._written = []

    def _delete(self, paths: Sequence[str]) -> None:
        delete_uncommitted(self.table.io, paths)
        gone = set(paths)
        self._written = [p for p in self._written if p not in gone]


__all__ = ["FILE_SCHEMA", "StagedFiles", "file_rows"]
