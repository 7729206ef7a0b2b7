"""Runs with no new records that still have work: expired tombstones, keyless rows after a switch to
``compaction.null-key=drop``, a ``delete,compact`` trim, and a forced rewrite that meets expired tombstones.

Each kind runs in both layouts in this process, and once more through ``compactor``'s command line in a fresh
process (the set-up stays in this process; the four runs under test share the one JVM of that process). A run
with nothing new used to fail with "Catalog 'default_iceberg' plugin class not found": its passes ran on worker
threads where the job session was not the active one. The results must be exact: the rows removed, nothing
else changed, the horizons kept, and the cursor moved. Afterwards the caller's own session is still the active
one and has none of the job's settings.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from pyspark.sql import SparkSession

from compactor.compaction.execution import JOB_SETTINGS
from compactor.compaction.job import compact_topic
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.topics.records import ProducerRecord, Record
from tests.helpers import cli_chain, compacted_rows, current_cursor, view

pytestmark = pytest.mark.spark
HOUR = 3_600_000
T0 = 1_767_225_600_000


@dataclass(frozen=True)
class Quiet:
    """A topic compacted once, and the run with nothing new that must change it."""

    now_ms: int                       # the quiet run's clock
    kept: list[tuple[int, bytes | None, bytes | None]]  # (offset, key, value) of the view afterwards
    removed: int                      # compacted rows the quiet run removes
    tombstones_dropped: int
    mode: str                         # the quiet run's stats.mode
    rewrite: bool = False             # a forced rewrite
    trim_before_ms: int | None = None  # a delete,compact trim


def tombstones(lake: Lake, name: str) -> Quiet:
    """A tombstone, compacted, whose delete horizon then passes (KIP-534)."""
    topic = lake.create_topic(name, config={"cleanup.policy": "compact", "delete.retention.ms": str(HOUR)})
    produce(topic, [ProducerRecord(b"a", b"1"), ProducerRecord(b"b", b"2"), ProducerRecord(b"a", None),
                    ProducerRecord(b"c", b"3")], now_ms=T0)
    compact_topic(lake, name, now_ms=T0 + 1)
    return Quiet(T0 + 2 + HOUR, [(1, b"b", b"2"), (3, b"c", b"3")], removed=1, tombstones_dropped=1,
                 mode="incremental")


def keyless(lake: Lake, name: str) -> Quiet:
    """Keyless rows kept under ``retain``; the setting then switches to ``drop``."""
    topic = lake.create_topic(name, config={"cleanup.policy": "compact", "compaction.null-key": "retain"})
    produce(topic, [ProducerRecord(None, b"x"), ProducerRecord(b"k", b"1"), ProducerRecord(None, b"y")], now_ms=T0)
    compact_topic(lake, name, now_ms=T0 + 1)
    lake.topic(name).set_config({"compaction.null-key": "drop"})
    return Quiet(T0 + 2, [(1, b"k", b"1")], removed=2, tombstones_dropped=0, mode="incremental")


def trim(lake: Lake, name: str) -> Quiet:
    """``delete,compact``: compacted rows older than ``retention.ms`` leave the view with no new records."""
    topic = lake.create_topic(name, config={"cleanup.policy": "delete,compact", "retention.ms": str(HOUR)})
    produce(topic, [ProducerRecord(b"old", b"1", timestamp_ms=T0), ProducerRecord(b"new", b"2", timestamp_ms=T0 + HOUR),
                    ProducerRecord(b"old2", b"3", timestamp_ms=T0)], now_ms=T0)
    compact_topic(lake, name, now_ms=T0 + HOUR)
    now = T0 + HOUR + HOUR // 2
    return Quiet(now, [(1, b"new", b"2")], removed=2, tombstones_dropped=0, mode="trim", trim_before_ms=now - HOUR)


def rewrite(lake: Lake, name: str) -> Quiet:
    """A forced rewrite of a view whose only change is an expired tombstone."""
    quiet = tombstones(lake, name)
    return Quiet(quiet.now_ms, quiet.kept, quiet.removed, quiet.tombstones_dropped, mode="rewrite", rewrite=True)


KINDS: dict[str, Callable[[Lake, str], Quiet]] = {
    "tombstones": tombstones, "keyless": keyless, "trim": trim, "rewrite": rewrite}


def check(lake: Lake, name: str, quiet: Quiet, before: int, stats: dict[str, object], snapshot_id: int) -> None:
    """The quiet run removed exactly what it should, read nothing, kept the horizons and moved the cursor."""
    cursor = current_cursor(lake, name)
    assert cursor is not None and cursor.snapshot_id == snapshot_id != before, "the cursor did not move"
    assert cursor.previous == before
    assert list(cursor.horizons) == list(cursor.raw_next_offsets), "the horizons changed"
    assert [(r.offset, r.key, r.value) for r, _ in compacted_rows(lake, name)] == quiet.kept
    assert [(r.offset, r.key, r.value) for r in view(lake, name)] == quiet.kept
    assert stats["records_read"] == 0 and stats["bytes_read"] == 0
    assert stats["records_removed"] == quiet.removed, stats
    assert stats["tombstones_dropped"] == quiet.tombstones_dropped, stats
    assert stats["records_kept"] == len(quiet.kept), stats
    assert stats["mode"] == quiet.mode, stats


# every kind is in the pre-commit loop through the fresh process below; in this process one kind and layout
IN_LOOP = {("tombstones", "partitioned")}


@pytest.mark.parametrize("kind, layout", [
    pytest.param(kind, layout, marks=() if (kind, layout) in IN_LOOP else pytest.mark.slow)
    for kind in KINDS for layout in ("partitioned", "sliced")])
def test_a_run_with_nothing_new_does_its_work(spark: SparkSession, lake: Lake, kind: str, layout: str) -> None:
    name = f"q.{kind}"
    quiet = KINDS[kind](lake, name)
    cursor = current_cursor(lake, name)
    assert cursor is not None
    caller = SparkSession.getActiveSession()
    caller_settings = {key: spark.conf.get(key, None) for key in JOB_SETTINGS}
    jvm_sessions = spark.sparkContext._jvm.org.apache.spark.sql.SparkSession  # type: ignore[union-attr]
    job = lake.job_spark()._jsparkSession
    active_in: dict[str, bool] = {}  # each step of the run, and whether the job session was active in its thread

    def listener(step: str, _: object) -> None:
        current = jvm_sessions.getActiveSession()
        active_in[step] = bool(current.isDefined() and current.get().equals(job))

    result = compact_topic(lake, name, now_ms=quiet.now_ms, layout=layout, force_rewrite=quiet.rewrite,
                           trim_before_ms=quiet.trim_before_ms, listener=listener)
    assert result.committed, result.reason
    spark_steps = {step: active for step, active in active_in.items() if step.startswith("phase 2")}
    assert spark_steps and all(spark_steps.values()), f"steps run without the job session active: {active_in}"
    assert result.stats.layout == layout
    check(lake, name, quiet, cursor.snapshot_id, result.stats.as_json(), result.compacted_snapshot_id or 0)
    # the caller's session is still the active one, carries none of the job's settings, and still reads
    assert SparkSession.getActiveSession() is caller
    assert {key: spark.conf.get(key, None) for key in JOB_SETTINGS} == caller_settings
    identifier = lake.topic(name).name.spark_identifier(lake.config.catalog_name)
    assert spark.read.format("iceberg").load(identifier).count() == sum(lake.topic(name).offsets().next_offsets)
    again = compact_topic(lake, name, now_ms=quiet.now_ms, layout=layout, trim_before_ms=quiet.trim_before_ms)
    assert not again.committed, "the work was done: a second run has none"


# One fresh process runs the four kinds one after another through ``compactor.cli.main.main`` (one JVM, not four:
# the first run is in a fresh process, the others check each kind's command line); the layouts alternate, and
# both are covered in-process above.
FRESH = [("tombstones", "sliced"), ("keyless", "partitioned"), ("trim", None), ("rewrite", "sliced")]


def test_a_run_with_nothing_new_in_a_fresh_process(spark: SparkSession, lake: Lake) -> None:
    quiets = {kind: KINDS[kind](lake, f"q.{kind}") for kind, _ in FRESH}
    before = {}
    for kind, _ in FRESH:
        cursor = current_cursor(lake, f"q.{kind}")
        assert cursor is not None
        before[kind] = cursor.snapshot_id
    verbs: list[list[str]] = []
    for kind, layout in FRESH:
        quiet = quiets[kind]
        if kind == "trim":  # as users run it: retention applies the delete,compact trim
            verbs.append(["retention", f"q.{kind}", "--now-ms", str(quiet.now_ms)])
        else:
            verbs.append(["compact", f"q.{kind}", "--now-ms", str(quiet.now_ms), "--layout", str(layout),
                          *(["--rewrite"] if quiet.rewrite else [])])
    results, _ = cli_chain(lake, *verbs)
    for (kind, layout), result in zip(FRESH, results, strict=True):
        name, quiet = f"q.{kind}", quiets[kind]
        out = json.loads(str(result["stdout"]))
        if kind == "trim":
            trimmed = out["compacted_trim"]
            assert trimmed["committed"] is True, trimmed
            stats = current_cursor(lake, name).stats.as_json()  # type: ignore[union-attr]
            snapshot_id = current_cursor(lake, name).snapshot_id  # type: ignore[union-attr]
        else:
            assert out["committed"] is True, out
            assert out["stats"]["layout"] == layout
            stats, snapshot_id = out["stats"], out["compacted_snapshot_id"]
        check(lake, name, quiet, before[kind], stats, snapshot_id)


@pytest.mark.slow  # the quiet-run kinds stay in the loop (above)
def test_the_issue_scenario_record_by_record(spark: SparkSession, lake: Lake) -> None:
    """The reported sequence: a value, a late tombstone, another key, then a run past the delete horizon."""
    name = "conf.case"
    topic = lake.create_topic(name, config={"cleanup.policy": "compact", "delete.retention.ms": "86400000"})
    produce(topic, [ProducerRecord(b"0", b"0", timestamp_ms=1767312010000)])
    compact_topic(lake, name, now_ms=1767225601000)
    produce(lake.topic(name), [ProducerRecord(b"0", None, timestamp_ms=1767139190000)])
    compact_topic(lake, name, now_ms=1767225602000)
    produce(lake.topic(name), [ProducerRecord(b"1", b"1", timestamp_ms=1767225603000)])
    compact_topic(lake, name, now_ms=1767225604000)
    result = compact_topic(lake, name, now_ms=1767312002000)
    assert result.committed and result.stats.tombstones_dropped == 1 and result.stats.records_read == 0
    assert view(lake, name) == [Record(0, 2, 1767225603000, b"1", b"1", ())]
