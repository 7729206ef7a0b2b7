"""The Spark DataFrame producer: one atomic batch written by executors, dense offsets in the DataFrame's order."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import SparkSession

from compactor.lake import Lake
from compactor.topics.dataframe import produce_dataframe
from compactor.topics.partitioner import partition_for_key
from compactor.topics.producer import produce_arrow

pytestmark = pytest.mark.spark


def rows(lake: Lake, name: str) -> list[dict[str, Any]]:
    table = lake.topic(name).table.scan().to_arrow().sort_by([("partition", "ascending"), ("offset", "ascending")])
    out: list[dict[str, Any]] = table.to_pylist()
    return out


def test_dataframe_offsets_are_dense_in_dataframe_order(spark: SparkSession, lake: Lake) -> None:
    lake.create_topic("d.t", partitions=3)
    import pyarrow as pa

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
