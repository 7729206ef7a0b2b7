"""The raw snapshot window through Spark (docs/guarantees.md#the-raw-log): a Structured Streaming query resumed from its
checkpoint and ``VERSION AS OF`` work within ``raw.snapshot.window.count`` and fail with Iceberg's own error
past it. One-record produces go through the Python API (pyiceberg commits); Spark runs only the readers."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from pyspark.sql import SparkSession

from compactor.lake import Lake
from compactor.producing.producer import produce_arrow
from compactor.retention.run import run_retention
from compactor.topics.topic import Topic

pytestmark = pytest.mark.spark

T0 = 1_800_000_000_000
OLD_LIMIT = 16  # appends used to keep only this many snapshot entries


def produce_many(topic: Topic, count: int, start: int) -> int | None:
    sid = None
    for i in range(start, start + count):
        sid = produce_arrow(topic, pa.table({"key": [f"k{i}".encode()], "value": [b"v"]}),
                            now_ms=T0 + i * 1000).snapshot_id
    return sid


class Stream:
    """A file-sink streaming query over a topic's raw table, run to completion with ``availableNow``."""

    def __init__(self, spark: SparkSession, table: str, tmp_path: Path) -> None:
        self.spark, self.table = spark, table
        self.out, self.checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run(self, **options: str) -> None:
        query = (self.spark.readStream.format("iceberg").options(**options).load(self.table)
                 .selectExpr("partition", "offset", "key")
                 .writeStream.format("parquet").option("path", str(self.out))
                 .option("checkpointLocation", str(self.checkpoint)).trigger(availableNow=True).start())
        try:
            query.awaitTermination()
        finally:
            query.stop()

    def keys(self) -> list[bytes]:
        return sorted(ds.dataset(str(self.out), format="parquet").to_table()["key"].to_pylist())


def expected(count: int) -> list[bytes]:
    return sorted(f"k{i}".encode() for i in range(count))


def test_a_streaming_query_resumes_within_the_window_and_fails_with_icebergs_error_past_it(
        spark: SparkSession, lake: Lake, tmp_path: Path) -> None:
    window = 2 * OLD_LIMIT
    topic = lake.create_topic("w.stream", partitions=2, config={"raw.snapshot.window.count": str(window)})
    stream = Stream(spark, f"{lake.config.catalog_name}.w.stream", tmp_path)
    produce_many(topic, 1, 0)
    stream.run()
    assert stream.keys() == expected(1)
    produce_many(topic, OLD_LIMIT + 8, 1)  # more than the old limit (the issue's 24)
    stream.run()
    assert stream.keys() == expected(OLD_LIMIT + 9)
    produce_many(topic, window + 1, OLD_LIMIT + 9)  # the checkpoint's snapshot leaves the window
    with pytest.raises(Exception, match="Cannot load current offset at snapshot"):
        stream.run()


def test_a_streaming_query_passes_retention_deletes_with_icebergs_skip_option(
        spark: SparkSession, lake: Lake, tmp_path: Path) -> None:
    """docs/other-engines.md: retention commits delete snapshots, which Iceberg's streaming source skips only when
    told to."""
    topic = lake.create_topic("w.deletes", config={"retention.ms": "1000"})
    stream = Stream(spark, f"{lake.config.catalog_name}.w.deletes", tmp_path)
    produce_many(topic, 2, 0)
    stream.run()
    assert run_retention(lake, "w.deletes", now_ms=T0 + 10**6).removed_records == 2
    produce_arrow(topic.refresh(), pa.table({"key": [b"k2"], "value": [b"v"]}), now_ms=T0 + 10**6)
    with pytest.raises(Exception, match="Cannot process delete snapshot"):
        stream.run()
    stream.run(**{"streaming-skip-delete-snapshots": "true"})
    assert stream.keys() == expected(3)


def test_version_as_of_a_recent_raw_snapshot_and_icebergs_error_past_the_window(
        spark: SparkSession, lake: Lake) -> None:
    window = OLD_LIMIT + 4
    topic = lake.create_topic("w.asof", config={"raw.snapshot.window.count": str(window)})
    table = f"{lake.config.catalog_name}.w.asof"
    old = produce_many(topic, 1, 0)
    produce_many(topic, window, 1)
    rows = spark.sql(f"SELECT count(*) AS n FROM {table} VERSION AS OF {old}").collect()
    assert rows[0].n == 1
    produce_many(topic, 1, window + 1)
    with pytest.raises(Exception, match=f"Cannot find snapshot with ID {old}"):
        spark.sql(f"SELECT count(*) AS n FROM {table} VERSION AS OF {old}").collect()


@pytest.mark.slow
@pytest.mark.long
def test_a_streaming_query_resumes_after_1000_produces_with_the_default_window(
        spark: SparkSession, lake: Lake, tmp_path: Path) -> None:
    topic = lake.create_topic("w.thousand", partitions=4)
    stream = Stream(spark, f"{lake.config.catalog_name}.w.thousand", tmp_path)
    checkpoint = produce_many(topic, 1, 0)
    stream.run()
    started = time.monotonic()
    produce_many(topic, 1000, 1)
    print(f"1,000 one-record produces: {time.monotonic() - started:.1f} s")
    scan = topic.refresh().table.incremental_append_scan(from_snapshot_id_exclusive=checkpoint)
    assert len(scan.to_arrow()) == 1000  # pyiceberg's incremental scan from the same snapshot
    stream.run()
    assert stream.keys() == expected(1001)
