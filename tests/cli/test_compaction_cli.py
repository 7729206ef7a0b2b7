"""``compactor compact`` on the command line and progress reporting, through the Spark job (the refusals that
need no JVM and the spark-submit entry point are in test_cli.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.sql import SparkSession

from compactor.cli.main import main
from compactor.compaction import plan
from compactor.compaction.job import TwoPhaseCompactor
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.topics.records import ProducerRecord

pytestmark = pytest.mark.spark


@pytest.fixture
def cli(lake: Lake, spark: SparkSession, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> Any:
    monkeypatch.setenv("COMPACTOR_CATALOG_NAME", lake.config.catalog_name)
    warehouse = lake.config.warehouse.replace("file://", "")

    def run(*args: str) -> tuple[int, str, str]:
        code = main(["--warehouse", warehouse, *args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_compact_prints_the_cursor_as_json(cli: Any, lake: Lake) -> None:
    topic = lake.create_topic("a.t", partitions=2, config={"cleanup.policy": "compact"})
    produce(topic, [ProducerRecord(b"k%d" % (i % 3), b"v") for i in range(9)])
    code, out, err = cli("compact", "a.t", "--now-ms", "5000")
    assert code == 0, err
    result = json.loads(out)
    assert result["committed"] is True
    assert isinstance(result["compacted_snapshot_id"], int) and isinstance(result["raw_snapshot_id"], int)
    assert result["horizons"] == {"0": lake.topic("a.t").offsets().next_offsets[0],
                                  "1": lake.topic("a.t").offsets().next_offsets[1]}
    assert result["run_time_ms"] == 5000
    assert {"records_read", "records_kept", "records_removed", "tombstones_kept", "tombstones_dropped",
            "bytes_read", "bytes_written", "duration_ms"} <= set(result["stats"])
    assert "summary" in err  # the progress log ends with a summary line
    assert metric_lines(err) == [{"event": "compaction", "topic": "a.t", "committed": True,
                                  "dirty_ratio": 1.0, **{k: result["stats"][k] for k in METRIC_FIELDS}}]
    code, out, err = cli("compact", "a.t", "--now-ms", "6000")
    assert code == 0 and json.loads(out)["committed"] is False
    assert [(line["committed"], line["records_read"]) for line in metric_lines(err)] == [(False, 0)]


METRIC_FIELDS = ("records_read", "records_kept", "records_removed", "tombstones_kept", "tombstones_dropped",
                 "bytes_read", "bytes_written", "duration_ms")


def metric_lines(err: str) -> list[dict[str, Any]]:
    """The ``compactor.metrics`` lines of a command's standard error, as JSON."""
    marker = " compactor.metrics: "
    return [json.loads(line.split(marker, 1)[1]) for line in err.splitlines() if marker in line]


@pytest.mark.slow  # two runs for the progress events; compact's output stays in the loop (above)
@pytest.mark.parametrize("scratch", [False, True], ids=["inline", "scratch"])
def test_progress_reports_each_phase_and_a_summary(spark: SparkSession, lake: Lake, scratch: bool,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Each phase is a step of the progress stream. Phase 1 is timed on its own ("phase 1 done") when it
    writes the scratch table; when it hands its winners inline (a first run, a small range) its work runs inside
    phase 2's passes, and its step says so."""
    if scratch:  # no range is small enough to go inline
        monkeypatch.setattr(plan.CompactionPlan, "small_range", property(lambda self: False))
    topic = lake.create_topic("a.t", config={"cleanup.policy": "compact"})
    produce(topic, [ProducerRecord(b"k", b"v")] * 5)
    events: list[tuple[str, dict[str, Any]]] = []
    TwoPhaseCompactor(lake, "a.t", now_ms=1000, listener=lambda name, data: events.append((name, data))).run()
    produce(topic.refresh(), [ProducerRecord(b"k", b"w")])
    TwoPhaseCompactor(lake, "a.t", now_ms=2000, listener=lambda name, data: events.append((name, data))).run()
    names = [name for name, _ in events]
    assert names.count("plan") == 2 and names.count("summary") == 2 and names.count("published") == 2
    second = names[names.index("plan", 1):]  # the incremental run's steps
    assert "phase 1" in second and "phase 2 appends" in second and "phase 2 deletes" in second
    assert second.index("phase 1") < second.index("phase 2 appends")
    phase1 = [data for name, data in events if name == "phase 1"]
    assert [data["inline"] for data in phase1] == [not scratch, not scratch]
    assert ("phase 1 done" in second) == scratch  # timed on its own only when it is a job of its own
    if scratch:
        assert second.index("phase 1 done") < second.index("phase 2 appends")
    assert all("ms" in data for name, data in events if name.endswith(" done"))
    assert all("elapsed_ms" in data for _, data in events)
    summary = [data for name, data in events if name == "summary"][-1]
    assert summary["records_read"] == 1 and summary["records_kept"] == 1


