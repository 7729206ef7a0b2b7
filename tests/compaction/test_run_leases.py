"""Retention never breaks a live compaction: with ``compaction.orphan-min-age-ms=0`` and a retention
clock far ahead, a run's scratch table, staging branch and unwritten-yet-uncommitted files are spared while
the run holds its lease (``compactor.compaction.lease``); a dead run's are removed once its lease lapses
(tests/compaction/test_compaction_safety.py kills a run for that).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from compactor import failpoints
from compactor.cli.main import main
from compactor.compaction import lease
from compactor.compaction.job import compact_topic
from compactor.compaction.scratch import scratch_identifier, scratch_mark
from compactor.compaction.staging import stage_branch, stage_mark
from compactor.lake import Lake
from compactor.retention import RetentionResult, run_retention
from compactor.topics.naming import TopicName
from compactor.topics.records import ProducerRecord
from tests.helpers import produce_both, view
from tests.model import ModelSettings, TopicModel

FAR = 10**13  # a retention clock far past every run clock here
CONFIG = {"cleanup.policy": "compact", "compaction.orphan-min-age-ms": "0"}


def seeded(lake: Lake, name: str) -> TopicModel:
    lake.create_topic(name, partitions=2, config=CONFIG)
    model = TopicModel(2)
    produce_both(lake, name, model, [ProducerRecord(b"k%d" % (i % 5), b"v%d" % i) for i in range(30)], 1000)
    compact_topic(lake, name, now_ms=2000)
    model.compact(2000, ModelSettings())
    produce_both(lake, name, model, [ProducerRecord(b"k%d" % (i % 7), None if i == 2 else b"w%d" % i)
                                     for i in range(12)], 3000)
    return model


def view_location(lake: Lake, name: str) -> str:
    return str(lake.catalog.load_table(f"{name}__compacted").metadata.location)


@pytest.mark.spark
@pytest.mark.parametrize("point", ["after-phase-1", pytest.param("after-delete", marks=pytest.mark.slow),
                                   pytest.param("after-write", marks=pytest.mark.slow)])
def test_retention_in_the_middle_of_a_run_leaves_it_to_finish(spark: SparkSession, lake: Lake, point: str) -> None:
    model = seeded(lake, "l.t")
    seen: list[RetentionResult] = []

    def retention_now() -> None:  # runs inside the compaction, exactly at the point
        live = lease.live_runs(lake.config, view_location(lake, "l.t"))
        assert len(live.run_ids) == 1, "the run holds no lease"
        seen.append(run_retention(lake, "l.t", now_ms=FAR))

    with failpoints.enabled({point: retention_now}):
        result = compact_topic(lake, "l.t", now_ms=4000)
    assert seen and seen[0].dropped_run_tables == [], "retention dropped the live run's scratch table"
    assert not seen[0].expiry.compacted.removed_refs, "retention removed the live run's staging branch"
    assert result.committed
    model.compact(4000, ModelSettings())
    assert view(lake, "l.t") == model.compacted_view()
    assert lease.live_runs(lake.config, view_location(lake, "l.t")).run_ids == frozenset()  # released at the end


@pytest.mark.slow  # a JVM of its own; retention inside a live run stays in the loop in-process (above)
@pytest.mark.spark
def test_retention_from_another_process_during_a_run(spark: SparkSession, lake: Lake, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """As reported: ``compactor compact`` at work in its own process, ``compactor retention`` meanwhile."""
    model = seeded(lake, "l.p")
    marker = tmp_path / "paused"
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "COMPACTOR_CATALOG_NAME": lake.config.catalog_name,
           "COMPACTOR_FAILPOINTS": "after-phase-1=pause", "COMPACTOR_FAILPOINT_MARKER": str(marker)}
    proc = subprocess.Popen([sys.executable, "-m", "compactor.cli.main", "--warehouse", lake.config.warehouse,
                             "compact", "l.p", "--now-ms", "4000"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the run never reached phase 2"
            time.sleep(0.1)
        monkeypatch.setenv("COMPACTOR_CATALOG_NAME", lake.config.catalog_name)
        code = main(["--warehouse", lake.config.warehouse, "retention", "l.p", "--now-ms", str(FAR)])
        out = capsys.readouterr().out
        assert code == 0
        assert json.loads(out)["dropped_run_tables"] == []
        marker.unlink()  # the run goes on
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr[-3000:]
    assert json.loads(stdout)["committed"] is True
    assert "ERROR" not in stderr
    model.compact(4000, ModelSettings())
    assert view(lake, "l.p") == model.compacted_view()


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def read_lease(location: str) -> dict[str, int]:
    data: dict[str, int] = json.loads(Path(location.removeprefix("file://")).read_text())
    return data


def test_a_lease_is_renewed_while_the_run_lives_and_lapses_when_it_stops(lake: Lake, tmp_path: Path) -> None:
    """The renewal thread's waits are driven by the test (no sleep): each released wait renews the lease at the
    injected clock's time; a lease not renewed within ``LEASE_TTL_MS`` is not live; the released lease is gone."""
    location = (tmp_path / "view").as_uri()
    clock = Clock(1_000_000)
    waiting: queue.Queue[float] = queue.Queue()  # the renewal thread is waiting (its interval)
    release: queue.Queue[bool] = queue.Queue()  # what its wait returns: False renews, True stops

    def wait(interval_s: float) -> bool:
        waiting.put(interval_s)
        return release.get(timeout=60)

    holder = lease.RunLease(lake.config, location, "abc123", renew_interval_s=15.0, clock=clock, wait=wait)
    path = lease.lease_location(location, "abc123")
    with holder:
        assert waiting.get(timeout=60) == 15.0  # written at the start, then waiting for the first renewal
        first = read_lease(path)
        assert first == {"run_id": "abc123", "started_ms": 1_000_000, "renewed_ms": 1_000_000}
        clock.now_ms += 15_000
        release.put(False)
        waiting.get(timeout=60)  # renewed, and waiting again
        second = read_lease(path)
        assert second["renewed_ms"] == 1_015_000 and second["started_ms"] == first["started_ms"]
        assert lease.live_runs(lake.config, location, now_ms=clock.now_ms) == lease.LiveRuns(
            frozenset({"abc123"}), 1_000_000)
        lapsed_at = second["renewed_ms"] + lease.LEASE_TTL_MS
        assert lease.live_runs(lake.config, location, now_ms=lapsed_at - 1).run_ids == frozenset({"abc123"})
        assert lease.live_runs(lake.config, location, now_ms=lapsed_at).run_ids == frozenset()  # not renewed
        release.put(True)  # the run ends: the thread stops
    assert lease.live_runs(lake.config, location, now_ms=clock.now_ms).run_ids == frozenset()  # released: gone
    assert not list((tmp_path / "view" / lease.LEASES_DIR).iterdir())


