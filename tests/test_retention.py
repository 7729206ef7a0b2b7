"""SEMANTICS section 4 (retention and expiry) with a controlled clock: delete / compact / delete,compact,
retention.bytes, pinned readers, snapshot expiry, physical deletion, orphans, stale refs, policy changes."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from compactor.compaction.job import compact_topic
from compactor.errors import OffsetOutOfRangeError, SnapshotExpiredError
from compactor.lake import Lake
from compactor.retention import run_retention
from compactor.topics.producer import produce
from compactor.topics.records import ProducerRecord, Record
from readers.reader import TopicReader
from tests.helpers import compacted_rows, current_cursor, raw, view

HOUR = 3_600_000
DAY = 24 * HOUR
T0 = 100 * DAY  # the controlled clock's origin


def batch(keys: str, stamp: int, partition: int = 0) -> list[ProducerRecord]:
    return [ProducerRecord(k.encode(), f"{k}@{stamp}".encode(), partition=partition, timestamp_ms=stamp)
            for k in keys]


def local_path(location: str) -> Path:
    return Path("/" + location.removeprefix("file:").lstrip("/"))


def files_on_disk(lake: Lake) -> set[Path]:
    root = local_path(lake.config.warehouse)
    return {p for p in root.rglob("*") if p.is_file() and p.suffix in (".parquet", ".avro")}


def offsets(records: list[Record]) -> list[int]:
    return [r.offset for r in records]


# --- delete ---------------------------------------------------------------------------------------------


def test_delete_removes_whole_old_files_and_never_a_record_newer_than_the_limit(lake: Lake) -> None:
    lake.create_topic("d.t", partitions=2, config={"retention.ms": str(DAY)})
    topic = lake.topic("d.t")
    produce(topic, batch("abc", T0) + batch("xy", T0, 1), now_ms=T0)               # old
    produce(topic, batch("de", T0 + 1) + batch("z", T0 + 5 * DAY, 1), now_ms=T0)   # old / young
    # mixed file: one young record keeps the whole file, and everything after it
    produce(topic, [*batch("fg", T0 + 2), ProducerRecord(b"h", b"h", partition=0, timestamp_ms=T0 + 5 * DAY)],
            now_ms=T0)
    produce(topic, batch("i", T0 + 3), now_ms=T0)  # old, but after a young record: not a prefix
    before = raw(lake, "d.t")
    now = T0 + 3 * DAY
    result = run_retention(lake, "d.t", now_ms=now).as_json()
    after = raw(lake, "d.t")
    removed = [r for r in before if r not in after]
    assert offsets([r for r in removed if r.partition == 0]) == [0, 1, 2, 3, 4]
    assert offsets([r for r in removed if r.partition == 1]) == [0, 1]
    assert all(r.timestamp_ms < now - DAY for r in removed)
    assert result["removed_records"] == 7 and result["removed_files"] == 3
    assert result["log_start_offsets"] == {"0": 5, "1": 2}
    assert lake.topic("d.t").offsets().log_start_offsets == (5, 2)
    # gap-free [LSO, N) afterwards, per partition
    for p, lso in ((0, 5), (1, 2)):
        assert offsets([r for r in after if r.partition == p]) == list(range(lso, lake.topic("d.t").offsets()
                                                                                .next_offsets[p]))
    # a start below the log start is out of range unless the caller chose a reset policy
    with pytest.raises(OffsetOutOfRangeError, match=r"\[5, 9\)"):
        raw(lake, "d.t", start={0: 2})
    assert offsets(raw(lake, "d.t", start={0: 2}, reset="earliest"))[:2] == [5, 6]
    # a second pass at the same clock removes nothing; LSO never decreases
    again = run_retention(lake, "d.t", now_ms=now).as_json()
    assert again["removed_records"] == 0 and again["log_start_offsets"] == {"0": 5, "1": 2}


def test_an_emptied_partition_starts_at_its_next_offset(lake: Lake) -> None:
    lake.create_topic("d.e", config={"retention.ms": str(HOUR)})
    produce(lake.topic("d.e"), batch("abc", T0), now_ms=T0)
    result = run_retention(lake, "d.e", now_ms=T0 + DAY).as_json()
    assert result["log_start_offsets"] == {"0": 3}
    assert raw(lake, "d.e") == []
    produce(lake.topic("d.e"), batch("d", T0 + DAY), now_ms=T0 + DAY)
    assert offsets(raw(lake, "d.e")) == [3]


def test_retention_bytes_removes_oldest_files_while_the_rest_stays_at_or_above_the_limit(lake: Lake) -> None:
    lake.create_topic("d.b", config={"retention.ms": "-1"})
    for i in range(4):
        produce(lake.topic("d.b"), batch("abcdefgh", T0 + i), now_ms=T0)
    sizes = [f.size_bytes for f in lake.topic("d.b").raw_files()]
    limit = sizes[2] + sizes[3]  # exactly two files' worth: the two oldest go, not a third
    lake.topic("d.b").set_config({"retention.bytes": str(limit)})
    result = run_retention(lake, "d.b", now_ms=T0).as_json()
    assert result["removed_files"] == 2 and result["log_start_offsets"] == {"0": 16}
    assert sum(f.size_bytes for f in lake.topic("d.b").raw_files()) >= limit
    lake.topic("d.b").set_config({"retention.bytes": str(limit + 1)})
    assert run_retention(lake, "d.b", now_ms=T0).as_json()["removed_files"] == 0


def test_dry_run_changes_nothing(lake: Lake) -> None:
    lake.create_topic("d.n", config={"retention.ms": str(HOUR)})
    produce(lake.topic("d.n"), batch("ab", T0), now_ms=T0)
    metadata = lake.topic("d.n").table.metadata_location
    result = run_retention(lake, "d.n", now_ms=T0 + DAY, dry_run=True).as_json()
    assert result["dry_run"] is True and result["removed_records"] == 2 and result["log_start_offsets"] == {"0": 2}
    assert lake.topic("d.n").table.metadata_location == metadata
    assert offsets(raw(lake, "d.n")) == [0, 1]


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def raw_step_lines(lake: Lake, name: str, now_ms: int, dry_run: bool) -> list[str]:
    """The progress lines of retention's raw step (``retention NAME: raw: ...``)."""
    logger, handler = logging.getLogger("compactor.progress"), _Lines()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        run_retention(lake, name, now_ms=now_ms, dry_run=dry_run)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return [line for line in handler.lines if f"retention {name}: raw:" in line]


