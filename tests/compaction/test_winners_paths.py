"""Phase 1's ways of handing its winners to phase 2 (issue 34): a small range in the partitioned layout keeps no
scratch table (``RunContext.winners_inline``: phase 2's queries compute the winners themselves), a larger range or the
sliced layout keeps them in the run's scratch table. Inline, the append pass of a first run as of an incremental run
finds them in the rows it reads (``rows.latest_range_rows``: ``path`` ``inline``) unless the range is over
``WINDOW_WINNERS_LIMIT``, when a hash table of the range's keys per task finds them (``keytable``:
``compactor.udf.RangeWinners``), or, past ``HASH_KEYS_LIMIT`` records in a partition, it joins the masks
(``masks``). The tests' runs are small enough to read each pass in one task (``execution.ONE_TASK_WORK``);
``partitions`` is ``inline`` with a task per topic partition. Sliced, a first run's phase 1 finds the winners in key
tables that share each partition's keys among tasks, and broadcasts them to the append pass's slices (``shared``:
``compactor.udf.SharedWinners``); later sliced runs keep them in the scratch table. Incremental = full
(docs/guarantees.md#compaction) and crash safety at every failure point (#the-cursor-and-failures) hold every way: the
same tests run on each way, and check which way their runs took."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from pyspark.sql import SparkSession

from compactor.compaction import execution, job, plan, start
from compactor.compaction.context import SHARED_KEY_TABLES, WINDOW
from compactor.compaction.job import compact_topic
from compactor.compaction.phase1 import winners
from compactor.compaction.phase2 import rows
from compactor.lake import Lake
from tests.backends import Backend
from tests.compaction import test_compaction_random as randomised
from tests.compaction import test_compaction_safety as safety
from tests.helpers import cli_chain, compacted_rows, current_cursor

pytestmark = pytest.mark.spark


@pytest.fixture
def inline_runs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Way]]:
    """Force the way named by the test's ``path`` parameter (``scratch``: no range is small enough to go inline)
    and record, for each run's phase 1, whether it went inline, whether it was a first run and whether its append pass
    was to find the winners in a window."""
    path = request.node.callspec.params["path"]
    if path == "scratch":
        monkeypatch.setattr(plan.CompactionPlan, "small_range", property(lambda self: False))
    if path in ("masks", "keytable"):
        monkeypatch.setattr(plan.CompactionPlan, "winners_in_window", property(lambda self: False))
    if path == "masks":
        monkeypatch.setattr(plan.CompactionPlan, "winners_in_key_table", property(lambda self: False))
    if path == "partitions":
        monkeypatch.setattr(execution, "ONE_TASK_WORK", 0)
    if path == "shared":
        monkeypatch.setattr(start, "choose_layout", functools.partial(execution.choose_layout, force="sliced"))
    seen: list[Way] = []
    real = winners.find_winners
    real_window = rows.latest_range_rows
    real_key_table = rows.key_table_range_rows

    def spy(run: Any, catalog: Any) -> winners.Winners:
        shared = run.append_winners == SHARED_KEY_TABLES
        seen.append(Way(run.winners_inline, run.plan.cursor is None, run.append_winners == WINDOW, shared))
        assert run.layout.one_task == (path not in ("partitions", "shared") and run.plan.rewrite_reason is None), \
            run.layout
        found = real(run, catalog)
        assert (found.inline is not None) == (run.winners_inline or shared)
        return found

    def window_spy(*args: Any, **kwargs: Any) -> Any:
        WINDOWS.append(True)
        return real_window(*args, **kwargs)

    def key_table_spy(*args: Any, **kwargs: Any) -> Any:
        KEY_TABLES.append(True)
        return real_key_table(*args, **kwargs)

    WINDOWS.clear()
    KEY_TABLES.clear()
    monkeypatch.setattr(job, "find_winners", spy)
    monkeypatch.setattr(rows, "latest_range_rows", window_spy)
    monkeypatch.setattr(rows, "key_table_range_rows", key_table_spy)
    yield seen


WINDOWS: list[bool] = []  # an append pass found its winners in a window over the range's rows
KEY_TABLES: list[bool] = []  # an append pass found them in a hash table of the range's keys per task


class Way(NamedTuple):
    """How one run's phase 1 handed over its winners."""

    inline: bool
    first: bool  # the topic's first run (no cursor)
    window: bool  # its append pass was to find them in a window (``context.WINDOW``)
    shared: bool  # phase 1 found them in shared key tables (``context.SHARED_KEY_TABLES``)


