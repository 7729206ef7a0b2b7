"""The column mapping of an attached log: which source columns are Kafka's partition, offset, timestamp and key,
and which rows are tombstones (docs/guarantees.md#attached-logs).

A mapping is made from the layout the user names (``kafka-connect``, ``redpanda`` or ``columns``) and checked
against the source table's schema before anything is written: every named column must exist with a type the
product can use. It is stored as JSON in a table property of the product's own view table, never in the source.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from pyiceberg.schema import Schema
from pyiceberg.types import (
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    StructType,
    TimestampType,
    TimestamptzType,
)

from compactor.errors import InputError

LAYOUTS = ("kafka-connect", "redpanda", "columns")
NULL_VALUE = "null-value"
BOOKKEEPING_PREFIX = "_compactor_"

# Kafka Connect's Iceberg sink, KafkaMetadataTransform: flat columns by default, or one nested struct.
CONNECT_FLAT = ("_kafka_metadata_partition", "_kafka_metadata_offset", "_kafka_metadata_timestamp")
CONNECT_STRUCT = "_kafka_metadata"
# Redpanda's Iceberg topics: one struct of the record's metadata (its key among them), the value beside it.
REDPANDA_STRUCT = "redpanda"


class AttachError(InputError):
    """A table that cannot be attached with the mapping given: nothing was written."""


@dataclass(frozen=True)
class Mapping:
    """Where Kafka's fields are in the source's rows; column names are dotted paths (``redpanda.offset``)."""

    layout: str
    source: str
    partition: str
    offset: str
    timestamp: str
    keys: tuple[str, ...]
    tombstone: str = NULL_VALUE
    headers: str | None = None
    metadata: tuple[str, ...] = field(default=())  # top-level source columns that are bookkeeping, not the value

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "keys": list(self.keys), "metadata": list(self.metadata)},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Mapping:
        raw = json.loads(text)
        return cls(**{**raw, "keys": tuple(raw["keys"]), "metadata": tuple(raw["metadata"])})

    def value_columns(self, schema: Schema) -> list[str]:
        """The source's top-level columns that make the record's value: all but the metadata and key columns."""
        skip = set(self.metadata) | set(self.keys)
        return [f.name for f in schema.fields if f.name not in skip]


def build_mapping(schema: Schema, source: str, layout: str, *, partition: str | None = None,
                  offset: str | None = None, timestamp: str | None = None, keys: Sequence[str] = (),
                  tombstone: str | None = None) -> Mapping:
    """The mapping of ``layout`` on a source of ``schema``, checked; ``AttachError`` names what does not fit."""
    if layout not in LAYOUTS:
        raise AttachError(f"unknown layout {layout!r}: choose one of {', '.join(LAYOUTS)}")
    keys = tuple(k.strip() for k in keys if k.strip())
    tombstone = (tombstone or NULL_VALUE).strip()
    given = {"--partition-column": partition, "--offset-column": offset, "--timestamp-column": timestamp}
    if layout == "kafka-connect":
        _refuse_given(layout, given)
        if not keys:
            raise AttachError("layout kafka-connect needs --key-columns: the sink writes no Kafka key, so the key "
                              "is one or more of the record's columns")
        if _find(schema, CONNECT_STRUCT) is not None:
            cols = tuple(f"{CONNECT_STRUCT}.{n}" for n in ("partition", "offset", "timestamp"))
            metadata: tuple[str, ...] = (CONNECT_STRUCT,)
        else:
            cols = CONNECT_FLAT
            metadata = CONNECT_FLAT
        mapping = Mapping(layout, source, cols[0], cols[1], cols[2], keys=keys, tombstone=tombstone,
                          metadata=metadata)
    elif layout == "redpanda":
        _refuse_given(layout, given)
        r = REDPANDA_STRUCT
        mapping = Mapping(layout, source, f"{r}.partition", f"{r}.offset", f"{r}.timestamp",
                          keys=keys or (f"{r}.key",), tombstone=tombstone,
                          headers=f"{r}.headers" if _find(schema, f"{r}.headers") is not None else None,
                          metadata=(r,))
    else:
        missing = [flag for flag, value in given.items() if not value]
        if missing or not keys:
            raise AttachError(f"layout columns needs {', '.join(missing + ([] if keys else ['--key-columns']))}")
        cols = (str(partition), str(offset), str(timestamp))
        mapping = Mapping(layout, source, cols[0], cols[1], cols[2], keys=keys, tombstone=tombstone,
                          metadata=tuple(dict.fromkeys(c.split(".")[0] for c in cols)))
    check_mapping(schema, mapping)
    return mapping


def _refuse_given(layout: str, given: dict[str, str | None]) -> None:
    named = [flag for flag, value in given.items() if value]
    if named:
        raise AttachError(f"layout {layout} fixes the partition, offset and timestamp columns: {', '.join(named)} "
                          "applies to layout columns only")


def check_mapping(schema: Schema, mapping: Mapping) -> None:
    """Raise ``AttachError`` unless every column of ``mapping`` exists in ``schema`` with a usable type."""
    names = [f.name for f in schema.fields]
    clashing = [n for n in names if n.startswith(BOOKKEEPING_PREFIX)]
    if clashing:
        raise AttachError(f"source {mapping.source}: column(s) {', '.join(clashing)} use the prefix "
                          f"'{BOOKKEEPING_PREFIX}' the product keeps for its own columns")
    _require(schema, mapping, mapping.partition, "partition", (IntegerType, LongType))
    _require(schema, mapping, mapping.offset, "offset", (IntegerType, LongType))
    _require(schema, mapping, mapping.timestamp, "timestamp", (TimestampType, TimestamptzType, LongType))
    for key in mapping.keys:
        kind = _require(schema, mapping, key, "key", None)
        if not kind.is_primitive:
            raise AttachError(f"source {mapping.source}: key column '{key}' is {kind}, not a primitive column")
    if len(set(mapping.keys)) != len(mapping.keys):
        raise AttachError(f"key columns {', '.join(mapping.keys)} name a column twice")
    if mapping.tombstone == NULL_VALUE and not mapping.value_columns(schema):
        raise AttachError(f"source {mapping.source}: no column is left for the value (every column is metadata or "
                          "key), so the null-value tombstone rule cannot apply; give --tombstone-when EXPR")


def _require(schema: Schema, mapping: Mapping, path: str, role: str,
             kinds: tuple[type[IcebergType], ...] | None) -> IcebergType:
    found = _find(schema, path)
    if found is None:
        raise AttachError(f"source {mapping.source} (layout {mapping.layout}) has no {role} column '{path}'; "
                          f"its columns: {', '.join(f.name for f in schema.fields)}")
    if kinds is not None and not isinstance(found.field_type, kinds):
        wanted = " or ".join(k.__name__.removesuffix("Type").lower() for k in kinds)
        raise AttachError(f"source {mapping.source}: {role} column '{path}' is {found.field_type}, expected {wanted}")
    return found.field_type


def _find(schema: Schema, path: str) -> NestedField | None:
    fields: tuple[NestedField, ...] = schema.fields
    found: NestedField | None = None
    for part in path.split("."):
        found = next((f for f in fields if f.name == part), None)
        if found is None:
            return None
        fields = found.field_type.fields if isinstance(found.field_type, StructType) else ()
    return found


__all__ = ["LAYOUTS", "NULL_VALUE", "AttachError", "Mapping", "build_mapping", "check_mapping"]