def test_the_raw_step_says_what_it_would_remove_in_a_dry_run_and_when_it_removes_nothing(lake: Lake) -> None:
    lake.create_topic("d.m", config={"retention.ms": str(HOUR)})
    produce(lake.topic("d.m"), batch("ab", T0), now_ms=T0)
    [line] = raw_step_lines(lake, "d.m", T0, dry_run=True)  # nothing is old enough yet
    assert "would remove no raw files" in line
    [line] = raw_step_lines(lake, "d.m", T0, dry_run=False)
    assert "removed no raw files" in line and "prefix" not in line
    [line] = raw_step_lines(lake, "d.m", T0 + DAY, dry_run=True)
    assert "would remove a prefix of raw files" in line
    assert offsets(raw(lake, "d.m")) == [0, 1]
    [line] = raw_step_lines(lake, "d.m", T0 + DAY, dry_run=False)
    assert line.startswith("retention d.m: raw: removed a prefix of raw files")
    assert raw(lake, "d.m") == []


def test_a_raw_reader_pinned_before_retention_reads_its_snapshot_for_its_lease(lake: Lake) -> None:
    lake.create_topic("d.p", config={"retention.ms": str(HOUR), "history.expire.max-snapshot-age-ms": "0",
                                     "compaction.cursor.retain-ms": str(HOUR)})
    produce(lake.topic("d.p"), batch("ab", T0), now_ms=T0)
    produce(lake.topic("d.p"), batch("c", T0 + 1), now_ms=T0 + 1)
    reader = TopicReader(lake, "d.p", now_ms=T0 + DAY)
    expected = list(reader.records())
    run_retention(lake, "d.p", now_ms=T0 + DAY)  # removes both files from the current snapshot
    assert raw(lake, "d.p") == []
    assert list(reader.records()) == expected  # within the lease: files are kept
    # past the lease, expiry may delete the files: the reader fails loudly, never with partial results
    result = run_retention(lake, "d.p", now_ms=T0 + DAY + HOUR + 1).as_json()
    assert result["expired_snapshots"] >= 1
    with pytest.raises(SnapshotExpiredError):
        list(reader.records())


