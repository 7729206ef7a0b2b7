"""The product's physical-plan rule (``compactor.udf.OnePassAggregates``, registered by the session factory as a
session extension): a final hash aggregation directly over its partial one, with no exchange between, runs as one
aggregation in complete mode; a pair with an exchange between stays as Spark plans it. The guard of the only module
that builds Spark's internal aggregation nodes: a Spark upgrade that changes them fails here."""

from __future__ import annotations

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from compactor.spark.session import ONE_PASS_AGGREGATES, PRODUCT_EXTENSIONS
from tests.helpers import final_plan

pytestmark = pytest.mark.spark


def aggregates(frame: DataFrame) -> list[str]:
    """The hash aggregations of ``frame``'s final physical plan (run first, so adaptive execution settled it)."""
    return [line.strip() for line in final_plan(frame).splitlines() if "HashAggregate(" in line]


def test_the_session_factory_registers_the_extension(spark: SparkSession) -> None:
    assert PRODUCT_EXTENSIONS in (spark.conf.get("spark.sql.extensions") or "").split(",")


def test_an_aggregation_over_input_clustered_on_its_keys_builds_one_hash_table(spark: SparkSession) -> None:
    rows = spark.range(2_000).select((F.col("id") % 97).alias("k"), F.col("id").alias("v")).repartition(4, "k")
    for frame, expected in [
        (rows.groupBy("k").agg(F.max("v").alias("top"), F.count(F.lit(1)).alias("n")),
         {k: (max(v for v in range(2_000) if v % 97 == k), len(range(k, 2_000, 97))) for k in range(97)}),
        (rows.select("k").distinct(), dict.fromkeys(range(97), ())),  # no aggregate function: a DISTINCT
    ]:
        got = {r[0]: tuple(r[1:]) for r in frame.collect()}
        assert got == expected
        (one,) = aggregates(frame)  # in complete mode: no partial_ functions
        assert "partial_" not in one, one


def test_the_rule_can_be_turned_off_for_a_session(spark: SparkSession) -> None:
    session = spark.newSession()  # a setting of its own: the caller's session is not changed
    session.conf.set(ONE_PASS_AGGREGATES, "false")
    rows = session.range(2_000).select((F.col("id") % 97).alias("k")).repartition(4, "k")
    frame = rows.groupBy("k").agg(F.count(F.lit(1)).alias("n"))
    assert len(frame.collect()) == 97
    found = aggregates(frame)
    assert len(found) == 2 and any("partial_count" in line for line in found), found


def test_an_aggregation_that_needs_an_exchange_keeps_its_partial_step(spark: SparkSession) -> None:
    rows = spark.range(2_000).select((F.col("id") % 97).alias("k"), (F.col("id") % 5).alias("j")).repartition(4, "k")
    frame = rows.groupBy("j").agg(F.count(F.lit(1)).alias("n"))
    assert {r.j: r.n for r in frame.collect()} == dict.fromkeys(range(5), 400)
    found = aggregates(frame)
    assert len(found) == 2 and any("partial_count" in line for line in found), found


QUERIES = [
    "SELECT k, count(*), count(v), sum(v), avg(v), min(v), max(v) FROM t GROUP BY k",
    "SELECT k, sum(v) FILTER (WHERE j > 1), max_by(j, v), bool_or(v IS NULL) FROM t GROUP BY k",
    "SELECT k, count(DISTINCT j), sum(v) FROM t GROUP BY k",
    "SELECT DISTINCT k, j FROM t",
    "SELECT k, sort_array(collect_list(v)) FROM t GROUP BY k",
    "SELECT j, count(*), max(v) FROM t GROUP BY j",
    "SELECT k, j, count(*) FROM t WHERE v IS NOT NULL GROUP BY k, j HAVING count(*) > 2",
]


def test_every_kind_of_aggregation_gives_what_spark_gives_without_the_rule(spark: SparkSession) -> None:
    """The rule applies to every query of the sessions the product starts, its users' too: aggregations of many
    kinds (filtered, distinct, object-based, needing an exchange or not, nulls) give the same rows with it as
    without it (a session with it turned off)."""
    off = spark.newSession()
    off.conf.set(ONE_PASS_AGGREGATES, "false")
    for session in (spark, off):
        (session.range(3_000).selectExpr("id % 53 AS k", "CASE WHEN id % 7 = 0 THEN NULL ELSE id END AS v",
                                         "id % 5 AS j")
         .repartition(4, "k").createOrReplaceTempView("t"))
    collapsed = []
    try:
        for query in QUERIES:
            with_rule, without = spark.sql(query), off.sql(query)
            assert sorted(map(tuple, with_rule.collect())) == sorted(map(tuple, without.collect())), query
            fewer = len(aggregates(with_rule)) - len(aggregates(without))
            assert fewer <= 0, query
            collapsed += [query] if fewer < 0 else []
    finally:
        spark.catalog.dropTempView("t")  # the shared session's view; the other session's goes with it
    assert QUERIES[0] in collapsed and QUERIES[1] in collapsed and QUERIES[3] in collapsed, collapsed
    assert QUERIES[5] not in collapsed, collapsed  # grouped by another column: the exchange and the pair stay
