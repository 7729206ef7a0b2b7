"""The DataFrame producer's counting pass: narrow (keys only) where the plan places rows whatever columns are read,
full otherwise; the write refuses oversized records and sums the bytes; a narrow count that proves wrong is redone."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from compactor.errors import InvalidRecordError
from compactor.lake import Lake
from compactor.producing import dataframe
from compactor.producing.dataframe import produce_dataframe
from compactor.producing.spark_plan import placement_ignores_projection
from compactor.topics.partitioner import partition_for_key
from compactor.topics.state import read_offsets
from tests.helpers import data_file_paths, parquet_source, topic_rows

pytestmark = pytest.mark.spark


def data_files(lake: Lake, name: str) -> list[Path]:
    return data_file_paths(lake.topic(name))


def test_which_plans_are_counted_without_their_values(spark: SparkSession, tmp_path: Path) -> None:
    scan = parquet_source(spark, tmp_path, [(b"k%d" % i, b"v%d" % i) for i in range(20)])
    local = spark.createDataFrame([(b"a", b"1")], "key binary, value binary")
    narrow = {
        "file scan": scan,
        "filter and projection": scan.filter(F.col("key") != b"k3").select("key", F.upper("value").alias("value")),
        "union": scan.union(scan),
        "local rows": local,
        "range": spark.range(10).select(F.col("id").cast("string").cast("binary").alias("key")),
        "cached": scan.cache(),
    }
    full = {
        "round-robin repartition": scan.repartition(3),
        "coalesce": scan.coalesce(1),
        "hash repartition": scan.repartition(3, "key"),
        "sort": scan.orderBy("key"),
        "aggregation": scan.groupBy("key").agg(F.max("value").alias("value")),
        "join": scan.join(scan.select("key"), "key"),
        "limit": scan.limit(5),
        "sample": scan.sample(0.5, seed=1),
        "random filter": scan.filter(F.rand(7) < 0.5),
    }
    assert {name: placement_ignores_projection(df) for name, df in narrow.items()} == dict.fromkeys(narrow, True)
    assert {name: placement_ignores_projection(df) for name, df in full.items()} == dict.fromkeys(full, False)
    scan.unpersist()


def test_a_narrow_count_writes_the_batch_with_dense_offsets_and_its_bytes(spark: SparkSession, lake: Lake,
                                                                         tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    passes: list[bool] = []
    count = dataframe._count
    def counting(*args: Any, **kwargs: Any) -> Any:
        passes.append(kwargs["values"])
        return count(*args, **kwargs)

    monkeypatch.setattr(dataframe, "_count", counting)
    rows: list[tuple[bytes | None, bytes]] = [(b"k%d" % (i % 9), b"v" * (i % 13)) for i in range(300)]
    rows += [(None, b"keyless")] * 7
    df = parquet_source(spark, tmp_path, rows, files=3)
    lake.create_topic("c.narrow", partitions=3)
    summary = produce_dataframe(lake, "c.narrow", df, now_ms=1000)
    assert passes == [False] and summary.records == len(rows)
    stored = topic_rows(lake.topic("c.narrow"))
    order = [(r["key"], r["value"]) for r in df.collect()]
    for p in range(3):
        in_p = [r for r in stored if r["partition"] == p]
        assert [r["offset"] for r in in_p] == list(range(len(in_p)))
        keyed = [(k, v) for k, v in order if k is not None and partition_for_key(k, 3) == p]
        assert [(r["key"], r["value"]) for r in in_p if r["key"] is not None] == keyed
    logical = read_offsets(lake.topic("c.narrow").table.metadata.properties).logical_bytes
    assert list(logical) == [sum(len(r["key"] or b"") + len(r["value"]) for r in stored if r["partition"] == p)
                             for p in range(3)]


def test_an_oversized_record_fails_the_write_and_leaves_no_file(spark: SparkSession, lake: Lake,
                                                                 tmp_path: Path) -> None:
    """Without the values in the counting pass, the writer refuses the record: the error names its Spark
    partition and row, nothing is committed, and the files of the tasks that had finished are deleted."""
    rows = [(b"k%d" % i, b"v") for i in range(40)] + [(b"big", b"x" * 60)] + [(b"k", b"v")] * 2
    df = parquet_source(spark, tmp_path, rows, files=1).coalesce(1)  # not a narrow plan: the counting pass refuses it
    files = parquet_source(spark, tmp_path / "many", rows, files=1)
    lake.create_topic("c.big", partitions=2, config={"max.message.bytes": "50"})
    for frame in (df, files):
        with pytest.raises(InvalidRecordError,
                           match=r"a record of 63 bytes exceeds max\.message\.bytes \(50\) \(Spark partition 0, "
                                 r"row 41 of that partition\); nothing was written; to accept it, raise the topic's "
                                 r"limit: compactor topic config NAME --set max\.message\.bytes=63$"):
            produce_dataframe(lake, "c.big", frame)
    assert lake.topic("c.big").snapshot is None
    assert data_files(lake, "c.big") == []
    # several tasks: those that finished before the bad record's had written files, which are deleted too
    spread = spark.createDataFrame(rows[:40], "key binary, value binary").union(
        spark.createDataFrame([rows[40]], "key binary, value binary"))
    assert placement_ignores_projection(spread) and spread.rdd.getNumPartitions() >= 3
    with pytest.raises(InvalidRecordError, match=r"a record of 63 bytes"):
        produce_dataframe(lake, "c.big", spread)
    assert lake.topic("c.big").snapshot is None and data_files(lake, "c.big") == []


def test_a_narrow_count_that_proves_wrong_is_counted_again(spark: SparkSession, lake: Lake,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """A source that places rows by the columns read (here a round-robin repartition, taken for a narrow plan):
    the files do not match the narrow count, so the batch is counted again with every column and written again,
    once; the topic gets exactly the DataFrame's rows."""
    monkeypatch.setattr(dataframe, "placement_ignores_projection", lambda df: True)
    data = [(b"k%d" % (i % 5), b"v%d" % i) for i in range(60)]
    df = spark.createDataFrame(data, "key binary, value binary").repartition(3)
    lake.create_topic("c.wrong", partitions=2)
    with caplog.at_level(logging.WARNING, logger="compactor.producing.dataframe"):
        summary = produce_dataframe(lake, "c.wrong", df)
    assert "counting again with every column" in caplog.text
    assert summary.records == 60
    stored = lake.topic("c.wrong").table.scan().to_arrow().to_pylist()
    assert sorted(r["value"] for r in stored) == sorted(v for _, v in data)
    for p in range(2):
        assert sorted(r["offset"] for r in stored if r["partition"] == p) == list(
            range(sum(1 for r in stored if r["partition"] == p)))
    assert len(data_files(lake, "c.wrong")) == len(lake.topic("c.wrong").raw_files())  # the first files are gone
    assert all(pq.read_metadata(path).num_rows > 0 for path in data_files(lake, "c.wrong"))
