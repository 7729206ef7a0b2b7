"""Idempotent producing over the durable batch-id record (producer.id.expiration.ms), and the bounded commit
metadata around it: pruned snapshot entries, merged manifests, and readers that keep their records."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from compactor import properties as props
from compactor.errors import BatchIdConflictError, InvalidSettingError, SnapshotExpiredError
from compactor.iceberg.snapshots import MERGE_FACTOR
from compactor.lake import Lake
from compactor.producing.batch_ids import TAIL_ENTRIES, BatchIdRecord
from compactor.producing.producer import produce, produce_arrow
from compactor.retention.expiry import remove_orphans
from compactor.retention.run import run_retention
from compactor.topics.records import ProducerRecord
from readers.reader import TopicReader
from tests.helpers import topic_rows as rows

T0 = 1_800_000_000_000
DAY = 86_400_000
WINDOW = 16  # a small raw snapshot window (raw.snapshot.window.count) keeps these tests short
SMALL_WINDOW = {"raw.snapshot.window.count": str(WINDOW)}


def one(i: int, stamp: int) -> pa.Table:
    return pa.table({"key": [f"x{i}".encode()], "value": [b"v"], "timestamp_ms": [stamp]})


def test_a_batch_id_outlives_snapshot_expiry_and_retention_within_its_window(lake: Lake) -> None:
    topic = lake.create_topic("i.t", partitions=2, config={
        "retention.ms": str(DAY), "producer.id.expiration.ms": str(3 * DAY),
        "history.expire.max-snapshot-age-ms": "0", "compaction.cursor.retain-ms": "0", "raw.snapshot.window.ms": "0"})
    batch = pa.table({"key": [b"a", b"b", None], "value": [b"1", b"2", b"3"], "timestamp_ms": [T0] * 3})
    first = produce_arrow(topic, batch, batch_id="B", now_ms=T0)
    for i in range(WINDOW + 10):
        produce_arrow(topic, one(i, T0 + DAY + i), now_ms=T0 + DAY + i)
    removed = run_retention(lake, "i.t", now_ms=T0 + DAY + 10**6)
    assert removed.removed_records == 3
    topic.refresh()
    assert topic.table.metadata.snapshot_by_id(first.snapshot_id or 0) is None  # the batch's snapshot is gone
    assert not any(r["value"] in (b"1", b"2", b"3") for r in rows(topic))  # and so are its records
    before = topic.offsets().next_offsets

    again = produce_arrow(topic, batch, batch_id="B", now_ms=T0 + 2 * DAY)
    assert again.duplicate and again.offsets == first.offsets and again.snapshot_id == first.snapshot_id
    assert topic.refresh().offsets().next_offsets == before
    with pytest.raises(BatchIdConflictError, match="different batch"):
        produce_arrow(topic, batch.slice(0, 2), batch_id="B", now_ms=T0 + 2 * DAY)

    later = produce_arrow(topic, batch, batch_id="B", now_ms=T0 + 3 * DAY)  # the window has passed
    assert not later.duplicate
    assert sum(topic.refresh().offsets().next_offsets) == sum(before) + 3


def test_the_command_line_batch_id_is_honoured_after_many_commits(lake: Lake) -> None:
    topic = lake.create_topic("i.cli")
    first = produce(topic, [ProducerRecord(b"k", b"v")] * 2, batch_id="load-1", now_ms=T0)
    for i in range(3 * TAIL_ENTRIES):  # enough ids to move the first one into a segment file
        produce_arrow(topic, one(i, T0), batch_id=f"other-{i}", now_ms=T0 + i)
    record = BatchIdRecord.of(topic.refresh().properties)
    assert record.segments and all(e.batch_id != "load-1" for e in record.tail)
    again = produce(lake.topic("i.cli"), [ProducerRecord(b"k", b"v")] * 2, batch_id="load-1", now_ms=T0 + 10**5)
    assert again.duplicate and again.offsets == first.offsets


@pytest.mark.slow  # 400 commits; an id's window passing stays in the loop (test_a_batch_id_outlives_...)
def test_the_record_stays_small_and_forgets_expired_ids(lake: Lake) -> None:
    topic = lake.create_topic("i.size", config={"producer.id.expiration.ms": str(10**6)})
    for i in range(400):
        produce_arrow(topic, one(i, T0), batch_id=f"id-{i}", now_ms=T0 + i)
    record = BatchIdRecord.of(topic.refresh().properties)
    assert sum(s.count for s in record.segments) + len(record.tail) == 400
    assert len(record.segments) <= 6  # size-tiered: O(log entries) segments
    assert len(topic.properties[props.BATCH_IDS_PROPERTY]) < 12_000
    produce_arrow(topic, one(0, T0), batch_id="late", now_ms=T0 + 10**7)  # every earlier id has expired
    record = BatchIdRecord.of(topic.refresh().properties)
    assert [e.batch_id for e in record.tail] == ["late"] and not record.segments


def test_orphan_cleanup_keeps_the_record_files(lake: Lake) -> None:
    topic = lake.create_topic("i.orphans")
    first = produce_arrow(topic, one(0, T0), batch_id="id-0", now_ms=T0)
    for i in range(1, 2 * TAIL_ENTRIES):
        produce_arrow(topic, one(i, T0), batch_id=f"id-{i}", now_ms=T0 + i)
    files = BatchIdRecord.of(topic.refresh().properties).files
    assert files
    remove_orphans(lake.config, topic.table, 0)
    assert all(Path(f.replace("file://", "")).exists() for f in files)
    again = produce_arrow(lake.topic("i.orphans"), one(0, T0), batch_id="id-0", now_ms=T0 + 10**5)
    assert again.duplicate and again.offsets == first.offsets


def test_producer_id_expiration_is_a_validated_setting(lake: Lake) -> None:
    topic = lake.create_topic("i.cfg")
    assert topic.settings.producer_id_expiration_ms == 86_400_000
    with pytest.raises(InvalidSettingError, match=r"producer\.id\.expiration\.ms must be"):
        topic.set_config({"producer.id.expiration.ms": "-3"})
    assert topic.set_config({"producer.id.expiration.ms": "60000"}).producer_id_expiration_ms == 60_000
    assert topic.properties["compactor.producer.id.expiration.ms"] == "60000"


# --- commit metadata stays bounded, readers keep their records ------------------------------------------------


@pytest.mark.slow  # 150 commits
def test_metadata_stays_bounded_over_many_commits(lake: Lake) -> None:
    topic = lake.create_topic("c.t", partitions=2, config=SMALL_WINDOW)
    for i in range(150):
        produce_arrow(topic, one(i, T0), batch_id=f"c{i}", now_ms=T0 + i)
    metadata = topic.refresh().table.metadata
    assert len(metadata.snapshots) <= WINDOW + 1
    assert len(metadata.snapshot_log) <= WINDOW + 1
    manifests = topic.table.current_snapshot().manifests(topic.table.io)  # type: ignore[union-attr]
    assert len(manifests) < 3 * MERGE_FACTOR
    live = sum((m.added_files_count or 0) + (m.existing_files_count or 0) for m in manifests)
    assert live == len(topic.raw_files()) == 150


def test_the_parent_of_a_retention_delete_is_kept_for_expiry_to_decide(lake: Lake) -> None:
    topic = lake.create_topic("c.keep", config={"retention.ms": str(DAY), **SMALL_WINDOW})
    for i in range(5):
        produce_arrow(topic, one(i, T0), now_ms=T0)
    before_delete = topic.refresh().snapshot
    assert before_delete is not None
    run_retention(lake, "c.keep", now_ms=T0 + 2 * DAY)
    for i in range(WINDOW + 5):
        produce_arrow(topic, one(i, T0 + 2 * DAY), now_ms=T0 + 2 * DAY + i)
    assert topic.refresh().table.metadata.snapshot_by_id(before_delete.snapshot_id) is not None


def test_an_open_reader_keeps_its_records_through_commits_and_retention_for_its_lease(lake: Lake) -> None:
    lease = 3_600_000
    topic = lake.create_topic("c.lease", partitions=2, config={
        "retention.ms": str(DAY), "history.expire.max-snapshot-age-ms": "0",
        "compaction.cursor.retain-ms": str(lease), "compaction.orphan-min-age-ms": "0", **SMALL_WINDOW})
    for i in range(6):
        produce_arrow(topic, one(i, T0), now_ms=T0)
    reader = TopicReader(lake, "c.lease")
    seen = list(reader.records())
    assert len(seen) == 6
    for i in range(2 * WINDOW):  # the reader's snapshot entry is dropped from the metadata
        produce_arrow(topic, one(100 + i, T0 + 2 * DAY), now_ms=T0 + 2 * DAY + i)
    assert topic.refresh().table.metadata.snapshot_by_id(reader.raw_snapshot_id or 0) is None
    now = T0 + 2 * DAY + 10**5
    assert run_retention(lake, "c.lease", now_ms=now).removed_records == 6  # every record the reader saw
    for i in range(2 * WINDOW):  # more appends after the retention delete, then expiry and orphan cleanup
        produce_arrow(topic, one(200 + i, T0 + 2 * DAY), now_ms=now + i)
    run_retention(lake, "c.lease", now_ms=now + 100)
    assert list(reader.records()) == seen  # within its lease: unchanged
    assert list(TopicReader(lake, "c.lease").records()) != seen
    run_retention(lake, "c.lease", now_ms=now + lease + 1)  # past the lease the files may go ...
    with pytest.raises(SnapshotExpiredError):  # ... and the reader says so, never returns partial results
        list(reader.records())
