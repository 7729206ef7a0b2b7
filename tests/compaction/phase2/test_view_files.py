"""An incremental run's kept rows become data files that the cursor commit registers with the position deletes
(compactor/compaction/phase2/files.py): one snapshot per run on the compacted table's ``main``, the files' column
statistics from their footers, and data manifests merged size-tiered so that their number does not grow with the
number of runs."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyiceberg.manifest import ManifestContent
from pyspark.sql import SparkSession

from compactor import schema as ts
from compactor.compaction.job import compact_topic
from compactor.compaction.phase2 import files
from compactor.iceberg.bounds import file_bound
from compactor.iceberg.manifests import FILE_PATH_ID
from compactor.iceberg.snapshots import MERGE_FACTOR
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.topics.records import ProducerRecord
from tests.helpers import compacted_rows

pytestmark = pytest.mark.spark


def test_an_incremental_run_adds_one_snapshot_with_its_files_and_deletes(spark: SparkSession, lake: Lake) -> None:
    lake.create_topic("f.t", partitions=2, config={"cleanup.policy": "compact"})
    topic = lake.topic("f.t")
    produce(topic, [ProducerRecord(b"k%d" % (i % 7), b"v%d" % i, partition=i % 2) for i in range(40)], now_ms=1)
    first = compact_topic(lake, "f.t", now_ms=1000)
    produce(topic.refresh(), [ProducerRecord(b"k%d" % (i % 3), b"w%d" % i, partition=i % 2) for i in range(9)]
            + [ProducerRecord(b"k4", None, partition=0)], now_ms=2)
    second = compact_topic(lake, "f.t", now_ms=2000)
    table = lake.catalog.load_table("f.t__compacted")
    head = table.metadata.snapshot_by_id(second.compacted_snapshot_id or 0)
    assert head is not None and head.parent_snapshot_id == first.compacted_snapshot_id  # no staging snapshot
    summary = head.summary
    assert summary is not None and summary.operation.value == "overwrite"  # new rows and position deletes
    counts = {k: int(v) for k, v in summary.additional_properties.items() if v.isdigit()}
    assert counts["added-data-files"] == 2 and counts["added-position-delete-files"] >= 1
    stats = second.stats
    assert stats.view_data_files == counts["total-data-files"]
    assert stats.bytes_written == counts["added-files-size"]
    new_files = [e.data_file for m in head.manifests(table.io) if m.content == ManifestContent.DATA
                 for e in m.fetch_manifest_entry(table.io) if e.snapshot_id == head.snapshot_id]
    assert sorted(int(f.partition[0]) for f in new_files) == [0, 1]
    for data_file in new_files:  # each file holds one partition, with the statistics of its footer
        rows = pq.read_table(table.io.new_input(data_file.file_path).open())
        assert set(rows[ts.PARTITION].to_pylist()) == {int(data_file.partition[0])}
        assert data_file.record_count == rows.num_rows
        offsets = rows[ts.OFFSET].to_pylist()
        assert file_bound(data_file.lower_bounds, ts.OFFSET_FIELD_ID, "long") == min(offsets)
        assert file_bound(data_file.upper_bounds, ts.OFFSET_FIELD_ID, "long") == max(offsets)
        assert offsets == sorted(offsets)
    k4 = {r.partition: r.value for r, _ in compacted_rows(lake, "f.t") if r.key == b"k4"}
    assert k4 == {0: None, 1: b"v39"}  # the tombstone of partition 0 kept; partition 1's k4 untouched


def test_data_manifests_stay_few_over_many_runs(spark: SparkSession, lake: Lake) -> None:
    """New keys only, so no run removes a row and none rewrites the view: each run adds a data file, and the data
    manifests are merged size-tiered instead of growing by one per run."""
    lake.create_topic("f.m", config={"cleanup.policy": "compact"})
    latest: dict[bytes, bytes] = {}
    for run in range(MERGE_FACTOR + 1):  # one more data file than a tier holds before it merges
        records = [ProducerRecord(b"k%d-%d" % (run, i), b"v%d" % i) for i in range(3)]
        produce(lake.topic("f.m"), records, now_ms=run + 1)
        latest.update((r.key, r.value) for r in records if r.key is not None and r.value is not None)
        result = compact_topic(lake, "f.m", now_ms=(run + 1) * 1000)
        assert result.committed and result.stats.mode == ("first" if run == 0 else "incremental"), result.stats
    table = lake.catalog.load_table("f.m__compacted")
    snapshot = table.current_snapshot()
    assert snapshot is not None
    data = [m for m in snapshot.manifests(table.io) if m.content == ManifestContent.DATA]
    assert sum(int(m.added_files_count or 0) + int(m.existing_files_count or 0) for m in data) == MERGE_FACTOR + 1
    assert len(data) < MERGE_FACTOR, len(data)  # the runs' files, in fewer manifests than runs
    assert {r.key: r.value for r, _ in compacted_rows(lake, "f.m")} == latest


def test_position_deletes_are_sorted_by_file_and_position_and_flushed_in_bounded_batches(
        spark: SparkSession, lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task holds at most ``FLUSH_POSITIONS`` positions: past that it writes them out as a file of its own. Each
    delete file lists its positions sorted by data file and position (as Iceberg's spec requires), and its path
    bounds in the delete manifest are its first and last data file."""
    monkeypatch.setattr(files, "FLUSH_POSITIONS", 3)
    lake.create_topic("f.d", partitions=2, config={"cleanup.policy": "compact"})
    topic = lake.topic("f.d")
    latest: dict[tuple[int, bytes], bytes] = {}
    for run in range(3):  # three runs of new keys: three data files per partition
        records = [ProducerRecord(b"k%d-%d" % (run, i), b"v%d" % run, partition=i % 2) for i in range(8)]
        produce(topic.refresh(), records, now_ms=run + 1)
        latest.update(((r.partition or 0, r.key or b""), r.value or b"") for r in records)
        compact_topic(lake, "f.d", now_ms=(run + 1) * 1000)
    # supersede keys of every file, listed out of order, in both partitions
    records = [ProducerRecord(b"k%d-%d" % (run, i), b"w", partition=i % 2) for run in (2, 0, 1) for i in range(6)]
    produce(topic.refresh(), records, now_ms=10)
    latest.update(((r.partition or 0, r.key or b""), b"w") for r in records)
    result = compact_topic(lake, "f.d", now_ms=10_000)
    assert result.stats.mode == "incremental" and result.stats.rows_deleted_from_view == 18, result.stats
    table = lake.catalog.load_table("f.d__compacted")
    head = table.metadata.snapshot_by_id(result.compacted_snapshot_id or 0)
    assert head is not None
    deletes = [e.data_file for m in head.manifests(table.io) if m.content == ManifestContent.DELETES
               for e in m.fetch_manifest_entry(table.io) if e.snapshot_id == head.snapshot_id]
    assert sum(d.record_count for d in deletes) == 18
    assert all(d.record_count <= 3 for d in deletes) and len(deletes) >= 6  # flushed every 3 positions
    for delete in deletes:
        rows = pq.read_table(table.io.new_input(delete.file_path).open()).to_pylist()
        pairs = [(row["file_path"], row["pos"]) for row in rows]
        assert pairs == sorted(pairs) and len(pairs) == delete.record_count
        assert delete.lower_bounds[FILE_PATH_ID].decode() == pairs[0][0]
        assert delete.upper_bounds[FILE_PATH_ID].decode() == pairs[-1][0]
    assert {(r.partition, r.key): r.value for r, _ in compacted_rows(lake, "f.d")} == latest


