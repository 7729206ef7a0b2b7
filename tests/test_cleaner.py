"""The cleaner without a JVM (compaction replaced by stand-ins where a topic is due): failures isolated, retried
or backed off by kind, metric lines, clean shutdown on SIGTERM. (Through the real Spark job:
test_cleaner_compacts.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from compactor import properties as props
from compactor.cleaner import Cleaner
from compactor.errors import (
    CommitConflictError,
    CursorCorruptError,
    InvalidSettingError,
    OutcomeUnknownError,
    StorageAccessDeniedError,
    StorageUnavailableError,
)
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.retention import RetentionResult
from compactor.topics.records import ProducerRecord
from tests.helpers import raw

HOUR = 3_600_000
T0 = 60 * 24 * HOUR


def records(n: int, prefix: str, stamp: int = T0) -> list[ProducerRecord]:
    return [ProducerRecord(f"{prefix}{i}".encode(), b"v" * 10, timestamp_ms=stamp) for i in range(n)]


@dataclass
class CompactionStandIn:
    """What the cleaner reads of a compaction run's result."""

    committed: bool = True

    def as_json(self) -> dict[str, Any]:
        return {"committed": self.committed, "stats": {"records_read": 2}}


def test_a_failing_topic_does_not_stop_the_others_and_is_backed_off(lake: Lake) -> None:
    for name in ("f.a", "f.bad", "f.c"):
        lake.create_topic(name, config={"retention.ms": str(HOUR)})
        produce(lake.topic(name), records(2, "k"), now_ms=T0)
    bad = lake.topic("f.bad").table.transaction()
    bad.set_properties({props.NEXT_OFFSETS_PROPERTY: "not json"})  # a corrupt topic
    bad.commit_transaction()
    cleaner = Cleaner(lake, backoff_s=3600)
    first = cleaner.run_once(now_ms=T0 + 2 * HOUR)
    assert first.failed == ["f.bad"]
    assert "TopicCorruptError" in first.topics["f.bad"].errors[0].error
    assert not first.topics["f.bad"].errors[0].transient and first.topics["f.bad"].errors[0].backoff_s == 3600
    assert raw(lake, "f.a") == [] and raw(lake, "f.c") == []
    second = cleaner.run_once(now_ms=T0 + 2 * HOUR)
    assert "uncleanable" in second.topics["f.bad"].skipped and second.failed == []
    # retention failing for one topic is isolated the same way
    calls: list[str] = []

    def retain(lake_: Lake, name: str, now_ms: int) -> RetentionResult:
        calls.append(name)
        if name == "f.a":
            raise RuntimeError("object store said no")
        return RetentionResult(name, dry_run=False, now_ms=now_ms)

    third = Cleaner(lake, retain=retain).run_once(now_ms=T0 + 2 * HOUR)
    assert calls == ["f.a", "f.c"]  # f.bad failed its assessment: no retention on a corrupt topic
    assert "f.a" in third.failed and third.topics["f.c"].retention == RetentionResult("f.c", False, T0 + 2 * HOUR)


def test_compaction_failure_is_isolated_and_logged_as_metrics(lake: Lake, caplog: pytest.LogCaptureFixture) -> None:
    for name in ("g.a", "g.b"):
        lake.create_topic(name, config={"cleanup.policy": "compact"})
        produce(lake.topic(name), records(2, "k"), now_ms=T0)
    compacted: list[str] = []

    def compact(lake_: Lake, name: str, now_ms: int) -> CompactionStandIn:
        if name == "g.a":
            raise RuntimeError("executor lost")
        compacted.append(name)
        return CompactionStandIn()

    with caplog.at_level("INFO", logger="compactor.metrics"):
        result = Cleaner(lake, compact=compact).run_once(now_ms=T0)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "compactor.metrics"]
    events = {(line["event"], line.get("topic")) for line in lines}
    assert {("topic-failed", "g.a"), ("retention", "g.b"), ("cleaner-pass", None)} <= events
    # a compaction logs its own metric line, as when run alone (the stand-in logs none, and the cleaner adds
    # none of its own: tests/test_cleaner_compacts.py counts the real run's)
    assert ("compaction", "g.b") not in events
    failed_line = next(line for line in lines if line["event"] == "topic-failed")
    assert failed_line["step"] == "compact" and "executor lost" in failed_line["error"]
    assert sorted(result.compaction_order) == ["g.a", "g.b"] and compacted == ["g.b"]
    assert result.failed == ["g.a"] and result.topics["g.a"].errors[0].step == "compact"
    assert result.topics["g.b"].retention is not None


