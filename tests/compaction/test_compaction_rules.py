"""One test per rule of docs/guarantees.md#compaction, through the real Spark job."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.sql import SparkSession

from compactor.compaction.job import TwoPhaseCompactor, compact_topic
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.topics.records import ProducerRecord
from tests.helpers import compacted_rows, current_cursor, raw, view

pytestmark = pytest.mark.spark
DAY = 86_400_000


def make(lake: Lake, partitions: int = 1, /, **config: str) -> None:
    lake.create_topic("c.t", partitions=partitions, config={"cleanup.policy": "compact", **config})


def put(lake: Lake, *records: ProducerRecord, now: int = 1000) -> list[tuple[int, int]]:
    return produce(lake.topic("c.t"), list(records), now_ms=now).offsets


def rec(key: bytes | None, value: bytes | None, ts: int | None = None, **kw: Any) -> ProducerRecord:
    return ProducerRecord(key, value, timestamp_ms=ts, **kw)


# --- horizon ---------------------------------------------------------------------------------------------


def test_horizon_reaches_the_log_end_without_lag(spark: SparkSession, lake: Lake) -> None:
    make(lake, 2)
    put(lake, *(rec(b"k%d" % i, b"v") for i in range(10)))
    result = compact_topic(lake, "c.t", now_ms=5000)
    assert result.horizons == {str(p): n for p, n in enumerate(lake.topic("c.t").offsets().next_offsets)}


def test_min_compaction_lag_stops_at_the_first_young_record(spark: SparkSession, lake: Lake) -> None:
    make(lake, **{"min.compaction.lag.ms": "1000"})
    # timestamps are not ordered: offset 2 is young, offset 3 old again; the horizon stops at 2
    put(lake, rec(b"a", b"1", ts=100), rec(b"b", b"2", ts=200), rec(b"a", b"3", ts=9500), rec(b"b", b"4", ts=300))
    result = compact_topic(lake, "c.t", now_ms=10_000)
    assert result.horizons == {"0": 2}
    assert [(r.offset, r.value) for r in view(lake, "c.t")] == [(0, b"1"), (1, b"2"), (2, b"3"), (3, b"4")]
    # once the young record ages past the lag, the horizon moves on and a/b are compacted
    result = compact_topic(lake, "c.t", now_ms=10_501)
    assert result.horizons == {"0": 4}
    assert [(r.offset, r.value) for r in view(lake, "c.t")] == [(2, b"3"), (3, b"4")]


def test_horizons_never_decrease(spark: SparkSession, lake: Lake) -> None:
    make(lake)
    put(lake, rec(b"a", b"1", ts=100), rec(b"b", b"2", ts=100))
    compact_topic(lake, "c.t", now_ms=1000)
    lake.topic("c.t").set_config({"min.compaction.lag.ms": "1000000"})
    put(lake, rec(b"a", b"3", ts=999_999))
    result = compact_topic(lake, "c.t", now_ms=1000)
    assert not result.committed
    assert current_cursor(lake, "c.t").horizons == (2,)  # type: ignore[union-attr]


# --- latest wins -----------------------------------------------------------------------------------------


def test_latest_means_highest_offset_not_newest_timestamp(spark: SparkSession, lake: Lake) -> None:
    make(lake)
    put(lake, rec(b"k", b"old-offset-new-time", ts=9000), rec(b"k", b"new-offset-old-time", ts=10))
    compact_topic(lake, "c.t", now_ms=10_000)
    assert [r.value for r in view(lake, "c.t")] == [b"new-offset-old-time"]


def test_keys_compare_by_exact_bytes(spark: SparkSession, lake: Lake) -> None:
    make(lake)
    keys = [b"a", b"a\x00", b"\x00a", b"A", b"\xff", b"\xff\x00", b"", b"a "]
    put(lake, *(rec(k, b"first", partition=0) for k in keys))
    put(lake, *(rec(k, b"second", partition=0) for k in keys[::2]))
    compact_topic(lake, "c.t", now_ms=5000)
    got = {r.key: r.value for r in view(lake, "c.t")}
    assert got == {k: (b"second" if i % 2 == 0 else b"first") for i, k in enumerate(keys)}


def test_latest_wins_per_partition(spark: SparkSession, lake: Lake) -> None:
    make(lake, 2)
    put(lake, rec(b"k", b"p0", partition=0), rec(b"k", b"p1", partition=1), rec(b"k", b"p0-new", partition=0))
    compact_topic(lake, "c.t", now_ms=5000)
    assert [(r.partition, r.value) for r in view(lake, "c.t")] == [(0, b"p0-new"), (1, b"p1")]


# --- offsets, order, bytes -------------------------------------------------------------------------------


def test_kept_records_keep_every_field_byte_for_byte(spark: SparkSession, lake: Lake) -> None:
    make(lake, 3)
    records = [rec(b"k%d" % (i % 7), bytes(range(i % 256)) if i % 5 else b"", ts=1_700_000_000_123 + i,
                   headers=(("trace", b"\x00\x01"), ("trace", None), ("h\u00e9", b"x" * i)))
               for i in range(60)]
    put(lake, *records)
    compact_topic(lake, "c.t", now_ms=1_800_000_000_000)
    compacted = view(lake, "c.t")
    by_position = {(r.partition, r.offset): r for r in raw(lake, "c.t")}
    assert compacted and all(by_position[(r.partition, r.offset)] == r for r in compacted)
    for p in range(3):  # a subsequence of the raw log, in offset order
        offsets = [r.offset for r in compacted if r.partition == p]
        assert offsets == sorted(offsets)


# --- null keys -------------------------------------------------------------------------------------------


def test_null_keys_dropped_by_default_retained_on_request(spark: SparkSession, lake: Lake) -> None:
    make(lake)
    put(lake, rec(None, b"a"), rec(b"k", b"v"), rec(None, b"b"))
    compact_topic(lake, "c.t", now_ms=5000)
    assert [r.value for r in view(lake, "c.t")] == [b"v"]
    lake.topic("c.t").set_config({"compaction.null-key": "retain"})
    put(lake, rec(None, b"c"), rec(None, b"d"))
    compact_topic(lake, "c.t", now_ms=6000)
    # switching to retain keeps keyless records of the new range only
    assert [r.value for r in view(lake, "c.t")] == [b"v", b"c", b"d"]
    lake.topic("c.t").set_config({"compaction.null-key": "drop"})
    result = compact_topic(lake, "c.t", now_ms=7000)  # no new data, but the compacted rows change
    assert result.committed
    assert [r.value for r in view(lake, "c.t")] == [b"v"]


# --- tombstones (KIP-534) --------------------------------------------------------------------------------


def test_tombstone_removes_earlier_records_and_carries_its_delete_horizon(spark: SparkSession, lake: Lake) -> None:
    make(lake, **{"delete.retention.ms": str(DAY)})
    put(lake, rec(b"k", b"1"), rec(b"k", b"2"), rec(b"other", b"x"))
    compact_topic(lake, "c.t", now_ms=10_000)
    put(lake, rec(b"k", None))
    compact_topic(lake, "c.t", now_ms=20_000)
    rows = compacted_rows(lake, "c.t")
    assert [(r.key, r.value, h) for r, h in rows] == [(b"other", b"x", None), (b"k", None, 20_000 + DAY)]
    # kept while now < horizon, never recomputed by later runs ...
    put(lake, rec(b"other", b"y"))
    compact_topic(lake, "c.t", now_ms=20_000 + DAY - 1)
    assert (b"k", None, 20_000 + DAY) in [(r.key, r.value, h) for r, h in compacted_rows(lake, "c.t")]
    # ... and dropped by the first run at or after it, even with no new data
    result = compact_topic(lake, "c.t", now_ms=20_000 + DAY)
    assert result.committed and result.stats.tombstones_dropped == 1
    assert [r.key for r, _ in compacted_rows(lake, "c.t")] == [b"other"]


def test_zero_delete_retention_drops_tombstones_in_the_run_that_meets_them(spark: SparkSession, lake: Lake) -> None:
    make(lake, **{"delete.retention.ms": "0"})
    put(lake, rec(b"k", b"1"), rec(b"j", b"2"))
    compact_topic(lake, "c.t", now_ms=5000)
    put(lake, rec(b"k", None))
    result = compact_topic(lake, "c.t", now_ms=6000)
    assert [r.key for r in view(lake, "c.t")] == [b"j"]
    assert result.stats.tombstones_kept == 0 and result.stats.tombstones_dropped == 1


def test_reader_resuming_within_delete_retention_sees_tombstones(spark: SparkSession, lake: Lake) -> None:
    """Guarantee: a reader that resumes at offset o within delete.retention.ms of the run that first
    compacted past o sees every tombstone at an offset >= o."""
    make(lake, **{"delete.retention.ms": str(DAY)})
    put(lake, rec(b"a", b"1"), rec(b"b", b"1"), rec(b"c", b"1"))  # a consumer read up to offset 3
    put(lake, rec(b"a", None), rec(b"b", b"2"), rec(b"c", None))
    compact_topic(lake, "c.t", now_ms=100_000)
    compact_topic(lake, "c.t", now_ms=100_000 + DAY - 1)
    resumed = view(lake, "c.t", start={0: 3})
    assert [(r.offset, r.value) for r in resumed if r.is_tombstone] == [(3, None), (5, None)]


# --- empty work, triggers, policy ------------------------------------------------------------------------


def test_nothing_to_do_commits_nothing(spark: SparkSession, lake: Lake) -> None:
    make(lake)
    result = compact_topic(lake, "c.t", now_ms=1000)  # an empty topic
    assert not result.committed and result.compacted_snapshot_id is None
    put(lake, rec(b"k", b"v"))
    first = compact_topic(lake, "c.t", now_ms=2000)
    again = compact_topic(lake, "c.t", now_ms=3000)
    assert first.committed and not again.committed
    assert again.compacted_snapshot_id == first.compacted_snapshot_id
    assert current_cursor(lake, "c.t").snapshot_id == first.compacted_snapshot_id  # type: ignore[union-attr]


def test_compact_runs_when_not_due_and_if_due_skips(spark: SparkSession, lake: Lake) -> None:
    make(lake, **{"min.cleanable.dirty.ratio": "0.9"})
    put(lake, *(rec(b"k%d" % i, b"v" * 50) for i in range(20)))
    compact_topic(lake, "c.t", now_ms=1000)
    put(lake, rec(b"k1", b"small"))  # dirty ratio far below 0.9
    skipped = TwoPhaseCompactor(lake, "c.t", now_ms=2000, if_due=True).run()
    assert not skipped.committed and skipped.reason.startswith("not due")
    forced = TwoPhaseCompactor(lake, "c.t", now_ms=2000).run()
    assert forced.committed


@pytest.mark.slow  # the trigger rules stay in the loop JVM-free (test_horizons_triggers.py)
def test_if_due_runs_when_due_by_max_compaction_lag(spark: SparkSession, lake: Lake) -> None:
    make(lake, **{"min.cleanable.dirty.ratio": "0.99", "max.compaction.lag.ms": "5000"})
    put(lake, *(rec(b"k%d" % i, b"v" * 50, ts=1000) for i in range(20)))
    compact_topic(lake, "c.t", now_ms=2000)
    put(lake, rec(b"k1", b"x", ts=3000))
    assert not TwoPhaseCompactor(lake, "c.t", now_ms=7000, if_due=True).run().committed
    assert TwoPhaseCompactor(lake, "c.t", now_ms=8001, if_due=True).run().committed


# --- what a run writes (each phase's own logic: tests/compaction/phase1/, tests/compaction/phase2/) ---------


def test_cursor_summary_carries_horizons_snapshot_clock_settings_and_stats(spark: SparkSession, lake: Lake) -> None:
    make(lake, 2, **{"delete.retention.ms": "123456"})
    put(lake, rec(b"a", b"1"), rec(b"a", b"2"), rec(b"b", None), rec(None, b"x"))
    result = compact_topic(lake, "c.t", now_ms=777)
    table = lake.catalog.load_table("c.t__compacted")
    summary = table.metadata.snapshot_by_name("main").summary.additional_properties  # type: ignore[union-attr]
    assert json.loads(summary["compactor.horizons"]) == list(lake.topic("c.t").offsets().next_offsets)
    assert int(summary["compactor.raw-snapshot-id"]) == lake.topic("c.t").snapshot.snapshot_id  # type: ignore[union-attr]
    assert summary["compactor.now-ms"] == "777"
    assert json.loads(summary["compactor.settings"])["delete.retention.ms"] == "123456"
    stats = json.loads(summary["compactor.stats"])
    for name in ("records_read", "records_kept", "records_removed", "tombstones_kept", "tombstones_dropped",
                 "bytes_read", "bytes_written", "duration_ms", "durations_ms"):
        assert name in stats and name in result.stats.as_json()
    assert (stats["records_read"], stats["records_kept"], stats["records_removed"]) == (4, 2, 2)
    assert (stats["tombstones_kept"], stats["tombstones_dropped"]) == (1, 0)
    assert stats["bytes_read"] == 2 + 2 + 1 + 1  # key + value bytes of the four records
    assert stats["bytes_written"] > 0
    # the raw table shows where the cursor is (for people)
    mirror = lake.topic("c.t").cursor_mirror()
    assert mirror is not None and mirror["compacted_snapshot_id"] == result.compacted_snapshot_id


@pytest.mark.slow  # plain Iceberg reads stay in the loop (test_other_engines.py)
def test_the_compacted_view_is_plain_iceberg(spark: SparkSession, lake: Lake) -> None:
    make(lake)
    put(lake, rec(b"k", b"1"), rec(b"k", b"2"), rec(b"j", b"3"))
    compact_topic(lake, "c.t", now_ms=1000)
    put(lake, rec(b"k", b"4"))
    compact_topic(lake, "c.t", now_ms=2000)
    name = lake.config.catalog_name
    via_spark = spark.sql(f"SELECT offset, value FROM {name}.c.t__compacted ORDER BY offset").collect()
    assert [(r.offset, bytes(r.value)) for r in via_spark] == [(2, b"3"), (3, b"4")]
    via_pyiceberg = lake.catalog.load_table("c.t__compacted").scan().to_arrow().sort_by("offset")
    assert via_pyiceberg.column("offset").to_pylist() == [2, 3]


def test_records_are_read_once_from_the_raw_range(spark: SparkSession, lake: Lake) -> None:
    make(lake, 2)
    put(lake, *(rec(b"k%d" % (i % 3), b"v") for i in range(12)))
    first = compact_topic(lake, "c.t", now_ms=1000)
    put(lake, rec(b"k0", b"w"))
    second = compact_topic(lake, "c.t", now_ms=2000)
    assert first.stats.records_read == 12 and second.stats.records_read == 1
    assert second.stats.rows_deleted_from_view == 1 and second.stats.rows_appended == 1
    newest = [r for r in raw(lake, "c.t") if r.value == b"w"]
    assert [r for r in view(lake, "c.t") if r.key == b"k0"] == newest


@pytest.mark.slow  # many runs; the rewrite mode stays in the loop
def test_view_is_rewritten_when_position_deletes_pile_up(spark: SparkSession, lake: Lake) -> None:
    from tests.helpers import produce_both
    from tests.model import ModelSettings, TopicModel

    make(lake, 2)
    model = TopicModel(2)
    settings = ModelSettings()
    now = 10_000
    rewrites = []
    for round_number in range(5):
        produce_both(lake, "c.t", model, [rec(b"k%d" % (i % 10), b"r%d-%d" % (round_number, i)) for i in range(12)],
                     now)
        now += 1000
        result = compact_topic(lake, "c.t", now_ms=now)
        model.compact(now, settings)
        rewrites.append(result.stats.rewrite_reason)
        assert compacted_rows(lake, "c.t") == model.compacted_rows()
        head = lake.catalog.load_table("c.t__compacted").metadata.snapshot_by_name("main")
        assert head is not None and head.summary is not None
        summary = head.summary
        if result.stats.rewrite_reason:
            # a rewrite leaves no position deletes and no delete files behind
            assert summary["total-position-deletes"] == "0" and summary["total-delete-files"] == "0"
    assert rewrites[0] is None and any(rewrites), rewrites


def test_forced_rewrite_gives_the_same_view(spark: SparkSession, lake: Lake) -> None:
    make(lake, **{"compaction.null-key": "retain"})
    put(lake, rec(b"a", b"1"), rec(None, b"n"), rec(b"b", None), rec(b"a", b"2"))  # offsets 0..3
    compact_topic(lake, "c.t", now_ms=1000)
    put(lake, rec(b"b", b"3"), rec(b"c", b"4"))  # offsets 4, 5
    compact_topic(lake, "c.t", now_ms=2000)
    put(lake, rec(b"c", b"5"))  # offset 6
    result = TwoPhaseCompactor(lake, "c.t", now_ms=3000, force_rewrite=True).run()
    assert result.stats.rewrite_reason == "requested" and result.stats.mode == "rewrite"
    assert [(r.offset, r.key, r.value) for r, _ in compacted_rows(lake, "c.t")] == [
        (1, None, b"n"), (3, b"a", b"2"), (4, b"b", b"3"), (6, b"c", b"5")]


@pytest.mark.slow  # five runs; empty work stays in the loop
def test_a_pass_that_finds_nothing_to_expire_commits_nothing(spark: SparkSession, lake: Lake) -> None:
    """The view's smallest delete horizon is a lower bound after incremental runs: a later run may look for
    expired tombstones and find none, and must then not commit."""
    make(lake, **{"delete.retention.ms": "1000"})
    put(lake, rec(b"a", None), rec(b"b", b"1"))
    compact_topic(lake, "c.t", now_ms=10_000)  # tombstone a, delete horizon 11_000
    put(lake, rec(b"d", None))
    compact_topic(lake, "c.t", now_ms=10_300)  # tombstone d, delete horizon 11_300
    put(lake, rec(b"a", b"back"))
    compact_topic(lake, "c.t", now_ms=10_500)  # a's tombstone is superseded; d's stays
    cursor = current_cursor(lake, "c.t")
    assert cursor is not None and cursor.view.tombstones == 1
    assert cursor.view.min_tombstone_delete_horizon == 11_000  # a lower bound: the true minimum is 11_300
    result = compact_topic(lake, "c.t", now_ms=11_200)  # looks for expired tombstones, finds none
    assert not result.committed and current_cursor(lake, "c.t") == cursor
    assert compact_topic(lake, "c.t", now_ms=11_300).committed  # now d's tombstone expires
    assert [r.key for r in view(lake, "c.t")] == [b"b", b"a"]
