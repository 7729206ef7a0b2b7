"""A compaction run, followed call by call from ``TwoPhaseCompactor``, passes through its steps once: plan, phase 1,
phase 2, publish. The run's data (``context``), its resources (lease, staging branch, scratch table),
the Spark helpers (``execution``), the raw-log figures (``horizons``, ``triggers``) and the orchestrator (``job``)
serve every step and are no step of their own."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from compactor.compaction.job import TwoPhaseCompactor
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.topics.records import ProducerRecord
from tests.steps import modules_entered, step_path

pytestmark = pytest.mark.spark

STEPS = {
    "compactor.compaction.start": "plan",
    "compactor.compaction.plan": "plan",
    "compactor.compaction.phase1": "phase 1",
    "compactor.compaction.phase2": "phase 2",
    "compactor.compaction.publish": "publish",
}


@pytest.mark.parametrize("config", [{}, {"compaction.strategy": "header", "compaction.strategy.header": "v"}],
                         ids=["offset", "header"])
def test_a_run_passes_through_its_steps_once(spark: SparkSession, lake: Lake, config: dict[str, str]) -> None:
    lake.create_topic("s.t", partitions=2, config={"cleanup.policy": "compact", **config})
    produce(lake.topic("s.t"), [ProducerRecord(b"k%d" % (i % 5), b"v", (("v", b"%d" % i),)) for i in range(20)],
            now_ms=1000)
    TwoPhaseCompactor(lake, "s.t", now_ms=2000).run()
    produce(lake.topic("s.t"), [ProducerRecord(b"k%d" % (i % 7), None if i == 3 else b"w", (("v", b"%d" % (50 + i)),))
                                for i in range(10)], now_ms=3000)
    run = TwoPhaseCompactor(lake, "s.t", now_ms=4000)  # phase 1, then deletes and appends (header: contested)
    result, modules = modules_entered(run.run, "compactor.compaction")
    assert result.committed and result.stats.rows_deleted_from_view > 0
    assert step_path(modules, STEPS) == ["plan", "phase 1", "phase 2", "publish"], modules

    trim = TwoPhaseCompactor(lake, "s.t", now_ms=5000, trim_before_ms=3500)  # no new range: no phase 1
    result, modules = modules_entered(trim.run, "compactor.compaction")
    assert result.committed and result.stats.records_read == 0 and result.stats.rows_deleted_from_view > 0
    assert step_path(modules, STEPS) == ["plan", "phase 2", "publish"], modules
