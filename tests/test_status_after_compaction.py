"""Triggers and status once a cursor exists (made by the Spark job): clean and dirty bytes against the
compacted view, the dirty ratio and max.compaction.lag.ms. (Status without a cursor: test_status.py.)"""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from compactor.compaction.job import compact_topic
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.status import topic_status
from tests.test_status import HOUR, T0, records

pytestmark = pytest.mark.spark


def test_dirty_ratio_and_max_compaction_lag_after_a_cursor(spark: SparkSession, lake: Lake) -> None:
    lake.create_topic("s.r", config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.5"})
    produce(lake.topic("s.r"), records(10, T0), now_ms=T0)
    compact_topic(lake, "s.r", now_ms=T0)
    status = topic_status(lake, "s.r", now_ms=T0 + 1)
    assert status.clean_bytes == 10 * 12 and status.dirty_bytes == 0 and status.due is False
    assert status.cursor is not None and status.cursor["horizons"] == {"0": 10} and status.horizons == {"0": 10}
    assert status.metrics.last_compaction["records_read"] == 10
    produce(lake.topic("s.r"), records(2, T0 + 1), now_ms=T0 + 1)  # 24 dirty vs 120 clean: ratio 1/6
    status = topic_status(lake, "s.r", now_ms=T0 + 2)
    assert status.dirty_bytes == 24 and abs(status.dirty_ratio - 24 / 144) < 1e-9
    assert status.due is False
    # the same dirty bytes are due once the oldest is older than max.compaction.lag.ms
    lake.topic("s.r").set_config({"max.compaction.lag.ms": str(HOUR)})
    late = topic_status(lake, "s.r", now_ms=T0 + 1 + HOUR + 5)
    assert late.due is True and "max.compaction.lag.ms" in late.due_reason
    assert late.max_compaction_delay_ms == 5
    produce(lake.topic("s.r"), records(10, T0 + 2, "other"), now_ms=T0 + 2)  # now dirtier than clean
    assert topic_status(lake, "s.r", now_ms=T0 + 3).due is True