# --- expiry and physical deletion ---------------------------------------------------------------------------


def test_expiry_keeps_protected_snapshots_and_storage_shrinks(lake: Lake) -> None:
    lake.create_topic("e.t", config={"retention.ms": str(DAY), "history.expire.max-snapshot-age-ms": str(DAY),
                                     "history.expire.min-snapshots-to-keep": "1",
                                     "compaction.cursor.retain-ms": str(HOUR)})
    for i in range(5):
        produce(lake.topic("e.t"), batch("abcd", T0 + i * HOUR), now_ms=T0 + i * HOUR)
    snapshots = [s.snapshot_id for s in lake.topic("e.t").table.metadata.snapshots]
    parquet_before = {p for p in files_on_disk(lake) if p.suffix == ".parquet"}
    assert len(parquet_before) == 5
    now = T0 + DAY + 12 * HOUR
    first = run_retention(lake, "e.t", now_ms=now).as_json()
    assert first["removed_files"] == 5 and raw(lake, "e.t") == []
    table = lake.topic("e.t").table
    remaining = {s.snapshot_id for s in table.metadata.snapshots}
    # the last produce snapshot was current until this pass: a reader may hold it for its lease
    assert snapshots[-1] in remaining and not remaining & set(snapshots[:-1])
    assert first["expired_snapshots"] == 4
    assert {p for p in files_on_disk(lake) if p.suffix == ".parquet"} == parquet_before  # still needed
    second = run_retention(lake, "e.t", now_ms=now + HOUR).as_json()
    table = lake.topic("e.t").table
    current = table.current_snapshot()
    assert current is not None and [s.snapshot_id for s in table.metadata.snapshots] == [current.snapshot_id]
    assert second["expired_snapshots"] == 1
    assert not {p for p in files_on_disk(lake) if p.suffix == ".parquet"}, "expired data files must be deleted"
    assert second["expiry"]["raw"]["deleted_bytes"] > 0


def test_expiry_keeps_the_newest_snapshots_and_young_ones(lake: Lake) -> None:
    lake.create_topic("e.k", config={"retention.ms": "-1", "history.expire.max-snapshot-age-ms": str(DAY),
                                     "history.expire.min-snapshots-to-keep": "3",
                                     "compaction.cursor.retain-ms": "0"})
    for i in range(6):
        produce(lake.topic("e.k"), batch("a", T0 + i * DAY), now_ms=T0 + i * DAY)
    snapshots = [s.snapshot_id for s in lake.topic("e.k").table.metadata.snapshots]
    run_retention(lake, "e.k", now_ms=T0 + 5 * DAY + 1)
    remaining = [s.snapshot_id for s in lake.topic("e.k").table.metadata.snapshots]
    # newest three of main's history stay; of the others, only those older than a day go (all of them here)
    assert remaining == snapshots[3:]
    assert offsets(raw(lake, "e.k")) == list(range(6))


def test_orphans_are_deleted_only_after_their_minimum_age(lake: Lake) -> None:
    topic = lake.create_topic("e.o", config={"retention.ms": "-1"})
    produce(topic, batch("a", T0), now_ms=T0)
    data_dir = local_path(topic.table.metadata.location) / "data"
    stray = data_dir / "crashed-run-output.parquet"
    stray.parent.mkdir(parents=True, exist_ok=True)
    stray.write_bytes(b"not referenced by any snapshot")
    run_retention(lake, "e.o", now_ms=T0)
    assert stray.exists(), "a young orphan may belong to a running writer"
    lake.topic("e.o").set_config({"compaction.orphan-min-age-ms": "0"})
    result = run_retention(lake, "e.o", now_ms=T0).as_json()
    assert not stray.exists()
    assert result["expiry"]["raw"]["orphan_files"] == 1
    assert offsets(raw(lake, "e.o")) == [0]  # referenced files are untouched


# --- compact and delete,compact (Spark) -----------------------------------------------------------------------