def took(seen: list[Way], path: str) -> bool:
    """Whether the runs went ``path``'s way; a window's way with both a first and an incremental run in a window."""
    window = path in ("inline", "partitions")
    return (bool(seen) and all(way.inline == (path not in ("scratch", "shared")) for way in seen)
            and bool(WINDOWS) == window and all(way.window == window for way in seen)
            and bool(KEY_TABLES) == (path in ("keytable", "shared"))
            and all(way.shared == (path == "shared" and way.first) for way in seen)
            and (not window or {way.first for way in seen} == {True, False})
            and (path != "shared" or {way.first for way in seen} == {True, False}))


@pytest.mark.parametrize("path", [pytest.param("inline", marks=pytest.mark.slow), "scratch",
                                  pytest.param("masks", marks=pytest.mark.slow), "keytable", "partitions", "shared"])
def test_incremental_equals_full_either_way(spark: SparkSession, lake: Lake, inline_runs: list[Way],
                                            path: str) -> None:
    """docs/guarantees.md#compaction's central property (``test_incremental_equals_full``) with the winners handed
    inline and through the scratch table (the default for the test's small ranges is inline: the slow mark keeps that
    twin out of the pre-commit loop, where the original test runs it)."""
    local = Backend("local", lake, {}, lake.config.warehouse, str(lake.config.catalog))
    randomised.test_incremental_equals_full(spark, local, "offset", 61)
    assert took(inline_runs, path), inline_runs


POINTS = ("after-plan", "after-phase-1", "after-delete", "after-write", "before-commit")
# in the pre-commit loop; the rest when slow
IN_THE_LOOP = {("scratch", "after-phase-1"), ("inline", "after-delete"), ("partitions", "after-write"),
               ("keytable", "after-write")}


# a task per partition differs from one task per pass only in how Spark reads, and the key table from the masks only
# in how the append pass finds its winners (no failure point lies between): two of their points suffice
PER_PARTITION_POINTS = ("after-delete", "after-write")


@pytest.mark.parametrize("path, point", [
    pytest.param(path, point, marks=() if (path, point) in IN_THE_LOOP else pytest.mark.slow)
    for path in ("inline", "scratch", "partitions", "keytable") for point in POINTS
    if path not in ("partitions", "keytable") or point in PER_PARTITION_POINTS])
def test_failure_points_either_way(spark: SparkSession, lake: Lake, inline_runs: list[Way], path: str,
                                   point: str) -> None:
    """docs/guarantees.md#the-cursor-and-failures: a failure at every point before the publish leaves the previous
    cursor and view and no staging branch; the run then succeeds and matches the reference model
    (``test_failure_before_publish_...``)."""
    safety.test_failure_before_publish_leaves_the_previous_cursor(spark, lake, point)
    assert took(inline_runs, path), inline_runs  # the seeding run and the run after the failure, at least


