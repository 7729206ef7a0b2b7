"""docs/guarantees.md#retention (retention and expiry) with a controlled clock, without cursors (no JVM): delete,
retention.bytes, pinned raw readers, snapshot expiry, physical deletion, orphans, the command line, a pass that
fails midway. (Under compact and delete,compact, with cursors: test_retention_compacted.py.)"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from compactor.errors import OffsetOutOfRangeError, OutcomeUnknownError, SnapshotExpiredError
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.retention import run_retention
from compactor.topics.records import ProducerRecord, Record
from readers.reader import TopicReader
from tests.helpers import raw

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
                                       "compaction.cursor.retain-ms": "0", "raw.snapshot.window.ms": "0"})
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


def test_a_malformed_policy_off_clock_is_a_corrupt_topic_not_a_value_error(lake: Lake) -> None:
    from compactor import properties as props
    from compactor.cursor.table import ensure_compacted_table
    from compactor.errors import TopicCorruptError

    lake.create_topic("p.off", config={"cleanup.policy": "delete"})
    ensure_compacted_table(lake.topic("p.off"))  # an (empty) compacted view left from when it compacted
    lake.topic("p.off").set_internal_properties({props.COMPACT_OFF_SINCE_PROPERTY: "yesterday"}, [])
    with pytest.raises(TopicCorruptError, match=r"compact-off-since-ms is not a clock.*'yesterday'"):
        run_retention(lake, "p.off", now_ms=T0)


def test_the_printed_result_keeps_every_field_name(lake: Lake) -> None:
    """The typed result prints the names ``retention`` has always printed (docs/reference.md's, then each step's)."""
    lake.create_topic("d.names", config={"retention.ms": str(HOUR)})
    produce(lake.topic("d.names"), batch("ab", T0), now_ms=T0)
    out = run_retention(lake, "d.names", now_ms=T0 + DAY).as_json()
    assert list(out) == ["topic", "dry_run", "now_ms", "removed_records", "removed_files", "removed_bytes",
                         "expired_snapshots", "log_start_offsets", "policy", "retained_cursors", "raw",
                         "compacted_trim", "policy_off", "expiry", "dropped_run_tables",
                         "deleted_files", "deleted_bytes", "duration_ms"]
    assert out["raw"] == {"0": {"files": 1, "records": 2, "bytes": out["removed_bytes"], "log_start": 0,
                                "new_log_start": 2, "reason": "retention.ms"}}
    assert {"applies", "committed", "reason", "trim_before_ms", "compacted_snapshot_id", "rows_removed"} == set(
        out["compacted_trim"])
    assert {"applies", "dropped", "reason", "policy_off_since_ms", "drop_at_ms", "would_drop", "deleted_files"} == set(
        out["policy_off"])
    assert set(out["expiry"]) == {"raw", "compacted"}
    assert set(out["expiry"]["raw"]) == {"expired_snapshots", "removed_refs", "deleted_files", "deleted_bytes",
                                         "orphan_files", "orphan_bytes"}
    json.dumps(out)


# --- an ambiguous commit --------------------------------------------------------------------------------


@pytest.mark.parametrize("table_readable", [True, False])
def test_a_lost_reply_to_the_retention_commit(lake: Lake, monkeypatch: pytest.MonkeyPatch,
                                              table_readable: bool) -> None:
    """The catalog commits the removal and the reply is lost: retention learns the outcome by re-reading the
    table; if it cannot, the outcome is unknown (exit 75), and a second run finds nothing more to remove."""
    lake.create_topic("d.lost", config={"retention.ms": str(DAY)})
    produce(lake.topic("d.lost"), batch("ab", T0), now_ms=T0)
    produce(lake.topic("d.lost"), batch("c", T0 + 5 * DAY), now_ms=T0 + 5 * DAY)
    catalog = lake.catalog
    real_commit, real_load = catalog.commit_table, catalog.load_table
    lost = {"reply": False}

    def commit_then_lose_the_reply(*args: Any, **kwargs: Any) -> Any:
        real_commit(*args, **kwargs)
        lost["reply"] = True
        raise ConnectionResetError("injected: the catalog's reply was lost")

    def load(*args: Any, **kwargs: Any) -> Any:
        if lost["reply"] and not table_readable:
            raise ConnectionResetError("injected: the catalog is unreachable")
        return real_load(*args, **kwargs)

    monkeypatch.setattr(catalog, "commit_table", commit_then_lose_the_reply)
    monkeypatch.setattr(catalog, "load_table", load)
    if table_readable:
        assert run_retention(lake, "d.lost", now_ms=T0 + 6 * DAY).removed_records == 2
    else:
        with pytest.raises(OutcomeUnknownError, match="re-running is safe"):
            run_retention(lake, "d.lost", now_ms=T0 + 6 * DAY)
    monkeypatch.undo()
    assert [r.value for r in raw(lake, "d.lost")] == [f"c@{T0 + 5 * DAY}".encode()]  # it did land
    assert run_retention(lake, "d.lost", now_ms=T0 + 6 * DAY).removed_records == 0