@pytest.mark.spark
def test_compact_never_removes_at_or_above_a_retained_cursors_horizon(spark: SparkSession, lake: Lake) -> None:
    lake.create_topic("c.t", config={"cleanup.policy": "compact", "retention.ms": str(HOUR),
                                     "compaction.cursor.retain-ms": str(DAY)})
    topic = lake.topic("c.t")
    produce(topic, batch("ab", T0), now_ms=T0)
    # no cursor yet: nothing is compacted, so nothing may go
    assert run_retention(lake, "c.t", now_ms=T0 + DAY).as_json()["removed_records"] == 0
    compact_topic(lake, "c.t", now_ms=T0 + 1)                  # C1: horizon 2
    produce(topic, batch("ac", T0 + 2), now_ms=T0 + 2)           # offsets 2, 3
    compact_topic(lake, "c.t", now_ms=T0 + 3)                  # C2: horizon 4, C1 retained for a day
    produce(topic, batch("d", T0 + 4), now_ms=T0 + 4)            # offset 4, above every horizon
    result = run_retention(lake, "c.t", now_ms=T0 + 10 * HOUR).as_json()
    assert result["log_start_offsets"] == {"0": 2}, "capped at the retained earlier cursor's horizon (2)"
    result = run_retention(lake, "c.t", now_ms=T0 + 3 + DAY).as_json()  # C1 no longer retained
    assert result["log_start_offsets"] == {"0": 4}, "capped at the current cursor's horizon (4)"
    assert offsets(raw(lake, "c.t")) == [4]
    # the compacted reader still returns every key: compacted rows below the horizon, the raw tail above it
    assert [(r.key, r.offset) for r in view(lake, "c.t")] == [(b"b", 1), (b"a", 2), (b"c", 3), (b"d", 4)]


@pytest.mark.spark
def test_delete_compact_trims_the_compacted_view_with_a_new_cursor(spark: SparkSession, lake: Lake) -> None:
    lake.create_topic("c.dc", config={"cleanup.policy": "delete,compact", "retention.ms": str(DAY),
                                      "delete.retention.ms": str(10 * DAY)})
    topic = lake.topic("c.dc")
    produce(topic, [*batch("ab", T0), ProducerRecord(b"t", None, partition=0, timestamp_ms=T0)], now_ms=T0)
    produce(topic, batch("c", T0 + 2 * DAY), now_ms=T0 + 2 * DAY)
    compact_topic(lake, "c.dc", now_ms=T0 + 2 * DAY)
    first = current_cursor(lake, "c.dc")
    assert first is not None and first.horizons == (4,)
    result = run_retention(lake, "c.dc", now_ms=T0 + 2 * DAY + 1).as_json()
    trim = result["compacted_trim"]
    assert trim["committed"] is True and trim["rows_removed"] == 3  # a, b and the tombstone t
    second = current_cursor(lake, "c.dc")
    assert second is not None and second.snapshot_id != first.snapshot_id
    assert second.horizons == first.horizons and second.previous == first.snapshot_id
    # the trim removed offsets 0-2: the compacted start advances to the lowest offset the view keeps
    assert first.compacted_start == (0,) and second.compacted_start == (3,)
    assert [r.key for r, _ in compacted_rows(lake, "c.dc")] == [b"c"]
    assert [r.key for r in view(lake, "c.dc")] == [b"c"]
    # the raw side keeps its delete rule, capped at the horizon: the old file is gone, offset 3 stays
    assert result["log_start_offsets"] == {"0": 3}
    # a second pass finds nothing to trim and commits nothing
    again = run_retention(lake, "c.dc", now_ms=T0 + 2 * DAY + 2).as_json()
    assert again["compacted_trim"]["committed"] is False
    assert current_cursor(lake, "c.dc").snapshot_id == second.snapshot_id  # type: ignore[union-attr]


