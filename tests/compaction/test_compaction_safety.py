"""Crash safety and concurrency of compaction (docs/guarantees.md#the-cursor-and-failures): failure points, killed
processes, racing compactors, producers appending during a run, and commits whose outcome cannot be learned."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession

from compactor import failpoints
from compactor.compaction import lease
from compactor.compaction.job import TwoPhaseCompactor, compact_topic
from compactor.compaction.staging import STAGE_PREFIX
from compactor.cursor import TAG_PREFIX
from compactor.errors import CommitConflictError, CursorCorruptError, InjectedFailureError
from compactor.lake import Lake
from compactor.topics.records import ProducerRecord
from tests.helpers import compacted_rows, current_cursor, produce_both, view
from tests.model import ModelSettings, TopicModel

pytestmark = pytest.mark.spark
SETTINGS = ModelSettings()


def seeded(lake: Lake, partitions: int = 2) -> TopicModel:
    """A topic with one published cursor and more records waiting to be compacted."""
    lake.create_topic("s.t", partitions=partitions, config={"cleanup.policy": "compact"})
    model = TopicModel(partitions)
    produce_both(lake, "s.t", model, [ProducerRecord(b"k%d" % (i % 5), b"v%d" % i) for i in range(20)], 1000)
    compact_topic(lake, "s.t", now_ms=2000)
    model.compact(2000, SETTINGS)
    produce_both(lake, "s.t", model, [ProducerRecord(b"k%d" % (i % 7), None if i == 3 else b"w%d" % i)
                                      for i in range(10)], 3000)
    return model


def stage_branches(lake: Lake) -> list[str]:
    refs = lake.catalog.load_table("s.t__compacted").metadata.refs
    return [name for name in refs if name.startswith(STAGE_PREFIX)]


@pytest.mark.parametrize("point", [pytest.param("after-plan", marks=pytest.mark.slow),
                                   pytest.param("after-phase-1", marks=pytest.mark.slow),
                                   pytest.param("after-delete", marks=pytest.mark.slow),
                                   pytest.param("after-write", marks=pytest.mark.slow), "before-commit"])
def test_failure_before_publish_leaves_the_previous_cursor(spark: SparkSession, lake: Lake, point: str) -> None:
    model = seeded(lake)
    before_cursor = current_cursor(lake, "s.t")
    before_view = view(lake, "s.t")
    with failpoints.enabled({point: "raise"}), pytest.raises(InjectedFailureError):
        compact_topic(lake, "s.t", now_ms=4000)
    assert current_cursor(lake, "s.t") == before_cursor
    assert view(lake, "s.t") == before_view
    assert stage_branches(lake) == []  # the failed run cleaned up after itself
    result = compact_topic(lake, "s.t", now_ms=4000)
    assert result.committed
    model.compact(4000, SETTINGS)
    assert compacted_rows(lake, "s.t") == model.compacted_rows()


def test_failure_after_publish_keeps_the_new_cursor(spark: SparkSession, lake: Lake) -> None:
    model = seeded(lake)
    with failpoints.enabled({"after-commit": "raise"}), pytest.raises(InjectedFailureError):
        compact_topic(lake, "s.t", now_ms=4000)
    model.compact(4000, SETTINGS)
    assert compacted_rows(lake, "s.t") == model.compacted_rows()
    assert not compact_topic(lake, "s.t", now_ms=4000).committed  # re-running is safe


def test_racing_compactor_restarts_on_the_new_cursor(spark: SparkSession, lake: Lake) -> None:
    model = seeded(lake)
    winner: dict[str, Any] = {}

    def another_run_commits() -> None:
        with failpoints.enabled({"before-commit": lambda: None}):
            winner["result"] = compact_topic(lake, "s.t", now_ms=4000)

    with failpoints.enabled({"before-commit": another_run_commits}):
        result = TwoPhaseCompactor(lake, "s.t", now_ms=4000, max_attempts=3).run()
    # the other run won; this one started again from phase 1 on the new cursor and found nothing left to do
    assert winner["result"].committed
    assert result.attempts == 2 and not result.committed
    model.compact(4000, SETTINGS)
    assert compacted_rows(lake, "s.t") == model.compacted_rows()


@pytest.mark.slow  # a racing compactor's restart stays in the loop (above)
def test_cursor_moved_fails_cleanly_when_restarts_are_exhausted(spark: SparkSession, lake: Lake) -> None:
    seeded(lake)
    before = current_cursor(lake, "s.t")

    def another_run_commits() -> None:
        with failpoints.enabled({"before-commit": lambda: None}):
            compact_topic(lake, "s.t", now_ms=4000)

    with (failpoints.enabled({"before-commit": another_run_commits}),
          pytest.raises(CommitConflictError, match="cursor moved")):
        TwoPhaseCompactor(lake, "s.t", now_ms=4000, max_attempts=1).run()
    after = current_cursor(lake, "s.t")
    assert after is not None and before is not None
    assert after.previous == before.snapshot_id  # exactly one run won: the chain is C -> C'
    assert stage_branches(lake) == []


@pytest.mark.slow  # a racing compactor stays in the loop (above)
def test_cursor_moved_before_the_staging_branch_restarts(spark: SparkSession, lake: Lake) -> None:
    """The staging branch is only created while main is still the pinned cursor; otherwise the run restarts."""
    model = seeded(lake)

    def another_run_commits() -> None:
        with failpoints.enabled({"after-plan": lambda: None}):
            assert compact_topic(lake, "s.t", now_ms=4000).committed

    with failpoints.enabled({"after-plan": another_run_commits}):
        result = TwoPhaseCompactor(lake, "s.t", now_ms=4000, max_attempts=3).run()
    assert result.attempts == 2 and not result.committed
    assert stage_branches(lake) == []
    model.compact(4000, SETTINGS)
    assert compacted_rows(lake, "s.t") == model.compacted_rows()


@pytest.mark.slow  # a racing compactor stays in the loop (above)
def test_creating_the_staging_branch_survives_a_racing_commit(spark: SparkSession, lake: Lake,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Another writer commits to the compacted table inside our branch commit's window (after the catalog
    read the current metadata, before its conditional update): the branch commit loses that race, is retried
    on the refreshed table, and the run publishes normally."""
    from compactor.compaction import staging as publish
    from compactor.iceberg import commits

    model = seeded(lake)
    real_commit, real_write = commits.commit, SqlCatalog._write_metadata
    state = {"creating": False, "raced": False}

    def commit(catalog: Any, table: Any, **kwargs: Any) -> None:
        state["creating"] = kwargs["what"].startswith("creating staging branch")
        try:
            real_commit(catalog, table, **kwargs)
        finally:
            state["creating"] = False

    def write_metadata(*args: Any, **kwargs: Any) -> Any:  # a static method of the catalog
        if state["creating"] and not state["raced"]:
            state["raced"] = True
            rival = lake.catalog.load_table("s.t__compacted")
            with rival.transaction() as tx:  # someone else's metadata commit lands first
                tx.set_properties({"rival": "1"})
        return real_write(*args, **kwargs)

    monkeypatch.setattr(publish, "commit", commit)
    monkeypatch.setattr(SqlCatalog, "_write_metadata", staticmethod(write_metadata))
    result = TwoPhaseCompactor(lake, "s.t", now_ms=4000, max_attempts=1).run()
    assert state["raced"] and result.committed and result.attempts == 1
    assert lake.catalog.load_table("s.t__compacted").metadata.properties.get("rival") == "1"
    assert stage_branches(lake) == []
    model.compact(4000, SETTINGS)
    assert compacted_rows(lake, "s.t") == model.compacted_rows()


