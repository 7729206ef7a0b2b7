"""The Spark reader: a topic's raw or compacted view as a DataFrame, for jobs that consume topics on a cluster.

Planning is the Python reader's (``TopicReader``): it pins the cursor ``C`` and then the raw snapshot ``R``,
plans ``R``'s data files, validates and resolves start positions (offsets, timestamps, reset policy, as-of
cursor) and splits each partition into segments. Spark reads the compacted table at the cursor's snapshot id
(protected while the cursor is retained), and the raw rows from the data files planned at open, as Parquet:
later appends drop older raw snapshots' metadata entries, and Spark re-plans a snapshot id every time the
DataFrame is evaluated, whereas the files themselves stay for the reader's lease. Both reads are filtered to
the segments' ``(partition, offset)`` ranges and unioned; the result holds exactly the records the Python
reader returns for the same arguments (tests compare them).

A DataFrame has no order of its own: pass ``ordered=True`` to sort by ``(partition, offset)`` (a shuffle), or
sort downstream only where order matters (``repartition("partition").sortWithinPartitions("offset")``).

An attached log's records are made by the Python reader (``readers.attached``) and handed to Spark from the
driver: fine for a consumer's increments, not for reading a whole large log at once.
"""

from __future__ import annotations

from functools import reduce
from typing import TYPE_CHECKING, Unpack

from compactor import schema as ts
from compactor.iceberg.bounds import task_range
from compactor.spark.active import active_session
from compactor.spark.catalog import register_table_storage
from compactor.spark.expressions import offset_ranges
from compactor.topics.naming import TopicName
from readers.attached import AttachedPinnedView
from readers.pinned import Segment
from readers.reader import ReaderOptions, TopicReader

# The raw data files' columns as Spark reads them from Parquet (every raw file has exactly these).
RAW_FILE_SCHEMA = ("`partition` INT, `offset` BIGINT, `timestamp` TIMESTAMP, `key` BINARY, `value` BINARY, "
                   "`headers` ARRAY<STRUCT<`key`: STRING, `value`: BINARY>>")

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from compactor.lake import Lake


def read_topic_dataframe(lake: Lake, topic: str | TopicName, *, ordered: bool = False,
                         **options: Unpack[ReaderOptions]) -> DataFrame:
    """The records of ``topic`` (raw, or compacted with ``read_compacted=True``) as a Spark DataFrame.

    **Unordered** unless ``ordered=True``: the rows are ``TopicReader``'s records, but a DataFrame has no order
    of its own (Spark returns them in file and task order); ``ordered=True`` sorts by ``(partition, offset)``,
    which costs a shuffle. Arguments and errors are those of ``TopicReader``; the snapshots are pinned when
    this is called, so re-evaluating the DataFrame later returns the same records for the readers' lease
    (``compaction.cursor.retain-ms``). Columns are the topic schema's, whatever the view table adds.
    """
    return dataframe_of(lake, TopicReader(lake, topic, **options), ordered=ordered)


def dataframe_of(lake: Lake, reader: TopicReader, *, ordered: bool = False) -> DataFrame:
    """The DataFrame of an open (pinned) ``TopicReader``'s records: unordered unless ``ordered=True``."""
    spark = lake.spark()
    with active_session(spark):  # Iceberg's source resolves its catalog on the active session
        return _dataframe_on(spark, lake, reader, ordered)


def _dataframe_on(spark: SparkSession, lake: Lake, reader: TopicReader, ordered: bool) -> DataFrame:
    if isinstance(reader.pinned, AttachedPinnedView):  # records made by the Python reader, handed to Spark
        frame = spark.createDataFrame(reader.to_pandas(), RAW_FILE_SCHEMA)
        return frame.orderBy(ts.PARTITION, ts.OFFSET) if ordered else frame
    catalog = lake.config.catalog_name
    segments = [s for p in range(reader.partitions) for s in reader.segments(p)]
    parts: list[DataFrame] = []
    compacted = [s for s in segments if s.compacted]
    condition = offset_ranges((s.partition, s.lo, s.hi) for s in compacted)
    if condition is not None and reader.cursor is not None:
        frame = (spark.read.format("iceberg").option("snapshot-id", str(reader.cursor.snapshot_id))
                 .load(reader.name.spark_identifier(catalog, compacted=True)))
        parts.append(frame.where(condition).select(*ts.COLUMNS))
    raw = [s for s in segments if not s.compacted]
    condition = offset_ranges((s.partition, s.lo, s.hi) for s in raw)
    paths = _raw_paths(reader, raw)
    if condition is not None and paths:
        register_table_storage(spark, lake.config, reader.topic.table)  # the files are read by path, through S3A
        frame = spark.read.schema(RAW_FILE_SCHEMA).parquet(*paths)
        parts.append(frame.where(condition).select(*ts.COLUMNS))
    if not parts:  # nothing to read: an empty frame with the topic's columns
        parts.append(spark.read.format("iceberg").load(reader.name.spark_identifier(catalog))
                     .select(*ts.COLUMNS).where("false"))
    result = reduce(lambda a, b: a.unionByName(b), parts)
    return result.orderBy(ts.PARTITION, ts.OFFSET) if ordered else result


def _raw_paths(reader: TopicReader, segments: list[Segment]) -> list[str]:
    """The pinned raw files that can hold rows of ``segments`` (by partition and offset statistics)."""
    wanted = {s.partition: (s.lo, s.hi) for s in segments}
    out = []
    for task in reader.raw_files:
        partition = int(task.file.partition[0])
        if partition not in wanted:
            continue
        first, last = task_range(task)
        lo, hi = wanted[partition]
        if last >= lo and first < hi:
            out.append(task.file.file_path)
    return out


__all__ = ["dataframe_of", "read_topic_dataframe"]