@pytest.mark.spark
def test_delete_compact_advances_the_compacted_start_above_the_raw_log_start(spark: SparkSession,
                                                                             lake: Lake) -> None:
    lake.create_topic("c.cs", partitions=3, config={"cleanup.policy": "delete,compact", "retention.ms": str(DAY)})
    topic = lake.topic("c.cs")
    # partition 0: old a and young c in ONE raw file, so file-granular raw retention keeps offset 0;
    # partition 1: young records only, with x superseded (a compaction gap at offset 0, nothing to trim);
    # partition 2: one old record, so the trim empties its compacted rows
    produce(topic, [*batch("a", T0), *batch("c", T0 + 2 * DAY), *batch("xxy", T0 + 2 * DAY, 1), *batch("z", T0, 2)],
            now_ms=T0 + 2 * DAY)
    compact_topic(lake, "c.cs", now_ms=T0 + 2 * DAY)
    assert current_cursor(lake, "c.cs").compacted_start == (0, 0, 0)  # type: ignore[union-attr]
    result = run_retention(lake, "c.cs", now_ms=T0 + 2 * DAY + 1).as_json()
    assert result["compacted_trim"]["committed"] is True and result["compacted_trim"]["rows_removed"] == 2
    assert result["log_start_offsets"] == {"0": 0, "1": 0, "2": 1}, "raw retention keeps the mixed file"
    cursor = current_cursor(lake, "c.cs")
    assert cursor is not None and cursor.compacted_start == (1, 0, 1), \
        "trimmed partitions advance (an emptied one to its horizon); the untrimmed one stays"
    # compacted reads: offset 0 is below the compacted start now; raw reads still hold it
    with pytest.raises(OffsetOutOfRangeError, match=r"compacted view holds \[1, 2\)"):
        view(lake, "c.cs", start={0: 0})
    expected = [(0, 1), (1, 1), (1, 2)]  # p0: c; p1: x, y
    assert [(r.partition, r.offset) for r in view(lake, "c.cs", start={0: 0}, reset="earliest")] == expected
    assert [(r.partition, r.offset) for r in view(lake, "c.cs", start={0: 1})] == expected
    assert [r.offset for r in raw(lake, "c.cs", start={0: 0}) if r.partition == 0] == [0, 1]
    # partition 1 kept its start: offset 0 there is a compaction gap, so reading continues at the next offset
    assert [(r.partition, r.offset) for r in view(lake, "c.cs", start={1: 0})] == expected


@pytest.mark.spark
def test_compacted_expiry_keeps_retained_cursors_and_drops_stale_tags(spark: SparkSession, lake: Lake) -> None:
    lake.create_topic("c.x", config={"cleanup.policy": "compact", "compaction.cursor.retain-ms": str(HOUR),
                                     "history.expire.max-snapshot-age-ms": "0", "retention.ms": "-1"})
    topic = lake.topic("c.x")
    cursors = []
    for i in range(3):
        produce(topic, batch("ab", T0 + i * HOUR), now_ms=T0 + i * HOUR)
        compact_topic(lake, "c.x", now_ms=T0 + i * HOUR)
        cursors.append(current_cursor(lake, "c.x").snapshot_id)  # type: ignore[union-attr]
    pinned = TopicReader(lake, "c.x", read_compacted=True, now_ms=T0 + 2 * HOUR)
    expected = list(pinned.records())
    # at T0 + 2h + 1: cursor 2 was replaced at T0 + 2h (retained), cursor 1 at T0 + 1h (not retained)
    result = run_retention(lake, "c.x", now_ms=T0 + 2 * HOUR + 1).as_json()
    table = lake.catalog.load_table("c.x__compacted")
    refs = set(table.metadata.refs)
    assert f"cursor-{cursors[1]}" in refs and f"cursor-{cursors[0]}" not in refs
    assert table.metadata.snapshot_by_id(cursors[1]) is not None and table.metadata.snapshot_by_id(cursors[2])
    assert table.metadata.snapshot_by_id(cursors[0]) is None
    assert f"cursor-{cursors[0]}" in result["expiry"]["compacted"]["removed_refs"]
    assert not [r for r in refs if r.startswith("compactor-run-")]
    assert list(pinned.records()) == expected
    assert view(lake, "c.x", as_of_cursor=cursors[1], now_ms=T0 + 2 * HOUR + 1)


@pytest.mark.spark
def test_a_compacted_reader_pinned_before_retention_reads_its_snapshot(spark: SparkSession, lake: Lake) -> None:
    lake.create_topic("c.r", config={"cleanup.policy": "delete,compact", "retention.ms": str(DAY),
                                     "history.expire.max-snapshot-age-ms": "0"})
    produce(lake.topic("c.r"), batch("abc", T0), now_ms=T0)
    compact_topic(lake, "c.r", now_ms=T0)
    produce(lake.topic("c.r"), batch("d", T0 + 2 * DAY), now_ms=T0 + 2 * DAY)
    reader = TopicReader(lake, "c.r", read_compacted=True, now_ms=T0 + 2 * DAY)
    expected = list(reader.records())
    assert [r.key for r in expected] == [b"a", b"b", b"c", b"d"]
    run_retention(lake, "c.r", now_ms=T0 + 2 * DAY)  # trims a, b, c from the view; expires what it may
    assert [r.key for r in view(lake, "c.r")] == [b"d"]
    assert list(reader.records()) == expected


