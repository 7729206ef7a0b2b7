"""The files of a DataFrame batch, written by Spark's tasks straight into the topic's data directory.

Each Spark task numbers its rows per topic partition as they stream by, from the first offsets of its (Spark
partition, topic partition) cells (``spark.udf.task_offset``: no shuffle, no sort, an array index per row).
The compiled ``compactor.udf.TopicFiles`` then writes, per topic partition a task holds, one Parquet file through
Iceberg's own Parquet writer (the topic's schema and field ids, its write properties and metrics settings),
routing each row by its partition column: no partition key and no writer lookup per row, as Iceberg's partitioned
Spark writer needs, no staging table and no Spark commit. It also sums each file's record bytes
(``record_rules.spark_record_bytes``, a column the writer does not store) and refuses a record over
``max.message.bytes``. The driver gets one line per file (path, partition, rows, bytes, record bytes), reads each
file's footer for its statistics (per-file metadata only), checks the files against the counting pass and hands
them to the topic's conditional commit (``producing.commit``), which rewrites them (by running the write again) if
another producer moved ``N_p`` first.
"""

from __future__ import annotations

import functools
import re
import uuid
from typing import TYPE_CHECKING

import numpy as np
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from compactor import schema as ts
from compactor.errors import CountMismatchError, InputError
from compactor.iceberg.bounds import file_bound
from compactor.iceberg.manifests import written_data_files
from compactor.iceberg.storage import delete_uncommitted
from compactor.lake import Lake
from compactor.producing.spark_counts import Counts, bad_row
from compactor.spark.udf import TASK_OFFSET_SKIP, parse_file_line, task_offset, topic_files
from compactor.topics.record_rules import SIZE
from compactor.topics.topic import Topic

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# Spark's writer has no row limit per row group: keep them small enough for compaction to split files
WRITE_OVERRIDES = {"write.parquet.row-group-size-bytes": str(32 * 1024 * 1024), "parquet.enable.dictionary": "false"}


# an oversized record's error from ``compactor.udf.TopicFiles``: its bytes, Spark partition and 1-based row
_TOO_LARGE = re.compile(r"compactor\.udf\.TopicFiles\.TOO_LARGE\[(\d+) (\d+) (\d+)\]")