def test_the_replaced_cursor_is_tagged_and_chained(spark: SparkSession, lake: Lake) -> None:
    seeded(lake)
    first = current_cursor(lake, "s.t")
    compact_topic(lake, "s.t", now_ms=4000)
    second = current_cursor(lake, "s.t")
    assert first is not None and second is not None and second.previous == first.snapshot_id
    refs = lake.catalog.load_table("s.t__compacted").metadata.refs
    assert refs[f"{TAG_PREFIX}{first.snapshot_id}"].snapshot_id == first.snapshot_id


def test_producers_appending_during_a_run_lose_nothing(spark: SparkSession, lake: Lake) -> None:
    model = seeded(lake)
    pinned = lake.topic("s.t").offsets().next_offsets

    def produce_more() -> None:
        produce_both(lake, "s.t", model, [ProducerRecord(b"k1", b"during"), ProducerRecord(b"late", b"x")], 3500)

    with failpoints.enabled({"after-phase-1": produce_more}):
        result = compact_topic(lake, "s.t", now_ms=4000)
    assert result.horizons == {str(p): n for p, n in enumerate(pinned)}  # later appends are ignored ...
    truncated = TopicModel(model.partitions, [records[: pinned[p]] for p, records in enumerate(model.log)],
                           cursor=model.cursor)
    truncated.compact(4000, SETTINGS)
    assert compacted_rows(lake, "s.t") == truncated.compacted_rows()
    model.cursor = truncated.cursor
    assert view(lake, "s.t") == model.compacted_view()  # ... and read from the raw tail
    compact_topic(lake, "s.t", now_ms=5000)
    model.compact(5000, SETTINGS)
    assert compacted_rows(lake, "s.t") == model.compacted_rows()