def test_run_marks_are_read_from_the_names_runs_give_their_leftovers() -> None:
    name = TopicName.parse("s.t")
    assert scratch_identifier(name, 4000, "0123456789ab") == "s.t__compacted__run_4000_0123456789ab"
    assert scratch_mark("s.t__compacted__run_4000_0123456789ab") == lease.RunMark(4000, "0123456789ab")
    assert stage_branch(4000, "0123456789ab") == "compactor-run-4000-0123456789ab"
    assert stage_mark("compactor-run-4000-0123456789ab") == lease.RunMark(4000, "0123456789ab")
    assert stage_mark("compactor-run-x-1") is None and stage_mark("main") is None
    assert stage_mark("cursor-4000") is None and scratch_mark("s.t__compacted") is None


def test_a_leftover_is_stale_once_its_run_is_dead_and_old_enough() -> None:
    mark = lease.RunMark(4000, "r1")
    live = lease.LiveRuns(frozenset({"r2"}), 3000)
    assert lease.is_stale(mark, live, now_ms=5001, min_age_ms=1000)
    assert not lease.is_stale(mark, live, now_ms=5000, min_age_ms=1000)  # not older than the minimum age
    assert not lease.is_stale(lease.RunMark(4000, "r2"), live, now_ms=10**13, min_age_ms=0)  # a live run's
    assert not lease.is_stale(None, live, now_ms=10**13, min_age_ms=0)  # not a run's leftover
