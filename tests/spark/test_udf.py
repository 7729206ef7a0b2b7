"""The compiled Spark functions (``compactor.spark.udf``): Kafka's partitioner in Spark and in Spark SQL, and the
error when a session lacks them."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from compactor.errors import MissingJarsError
from compactor.spark import udf
from compactor.spark.udf import murmur2_partition
from compactor.topics.partitioner import partition_for_key, partitions_for_keys

pytestmark = pytest.mark.spark


def test_spark_murmur2_agrees_with_kafka(spark: SparkSession) -> None:
    rng = random.Random(11)
    keys = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 100))) for _ in range(800)]  # not UTF-8
    keys += ["".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(160, 0x10FFFF)]))
                     for _ in range(rng.randrange(0, 30))).encode("utf-8", "surrogatepass") for _ in range(800)]
    keys += [b"21", b"foobar", b"", b"abc", b"\xff" * 67, b"\xc0\x80", b"\xed\xa0\x80", "é€𝄞".encode(),
             "\ufffd".encode(), "a\ufffdb".encode(), b"a\xef\xbf\xbd\xff", b"\xff\xfe"]  # real U+FFFD or not
    frame = spark.createDataFrame([(k,) for k in keys] + [(None,)], "key binary").repartition(2)
    for partitions in (1, 4, 7, 1000):
        got = {(bytes(r["key"]) if r["key"] is not None else None): r["p"]
               for r in frame.withColumn("p", murmur2_partition(F.col("key"), partitions)).collect()}
        expected: dict[bytes | None, int | None] = {k: partition_for_key(k, partitions) for k in keys}
        assert got == {**expected, None: None}
        vectorised = partitions_for_keys(pa.array(keys, pa.binary()), partitions).tolist()  # the numpy path
        assert vectorised == [expected[k] for k in keys]


def test_kafka_partition_in_spark_sql(spark: SparkSession) -> None:
    from compactor.producing.spark_columns import register_functions

    register_functions(spark)
    keys = [b"21", b"", b"\xff\xfe\x00", b"user-17"]
    spark.createDataFrame([(k,) for k in keys], "key binary").createOrReplaceTempView("issue22_keys")
    got = spark.sql("SELECT key, kafka_partition(key, 7) AS p FROM issue22_keys").collect()
    assert {bytes(r["key"]): r["p"] for r in got} == {k: partition_for_key(k, 7) for k in keys}


def test_a_session_without_the_compiled_functions_is_an_error(spark: SparkSession,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(udf, "PACKAGE", "compactor.missing")  # a class the session cannot load
    with pytest.raises(MissingJarsError, match=r"compactor-udf\.jar is not on its classpath \(or was built from "
                       r"older sources\)\. Run infra/setup\.sh"):
        murmur2_partition(F.col("key"), 4)