def test_clean_interval_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    lake = Lake(warehouse=str(warehouse))
    lake.create_topic("t.a")
    lake.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTOR_", "PYSPARK"))}
    process = subprocess.Popen(
        [sys.executable, "-m", "compactor.cli.submit", "--warehouse", str(warehouse), "clean",
         "--interval", "0.2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stdout is not None
        first = json.loads(process.stdout.readline())  # one pass done
        assert first["failed"] == [] and "t.a" in first["topics"]
        time.sleep(0.3)
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert code == 0, process.stderr.read() if process.stderr else ""


def test_clean_once_exits_nonzero_when_a_topic_failed(lake: Lake, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from compactor.cli.main import main

    lake.create_topic("h.ok")
    lake.create_topic("h.bad")
    bad = lake.topic("h.bad").table.transaction()
    bad.set_properties({props.NEXT_OFFSETS_PROPERTY: "[1, 2]"})
    bad.commit_transaction()
    monkeypatch.setenv("COMPACTOR_CATALOG_NAME", lake.config.catalog_name)
    assert main(["--warehouse", lake.config.warehouse, "clean", "--once", "--now-ms", str(T0)]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["failed"] == ["h.bad"] and out["topics"]["h.ok"]["retention"] is not None


# --- transient and terminal failures --------------------------------------------------------------------------


def failing_retention(failures: list[BaseException | None]) -> tuple[list[str], Any]:
    """A retention stand-in that raises the next of ``failures`` on each call (``None``: succeeds)."""
    calls: list[str] = []

    def retain(lake_: Lake, name: str, now_ms: int) -> RetentionResult:
        calls.append(name)
        failure = failures.pop(0) if failures else None
        if failure is not None:
            raise failure
        return RetentionResult(name, dry_run=False, now_ms=now_ms)

    return calls, retain


@pytest.mark.parametrize("error", [CommitConflictError("lost a race"), CommitConflictError("cursor moved: another run"),
                                   StorageUnavailableError("storage unavailable: timed out"),
                                   OutcomeUnknownError("the commit's result is unknown")],
                         ids=lambda e: type(e).__name__)
def test_transient_failures_are_retried_next_pass_then_backed_off(lake: Lake, error: Exception) -> None:
    lake.create_topic("r.t")
    calls, retain = failing_retention([error] * 10)
    cleaner = Cleaner(lake, backoff_s=3600, transient_limit=3, retain=retain)
    for attempt in (1, 2):  # retried at the very next pass, no back-off
        outcome = cleaner.run_once(now_ms=T0).topics["r.t"]
        assert outcome.errors and outcome.errors[0].transient and outcome.errors[0].backoff_s == 0
        assert not outcome.skipped and len(calls) == attempt
    third = cleaner.run_once(now_ms=T0).topics["r.t"]  # the third failure in a row: backed off after all
    assert third.errors[0].transient and third.errors[0].backoff_s == 3600
    fourth = cleaner.run_once(now_ms=T0).topics["r.t"]
    assert "uncleanable" in fourth.skipped and len(calls) == 3


def test_a_clean_pass_ends_a_run_of_transient_failures(lake: Lake) -> None:
    lake.create_topic("r.t")
    transient = CommitConflictError("lost a race")
    calls, retain = failing_retention([transient, transient, None, transient, transient])
    cleaner = Cleaner(lake, backoff_s=3600, transient_limit=3, retain=retain)
    results = [cleaner.run_once(now_ms=T0).topics["r.t"] for _ in range(5)]
    assert [bool(r.errors) for r in results] == [True, True, False, True, True]
    assert all(e.backoff_s == 0 for r in results for e in r.errors), "the count should restart after a success"
    assert len(calls) == 5 and not any(r.skipped for r in results)


@pytest.mark.parametrize("error", [InvalidSettingError("retention.ms must be an integer"),
                                   CursorCorruptError("the cursor names a missing snapshot"),
                                   StorageAccessDeniedError("access denied: check AWS_ACCESS_KEY_ID"),
                                   RuntimeError("not classified")], ids=lambda e: type(e).__name__)
def test_terminal_failures_are_backed_off_at_once(lake: Lake, error: Exception,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    lake.create_topic("r.t")
    calls, retain = failing_retention([error])
    cleaner = Cleaner(lake, backoff_s=3600, transient_limit=3, retain=retain)
    with caplog.at_level("INFO", logger="compactor.metrics"):
        first = cleaner.run_once(now_ms=T0).topics["r.t"]
    assert not first.errors[0].transient and first.errors[0].backoff_s == 3600
    line = next(json.loads(r.getMessage()) for r in caplog.records if "topic-failed" in r.getMessage())
    assert line["transient"] is False and line["backoff_s"] == 3600
    second = cleaner.run_once(now_ms=T0).topics["r.t"]
    assert "uncleanable" in second.skipped and calls == ["r.t"]


def test_a_pass_counts_once_however_many_of_its_steps_failed(lake: Lake) -> None:
    lake.create_topic("r.c", config={"cleanup.policy": "compact"})
    produce(lake.topic("r.c"), records(2, "k"), now_ms=T0)  # due: never compacted

    def compact(lake_: Lake, name: str, now_ms: int) -> CompactionStandIn:
        raise CommitConflictError("lost a race")

    _, retain = failing_retention([CommitConflictError("lost a race")] * 10)
    cleaner = Cleaner(lake, backoff_s=3600, transient_limit=3, compact=compact, retain=retain)
    for _ in (1, 2):
        outcome = cleaner.run_once(now_ms=T0).topics["r.c"]
        assert [e.step for e in outcome.errors] == ["compact", "retention"]
        assert all(e.backoff_s == 0 for e in outcome.errors), "two failing steps of one pass counted twice"
    assert all(e.backoff_s == 3600 for e in cleaner.run_once(now_ms=T0).topics["r.c"].errors)
