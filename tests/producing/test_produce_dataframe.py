"""The Spark DataFrame producer: one atomic batch written by executors, dense offsets in the DataFrame's order."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from compactor.errors import InvalidRecordError
from compactor.lake import Lake
from compactor.producing.dataframe import produce_dataframe
from compactor.producing.producer import produce_arrow
from compactor.retention.run import run_retention
from compactor.spark.udf import headers_type
from compactor.topics.partitioner import partition_for_key
from readers.spark import read_topic_dataframe
from tests.helpers import rival_commits_first, topic_rows

pytestmark = pytest.mark.spark


def rows(lake: Lake, name: str) -> list[dict[str, Any]]:
    return topic_rows(lake.topic(name))


def tables(lake: Lake) -> list[str]:
    """The tables of namespace ``d``: a failed or replayed DataFrame batch must leave none but its topic."""
    return sorted(identifier[-1] for identifier in lake.catalog.list_tables("d"))


def test_dataframe_offsets_are_dense_in_dataframe_order(spark: SparkSession, lake: Lake) -> None:
    lake.create_topic("d.t", partitions=3)
    produce_arrow(lake.topic("d.t"), pa.table({"key": [b"x", b"y"], "value": [b"0", b"1"]}), now_ms=5)
    data = [(f"k{i % 7}".encode(), f"v{i}".encode()) for i in range(40)] + [(None, b"keyless")] * 6
    df = spark.createDataFrame(data, "key binary, value binary").repartition(3)
    order = [(bytes(r["key"]) if r["key"] is not None else None, bytes(r["value"])) for r in df.collect()]
    summary = produce_dataframe(lake, "d.t", df, now_ms=1000)
    assert summary.records == 46 and not summary.duplicate
    stored = [r for r in rows(lake, "d.t") if r["value"] not in (b"0", b"1")]
    for p in range(3):
        in_p = [r for r in stored if r["partition"] == p]
        offsets = [r["offset"] for r in in_p]
        start = summary.first_offsets[str(p)]
        assert offsets == list(range(start, start + len(in_p)))
        expected = [v for k, v in order if k is not None and partition_for_key(k, 3) == p]
        assert [r["value"] for r in in_p if r["key"] is not None] == expected
    assert sum(1 for r in stored if r["key"] is None) == 6
    assert lake.topic("d.t").offsets().next_offsets == tuple(
        sum(1 for r in rows(lake, "d.t") if r["partition"] == p) for p in range(3))
    for f in lake.topic("d.t").raw_files():
        assert f.last_offset - f.first_offset + 1 == f.record_count


HEADERS = "headers array<struct<key:string,value:binary>>"


@pytest.mark.parametrize("rows_in, schema, message", [
    ([(b"k", b"v", 0), (b"k", b"v", 9)], "partition int", "partition 9 is out of range"),
    ([(b"k", b"x" * 50, None)], "partition int", r"a record of 51 bytes exceeds max\.message\.bytes \(40\)"),
    ([(b"k", b"v", []), (b"k", b"x" * 10, [("h" * 20, b"y" * 20)])], HEADERS,  # headers count against the limit
     r"a record of 51 bytes exceeds max\.message\.bytes \(40\)"),
    ([(b"k", b"v", [("h", b"1"), (None, b"2")])], HEADERS, "a header key must be a string"),
    ([(b"k", b"v", 5), (b"k", b"v", -5)], "timestamp_ms long", "timestamp_ms must be between 0"),
])
def test_a_bad_row_fails_the_dataframe_batch(spark: SparkSession, lake: Lake, rows_in: list[tuple[Any, ...]],
                                             schema: str, message: str) -> None:
    lake.create_topic("d.bad", partitions=2, config={"max.message.bytes": "40"})
    df = spark.createDataFrame(rows_in, f"key binary, value binary, {schema}").coalesce(1)
    with pytest.raises(InvalidRecordError, match=message + r".*\(Spark partition 0, row \d+ of that partition\)"):
        produce_dataframe(lake, "d.bad", df)
    topic = lake.topic("d.bad")
    assert topic.snapshot is None
    assert tables(lake) == ["bad"]  # a producer writes no table but the topic


def test_dataframe_batch_ids_and_a_lost_race(spark: SparkSession, lake: Lake) -> None:
    lake.create_topic("d.race", partitions=2)
    rival = lake.topic("d.race")
    df = spark.createDataFrame([(f"k{i}".encode(), b"d") for i in range(30)], "key binary, value binary")
    with rival_commits_first(lambda: produce_arrow(rival.refresh(), pa.table({"key": [b"r1", b"r2", b"r3"],
                                                                               "value": [b"r"] * 3}))):
        summary = produce_dataframe(lake, "d.race", df, batch_id="df-1", now_ms=10)
    assert summary.attempts == 2 and summary.records == 30
    stored = rows(lake, "d.race")
    for p in range(2):
        in_p = [r for r in stored if r["partition"] == p]
        assert [r["offset"] for r in in_p] == list(range(len(in_p)))
        assert all(r["value"] == b"r" for r in in_p[:summary.first_offsets.get(str(p), len(in_p))])
    again = produce_dataframe(lake, "d.race", df, batch_id="df-1", now_ms=20)
    assert again.duplicate and again.first_offsets == summary.first_offsets and again.counts == summary.counts
    assert len(rows(lake, "d.race")) == 33
    assert tables(lake) == ["race"]  # a producer writes no table but the topic


def test_the_spark_reader_keeps_its_files_after_appends_and_retention(spark: SparkSession, lake: Lake) -> None:
    day = 86_400_000
    topic = lake.create_topic("d.read", config={"retention.ms": str(day), "history.expire.max-snapshot-age-ms": "0"})
    produce_arrow(topic, pa.table({"key": [b"a", b"b"], "value": [b"1", b"2"], "timestamp_ms": [0, 0]}), now_ms=0)
    frame = read_topic_dataframe(lake, "d.read", ordered=True)
    first = [(r["offset"], bytes(r["value"])) for r in frame.collect()]
    for _ in range(20):  # the snapshot the frame was planned on leaves the table metadata
        produce_arrow(topic, pa.table({"key": [b"c"], "value": [b"n"], "timestamp_ms": [2 * day]}), now_ms=2 * day)
    assert run_retention(lake, "d.read", now_ms=2 * day + 1).removed_records == 2
    # a new query on the frame plans it again (the same Dataset object would reuse its executed plan)
    again = frame.select("offset", "value").collect()
    assert [(r["offset"], bytes(r["value"])) for r in again] == first == [(0, b"1"), (1, b"2")]


def test_dataframe_files_keep_row_groups_small_enough_to_split(spark: SparkSession, lake: Lake,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Iceberg's Parquet writer bounds row groups by bytes only: the DataFrame producer asks for small ones, so
    the compaction's sliced layout can split a large DataFrame batch's file (here 1 MB groups, 3 MB of values)."""
    import pyarrow.parquet as pq

    from compactor.producing import spark_files

    monkeypatch.setitem(spark_files.WRITE_OVERRIDES, "write.parquet.row-group-size-bytes", str(1024 * 1024))
    lake.create_topic("d.groups", partitions=1)
    noise = random.Random(5)
    df = spark.createDataFrame([(f"k{i}".encode(), noise.randbytes(3000)) for i in range(1000)],
                               "key binary, value binary").coalesce(1)
    produce_dataframe(lake, "d.groups", df)
    files = lake.topic("d.groups").raw_files()
    assert len(files) == 1 and files[0].record_count == 1000
    with lake.topic("d.groups").table.io.new_input(files[0].path).open() as stream:
        assert pq.ParquetFile(stream).metadata.num_row_groups >= 2



