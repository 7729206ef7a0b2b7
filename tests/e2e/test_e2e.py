"""End to end through Spark on every back-end: the same scenario on the local warehouse (SQLite catalog), on S3
(moto's server) and with a PostgreSQL catalog, parametrised (``tests/backends.py``); plus the S3 endpoint going
away mid-run. The command line on each back-end and the storage errors that need no JVM are in
test_storage.py."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from compactor import failpoints
from compactor.compaction.job import compact_topic
from compactor.errors import CompactorError, StorageUnavailableError
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.retention import run_retention
from compactor.status import topic_status
from compactor.topics.records import ProducerRecord
from readers.reader import TopicReader
from readers.spark import read_topic_dataframe
from readers.table_view import TableView
from tests.backends import Backend, attach_spark
from tests.conftest import new_lake_config
from tests.s3_server import S3Server

pytestmark = pytest.mark.spark
HOUR = 3_600_000
T0 = 200 * 24 * HOUR
_buckets = itertools.count()


def latest_per_key(records: list[ProducerRecord], stored: list[tuple[int, int]]) -> dict[bytes, bytes | None]:
    out: dict[bytes, bytes | None] = {}
    for record, _ in sorted(zip(records, stored, strict=True), key=lambda pair: pair[1]):
        assert record.key is not None
        out[record.key] = record.value
    return out


def test_produce_compact_read_retain_and_status(backend: Backend, spark_session: SparkSession) -> None:
    lake = attach_spark(backend.lake, spark_session)
    lake.create_topic("e2e.orders", partitions=2, config={"cleanup.policy": "compact", "retention.ms": str(HOUR),
                                                         "history.expire.max-snapshot-age-ms": "0",
                                                         "compaction.cursor.retain-ms": "0"})
    sent: list[ProducerRecord] = []
    where: list[tuple[int, int]] = []
    for round_number in range(3):
        batch = [ProducerRecord(f"k{(round_number * 7 + i) % 9}".encode(),
                                None if i == 4 else f"v{round_number}.{i}".encode(), timestamp_ms=T0 + round_number)
                 for i in range(8)]
        result = produce(lake.topic("e2e.orders"), batch, now_ms=T0 + round_number)
        sent += batch
        where += result.offsets
        if round_number < 2:
            assert compact_topic(lake, "e2e.orders", now_ms=T0 + round_number).committed
    expected = latest_per_key(sent, where)
    live = {k: v for k, v in expected.items() if v is not None}
    reader = TopicReader(lake, "e2e.orders", read_compacted=True)
    compacted = list(reader.records())
    last = {r.key: r.value for r in compacted}
    assert {k: v for k, v in last.items() if v is not None} == live
    assert len(list(TopicReader(lake, "e2e.orders").records())) == 24
    frame = read_topic_dataframe(lake, "e2e.orders", read_compacted=True)
    assert frame.count() == len(compacted)
    assert TableView(lake, "e2e.orders").to_dict() == live
    status = topic_status(lake, "e2e.orders", now_ms=T0 + 3)
    assert status.cursor is not None and status.cursor["horizons"] == {"0": sum(1 for p, _ in where[:16] if p == 0),
                                            "1": sum(1 for p, _ in where[:16] if p == 1)}
    assert status.dirty_bytes > 0
    # compact the tail, then retention removes the raw files below the horizon and expires old snapshots
    assert compact_topic(lake, "e2e.orders", now_ms=T0 + 4).committed
    removed = run_retention(lake, "e2e.orders", now_ms=T0 + 2 * HOUR).as_json()
    assert removed["removed_records"] == 24 and removed["log_start_offsets"] == topic_status(
        lake, "e2e.orders", now_ms=T0 + 2 * HOUR).next_offsets
    assert removed["expired_snapshots"] > 0 and removed["deleted_files"] > 0
    assert list(TopicReader(lake, "e2e.orders").records()) == []
    after = {r.key: r.value for r in TopicReader(lake, "e2e.orders", read_compacted=True).records()}
    assert {k: v for k, v in after.items() if v is not None} == live


# --- faults on S3 ------------------------------------------------------------------------------------------


@pytest.fixture
def s3_lake(s3_server: S3Server, tmp_path: Path, spark_session: SparkSession,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[Lake]:
    bucket = f"fault-{next(_buckets)}"
    s3_server.create_bucket(bucket)
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    config = new_lake_config(f"s3://{bucket}/lake", str(tmp_path / "catalog.db"), **s3_server.env)
    lake = attach_spark(Lake(config), spark_session)
    yield lake
    lake.close()


def test_endpoint_gone_mid_run_fails_cleanly_and_the_cursor_stays(s3_server: S3Server, s3_lake: Lake) -> None:
    s3_lake.create_topic("f.t", config={"cleanup.policy": "compact"})
    produce(s3_lake.topic("f.t"), [ProducerRecord(b"a", b"1"), ProducerRecord(b"a", b"2")], now_ms=T0)
    first = compact_topic(s3_lake, "f.t", now_ms=T0)
    produce(s3_lake.topic("f.t"), [ProducerRecord(b"b", b"3")], now_ms=T0)
    try:
        with failpoints.enabled({"before-commit": s3_server.stop}), pytest.raises(CompactorError) as caught:
            compact_topic(s3_lake, "f.t", now_ms=T0 + 1)
        assert isinstance(caught.value, StorageUnavailableError), caught.value
        assert "127.0.0.1" in str(caught.value) or "connect" in str(caught.value).lower()
        with pytest.raises(StorageUnavailableError):  # producing while it is down: a clear error too
            produce(s3_lake.topic("f.t"), [ProducerRecord(b"c", b"4")], now_ms=T0)
    finally:
        if s3_server.server is None:
            s3_server.start()
    reader = TopicReader(s3_lake, "f.t", read_compacted=True)
    assert reader.cursor is not None and reader.cursor.snapshot_id == first.compacted_snapshot_id
    assert [(r.key, r.value) for r in reader.records()] == [(b"a", b"2"), (b"b", b"3")]
    assert compact_topic(s3_lake, "f.t", now_ms=T0 + 2).committed
