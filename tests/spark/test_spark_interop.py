"""One catalog, two engines: tables written by Spark are read by pyiceberg, and the reverse."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.topics.records import ProducerRecord
from readers.reader import TopicReader

pytestmark = pytest.mark.spark


def test_spark_written_table_is_read_by_pyiceberg(spark: SparkSession, lake: Lake) -> None:
    name = lake.config.catalog_name
    lake.catalog.create_namespace("x")
    spark.sql(f"CREATE TABLE {name}.x.t (id bigint, payload binary) USING iceberg")
    spark.sql(f"INSERT INTO {name}.x.t VALUES (1, X'00FF'), (2, NULL)")
    rows = lake.catalog.load_table("x.t").scan().to_arrow().sort_by("id").to_pylist()
    assert rows == [{"id": 1, "payload": b"\x00\xff"}, {"id": 2, "payload": None}]


def test_topic_produced_by_pyiceberg_is_read_by_spark(spark: SparkSession, lake: Lake) -> None:
    topic = lake.create_topic("x.events", partitions=2)
    produce(topic, [ProducerRecord(f"k{i}".encode(), f"v{i}".encode(), (("h", b"\x01"),), timestamp_ms=1000 + i)
                    for i in range(20)])
    produce(topic, [ProducerRecord(b"k0", None)])
    name = lake.config.catalog_name
    spark_rows = spark.sql(
        f"SELECT partition, offset, CAST(unix_micros(timestamp) / 1000 AS BIGINT) AS ts, key, value, headers "
        f"FROM {name}.x.events ORDER BY partition, offset").collect()
    python_rows = list(TopicReader(lake, "x.events").records())
    assert len(spark_rows) == len(python_rows) == 21
    for s, p in zip(spark_rows, python_rows, strict=True):
        assert (s.partition, s.offset, s.ts, bytes(s.key), s.value and bytes(s.value)) == (
            p.partition, p.offset, p.timestamp_ms, p.key, p.value)
        assert [(h.key, bytes(h.value)) for h in s.headers] == list(p.headers)


def test_spark_sees_pyiceberg_commits_without_restart(spark: SparkSession, lake: Lake) -> None:
    topic = lake.create_topic("x.live")
    name = lake.config.catalog_name
    assert spark.sql(f"SELECT count(*) AS n FROM {name}.x.live").first().n == 0  # type: ignore[union-attr]
    produce(topic, [ProducerRecord(b"k", b"v")] * 3)
    assert spark.sql(f"SELECT count(*) AS n FROM {name}.x.live").first().n == 3  # type: ignore[union-attr]


def test_spark_first_on_a_warehouse_that_does_not_exist_yet(spark_session: SparkSession, tmp_path: Path) -> None:
    """``Lake(warehouse=new).spark()`` before any pyiceberg use: opening never creates a lake, so it is a clear
    error that creates nothing (not a JDBC failure, nor an empty SQLite file Spark made); once the lake is made
    (``open(create=True)``, what ``create_topic`` does), Spark's catalog opens on it (it once failed: SQLite
    cannot create a file in a missing directory)."""
    from compactor.errors import LakeNotFoundError
    from tests.conftest import new_lake_config

    lake = Lake(new_lake_config(tmp_path / "not" / "yet"))
    with pytest.raises(LakeNotFoundError):
        lake.spark()
    assert not (tmp_path / "not").exists()
    lake.open(create=True)
    session = lake.spark()
    session.sql(f"CREATE NAMESPACE `{lake.config.catalog_name}`.fresh")
    assert lake.catalog.list_namespaces() == [("fresh",)]


def test_the_job_session_resolves_spark_functions_to_the_same_class(spark: SparkSession, lake: Lake) -> None:
    """The job session adds ``org.apache.spark.sql.functions`` as a single-type import of py4j's JVM view
    (``spark.internals.import_sql_functions``): the name must still resolve to Spark's class, and PySpark's
    functions must still work."""
    from pyspark.sql import functions as F

    from compactor.spark import internals

    job = lake.job_spark()
    assert internals.jvm(job).functions._fqn == "org.apache.spark.sql.functions"
    assert internals.jvm(job).PythonUtils._fqn == "org.apache.spark.api.python.PythonUtils"
    row = job.range(3).select(F.max(F.col("id") + F.lit(1)).alias("top")).first()
    assert row is not None and row["top"] == 3


def test_java_class_names_a_class_by_its_full_name(spark: SparkSession) -> None:
    """``spark.internals.java_class`` resolves a full name through a single-type import (one class lookup instead
    of one per package): the class itself, callable; a name that is no class stays a py4j package."""
    from py4j.java_gateway import JavaClass, JavaPackage

    from compactor.spark import internals

    sessions = internals.java_class("org.apache.spark.sql.SparkSession", spark)
    assert isinstance(sessions, JavaClass) and sessions._fqn == "org.apache.spark.sql.SparkSession"
    assert sessions.getActiveSession() is not None
    assert isinstance(internals.java_class("compactor.udf.NoSuchClass"), JavaPackage)
    # two classes of one simple name: each resolves to itself, whichever came first
    assert internals.java_class("java.util.Date", spark)._fqn == "java.util.Date"
    assert internals.java_class("java.sql.Date", spark)._fqn == "java.sql.Date"
    assert isinstance(internals.java_class("compactor.nowhere.Date", spark), JavaPackage)


def test_observed_metrics_are_what_observation_get_returns(spark: SparkSession) -> None:
    """``spark.internals.observed_metrics`` reads an observation's metrics without iterating the JVM's map (PySpark's
    ``Observation.get`` does, and pays for a converted Java exception each time): the same names, values and
    Python types, nulls included; and a clear error for an observation no DataFrame used."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from compactor.errors import CompactorError
    from compactor.spark import internals

    observation = Observation("guard")
    with pytest.raises(CompactorError, match=r"DataFrame\.observe"):
        internals.observed_metrics(observation)
    spark.range(5).observe(observation, F.count(F.lit(1)).alias("rows"), F.sum("id").alias("total"),
                           F.max(F.when(F.col("id") > 9, F.col("id"))).alias("none"),
                           F.min(F.col("id").cast("string")).alias("text")).collect()
    read = internals.observed_metrics(observation)
    assert read == observation.get == {"rows": 5, "total": 10, "none": None, "text": "0"}
    assert [type(v) for v in read.values()] == [type(v) for v in observation.get.values()]
