"""Source tables other tools write, built here with pyiceberg in their documented layouts (the product only reads
them): Redpanda's Iceberg topics (``key_value`` mode: the ``redpanda`` struct and a binary ``value``, partitioned
by the hour of the record's timestamp) and a Kafka Connect sink table with flat ``_kafka_metadata_*`` columns."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import HourTransform
from pyiceberg.types import (
    BinaryType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

REDPANDA_SCHEMA = Schema(
    NestedField(1, "redpanda", StructType(
        NestedField(3, "partition", IntegerType(), required=True),
        NestedField(4, "offset", LongType(), required=True),
        NestedField(5, "timestamp", TimestamptzType(), required=True),
        NestedField(6, "headers", ListType(9, StructType(
            NestedField(10, "key", BinaryType(), required=False),
            NestedField(11, "value", BinaryType(), required=False)), element_required=False), required=False),
        NestedField(7, "key", BinaryType(), required=False)), required=True),
    NestedField(2, "value", BinaryType(), required=False),
)
REDPANDA_SPEC = PartitionSpec(PartitionField(source_id=5, field_id=1000, transform=HourTransform(),
                                             name="redpanda_timestamp_hour"))

CONNECT_SCHEMA = Schema(
    NestedField(1, "id", StringType(), required=False),
    NestedField(2, "region", StringType(), required=False),
    NestedField(3, "amount", LongType(), required=False),
    NestedField(4, "_kafka_metadata_partition", IntegerType(), required=False),
    NestedField(5, "_kafka_metadata_offset", LongType(), required=False),
    NestedField(6, "_kafka_metadata_timestamp", LongType(), required=False),
)

BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def redpanda_table(catalog: Catalog, identifier: str) -> Table:
    catalog.create_namespace_if_not_exists(identifier.rsplit(".", 1)[0])
    return catalog.create_table(identifier, schema=REDPANDA_SCHEMA, partition_spec=REDPANDA_SPEC)


def append_redpanda(spark: Any, catalog_name: str, identifier: str,
                    records: Sequence[tuple[int, int, int, bytes | None, bytes | None]]) -> None:
    """Append (partition, offset, timestamp_ms, key, value) records in Redpanda's key_value layout, with Spark
    (pyiceberg cannot write an hour-partitioned table without its native extension), as one commit."""
    def binary(value: bytes | None) -> str:
        return "CAST(NULL AS BINARY)" if value is None else f"X'{value.hex()}'"

    rows = [f"(named_struct('partition', {p}, 'offset', CAST({o} AS BIGINT), 'timestamp', timestamp_millis({t}), "
            f"'headers', array(named_struct('key', {binary(b'trace')}, 'value', {binary(str(o).encode())})), "
            f"'key', {binary(k)}), {binary(v)})" for p, o, t, k, v in records]
    table = ".".join(f"`{part}`" for part in (catalog_name, *identifier.split(".")))
    spark.sql(f"INSERT INTO {table} VALUES {', '.join(rows)}")


def connect_table(catalog: Catalog, identifier: str, schema: Schema = CONNECT_SCHEMA) -> Table:
    catalog.create_namespace_if_not_exists(identifier.rsplit(".", 1)[0])
    return catalog.create_table(identifier, schema=schema)


def connect_rows(table: Table, records: Sequence[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(list(records), schema=table.schema().as_arrow())


def tree_digest(directory: str | Path) -> dict[str, str]:
    """Every file under ``directory`` (a table's location) with the SHA-256 of its bytes."""
    out: dict[str, str] = {}
    for root, _, files in os.walk(directory):
        for name in files:
            full = Path(root) / name
            out[str(full.relative_to(directory))] = hashlib.sha256(full.read_bytes()).hexdigest()
    return out


def location_path(table: Table) -> Path:
    return Path(table.metadata.location.removeprefix("file://"))
