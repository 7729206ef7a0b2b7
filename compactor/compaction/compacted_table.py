"""The compacted table ``ns.t__compacted``: the topic's columns plus two bookkeeping columns.

* ``delete_horizon_ms``: set on tombstones when a run first writes them (``now + delete.retention.ms`` of
  that run, KIP-534); never recomputed. Null on every other row, so "is a tombstone" is "has a horizon".
* ``record_bytes``: key + value + headers bytes of the row, so clean bytes and the size of superseded rows
  are known from the narrow columns alone (without reading values).

Partitioned by ``identity(partition)`` like the topic, so Spark joins the view with the raw range partition
by partition without a shuffle. Merge-on-read: an incremental run writes position deletes for superseded rows
and appends the new rows; nothing else of the view is rewritten. No Iceberg sort order is declared (it would
make Spark sort full rows before every write); the job sorts each partition's rows by offset itself.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pyarrow as pa
from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField

from compactor.catalog import translate_storage_errors
from compactor.errors import CursorCorruptError
from compactor.topics import schema as ts
from compactor.topics.topic import Topic

DELETE_HORIZON = "delete_horizon_ms"
RECORD_BYTES = "record_bytes"
VIEW_COLUMNS = (*ts.COLUMNS, DELETE_HORIZON, RECORD_BYTES)

COMPACTED_SCHEMA = Schema(
    *ts.TOPIC_SCHEMA.fields,
    NestedField(10, DELETE_HORIZON, LongType(), required=False),
    NestedField(11, RECORD_BYTES, LongType(), required=False),
)
ARROW_VIEW_SCHEMA = pa.schema([*ts.ARROW_SCHEMA, pa.field(DELETE_HORIZON, pa.int64()),
                               pa.field(RECORD_BYTES, pa.int64())])

COMPACTED_OF_PROPERTY = "compactor.compacted-of"
TOPIC_UUID_PROPERTY = "compactor.topic-uuid"
COMPACTED_PROPERTIES = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
    "write.distribution-mode": "none",
    "write.parquet.compression-codec": "zstd",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "50",
}


def ensure_compacted_table(topic: Topic) -> Table:
    """Load the topic's compacted table, creating it on first use; check it belongs to this topic."""
    catalog = topic.lake.catalog
    identifier = topic.name.compacted_identifier
    topic_uuid = str(topic.table.metadata.table_uuid)
    with translate_storage_errors(f"opening the compacted view of {topic.name}"):
        try:
            table = catalog.load_table(identifier)
        except NoSuchTableError:
            location = topic.table.metadata.location.rstrip("/") + "-compacted"
            with contextlib.suppress(TableAlreadyExistsError):
                catalog.create_table(
                    identifier,
                    schema=COMPACTED_SCHEMA,
                    location=location,
                    partition_spec=ts.TOPIC_PARTITION_SPEC,
                    properties={**COMPACTED_PROPERTIES, COMPACTED_OF_PROPERTY: topic.name.identifier,
                                TOPIC_UUID_PROPERTY: topic_uuid},
                )
            table = catalog.load_table(identifier)
    check_belongs(table, topic_uuid, identifier)
    return table


def check_belongs(table: Any, topic_uuid: str, identifier: str) -> None:
    owner = table.metadata.properties.get(TOPIC_UUID_PROPERTY)
    if owner != topic_uuid:
        raise CursorCorruptError(
            f"{identifier} does not belong to this topic (it was made for topic table {owner}, "
            f"this topic is {topic_uuid}); drop it to start compaction afresh")