def _error_lines(stderr: str) -> str:
    """The lines of a failed command's standard error that name the problem (not the whole JVM trace)."""
    wanted = [line for line in stderr.splitlines()
              if line.startswith("compactor: error") or "Exception:" in line or "Error:" in line]
    return "\n".join(wanted[:20]) or stderr[-2000:]


def _cli_env(lake: Lake, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTOR_", "PYSPARK"))}
    env.update(COMPACTOR_CATALOG_NAME=lake.config.catalog_name, COMPACTOR_DRIVER_MEMORY="768m",
               COMPACTOR_SPARK_CORES="1", COMPACTOR_SHUFFLE_PARTITIONS="2", **extra)
    return env


def _cli(lake: Lake, *args: str) -> list[str]:
    warehouse = lake.config.warehouse.replace("file://", "")
    return [sys.executable, "-m", "compactor.cli.main", "--warehouse", warehouse, *args]


def kill_compaction_at(lake: Lake, point: str, marker: Path, *args: str) -> None:
    """Run the command line ``args`` in a process of its own, paused at the failure point ``point`` (``marker``
    appears when it gets there), then kill it there with its JVM (SIGKILL to its process group)."""
    proc = subprocess.Popen(_cli(lake, *args), env=_cli_env(lake, COMPACTOR_FAILPOINTS=f"{point}=pause",
                                                            COMPACTOR_FAILPOINT_MARKER=str(marker)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not marker.exists():
            assert proc.poll() is None, _error_lines(proc.communicate()[1].decode())
            assert time.monotonic() < deadline, "the job never reached the failure point"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the Python process and its JVM, mid-run
        proc.wait(timeout=60)


@pytest.mark.slow  # a JVM of its own; failures at every point stay in the loop in-process (above)
def test_killing_the_job_process_leaves_the_previous_cursor(spark: SparkSession, lake: Lake, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    model = seeded(lake)
    before = current_cursor(lake, "s.t")
    marker = tmp_path / "reached"
    # sliced: the run keeps its winners in a scratch table (a small range otherwise keeps none: issue 34's twin of
    # this test, tests/compaction/test_winners_paths.py, kills that run)
    kill_compaction_at(lake, "after-write", marker, "compact", "s.t", "--now-ms", "4000", "--layout", "sliced")
    assert current_cursor(lake, "s.t") == before
    assert len(stage_branches(lake)) == 1  # the killed run's staging branch: never read, removed by retention
    killed_run_tables = run_tables(lake)  # and its phase-1 table, dropped by retention once old enough
    assert len(killed_run_tables) == 1
    assert view(lake, "s.t") == TopicModel(model.partitions, model.log, cursor=model.cursor).compacted_view()
    assert compact_topic(lake, "s.t", now_ms=4000).committed
    model.compact(4000, SETTINGS)
    assert compacted_rows(lake, "s.t") == model.compacted_rows()
    assert run_tables(lake) == killed_run_tables  # a live run's table is never dropped under it
    from compactor.retention import run_retention

    later = 4000 + lake.topic("s.t").settings.orphan_min_age_ms + 1
    # the killed run's lease is still live (it lapses LEASE_TTL_MS after its last renewal): nothing is dropped
    assert run_retention(lake, "s.t", now_ms=later).dropped_run_tables == []
    assert run_tables(lake) == killed_run_tables and len(stage_branches(lake)) == 1
    real_clock = lease.wall_clock_ms
    monkeypatch.setattr(lease, "wall_clock_ms", lambda: real_clock() + lease.LEASE_TTL_MS + 1)  # and now it lapsed
    assert run_retention(lake, "s.t", now_ms=later, dry_run=True).dropped_run_tables == killed_run_tables
    assert run_tables(lake) == killed_run_tables
    assert run_retention(lake, "s.t", now_ms=later).dropped_run_tables == killed_run_tables
    assert run_tables(lake) == [] and stage_branches(lake) == []
    assert not lease.live_runs(lake.config, lake.catalog.load_table("s.t__compacted").metadata.location).run_ids


def run_tables(lake: Lake) -> list[str]:
    """The phase-1 scratch tables of compaction runs on topic s.t."""
    return sorted(".".join(t) for t in lake.catalog.list_tables("s") if t[-1].startswith("t__compacted__run_"))


@pytest.mark.slow  # two JVMs; the racing compactor stays in the loop in-process (above)
def test_two_compactor_processes_one_cursor_chain(spark: SparkSession, lake: Lake) -> None:
    model = seeded(lake)
    before = current_cursor(lake, "s.t")
    procs = [subprocess.Popen(_cli(lake, "compact", "s.t", "--now-ms", "4000"), env=_cli_env(lake),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    outputs = [proc.communicate(timeout=300) for proc in procs]
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, _error_lines(err.decode())
    results = [json.loads(out) for out, _ in outputs]
    assert sum(r["committed"] for r in results) == 1  # the same work can only be published once
    after = current_cursor(lake, "s.t")
    assert after is not None and before is not None and after.previous == before.snapshot_id
    model.compact(4000, SETTINGS)
    assert compacted_rows(lake, "s.t") == model.compacted_rows()


def test_unknown_commit_outcome_exits_75(spark: SparkSession, lake: Lake, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    from sqlalchemy.exc import OperationalError

    from compactor.cli.main import main

    seeded(lake)
    real_commit, real_load = SqlCatalog.commit_table, SqlCatalog.load_table
    state = {"down": False}

    def commit_then_lose_connection(self: SqlCatalog, table: Any, requirements: Any, updates: Any) -> Any:
        if table.name()[-1].endswith("__compacted") and any(getattr(u, "ref_name", "") == "main" for u in updates):
            state["down"] = True
            raise OperationalError("UPDATE iceberg_tables", {}, Exception("server closed the connection"))
        return real_commit(self, table, requirements, updates)

    def load_while_down(self: SqlCatalog, identifier: Any) -> Any:
        if state["down"]:
            raise OperationalError("SELECT", {}, Exception("could not connect to server"))
        return real_load(self, identifier)

    monkeypatch.setattr(SqlCatalog, "commit_table", commit_then_lose_connection)
    monkeypatch.setattr(SqlCatalog, "load_table", load_while_down)
    monkeypatch.setenv("COMPACTOR_CATALOG_NAME", lake.config.catalog_name)
    warehouse = lake.config.warehouse.replace("file://", "")
    code = main(["--warehouse", warehouse, "compact", "s.t", "--now-ms", "4000"])
    err = capsys.readouterr().err
    assert code == 75 and "outcome unknown" in err
    monkeypatch.undo()
    assert compact_topic(lake, "s.t", now_ms=4000).committed  # the commit did not land; re-running is safe


@pytest.mark.slow  # the unknown outcome stays in the loop (above)
def test_ambiguous_failure_that_landed_counts_as_committed(spark: SparkSession, lake: Lake,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from sqlalchemy.exc import OperationalError

    model = seeded(lake)
    real_commit = SqlCatalog.commit_table

    def commit_then_fail(self: SqlCatalog, table: Any, requirements: Any, updates: Any) -> Any:
        response = real_commit(self, table, requirements, updates)
        if table.name()[-1].endswith("__compacted") and any(getattr(u, "ref_name", "") == "main" for u in updates):
            raise OperationalError("COMMIT", {}, Exception("connection reset after commit"))
        return response

    monkeypatch.setattr(SqlCatalog, "commit_table", commit_then_fail)
    result = compact_topic(lake, "s.t", now_ms=4000)
    monkeypatch.undo()
    assert result.committed
    model.compact(4000, SETTINGS)
    assert compacted_rows(lake, "s.t") == model.compacted_rows()


def test_a_corrupt_cursor_is_an_error_not_a_fallback(spark: SparkSession, lake: Lake) -> None:
    from compactor.iceberg.commits import RefMove, commit
    from compactor.iceberg.snapshots import build_snapshot

    seeded(lake)
    table = lake.catalog.load_table("s.t__compacted")
    head = table.metadata.snapshot_by_name("main")
    bogus = build_snapshot(table, head, {"compactor.cursor": "v1", "compactor.horizons": "not json"})
    commit(lake.catalog, table, snapshot=bogus, moves=[RefMove("main", None)],
           expect={"main": head.snapshot_id if head else None}, what="corrupting the cursor")
    with pytest.raises(CursorCorruptError):
        compact_topic(lake, "s.t", now_ms=5000)
    with pytest.raises(CursorCorruptError):
        view(lake, "s.t")
