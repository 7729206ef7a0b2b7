"""A table in Redpanda's Iceberg-topic layout (key_value mode, partitioned by hour), attached and compacted:
latest per key per partition, tombstones by a null value, the source never written, reads and incremental runs."""

from __future__ import annotations

import pytest

from compactor import attach_table, compact_attached, detach_table, read_attached
from compactor.lake import Lake
from readers import TableView, TopicReader
from readers.attached import record_object
from tests.attach.sources import BASE_MS, append_redpanda, location_path, redpanda_table, tree_digest

pytestmark = pytest.mark.spark
HOUR = 3_600_000


def append(spark: object, lake: Lake, records: list[tuple[int, int, int, bytes | None, bytes | None]]) -> None:
    append_redpanda(spark, lake.config.catalog_name, "rp.orders", records)


def test_a_redpanda_table_compacts_to_the_latest_record_per_key_and_is_never_written(lake: Lake, spark: object) -> None:
    source = redpanda_table(lake.catalog, "rp.orders")
    # two partitions, offsets with gaps, spread over three hours (three Iceberg partitions), one tombstone
    append(spark, lake, [(0, 0, BASE_MS, b"a", b"a1"), (1, 5, BASE_MS, b"b", b"b1"),
                                 (0, 3, BASE_MS + HOUR, b"a", b"a2"), (1, 9, BASE_MS + HOUR, b"c", b"c1")])
    append(spark, lake, [(0, 4, BASE_MS + 2 * HOUR, b"d", b"d1"), (1, 12, BASE_MS + 2 * HOUR, b"b", None)])
    before = tree_digest(location_path(source))
    snapshots_before = [s.snapshot_id for s in lake.catalog.load_table("rp.orders").snapshots()]

    attach_table(lake, "lake.orders", table="rp.orders", layout="redpanda")
    first = compact_attached(lake, "lake.orders", now_ms=BASE_MS + 3 * HOUR)
    assert first.committed and first.horizons == {"0": 5, "1": 13}
    compacted = list(read_attached(lake, "lake.orders", read_compacted=True))
    assert [(r["partition"], r["offset"], r["value"]) for r in compacted] == [
        (0, 3, {"value": "YTI="}), (0, 4, {"value": "ZDE="}), (1, 9, {"value": "YzE="}), (1, 12, None)]
    assert compacted[0]["headers"] == [["trace", "3"]] and compacted[0]["timestamp_ms"] == BASE_MS + HOUR
    raw = list(read_attached(lake, "lake.orders", read_compacted=False))
    assert [(r["partition"], r["offset"]) for r in raw] == [(0, 0), (0, 3), (0, 4), (1, 5), (1, 9), (1, 12)]

    # an incremental run over new rows; the compacted read is the view then the raw tail
    append(spark, lake, [(0, 8, BASE_MS + 3 * HOUR, b"a", b"a3")])
    tail = list(read_attached(lake, "lake.orders", read_compacted=True))
    assert [(r["partition"], r["offset"]) for r in tail] == [(0, 3), (0, 4), (0, 8), (1, 9), (1, 12)]
    # the readers (no JVM) give the records Spark's read gives: headers, binary as base64, nested columns
    assert [record_object(r) for r in TopicReader(lake, "lake.orders", read_compacted=True)] == tail
    assert TableView(lake, "lake.orders").get({"redpanda.key": b"a"}) == b'{"value":"YTM="}'
    assert [(r.offset, r.value) for r in TopicReader(lake, "lake.orders", start={0: "latest"})] == [
        (5, b'{"value":"YjE="}'), (9, b'{"value":"YzE="}'), (12, None)]
    second = compact_attached(lake, "lake.orders", now_ms=BASE_MS + 4 * HOUR)
    assert second.committed and second.horizons == {"0": 9, "1": 13} and second.stats["records_read"] == 1
    assert [(r["partition"], r["offset"]) for r in read_attached(lake, "lake.orders", read_compacted=True)] == [
        (0, 4), (0, 8), (1, 9), (1, 12)]
    assert not compact_attached(lake, "lake.orders", now_ms=BASE_MS + 4 * HOUR).committed

    after = lake.catalog.load_table("rp.orders")
    assert tree_digest(location_path(source)).items() >= before.items()  # every file of the source unchanged
    assert [s.snapshot_id for s in after.snapshots()][:2] == snapshots_before
    assert len(after.snapshots()) == 3  # only the owner's own append was added
    detached = detach_table(lake, "lake.orders")
    assert detached["detached"] and lake.catalog.table_exists("rp.orders")
    assert tree_digest(location_path(source)) == tree_digest(location_path(after))