class SparkFiles:
    """The ``Staged`` protocol over files Spark's tasks write into the topic (see the module docstring).
    ``sizes``: the record bytes per topic partition, known once the files are written."""

    def __init__(self, lake: Lake, topic: Topic, frame: DataFrame, counted: Counts, now_ms: int,
                 max_message_bytes: int, shares: int = 1) -> None:
        self.lake = lake
        self.shares = shares
        self.topic = topic
        self.frame = frame
        self.cells = counted.cells
        self.counts = counted.counts
        self.sizes = np.zeros(len(counted.counts), np.int64)
        self.now_ms = now_ms
        self.max_message_bytes = max_message_bytes
        self.base = np.full(len(counted.counts), -1, np.int64)  # the base offsets of ``data_files`` (-1: none yet)
        self.data_files: list[DataFile] = []

    def files_for(self, table: Table, base: np.ndarray) -> list[DataFile]:
        """The batch's files with offsets starting at ``base[p]``: written by Spark's tasks (again, if they were
        written for other base offsets)."""
        touched = np.nonzero(self.counts)[0]
        if np.array_equal(self.base[touched], base[touched]):
            return self.data_files
        self.discard()
        self.data_files = self._write(table, base)
        self.base = base.copy()
        return self.data_files

    def rows(self, base: np.ndarray) -> DataFrame:
        """The batch's rows as the topic's columns, with offsets from ``base`` (in each task's row order), then
        each record's bytes (``_size``) and its row id in the input (``_row``: the writer's errors name it). With
        ``shares`` > 1, the input is read as that many copies side by side (``TaskOffset``'s shares): each task of
        copy ``j`` writes the ``j``-th part of each of its cells' offsets, so cores the input's tasks would leave
        idle write too."""
        from pyspark.sql import functions as F

        partitions = len(self.counts)
        cells: dict[tuple[int, int], tuple[int, int]] = {}  # (Spark partition, topic partition) -> (first, rows)
        before = np.zeros(partitions, np.int64)
        for pid, p in sorted(self.cells):
            cells[(pid, p)] = (int(base[p] + before[p]), self.cells[(pid, p)])
            before[p] += self.cells[(pid, p)]

        def copy(share: int) -> DataFrame:
            rows = self.frame.select(
                F.col("_p").alias(ts.PARTITION),
                task_offset(F.col("_pid"), F.col("_p"), cells, partitions, share, self.shares).alias(ts.OFFSET),
                F.timestamp_millis(F.coalesce(F.col("timestamp_ms"), F.lit(self.now_ms))).alias(ts.TIMESTAMP),
                F.col("key").alias(ts.KEY), F.col("value").alias(ts.VALUE), F.col("headers").alias(ts.HEADERS),
                F.col("_size"), F.col("_row"))
            return rows if self.shares == 1 else rows.where(~F.col(ts.OFFSET).eqNullSafe(F.lit(TASK_OFFSET_SKIP)))

        return functools.reduce(lambda a, b: a.unionAll(b), (copy(share) for share in range(self.shares)))

    def _write(self, table: Table, base: np.ndarray) -> list[DataFile]:
        try:
            lines = topic_files(self.rows(base), self._jvm_name(), uuid.uuid4().hex[:12], WRITE_OVERRIDES,
                                self.max_message_bytes)
        except Exception as exc:  # py4j's error: the writer deleted its files
            found = _TOO_LARGE.search(str(exc))
            if found is None:
                raise
            size, spark_partition, row = (int(g) for g in found.groups())
            raise bad_row(SIZE, size, len(self.counts), self.max_message_bytes, spark_partition, row) from None
        written = [parse_file_line(line) for line in lines]
        files = written_data_files(table, ts.TOPIC_SCHEMA, [w[:4] for w in written], str(self.topic.name))
        check_files(files, base, self.counts, table)
        self.sizes = np.zeros(len(self.counts), np.int64)
        for _, partition, _, _, record_bytes in written:
            self.sizes[partition] += record_bytes
        return files

    def _jvm_name(self) -> str:
        """The topic's table as the session's Iceberg catalog names it."""
        return self.topic.name.spark_identifier(self.lake.config.catalog_name)

    def discard(self) -> None:
        delete_uncommitted(self.topic.table.io, [f.file_path for f in self.data_files])
        self.data_files = []
        self.base = np.full(len(self.counts), -1, np.int64)


def check_files(files: list[DataFile], base: np.ndarray, counts: np.ndarray, table: Table) -> None:
    """Every partition's files must hold exactly ``[base_p, base_p + count_p)``, each a contiguous range;
    otherwise the files are deleted and the batch fails (the DataFrame changed between the passes)."""
    by_partition: dict[int, list[tuple[int, int, int]]] = {}
    for data_file in files:
        lo = file_bound(data_file.lower_bounds, ts.OFFSET_FIELD_ID, "long")
        hi = file_bound(data_file.upper_bounds, ts.OFFSET_FIELD_ID, "long")
        if lo is None or hi is None:
            delete_uncommitted(table.io, [f.file_path for f in files])
            raise InputError("a new data file lacks offset statistics")
        by_partition.setdefault(int(data_file.partition[0]), []).append((lo, hi, int(data_file.record_count)))
    for p in range(len(counts)):
        expected = int(base[p])
        for lo, hi, n in sorted(by_partition.get(p, [])):
            if lo != expected or hi - lo + 1 != n:
                break
            expected = hi + 1
        if expected != int(base[p] + counts[p]) or sum(n for *_, n in by_partition.get(p, [])) != int(counts[p]):
            delete_uncommitted(table.io, [f.file_path for f in files])
            raise CountMismatchError(
                "the DataFrame returned different rows when written than when counted (it is not "
                "deterministic): sort it, read it from files or cache() it; nothing was written")


__all__ = ["WRITE_OVERRIDES", "SparkFiles", "check_files"]
