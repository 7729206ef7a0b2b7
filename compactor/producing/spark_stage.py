"""The files of a DataFrame batch, written by Spark into a private staging table (``produce_dataframe``).

Each Spark task numbers its rows per topic partition as they stream by (``spark_columns.task_position``: no
shuffle); a literal map of per-(Spark partition, topic partition) first offsets turns the number into the
offset; the task then sorts its rows by (partition, offset) and Iceberg's clustered writer writes, per topic
partition, one file with a contiguous offset range in offset order. The files go to a staging table whose
data path is the topic's data directory; the driver then checks them against the counting pass and hands them
to the topic's conditional commit (``producing.commit``), which rewrites them (by running the write again) if
another producer moved ``N_p`` first. The staging table is dropped afterwards, its metadata deleted.
"""

from __future__ import annotations

import contextlib
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from pyiceberg.catalog import Catalog
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from compactor import properties as props
from compactor import schema as ts
from compactor.config import LakeConfig
from compactor.errors import InputError
from compactor.iceberg.bounds import file_bound
from compactor.iceberg.catalog import translate_storage_errors
from compactor.iceberg.storage import delete_prefix, delete_uncommitted, drop_stale_tables
from compactor.lake import Lake
from compactor.producing.spark_columns import task_position
from compactor.spark.active import active_session
from compactor.topics.naming import TopicName
from compactor.topics.topic import Topic

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

ROW_BITS = 33  # monotonically_increasing_id() = (Spark partition << 33) + position within the partition
STAGING_INFIX = "__producing_"
STAGING_DIR = "_compactor_staging"  # under the warehouse: the staging tables' metadata (their data is the topic's)
STAGED_ROW_GROUP_BYTES = str(32 * 1024 * 1024)


@dataclass(frozen=True)
class Counts:
    """Rows and bytes per (Spark partition, topic partition), from the counting pass."""

    cells: dict[tuple[int, int], int]
    sizes: np.ndarray
    counts: np.ndarray


class SparkStage:
    """``producing.commit.Staged`` over files written by Spark into a staging table (see the module docstring)."""

    def __init__(self, lake: Lake, topic: Topic, frame: DataFrame, counted: Counts, rr_start: int,
                 now_ms: int, prepared: Future[tuple[str, str]] | None = None) -> None:
        self.lake = lake
        self.topic = topic
        self.frame = frame
        self.cells = counted.cells
        self.counts = counted.counts
        self.sizes = counted.sizes
        self.rr_start = rr_start
        self.now_ms = now_ms
        self._base: np.ndarray | None = None
        self._files: list[DataFile] = []
        self._staging: list[tuple[str, str]] = []  # (identifier, location) of staging tables to drop
        self._prepared = prepared  # a staging table created while the counting pass ran (``create_staging``)

    def staged_base(self) -> np.ndarray:
        return self._base if self._base is not None else np.full(len(self.counts), -1, np.int64)

    def files_for(self, table: Table, base: np.ndarray) -> list[DataFile]:
        touched = np.nonzero(self.counts)[0]
        if self._base is not None and np.array_equal(self._base[touched], base[touched]):
            return self._files
        self._delete_files()
        self._files = self._write(table, base)
        self._base = base.copy()
        return self._files

    def _write(self, table: Table, base: np.ndarray) -> list[DataFile]:
        from pyspark.sql import functions as F

        identifier = self._take_prepared() or self._create_staging(table)
        partitions = len(self.counts)
        starts = []  # (Spark partition * P + topic partition, the offset of that cell's first row)
        before = np.zeros(partitions, np.int64)
        for pid, p in sorted(self.cells):
            starts.append((pid * partitions + p, int(base[p] + before[p])))
            before[p] += self.cells[(pid, p)]
        # A literal map, not a join: a join makes Spark infer constraints through every projection of the
        # prepared columns, which blows up its expression trees.
        cells = F.create_map(*[F.lit(x) for cell, start in starts for x in (cell, start)])
        offset_base = F.element_at(cells, F.col("_pid").cast("bigint") * partitions + F.col("_p"))
        # the row's position among its task's rows of the same topic partition, counted as the rows stream by
        # (compiled, non-deterministic: evaluated once per row), so no sort is needed to number them
        numbered = self.frame.withColumn("_i", task_position(F.col("_p")))
        out = numbered.select(
            F.col("_p").alias(ts.PARTITION), (offset_base + F.col("_i")).alias(ts.OFFSET),
            F.timestamp_millis(F.coalesce(F.col("timestamp_ms"), F.lit(self.now_ms))).alias(ts.TIMESTAMP),
            F.col("key").alias(ts.KEY), F.col("value").alias(ts.VALUE), F.col("headers").alias(ts.HEADERS))
        # numbered first, then each task's rows sorted by (partition, offset) for Iceberg's clustered writer: in
        # task CPU (1M rows, bench/README.md) cheaper than the fanout writer's four open files per task
        out = out.sortWithinPartitions(ts.PARTITION, ts.OFFSET)
        catalog = self.lake.config.catalog_name
        with active_session(out.sparkSession):  # Iceberg's writer reads its settings on the active session
            out.writeTo(f"`{catalog}`." + ".".join(f"`{part}`" for part in identifier.split("."))) \
                .option("check-nullability", "false").option("distribution-mode", "none").append()
        with translate_storage_errors(f"reading the staged files of {self.topic.name}"):
            staged = self.lake.catalog.load_table(identifier)
            files = [task.file for task in staged.scan().plan_files()]
        self._check(files, base)
        return files

    def _create_staging(self, table: Table) -> str:
        identifier, location = create_staging(self.lake, self.topic, table)
        self._staging.append((identifier, location))
        return identifier

    def _take_prepared(self) -> str | None:
        """The staging table created in advance (once; ``None`` if there is none or its creation failed)."""
        prepared, self._prepared = self._prepared, None
        if prepared is None:
            return None
        try:
            identifier, location = prepared.result()
        except Exception:  # created again on the caller's thread, where its error is reported
            return None
        self._staging.append((identifier, location))
        return identifier

    def _check(self, files: list[DataFile], base: np.ndarray) -> None:
        """Every partition's files must hold exactly ``[base_p, base_p + count_p)``, each a contiguous range."""
        by_partition: dict[int, list[tuple[int, int, int]]] = {}
        for data_file in files:
            lo = file_bound(data_file.lower_bounds, ts.OFFSET_FIELD_ID, "long")
            hi = file_bound(data_file.upper_bounds, ts.OFFSET_FIELD_ID, "long")
            if lo is None or hi is None:
                raise InputError("a staged file lacks offset statistics")
            by_partition.setdefault(int(data_file.partition[0]), []).append((lo, hi, int(data_file.record_count)))
        for p in range(len(self.counts)):
            expected = int(base[p])
            for lo, hi, n in sorted(by_partition.get(p, [])):
                if lo != expected or hi - lo + 1 != n:
                    break
                expected = hi + 1
            if expected != int(base[p] + self.counts[p]) or sum(n for *_, n in by_partition.get(p, [])) != \
                    int(self.counts[p]):
                self._delete_files(files)
                raise InputError(
                    "the DataFrame returned different rows when written than when counted (it is not "
                    "deterministic): sort it, read it from files or cache() it; nothing was written")

    def _delete_files(self, files: list[DataFile] | None = None) -> None:
        delete_uncommitted(self.topic.table.io, [f.file_path for f in (files if files is not None else self._files)])
        if files is None:
            self._files = []

    def discard(self) -> None:
        self._delete_files()
        self.drop_staging()

    def drop_staging(self) -> None:
        self._take_prepared()
        for identifier, location in self._staging:
            drop_staging_table(self.lake, identifier, location)
        self._staging = []


