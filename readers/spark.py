"""The Spark reader: a topic's raw or compacted view as a DataFrame, for jobs that consume topics on a cluster.

Planning is the Python reader's (``TopicReader``): it pins the cursor ``C`` and then the raw snapshot ``R``,
validates and resolves start positions (offsets, timestamps, reset policy, as-of cursor) and splits each
partition into segments. Spark then reads each table once, at its pinned snapshot id, filtered to the
segments' ``(partition, offset)`` ranges, so Iceberg prunes files by partition and offset statistics exactly
as the Python reader does. The two reads are unioned; the result holds exactly the records the Python reader
returns for the same arguments (tests compare them).

A DataFrame has no order of its own: pass ``ordered=True`` to sort by ``(partition, offset)`` (a shuffle), or
sort downstream only where order matters (``repartition("partition").sortWithinPartitions("offset")``).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import reduce
from typing import TYPE_CHECKING

from compactor import schema as ts
from compactor.spark.columns import offset_ranges
from compactor.topics.naming import TopicName
from readers.positions import ResetPolicy, StartSpec
from readers.reader import TopicReader

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from compactor.lake import Lake


def read_topic_dataframe(
    lake: Lake,
    topic: str | TopicName,
    *,
    read_compacted: bool = False,
    start: Mapping[int, StartSpec] | None = None,
    reset: ResetPolicy | None = None,
    as_of_cursor: int | None = None,
    now_ms: int | None = None,
    ordered: bool = False,
) -> DataFrame:
    """The records of ``topic`` (raw, or compacted with ``read_compacted=True``) as a Spark DataFrame.

    **Unordered** unless ``ordered=True``: the rows are ``TopicReader``'s records, but a DataFrame has no order
    of its own (Spark returns them in file and task order); ``ordered=True`` sorts by ``(partition, offset)``,
    which costs a shuffle. Arguments and errors are those of ``TopicReader``; the snapshots are pinned when
    this is called, so re-evaluating the DataFrame later returns the same records for the readers' lease
    (``compaction.cursor.retain-ms``). Columns are the topic schema's, whatever the view table adds.
    """
    reader = TopicReader(lake, topic, read_compacted=read_compacted, start=start, reset=reset,
                         as_of_cursor=as_of_cursor, now_ms=now_ms)
    return dataframe_of(lake, reader, ordered=ordered)


def dataframe_of(lake: Lake, reader: TopicReader, *, ordered: bool = False) -> DataFrame:
    """The DataFrame of an open (pinned) ``TopicReader``'s records: unordered unless ``ordered=True``."""
    spark = lake.spark()
    catalog = lake.config.catalog_name
    segments = [s for p in range(reader.partitions) for s in reader.segments(p)]
    parts: list[DataFrame] = []
    for compacted in (True, False):
        chosen = [s for s in segments if s.compacted == compacted]
        snapshot_id = (reader.cursor.snapshot_id if reader.cursor else None) if compacted else reader.raw_snapshot_id
        condition = offset_ranges((s.partition, s.lo, s.hi) for s in chosen)
        if condition is None or snapshot_id is None:
            continue
        frame = (spark.read.format("iceberg").option("snapshot-id", str(snapshot_id))
                 .load(reader.name.spark_identifier(catalog, compacted=compacted)))
        parts.append(frame.where(condition).select(*ts.COLUMNS))
    if not parts:  # nothing to read: an empty frame with the topic's columns
        parts.append(spark.read.format("iceberg").load(reader.name.spark_identifier(catalog))
                     .select(*ts.COLUMNS).where("false"))
    result = reduce(lambda a, b: a.unionByName(b), parts)
    return result.orderBy(ts.PARTITION, ts.OFFSET) if ordered else result


__all__ = ["dataframe_of", "read_topic_dataframe"]
