"""The Spark form of a record's bytes (``record_rules.spark_record_bytes``) agrees with the per-record form."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from compactor.topics.record_rules import record_size, spark_record_bytes

pytestmark = pytest.mark.spark

ROWS: list[tuple[bytes | None, bytes | None, list[tuple[str | None, bytes | None]] | None]] = [
    (None, None, None),
    (b"", b"", []),
    (b"k", None, [("\u00e9t\u00e9", None), ("", b"12")]),  # a header key counts its UTF-8 bytes
    (None, b"value", [("trace", b"abc"), ("\u043a\u043b\u044e\u0447", b"")]),
    (b"\x00\xff", b"\xf0\x9f\x98\x80", [(None, b"xy")]),  # a null header key counts 0 (refused elsewhere)
]


def test_a_records_bytes_in_spark_are_its_bytes_one_at_a_time(spark: SparkSession) -> None:
    frame = spark.createDataFrame(
        [(k, v, [{"key": n, "value": x} for n, x in h] if h is not None else None) for k, v, h in ROWS],
        "key binary, value binary, headers array<struct<key: string, value: binary>>")
    with_headers = [r["n"] for r in frame.select(spark_record_bytes("key", "value", "headers").alias("n")).collect()]
    without = [r["n"] for r in frame.select(spark_record_bytes("key", "value", None).alias("n")).collect()]
    assert with_headers == [record_size(k, v, [(n or "", x) for n, x in h or []]) for k, v, h in ROWS]
    assert without == [record_size(k, v) for k, v, _ in ROWS]