def create_staging(lake: Lake, topic: Topic, table: Table) -> tuple[str, str]:
    """Create a private staging table for one DataFrame batch of ``topic`` (its data path is the topic's):
    ``(identifier, location)``. Callable from another thread while Spark counts the batch."""
    name = f"{topic.name.topic}{STAGING_INFIX}{uuid.uuid4().hex[:12]}"
    identifier = ".".join((*topic.name.namespace, name))
    location = f"{lake.config.warehouse.rstrip('/')}/{STAGING_DIR}/{name}"
    data_path = table.metadata.properties.get("write.data.path", f"{table.metadata.location.rstrip('/')}/data")
    with translate_storage_errors(f"creating a staging table for {topic.name}"):
        lake.catalog.create_table(identifier, schema=ts.TOPIC_SCHEMA, location=location,
                                  partition_spec=ts.TOPIC_PARTITION_SPEC,
                                  properties={**props.TOPIC_TABLE_PROPERTIES, "write.data.path": data_path,
                                              # rows arrive sorted by partition: one open file a task
                                              "write.spark.fanout.enabled": "false",
                                              # Spark's writer has no row limit per row group: keep them small
                                              # enough for compaction to split files
                                              "write.parquet.row-group-size-bytes": STAGED_ROW_GROUP_BYTES})
    return identifier, location


def drop_staging_table(lake: Lake, identifier: str, location: str) -> None:
    """Drop one staging table and delete its metadata (best effort: retention drops what is left behind)."""
    with contextlib.suppress(Exception):
        lake.catalog.drop_table(identifier)
    with contextlib.suppress(Exception):
        delete_prefix(lake.config, location)


def discard_prepared(lake: Lake, prepared: Future[tuple[str, str]]) -> None:
    """Drop a staging table created in advance for a batch that will not be written."""
    with contextlib.suppress(Exception):
        drop_staging_table(lake, *prepared.result())


def drop_stale_staging(catalog: Catalog, config: LakeConfig, name: TopicName, now_ms: int, min_age_ms: int, *,
                       dry_run: bool = False) -> list[str]:
    """Drop the staging tables of ``name``'s DataFrame batches last changed more than ``min_age_ms`` before
    ``now_ms`` (a producer that died left them); returns their identifiers (in a dry run, those it would drop).

    Only the catalog entry and the staging metadata go, never the data: a staging table's manifests list files
    in the topic's own data directory, which the topic may have committed (so never ``DROP TABLE ... PURGE``
    one by hand either); files no snapshot of the topic references are left to orphan cleanup.
    """
    def stale(_: str, table: Table) -> bool:
        metadata = table.metadata
        return (props.MARKER_PROPERTY not in metadata.properties  # not a topic of that name
                and f"/{STAGING_DIR}/" in metadata.location
                and metadata.last_updated_ms + min_age_ms < now_ms)  # else possibly a producer still at work

    return drop_stale_tables(catalog, config, name.namespace, f"{name.topic}{STAGING_INFIX}", stale, "staging table",
                             dry_run=dry_run)


__all__ = [
    "ROW_BITS",
    "Counts",
    "SparkStage",
    "create_staging",
    "discard_prepared",
    "drop_staging_table",
    "drop_stale_staging",
]