def test_produce_with_the_spark_engine_from_the_command_line(spark: SparkSession, lake: Lake, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """``produce --format parquet --engine spark``: Spark reads the files, one atomic batch, a summary line;
    offsets follow the files' row order, partitions are the Python producer's."""
    import json

    import pyarrow.parquet as pq

    from compactor.cli.main import main

    monkeypatch.setenv("COMPACTOR_CATALOG_NAME", lake.config.catalog_name)
    lake.create_topic("d.cli", partitions=3)
    keys = [b"k%d" % (i % 11) for i in range(60)] + [b"", b"\xff\xfe"]
    source = tmp_path / "in.parquet"
    pq.write_table(pa.table({"key": keys, "value": [b"v%d" % i for i in range(len(keys))]}), source)
    warehouse = lake.config.warehouse.replace("file://", "")
    code = main(["--warehouse", warehouse, "produce", "d.cli", "--file", str(source), "--format", "parquet",
                 "--engine", "spark", "--batch-id", "cli-1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out)
    assert summary["records"] == len(keys) and summary["batch_id"] == "cli-1"
    stored = rows(lake, "d.cli")
    assert all(r["partition"] == partition_for_key(r["key"], 3) for r in stored) and len(stored) == len(keys)
    for p in range(3):
        in_p = [r for r in stored if r["partition"] == p]
        assert [r["offset"] for r in in_p] == list(range(len(in_p)))
        assert [r["value"] for r in in_p] == [b"v%d" % i for i, k in enumerate(keys) if partition_for_key(k, 3) == p]
    assert main(["--warehouse", warehouse, "produce", "d.cli", "--file", str(source), "--format", "jsonl",
                 "--engine", "spark"]) == 2


def test_dataframe_files_carry_the_topics_field_ids_and_other_engines_read_them(spark: SparkSession,
                                                                              lake: Lake) -> None:
    """The producer's tasks write the topic's files themselves (Iceberg's Parquet writer, no staging table):
    every column carries the topic schema's field id, and pyiceberg, Spark SQL and DuckDB read the same rows,
    headers included, as the product's reader."""
    import pyarrow.parquet as pq

    from compactor import schema as ts
    from readers.reader import TopicReader
    from tests.e2e.test_other_engines import duckdb_connection

    lake.create_topic("d.engines", partitions=2)
    data = [(f"k{i % 5}".encode(), f"v{i}".encode() if i % 7 else None, 1_000 + i,
             [("h", b"x%d" % i), ("n", None)] if i % 3 == 0 else []) for i in range(30)]
    df = spark.createDataFrame(data, f"key binary, value binary, timestamp_ms bigint, headers {headers_type()}")
    produce_dataframe(lake, "d.engines", df.repartition(2))
    assert tables(lake) == ["engines"]  # a producer writes no table but the topic
    topic = lake.topic("d.engines")
    expected = sorted((r.partition, r.offset, r.timestamp_ms, r.key, r.value, tuple(r.headers))
                      for r in TopicReader(lake, "d.engines", read_compacted=False).records())
    assert len(expected) == 30
    ids = {field.name: field.field_id for field in ts.TOPIC_SCHEMA.fields}
    for data_file in topic.raw_files():
        with topic.table.io.new_input(data_file.path).open() as stream:
            schema = pq.ParquetFile(stream).schema_arrow
        assert {f.name: int(f.metadata[b"PARQUET:field_id"]) for f in schema} == ids
    def millis(stamp: dt.datetime) -> int:
        return (stamp.astimezone(dt.UTC) - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(milliseconds=1)

    by_pyiceberg = sorted((r["partition"], r["offset"], millis(r["timestamp"]), r["key"], r["value"],
                           tuple((h["key"], h["value"]) for h in r["headers"])) for r in rows(lake, "d.engines"))
    table = f"`{lake.config.catalog_name}`.d.engines"
    by_spark = sorted((r["partition"], r["offset"], millis(r["timestamp"]), bytes(r["key"]),
                       bytes(r["value"]) if r["value"] is not None else None,
                       tuple((h["key"], bytes(h["value"]) if h["value"] is not None else None) for h in r["headers"]))
                      for r in spark.sql(f"SELECT * FROM {table}").collect())
    columns = '"partition", "offset", "timestamp", "key", "value", "headers"'
    by_duckdb = sorted((p, o, millis(t), k, v, tuple((h["key"], h["value"]) for h in hs)) for p, o, t, k, v, hs in
                       duckdb_connection().sql(f"SELECT {columns} FROM iceberg_scan('{topic.table.metadata_location}')")
                       .fetchall())
    assert by_pyiceberg == by_spark == by_duckdb == expected
