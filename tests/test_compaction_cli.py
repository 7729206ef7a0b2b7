"""``compactor compact`` on the command line, the spark-submit entry point, and progress reporting."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from compactor.cli.main import main
from compactor.compaction.job import TwoPhaseCompactor
from compactor.lake import Lake
from compactor.topics.producer import produce
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
    code, out, _ = cli("compact", "a.t", "--now-ms", "6000")
    assert code == 0 and json.loads(out)["committed"] is False


def test_compact_refuses_a_topic_whose_policy_lacks_compact(cli: Any, lake: Lake) -> None:
    lake.create_topic("a.t")
    code, _, err = cli("compact", "a.t")
    assert code == 1 and "cleanup.policy=delete" in err and len(err.strip().splitlines()) >= 1
    assert err.strip().splitlines()[-1].startswith("compactor: error:")


def test_compact_unknown_topic(cli: Any) -> None:
    code, _, err = cli("compact", "a.nope")
    assert code == 1 and "unknown topic" in err


def test_progress_reports_each_phase_and_a_summary(spark: SparkSession, lake: Lake) -> None:
    topic = lake.create_topic("a.t", config={"cleanup.policy": "compact"})
    produce(topic, [ProducerRecord(b"k", b"v")] * 5)
    events: list[tuple[str, dict[str, Any]]] = []
    TwoPhaseCompactor(lake, "a.t", now_ms=1000, listener=lambda name, data: events.append((name, data))).run()
    produce(topic.refresh(), [ProducerRecord(b"k", b"w")])
    TwoPhaseCompactor(lake, "a.t", now_ms=2000, listener=lambda name, data: events.append((name, data))).run()
    names = [name for name, _ in events]
    assert names.count("plan") == 2 and names.count("summary") == 2 and "published" in names
    # phase 1 is a step of its own, timed, and done before phase 2 starts
    assert "phase 1 done" in names and "phase 2 appends" in names and "phase 2 deletes" in names
    assert names.index("phase 1 done") < names.index("phase 2 appends")
    assert all("ms" in data for name, data in events if name.endswith(" done"))
    assert all("elapsed_ms" in data for _, data in events)
    summary = [data for name, data in events if name == "summary"][-1]
    assert summary["records_read"] == 1 and summary["records_kept"] == 1


def test_submit_module_is_the_command_line(tmp_path: Path) -> None:
    """``spark-submit compactor/cli/submit.py ARGS`` runs the same command line as ``compactor ARGS``."""
    result = subprocess.run([sys.executable, "-m", "compactor.cli.submit", "--warehouse",
                             str(tmp_path / "wh"), "topic", "create", "a.t"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["created"] is True
