"""End to end against the real writers: Kafka Connect's Iceberg sink (with its KafkaMetadataTransform), running
on a Connect worker against the test broker, writes a topic into an Iceberg table of this lake's catalog; that
table is attached and compacted, and the view holds, per key, the latest record the Kafka topic holds, at the
Kafka offsets the sink's metadata columns carry. The table is never written by the product."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from compactor import attach_table, compact_attached, read_attached
from compactor.lake import Lake
from tests.attach.sources import location_path, tree_digest
from tests.kafka_helpers import create_topic, produce, wait_for
from tests.servers import KafkaBroker, KafkaConnect

pytestmark = pytest.mark.spark


def start_sink(connect: KafkaConnect, broker: KafkaBroker, lake: Lake, topic: str, table: str) -> str:
    name = f"sink-{uuid.uuid4().hex[:8]}"
    control = create_topic(broker, prefix="control")
    connect.request("POST", "/connectors", {"name": name, "config": {
        "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
        "tasks.max": "1",
        "topics": topic,
        "iceberg.tables": table,
        "iceberg.tables.auto-create-enabled": "true",
        "iceberg.control.topic": control,
        "iceberg.control.commit.interval-ms": "500",
        "iceberg.catalog": lake.config.catalog_name,
        "iceberg.catalog.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
        "iceberg.catalog.uri": lake.config.catalog.jdbc_url,
        "iceberg.catalog.warehouse": str(lake.config.warehouse),
        "iceberg.catalog.jdbc.init-catalog-tables": "false",
        "transforms": "meta",
        "transforms.meta.type": "org.apache.iceberg.connect.transforms.KafkaMetadataTransform",
    }})
    return name


def rows_in(lake: Lake, table: str) -> int:
    if not lake.catalog.table_exists(table):
        return 0
    return len(lake.catalog.load_table(table).scan(selected_fields=("_kafka_metadata_offset",)).to_arrow())


def test_a_table_the_kafka_connect_sink_writes_is_attached_and_compacted(
        lake: Lake, spark: object, kafka_broker: KafkaBroker, kafka_connect: KafkaConnect, tmp_path: Path) -> None:
    topic = create_topic(kafka_broker, partitions=2, prefix="orders")
    lake.catalog.create_namespace_if_not_exists("sink")
    table = f"sink.{topic.replace('-', '_')}"
    sent = [(i % 2, f"k{i % 5}".encode(), json.dumps({"id": f"k{i % 5}", "n": i}).encode(), None) for i in range(20)]
    landed = [at for p in (0, 1) for at in produce(kafka_broker, topic, [r for r in sent if r[0] == p])]
    sent = [r for p in (0, 1) for r in sent if r[0] == p]  # the order of ``landed``: delivery order per partition
    connector = start_sink(kafka_connect, kafka_broker, lake, topic, table)
    try:
        wait_for(lambda: rows_in(lake, table) == len(sent), f"the sink's table {table} to hold 20 rows", 180)
        source = lake.catalog.load_table(table)
        digest = tree_digest(location_path(source))
        snapshots = [s.snapshot_id for s in source.snapshots()]
        attach_table(lake, "lake.orders", table=table, layout="kafka-connect", key_columns=["id"])
        result = compact_attached(lake, "lake.orders")
        assert result.committed and result.stats["records_read"] == 20

        # what Kafka holds, per partition and key: the last record sent, at its Kafka offset
        expected: dict[tuple[int, str], tuple[int, int]] = {}
        for (partition, _, value, _), (landed_p, offset) in zip(sent, landed, strict=True):
            assert partition == landed_p
            record = json.loads(value)
            expected[(partition, record["id"])] = (offset, record["n"])
        got = {(r["partition"], r["key"]["id"]): (r["offset"], r["value"]["n"])
               for r in read_attached(lake, "lake.orders", read_compacted=True)}
        assert got == expected
        ends = {p: max(o for lp, o in landed if lp == p) + 1 for p in (0, 1)}
        assert result.horizons == {str(p): e for p, e in ends.items()}
        assert tree_digest(location_path(source)) == digest
        assert [s.snapshot_id for s in lake.catalog.load_table(table).snapshots()] == snapshots
    finally:
        kafka_connect.request("DELETE", f"/connectors/{connector}")
