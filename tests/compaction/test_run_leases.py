"""Retention never breaks a live compaction (issue 19): with ``compaction.orphan-min-age-ms=0`` and a retention
clock far ahead, a run's scratch table, staging branch and unwritten-yet-uncommitted files are spared while
the run holds its lease (``compactor.compaction.lease``); a dead run's are removed once its lease lapses
(tests/compaction/test_compaction_safety.py kills a run for that).
"""

from __future__ import annotations

import json
import os
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
from compactor.lake import Lake
from compactor.retention import RetentionResult, run_retention
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


def test_a_lease_is_renewed_while_the_run_lives_and_lapses_when_it_stops(lake: Lake, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    location = (tmp_path / "view").as_uri()
    holder = lease.RunLease(lake.config, location, "abc123", renew_interval_s=0.05)
    with holder:
        first = json.loads(Path(lease.lease_location(location, "abc123").removeprefix("file://")).read_text())
        time.sleep(0.3)
        second = json.loads(Path(lease.lease_location(location, "abc123").removeprefix("file://")).read_text())
        assert second["renewed_ms"] > first["renewed_ms"] and second["started_ms"] == first["started_ms"]
        assert lease.live_runs(lake.config, location) == lease.LiveRuns(frozenset({"abc123"}), first["started_ms"])
        real_clock = lease.wall_clock_ms
        monkeypatch.setattr(lease, "wall_clock_ms", lambda: real_clock() + lease.LEASE_TTL_MS + 1000)
        assert lease.live_runs(lake.config, location).run_ids == frozenset()  # a lease not renewed in time
        monkeypatch.undo()
    assert lease.live_runs(lake.config, location).run_ids == frozenset()  # released: the file is gone
    assert not list((tmp_path / "view" / lease.LEASES_DIR).iterdir())


def test_run_ids_are_read_from_the_names_runs_give_their_leftovers() -> None:
    assert lease.run_id_of("s.t__compacted__run_4000_0123456789ab", "__compacted__run_", "_") == "0123456789ab"
    assert lease.run_id_of("compactor-run-4000-0123456789ab", "compactor-run-", "-") == "0123456789ab"
    assert lease.run_id_of("compactor-run-x-1", "compactor-run-", "-") is None
    assert lease.run_id_of("main", "compactor-run-", "-") is None
