"""The cleaner through the real Spark job: due topics compacted filthiest first, the others left alone, and
retention on every topic. (The cleaner's scheduling, failures and back-off without a JVM: test_cleaner.py.)"""

from __future__ import annotations

import json

import pytest
from pyspark.sql import SparkSession

from compactor.cleaner import Cleaner
from compactor.compaction.job import compact_topic
from compactor.lake import Lake
from compactor.producing.producer import produce
from tests.helpers import current_cursor, raw
from tests.test_cleaner import HOUR, T0, records

pytestmark = pytest.mark.spark


def test_due_topics_are_compacted_filthiest_first_and_retention_runs_everywhere(
        spark: SparkSession, lake: Lake, caplog: pytest.LogCaptureFixture) -> None:
    for name in ("x.low", "x.mid", "x.new"):
        lake.create_topic(name, config={"cleanup.policy": "compact"})
    lake.create_topic("x.del", config={"cleanup.policy": "delete", "retention.ms": str(HOUR)})
    for name in ("x.low", "x.mid"):
        produce(lake.topic(name), records(10, "k"), now_ms=T0)
        compact_topic(lake, name, now_ms=T0)
    produce(lake.topic("x.low"), records(2, "n"), now_ms=T0)    # ratio 24/144: not due
    produce(lake.topic("x.mid"), records(20, "n"), now_ms=T0)   # ratio 240/360: due
    produce(lake.topic("x.new"), records(3, "k"), now_ms=T0)    # never compacted: ratio 1.0
    produce(lake.topic("x.del"), records(3, "k"), now_ms=T0)    # old: retention removes it
    low_cursor = current_cursor(lake, "x.low")
    caplog.clear()  # the metric lines of the pass alone
    with caplog.at_level("INFO", logger="compactor.metrics"):
        result = Cleaner(lake).run_once(now_ms=T0 + 2 * HOUR)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "compactor.metrics"]
    compactions = [(line["topic"], line["committed"]) for line in lines if line["event"] == "compaction"]
    assert compactions == [("x.new", True), ("x.mid", True)]  # one line per run: the run's own
    mid = next(line for line in lines if line["event"] == "compaction" and line["topic"] == "x.mid")
    # the run's dirty ratio of what it cleaned is the one the cleaner assessed the topic at
    assert mid["records_read"] == 20 and mid["dirty_ratio"] == pytest.approx(result.topics["x.mid"].dirty_ratio)
    assert sorted(line["topic"] for line in lines if line["event"] == "retention") == [
        "x.del", "x.low", "x.mid", "x.new"]
    assert result.compaction_order == ["x.new", "x.mid"]
    assert result.failed == []
    assert current_cursor(lake, "x.low") == low_cursor
    assert result.topics["x.mid"].compaction is not None and result.topics["x.mid"].compaction.committed
    assert all(result.topics[n].retention is not None for n in ("x.low", "x.mid", "x.new", "x.del"))
    assert raw(lake, "x.del") == []
    removed = result.topics["x.del"].retention
    assert removed is not None and removed.removed_records == 3