@pytest.mark.slow  # a JVM of its own
def test_killing_an_inline_run_leaves_the_previous_cursor_and_no_scratch_table(
        spark: SparkSession, lake: Lake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``test_killing_the_job_process_leaves_the_previous_cursor`` for a run that keeps no scratch table: killed at
    ``after-write``, it leaves the previous cursor, its staging branch (never read; retention removes it once the
    run's lease lapsed) and no table."""
    from compactor.compaction import lease
    from compactor.retention import run_retention

    model = safety.seeded(lake)
    before = current_cursor(lake, "s.t")
    marker = tmp_path / "reached"
    safety.kill_compaction_at(lake, "after-write", marker, "compact", "s.t", "--now-ms", "4000")
    assert current_cursor(lake, "s.t") == before
    assert len(safety.stage_branches(lake)) == 1 and safety.run_tables(lake) == []
    assert compact_topic(lake, "s.t", now_ms=4000).committed
    model.compact(4000, safety.SETTINGS)
    assert compacted_rows(lake, "s.t") == model.compacted_rows()
    later = 4000 + lake.topic("s.t").settings.orphan_min_age_ms + 1
    real_clock = lease.wall_clock_ms
    monkeypatch.setattr(lease, "wall_clock_ms", lambda: real_clock() + lease.LEASE_TTL_MS + 1)
    run_retention(lake, "s.t", now_ms=later)
    assert safety.stage_branches(lake) == [] and safety.run_tables(lake) == []


@pytest.mark.slow  # a JVM of its own
def test_first_runs_past_the_windows_limit_take_the_key_tables_from_the_command_line(lake: Lake) -> None:
    """As users run it, in a fresh process on 2 cores (one JVM for both commands): a first run of one partition
    holding ``FIRST_RUN_WINDOW_LIMIT + 1`` records (keys of 1 to 12 bytes, null keys, tombstones) finds its winners
    in the key table with ``--layout partitioned`` (one task), and in shared key tables with ``--layout sliced``;
    the progress says so, and each view holds each key's latest record, tombstones stamped, keyless records
    dropped."""
    import json
    import os

    import pyarrow as pa

    from compactor.producing.producer import produce_arrow
    from tests.conftest import jvm_env

    count = plan.FIRST_RUN_WINDOW_LIMIT + 1
    keys: list[bytes | None] = [None if i % 97 == 0 else b"k%d" % (i * 7919 % 30_011) for i in range(count)]
    values: list[bytes | None] = [None if i % 13 == 0 else b"v%d" % i for i in range(count)]
    ways = {"partitioned": "key table", "sliced": "shared key tables"}
    for layout in ways:
        topic = lake.create_topic(f"w.{layout}", partitions=1, config={"cleanup.policy": "compact"})
        produce_arrow(topic, pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTOR_", "PYSPARK", "SPARK_"))}
    env.update(COMPACTOR_SPARK_CORES="2", COMPACTOR_DRIVER_MEMORY="768m", **jvm_env())
    results, stderr = cli_chain(lake, *(["compact", f"w.{layout}", "--now-ms", "5000", "--layout", layout]
                                        for layout in ways), env=env)
    latest = {key: offset for offset, key in enumerate(keys) if key is not None}
    expected = sorted((offset, key, values[offset]) for key, offset in latest.items())
    for (layout, way), result in zip(ways.items(), results, strict=True):
        assert json.loads(str(result["stdout"]))["stats"]["records_read"] == count
        progress = [line for line in stderr.splitlines() if f"compact w.{layout}: " in line]
        appends = [line for line in progress if "phase 2 appends:" in line]
        assert len(appends) == 1 and f'"winners":"{way}"' in appends[0], stderr[-3000:]
        if layout == "sliced":  # phase 1: one task per slot, each holding half of the keys
            assert any("phase 1 done" in line and '"buckets":2' in line for line in progress), stderr[-3000:]
        got = [(record.offset, record.key, record.value, horizon)
               for record, horizon in compacted_rows(lake, f"w.{layout}")]
        assert [row[:3] for row in got] == expected
        assert all((horizon is not None) == (value is None) for _, _, value, horizon in got)


@pytest.mark.parametrize("retain", [pytest.param(False, marks=pytest.mark.slow), True])
def test_the_key_table_keeps_what_the_masks_keep_in_first_incremental_and_rewrite_runs(
        spark: SparkSession, lake: Lake, monkeypatch: pytest.MonkeyPatch, retain: bool) -> None:
    """Two topics with the same records, two partitions, each compacted by a first run, an incremental run and a
    rewrite: one whose append passes find their winners in the key table, one that joins phase 1's masks. Their
    views hold the same rows, keyless ones included under ``compaction.null-key=retain``."""
    from tests.compaction.test_compaction_layouts import compact, fill
    from tests.helpers import view

    monkeypatch.setattr(plan.CompactionPlan, "winners_in_window", property(lambda self: False))
    config = {"cleanup.policy": "compact", "compaction.null-key": "retain" if retain else "drop"}
    real_key_table, key_tables = rows.key_table_range_rows, []

    def spy(*args: Any, **kwargs: Any) -> Any:
        key_tables.append(True)
        return real_key_table(*args, **kwargs)

    monkeypatch.setattr(rows, "key_table_range_rows", spy)
    modes: dict[str, list[str]] = {}
    for name, key_table in (("k.table", True), ("k.masks", False)):
        def in_key_table(self: plan.CompactionPlan, on: bool = key_table) -> bool:
            return on and self.small_range and self.hash_keys

        monkeypatch.setattr(plan.CompactionPlan, "winners_in_key_table", property(in_key_table))
        lake.create_topic(name, partitions=2, config=config)
        runs = []
        for seed, now, rewrite in ((3, 5_000, False), (4, 6_000, False), (5, 7_000, True)):
            fill(lake, name, seed=seed, partitions=2, batches=2)
            result, _ = compact(lake, spark, name, now, force_rewrite=rewrite)
            runs.append(result.stats.mode)
        modes[name] = runs
        assert len(key_tables) == 3, key_tables  # each run of the first topic, none of the second
    assert modes["k.table"] == modes["k.masks"] == ["first", "incremental", "rewrite"], modes
    assert compacted_rows(lake, "k.table") == compacted_rows(lake, "k.masks")
    assert view(lake, "k.table") == view(lake, "k.masks")


@pytest.mark.parametrize("sliced", [False, True])
def test_a_range_whose_key_table_would_not_fit_a_tasks_memory_joins_the_masks(
        spark: SparkSession, lake: Lake, monkeypatch: pytest.MonkeyPatch, sliced: bool) -> None:
    """Key tables live outside Spark's memory accounting, so a run takes them only while its tasks' records fit the
    execution memory a task may count on (``RunContext.key_table_fits``, ``spark.udf.task_memory_bytes``; for a
    sliced first run's shared key tables, a task's share of its partition's keys): with the test session's memory
    the run takes them; where a task may count on 1 byte, a run of the same records joins Spark's masks instead
    (sliced: through the scratch table), with the same view."""
    from compactor.spark import internals
    from compactor.spark.udf import task_memory_bytes
    from tests.compaction.test_compaction_layouts import compact, fill

    memory = task_memory_bytes(spark)
    heap = internals.jvm(spark).java.lang.Runtime.getRuntime().maxMemory()
    assert 0 < memory < heap, (memory, heap)
    monkeypatch.setattr(plan.CompactionPlan, "winners_in_window", property(lambda self: False))
    if sliced:
        monkeypatch.setattr(start, "choose_layout", functools.partial(execution.choose_layout, force="sliced"))
    ways = recorded_ways(monkeypatch)
    partitions = 1 if sliced else 2
    for name in ("m.table", "m.masks"):
        if name == "m.masks":
            monkeypatch.setattr(start, "task_memory_bytes", lambda _spark: 1)
        lake.create_topic(name, partitions=partitions, config={"cleanup.policy": "compact"})
        fill(lake, name, seed=9, partitions=partitions)
        compact(lake, spark, name, 5_000)
    assert ways == ["shared key tables" if sliced else "key table", "masks"], ways
    assert compacted_rows(lake, "m.masks") == compacted_rows(lake, "m.table")


def recorded_ways(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """How the append pass of each run opened from now on finds its winners (``RunContext.append_winners``)."""
    ways: list[str] = []
    real_open = start.open_run

    def spy(*args: Any, **kwargs: Any) -> Any:
        run = real_open(*args, **kwargs)
        ways.append(run.append_winners)
        return run

    monkeypatch.setattr(job, "open_run", spy)
    return ways


def one_partition_topic(lake: Lake, name: str) -> Any:
    """A topic of one partition with three batches of keyed and keyless records and tombstones, and its model."""
    from compactor.topics.records import ProducerRecord
    from tests.helpers import produce_both
    from tests.model import TopicModel

    lake.create_topic(name, partitions=1, config={"cleanup.policy": "compact"})
    model = TopicModel(1)
    for batch in range(3):
        produce_both(lake, name, model, [ProducerRecord(None if i == 5 else b"k%d" % (i % 7),
                                                        None if i == 3 else b"v%d-%d" % (batch, i))
                                         for i in range(20)], 1000)
    return model


def bit_files(lake: Lake, name: str) -> list[Path]:
    """The files of shared key tables' bits left below the compacted table of ``name``."""
    from urllib.parse import urlparse

    location = lake.catalog.load_table(f"{name}__compacted").metadata.location
    return sorted(Path(urlparse(location).path).rglob("*.bits"))


@pytest.fixture
def sliced_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every run sliced, each raw file (a produce batch) a slice of its own; the ways their append passes took."""
    monkeypatch.setattr(start, "choose_layout", functools.partial(execution.choose_layout, force="sliced"))
    monkeypatch.setattr(execution, "MIN_SPLIT_BYTES", 1)
    return recorded_ways(monkeypatch)


def test_a_sliced_first_run_shares_its_key_tables_and_keeps_what_the_scratch_table_keeps(
        spark: SparkSession, lake: Lake, monkeypatch: pytest.MonkeyPatch, sliced_runs: list[str]) -> None:
    """Two topics with the same records in one partition, keyless ones retained, sliced: the first run of one finds
    its winners in key tables shared among the task slots (its phase 1 one job, no scratch table), the other's in the
    scratch table; an incremental run and a rewrite follow on each (the scratch table's way). Their views hold the
    same rows. (More partitions and the other null-key setting: ``test_incremental_equals_full_either_way``'s
    ``shared`` way.)"""
    from compactor.compaction import context
    from compactor.progress import Progress
    from tests.compaction.test_compaction_layouts import compact, fill
    from tests.helpers import view

    events: list[dict[str, Any]] = []
    real_phase = Progress.phase

    def record(self: Progress, name: str, message: str = "", **fields: Any) -> None:
        events.append({"phase": name, **fields})
        real_phase(self, name, message, **fields)

    monkeypatch.setattr(Progress, "phase", record)
    config = {"cleanup.policy": "compact", "compaction.null-key": "retain"}
    for name in ("h.shared", "h.scratch"):
        if name == "h.scratch":
            monkeypatch.setattr(context.RunContext, "shared_key_tables", property(lambda self: False))
        lake.create_topic(name, partitions=1, config=config)
        for seed, now, rewrite in ((3, 5_000, False), (4, 6_000, False), (5, 7_000, True)):
            fill(lake, name, seed=seed, partitions=1, batches=3)
            result, tasks = compact(lake, spark, name, now, force_rewrite=rewrite)
            assert result.stats.layout == "sliced"
            if now == 5_000 and name == "h.shared":
                assert tasks >= 3, tasks  # the append pass's slices
                assert result.stats.records_read == 3 * 40  # counted once, whatever the buckets
    assert sliced_runs == ["shared key tables"] + ["masks"] * 5, sliced_runs
    done = [e for e in events if e["phase"] == "phase 1 done" and "buckets" in e]
    assert len(done) == 1 and done[0]["buckets"] == 2, done  # one partition on 2 slots: a table per slot
    assert compacted_rows(lake, "h.shared") == compacted_rows(lake, "h.scratch")
    assert view(lake, "h.shared") == view(lake, "h.scratch")
    assert [t for t in lake.catalog.list_tables("h") if "__compacted__run_" in t[-1]] == []
    assert bit_files(lake, "h.shared") == []


@pytest.mark.parametrize("point", ["after-phase-1", "after-write"])
def test_a_shared_first_run_that_fails_leaves_no_cursor_and_the_next_run_compacts(
        spark: SparkSession, lake: Lake, sliced_runs: list[str], point: str) -> None:
    """docs/guarantees.md#the-cursor-and-failures for a first run whose phase 1 shared its key tables: a failure once
    the winners are written as bits, or once the kept rows are written, publishes no cursor and leaves no staging
    branch, scratch table or file of bits; the next run compacts as the model does."""
    from compactor import failpoints
    from compactor.errors import InjectedFailureError

    model = one_partition_topic(lake, "s.t")
    with failpoints.enabled({point: "raise"}), pytest.raises(InjectedFailureError):
        compact_topic(lake, "s.t", now_ms=4000)
    assert current_cursor(lake, "s.t") is None
    assert safety.stage_branches(lake) == [] and safety.run_tables(lake) == [] and bit_files(lake, "s.t") == []
    assert compact_topic(lake, "s.t", now_ms=4000).committed
    model.compact(4000, safety.SETTINGS)
    assert compacted_rows(lake, "s.t") == model.compacted_rows()
    assert sliced_runs == ["shared key tables"] * 2, sliced_runs


@pytest.mark.parametrize("backend", ["s3", "rest"], indirect=True)
def test_shared_key_tables_write_and_read_their_bits_through_the_tables_file_io(
        spark_session: SparkSession, backend: Backend, sliced_runs: list[str]) -> None:
    """On moto's S3 server and on the REST catalog server (which places the tables), a sliced first run's phase 1
    writes its bits through the compacted table's file IO, the append pass's tasks read them back the same way, the
    view is the model's, and the run leaves no file of bits behind."""
    from compactor.iceberg.storage import list_files
    from tests.backends import attach_spark

    lake = attach_spark(backend.lake, spark_session)
    model = one_partition_topic(lake, "b.t")
    assert compact_topic(lake, "b.t", now_ms=4000).committed
    model.compact(4000, safety.SETTINGS)
    assert compacted_rows(lake, "b.t") == model.compacted_rows()
    assert sliced_runs == ["shared key tables"], sliced_runs
    view = lake.catalog.load_table("b.t__compacted")
    left = [f.location for f in list_files(lake.config, view.metadata.location.rstrip("/") + "/", view.io)]
    assert left and not [path for path in left if path.endswith(".bits")], left