def test_a_file_warehouse_gets_no_checksum_files(spark: SparkSession, lake: Lake) -> None:
    """On a ``file:`` warehouse the run's files are written without Hadoop's checksum files (and its ``chmod``
    processes): the data and delete files stand alone, as pyarrow's do."""
    lake.create_topic("f.c", config={"cleanup.policy": "compact"})
    produce(lake.topic("f.c"), [ProducerRecord(b"k%d" % i, b"v") for i in range(5)], now_ms=1)
    compact_topic(lake, "f.c", now_ms=1000)
    produce(lake.topic("f.c").refresh(), [ProducerRecord(b"k1", b"w")], now_ms=2)
    result = compact_topic(lake, "f.c", now_ms=2000)
    table = lake.catalog.load_table("f.c__compacted")
    head = table.metadata.snapshot_by_id(result.compacted_snapshot_id or 0)
    assert head is not None
    written = [e.data_file.file_path for m in head.manifests(table.io)
               for e in m.fetch_manifest_entry(table.io) if e.snapshot_id == head.snapshot_id]
    assert len(written) == 2 and all(path.startswith("file:") for path in written)  # a data and a delete file
    for path in written:
        local = Path(path.removeprefix("file:"))
        assert local.exists() and not (local.parent / f".{local.name}.crc").exists()
