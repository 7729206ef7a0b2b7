"""The two layouts of a compaction's Spark work: a topic with fewer partitions than task slots is
split into offset slices, full rows are never shuffled, phase 1 exchanges only (partition, key, offset), both
layouts give the same compacted view, and the caller's SparkSession is never changed."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.readwriter import DataFrameWriterV2

from compactor.compaction import execution
from compactor.compaction import plan as compaction_plan
from compactor.compaction.job import TwoPhaseCompactor
from compactor.compaction.phase2 import files
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.spark.udf import view_files
from compactor.topics.records import ProducerRecord
from tests.helpers import compacted_rows, final_plan, raw, view

pytestmark = pytest.mark.spark
BATCHES = 6


@pytest.fixture
def tiny_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Slice even a small test topic: every raw file (one per produce batch) becomes a slice of its own."""
    monkeypatch.setattr(execution, "MIN_SPLIT_BYTES", 1)


def fill(lake: Lake, name: str, seed: int, *, partitions: int = 1, batches: int = BATCHES, keys: int = 25,
         now: int = 1_000) -> None:
    rng = random.Random(seed)
    for batch in range(batches):
        records = [ProducerRecord(None if rng.random() < 0.05 else b"k%d" % rng.randrange(keys),
                                  None if rng.random() < 0.1 else b"v%d-%d" % (batch, i), timestamp_ms=now)
                   for i in range(40)]
        produce(lake.topic(name), records, now_ms=now)


def job_ids(spark: SparkSession) -> set[int]:
    return set(spark.sparkContext.statusTracker().getJobIdsForGroup())


def max_tasks(spark: SparkSession, jobs: set[int]) -> int:
    """The most tasks any stage of ``jobs`` ran (from Spark's status API)."""
    tracker = spark.sparkContext.statusTracker()
    most = 0
    for job in jobs:
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info else ():
            stage_info = tracker.getStageInfo(stage)
            if stage_info is not None:
                most = max(most, stage_info.numTasks)
    return most


def compact(lake: Lake, spark: SparkSession, name: str, now: int, **kwargs: Any) -> tuple[Any, int]:
    before = job_ids(spark)
    result = TwoPhaseCompactor(lake, name, now_ms=now, **kwargs).run()
    return result, max_tasks(spark, job_ids(spark) - before)


@pytest.mark.slow  # both layouts stay in the loop on their own (quiet runs, strategies, the sliced plan below)
@pytest.mark.parametrize("retain", [False, True])
def test_one_partition_runs_on_many_tasks_with_the_same_result(spark: SparkSession, lake: Lake, tiny_slices: None,
                                                               retain: bool) -> None:
    config = {"cleanup.policy": "compact", "compaction.null-key": "retain" if retain else "drop"}
    for name in ("l.sliced", "l.partitioned"):
        lake.create_topic(name, config=config)
        fill(lake, name, seed=3)
    sliced, sliced_tasks = compact(lake, spark, "l.sliced", 5_000, layout="sliced")
    partitioned, partitioned_tasks = compact(lake, spark, "l.partitioned", 5_000, layout="partitioned")
    assert sliced.stats.layout == "sliced" and partitioned.stats.layout == "partitioned"
    assert sliced_tasks >= BATCHES and partitioned_tasks == 1, (sliced_tasks, partitioned_tasks)
    assert compacted_rows(lake, "l.sliced") == compacted_rows(lake, "l.partitioned")
    # an incremental run (position deletes) and a rewrite agree too
    for name, layout in (("l.sliced", "sliced"), ("l.partitioned", "partitioned")):
        fill(lake, name, seed=4, batches=3)
        compact(lake, spark, name, 6_000, layout=layout)
        fill(lake, name, seed=5, batches=2)
        result, _ = compact(lake, spark, name, 7_000, layout=layout, force_rewrite=True)
        assert result.stats.mode == "rewrite"
    assert compacted_rows(lake, "l.sliced") == compacted_rows(lake, "l.partitioned")
    assert view(lake, "l.sliced") == view(lake, "l.partitioned")