@pytest.mark.spark
def test_policy_without_compact_drops_the_compacted_view_after_the_lease(spark: SparkSession, lake: Lake) -> None:
    lake.create_topic("c.off", config={"cleanup.policy": "compact", "compaction.cursor.retain-ms": str(HOUR),
                                       "retention.ms": "-1"})
    produce(lake.topic("c.off"), batch("aab", T0), now_ms=T0)
    compact_topic(lake, "c.off", now_ms=T0)
    lake.topic("c.off").set_config({"cleanup.policy": "delete"})
    assert offsets(view(lake, "c.off")) == [0, 1, 2], "without compact, compacted reads are the raw view"
    first = run_retention(lake, "c.off", now_ms=T0 + 1).as_json()
    assert first["policy_off"]["dropped"] is False
    assert lake.catalog.table_exists("c.off__compacted")
    second = run_retention(lake, "c.off", now_ms=T0 + 1 + HOUR).as_json()
    assert second["policy_off"]["dropped"] is True
    assert not lake.catalog.table_exists("c.off__compacted")
    # turning compact back on starts the first run at the log start
    lake.topic("c.off").set_config({"cleanup.policy": "compact"})
    compact_topic(lake, "c.off", now_ms=T0 + 2 * HOUR)
    assert offsets(view(lake, "c.off")) == [1, 2]


def test_cli_retention_prints_the_interface_fields(lake: Lake, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from compactor.cli.main import main

    lake.create_topic("d.cli", config={"retention.ms": str(HOUR)})
    produce(lake.topic("d.cli"), batch("ab", T0), now_ms=T0)
    monkeypatch.setenv("COMPACTOR_CATALOG_NAME", lake.config.catalog_name)
    base = ["--warehouse", lake.config.warehouse]
    assert main([*base, "retention", "d.cli", "--now-ms", str(T0 + DAY), "--dry-run"]) == 0
    out = json.loads(capsys.readouterr().out)
    for field in ("dry_run", "removed_records", "removed_files", "removed_bytes", "expired_snapshots",
                  "log_start_offsets"):
        assert field in out
    assert out["dry_run"] is True and out["removed_records"] == 2
    assert main([*base, "retention", "d.cli", "--now-ms", str(T0 + DAY)]) == 0
    assert json.loads(capsys.readouterr().out)["log_start_offsets"] == {"0": 2}


@pytest.mark.parametrize("point", ["retention-after-delete", "retention-before-expire"])
def test_a_pass_that_fails_midway_leaves_a_consistent_topic_and_the_next_pass_finishes(lake: Lake,
                                                                                      point: str) -> None:
    from compactor import failpoints
    from compactor.errors import InjectedFailureError

    lake.create_topic("f.mid", config={"retention.ms": str(HOUR), "history.expire.max-snapshot-age-ms": "0",
                                       "compaction.cursor.retain-ms": "0"})
    produce(lake.topic("f.mid"), batch("ab", T0), now_ms=T0)
    produce(lake.topic("f.mid"), batch("c", T0 + DAY), now_ms=T0 + DAY)
    with failpoints.enabled({point: "raise"}), pytest.raises(InjectedFailureError):
        run_retention(lake, "f.mid", now_ms=T0 + DAY + 1)
    # both points come after the raw removal's commit, which moved the files and the LSO together
    assert lake.topic("f.mid").offsets().log_start_offsets == (2,) and offsets(raw(lake, "f.mid")) == [2]
    assert len(lake.topic("f.mid").table.metadata.snapshots) == 3, "nothing expired yet"
    result = run_retention(lake, "f.mid", now_ms=T0 + DAY + 2).as_json()
    assert result["log_start_offsets"] == {"0": 2} and offsets(raw(lake, "f.mid")) == [2]
    assert len(lake.topic("f.mid").table.metadata.snapshots) == 1  # the earlier ones expired now
