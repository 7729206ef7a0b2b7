"""Phase 1's DataFrame logic (``compaction.phase1.latest``) on plain DataFrames and one topic table."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from compactor.compaction.phase1 import latest
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.topics.records import ProducerRecord

pytestmark = pytest.mark.spark


def test_phase_one_reads_only_partition_key_offset(spark: SparkSession, lake: Lake) -> None:
    lake.create_topic("c.t", partitions=2, config={"cleanup.policy": "compact"})
    produce(lake.topic("c.t"), [ProducerRecord(b"k", b"v")], now_ms=1000)
    ident = lake.topic("c.t").name.spark_identifier(lake.config.catalog_name)
    plan = latest.latest_offsets(spark.read.format("iceberg").load(ident))._jdf.queryExecution() \
        .executedPlan().toString()
    scans = [line for line in plan.splitlines() if "BatchScan" in line]
    assert scans and all("value" not in line and "headers" not in line and "timestamp" not in line
                         for line in scans), plan