@pytest.fixture
def captured_plans(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The physical plan of every DataFrame the job writes to a table (through Spark's writer, or as the new data
    files of an incremental run), as planned before it runs."""
    plans: list[str] = []
    for method in ("append", "overwrite"):
        real = getattr(DataFrameWriterV2, method)

        def capture(self: DataFrameWriterV2, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            plans.append(self._df._jdf.queryExecution().executedPlan().toString())
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(DataFrameWriterV2, method, capture)
    def capture_files(rows: DataFrame, *args: Any) -> Any:
        plans.append(rows._jdf.queryExecution().executedPlan().toString())
        return view_files(rows, *args)

    monkeypatch.setattr(files, "view_files", capture_files)
    yield plans


def exchanges(plan: str) -> list[str]:
    return [line.strip() for line in plan.splitlines() if "Exchange" in line]


@pytest.mark.parametrize("layout, shared", [pytest.param("partitioned", False, marks=pytest.mark.slow),
                                            ("sliced", True), ("sliced", False)])
def test_full_rows_are_never_shuffled_nor_a_joins_side_broadcast(
        spark: SparkSession, lake: Lake, tiny_slices: None, captured_plans: list[str], monkeypatch: pytest.MonkeyPatch,
        layout: str, shared: bool) -> None:
    """Neither layout shuffles full rows, and no query broadcasts a side of a join. A sliced first run's phase 1
    finds the winners in shared key tables (``shared``; a job that writes nothing and broadcasts them as bits, within
    ``plan.SHARED_WINNERS_BYTES``), so its append pass joins nothing; or, with them off, keeps them in the scratch
    table, which each slice joins in place."""
    from compactor.compaction import context

    if not shared:
        monkeypatch.setattr(context.RunContext, "shared_key_tables", property(lambda self: False))
    lake.create_topic("l.t", partitions=2, config={"cleanup.policy": "compact"})
    fill(lake, "l.t", seed=7, partitions=2)
    compact(lake, spark, "l.t", 5_000, layout=layout)
    assert all("Broadcast" not in plan for plan in captured_plans)
    if layout == "partitioned":  # a small first run finds its winners in a window: one write, phase 1's work inside it
        (phase2,) = captured_plans
        assert exchanges(phase2) == [] and "Window" in phase2, phase2
    elif shared:
        (phase2,) = captured_plans
        assert exchanges(phase2) == [] and "Join" not in phase2 and "Aggregate" not in phase2, phase2
    else:  # the scratch table's rows, then the view's new rows
        phase1, phase2 = captured_plans
        assert exchanges(phase2) == [], phase2  # phase 2 joins each slice with its winners in place
        # phase 1 exchanges (partition, key, offset) and then the winners grouped by mask word, nothing wider
        assert exchanges(phase1), phase1
        scans = [line for line in phase1.splitlines() if "BatchScan" in line]
        assert scans and all("value" not in line and "headers" not in line for line in scans), phase1


@pytest.mark.parametrize("one_task", [True, False])
def test_an_incremental_run_finding_its_winners_in_a_window_shuffles_nothing(
        spark: SparkSession, lake: Lake, captured_plans: list[str], monkeypatch: pytest.MonkeyPatch,
        one_task: bool) -> None:
    """A small incremental range, partitioned: the append pass's window over ``(partition, key)`` sorts each
    partition's rows, led by the keys' hashes, where they are read (the scan reports its partitioning), and the
    delete pass joins in place; with little work (``ONE_TASK_WORK``) each pass reads its scans coalesced into one
    task, which needs no exchange either. Both give the same view."""
    if not one_task:
        monkeypatch.setattr(execution, "ONE_TASK_WORK", 0)
    name = f"l.w{int(one_task)}"
    lake.create_topic(name, partitions=2, config={"cleanup.policy": "compact"})
    fill(lake, name, seed=8, partitions=2)
    compact(lake, spark, name, 5_000)
    fill(lake, name, seed=9, partitions=2, batches=1)
    captured_plans.clear()
    result, tasks = compact(lake, spark, name, 6_000)
    assert result.stats.mode == "incremental" and len(captured_plans) == 2  # the append pass and the delete pass
    assert tasks == (1 if one_task else 2), tasks
    (windowed,) = [plan for plan in captured_plans if "Window" in plan]
    # the window's sort compares the keys' hashes first (rows.latest_range_rows, projected as a column), then
    # partition and key
    first = re.findall(r"Sort \[(\w+)#\d+L? ASC NULLS FIRST, partition#\d+ ASC NULLS FIRST, key#", windowed)
    assert first and first[0] != "partition" and "xxhash64(key#" in windowed, windowed
    assert all(exchanges(plan) == [] and "Broadcast" not in plan for plan in captured_plans), captured_plans
    assert all(("Coalesce" in plan) == one_task for plan in captured_plans), captured_plans
    expected = {(p, o): (k, v) for p, o, k, v in _model_view(lake, name)}
    assert {(r.partition, r.offset): (r.key, r.value) for r in view(lake, name)} == expected


def test_phase_1_groups_each_partitions_keys_in_one_hash_table(spark: SparkSession, lake: Lake,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A first run whose winners go inline as masks, a task per partition: its grouping by ``(partition, key)``, and
    by mask word, each run in one step (``compactor.udf.OnePassAggregates``: the scan is grouped by partition, so
    Spark leaves out the exchange between its partial and final aggregations, and the rule makes them one). The
    plan read once the job ran, as adaptive execution finalised it."""
    monkeypatch.setattr(compaction_plan.CompactionPlan, "winners_in_key_table", property(lambda self: False))
    phase2 = _inline_first_run_plan(spark, lake, monkeypatch, "l.a", seed=5)
    grouped = [line.strip() for line in phase2.splitlines() if "HashAggregate(" in line]
    assert len(grouped) == 2 and not any("partial_" in line for line in grouped), phase2  # keys, then mask words


def test_a_first_run_over_the_windows_limit_finds_its_winners_in_a_key_table_per_task(
        spark: SparkSession, lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    """A first run whose winners go inline past the window's limit (``plan.winners_in_key_table``): a task per
    partition reads the range's narrow columns into a hash table of its keys, then passes on the full rows the view
    keeps (``compactor.udf.RangeWinners``): no aggregation, no join, no exchange in the append pass's plan."""
    phase2 = _inline_first_run_plan(spark, lake, monkeypatch, "l.k", seed=6)
    assert "ExistingRDD" in phase2 and "Aggregate" not in phase2 and "Join" not in phase2, phase2


def _inline_first_run_plan(spark: SparkSession, lake: Lake, monkeypatch: pytest.MonkeyPatch, name: str, *,
                           seed: int) -> str:
    """The append pass's final physical plan of a first run of two partitions, a task each, with its winners inline
    and not in a window; checked: no exchange, and the view holds each key's latest record."""
    monkeypatch.setattr(execution, "ONE_TASK_WORK", 0)
    monkeypatch.setattr(compaction_plan.CompactionPlan, "winners_in_window", property(lambda self: False))
    final_plans: list[str] = []

    def capture_files(rows: DataFrame, *args: Any) -> Any:
        lines = view_files(rows, *args)
        final_plans.append(final_plan(rows))
        return lines

    monkeypatch.setattr(files, "view_files", capture_files)
    lake.create_topic(name, partitions=2, config={"cleanup.policy": "compact"})
    fill(lake, name, seed=seed, partitions=2)
    result, tasks = compact(lake, spark, name, 5_000)
    assert result.stats.mode == "first" and tasks == 2, (result.stats.mode, tasks)
    (phase2,) = final_plans
    assert exchanges(phase2) == [], phase2
    expected = {(p, o): (k, v) for p, o, k, v in _model_view(lake, name)}
    assert {(r.partition, r.offset): (r.key, r.value) for r in view(lake, name)} == expected
    return phase2


def _model_view(lake: Lake, name: str) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Each key's latest record of the topic's raw log (its tombstones kept: the runs' ``now`` is before their delete
    horizons; keyless records dropped, the default)."""
    latest: dict[tuple[int, bytes], tuple[int, bytes | None]] = {}
    for record in raw(lake, name):
        if record.key is not None:
            latest[(record.partition, record.key)] = (record.offset, record.value)
    return [(p, o, k, v) for (p, k), (o, v) in latest.items()]


@pytest.mark.slow  # the caller's session stays in the loop (test_compaction_quiet_runs.py)
def test_the_callers_session_is_never_changed(spark: SparkSession, lake: Lake, tiny_slices: None) -> None:
    keys = [*execution.JOB_SETTINGS, execution.GROUPED_SCANS, execution.PARTIAL_CLUSTERING,
            "spark.sql.shuffle.partitions"]
    before = {key: spark.conf.get(key, None) for key in keys}
    description = spark.sparkContext.getLocalProperty("spark.job.description")
    lake.create_topic("l.t", config={"cleanup.policy": "compact"})
    fill(lake, "l.t", seed=9)
    for layout in ("sliced", "partitioned"):
        TwoPhaseCompactor(lake, "l.t", now_ms=5_000, layout=layout, force_rewrite=True).run()
    assert {key: spark.conf.get(key, None) for key in keys} == before
    assert spark.sparkContext.getLocalProperty("spark.job.description") == description
    assert lake.job_spark() is not spark


@pytest.mark.slow  # randomised rounds
@pytest.mark.parametrize("seed, keys, null_key", [(31, 6, "drop"), (32, 200, "retain")])
def test_random_rounds_on_one_partition_with_many_tasks(spark: SparkSession, lake: Lake, tiny_slices: None,
                                                        seed: int, keys: int, null_key: str) -> None:
    """The randomised model rounds (tests/compaction/test_compaction_random.py), forced onto the sliced layout with a
    slice per file: phase 1 exchanges, phase 2 joins slices with replicated winners, and every run matches
    the reference model (docs/guarantees.md#compaction and #the-cursor-and-failures)."""
    from tests.compaction.test_compaction_random import HOUR, check_against_model, random_batch
    from tests.helpers import produce_both
    from tests.model import ModelSettings, TopicModel

    rng = random.Random(seed)
    retention = 2 * HOUR
    lake.create_topic("r.t", config={"cleanup.policy": "compact", "delete.retention.ms": str(retention),
                                     "compaction.null-key": null_key})
    settings = ModelSettings(null_key=null_key, delete_retention_ms=retention)
    model = TopicModel(1)
    now = 10 * 24 * HOUR
    for round_number in range(5):
        for _ in range(rng.randrange(1, 4)):
            produce_both(lake, "r.t", model, random_batch(rng, keys, rng.randrange(5, 40), now), now)
        now += rng.choice([1, HOUR, retention + 1])
        expected = model.compact(now, settings)
        result = TwoPhaseCompactor(lake, "r.t", now_ms=now, layout="sliced",
                                   force_rewrite=round_number == 3).run()
        assert result.committed == expected, f"seed {seed}, round {round_number}: {result.reason}"
        check_against_model(lake, "r.t", model, seed, f"round {round_number}")


@pytest.mark.slow  # a detail of slicing
def test_one_large_file_is_sliced_by_its_row_groups(spark: SparkSession, lake: Lake, tiny_slices: None) -> None:
    """A single batch's file holds row groups of at most ``write.parquet.row-group-limit`` rows, and the sliced
    layout reads them in parallel tasks: even a one-file, one-partition topic uses the cluster."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from compactor.producing.producer import produce_arrow

    topic = lake.create_topic("l.big", config={"cleanup.policy": "compact"})
    with topic.table.transaction() as tx:  # small row groups, so a test-sized batch has several
        tx.set_properties({"write.parquet.row-group-limit": "1000"})
    count = 5_000
    produce_arrow(topic.refresh(), pa.table({"key": [b"k%d" % (i % 700) for i in range(count)],
                                             "value": [b"v%d" % i for i in range(count)]}), now_ms=1_000)
    (only,) = lake.topic("l.big").raw_files()
    assert pq.ParquetFile(only.path.removeprefix("file://")).metadata.num_row_groups == 5
    result, tasks = compact(lake, spark, "l.big", 5_000, layout="sliced")
    assert tasks >= 5, tasks
    assert result.stats.records_kept == 700
    latest = {b"k%d" % (i % 700): b"v%d" % i for i in range(count)}
    assert {r.key: r.value for r in view(lake, "l.big")} == latest


def test_task_slots_are_the_applications_parallelism(spark: SparkSession) -> None:
    """Read through the session's configuration, which falls back to the application's (the tests' session sets
    ``spark.default.parallelism`` to 2 when it starts)."""
    assert spark.sparkContext.getConf().get("spark.default.parallelism") == "2"
    assert execution.task_slots(spark) == 2
