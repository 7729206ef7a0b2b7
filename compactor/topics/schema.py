"""The raw log's table layout: schema, partitioning, sort order and the properties that mark a topic.

A topic is an Iceberg table with exactly the columns of SEMANTICS section 1. It is partitioned by
``identity(partition)`` only: every data file then holds one partition, and because producers write each
batch's rows of a partition as one sorted file, every file holds a contiguous offset range. Partitioning by
day of timestamp as well would break that whenever timestamps go backwards within a batch, so time-based
retention instead drops whole files by their timestamp statistics (files are offset-ordered prefixes).
The identity partitioning also lets Spark process each partition without a shuffle (see the compaction job).
"""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import SortField, SortOrder
from pyiceberg.transforms import IdentityTransform
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

PARTITION, OFFSET, TIMESTAMP, KEY, VALUE, HEADERS = "partition", "offset", "timestamp", "key", "value", "headers"
COLUMNS = (PARTITION, OFFSET, TIMESTAMP, KEY, VALUE, HEADERS)

HEADER_TYPE = StructType(
    NestedField(8, "key", StringType(), required=True),
    NestedField(9, "value", BinaryType(), required=False),
)

TOPIC_SCHEMA = Schema(
    NestedField(1, PARTITION, IntegerType(), required=True),
    NestedField(2, OFFSET, LongType(), required=True),
    NestedField(3, TIMESTAMP, TimestamptzType(), required=True),
    NestedField(4, KEY, BinaryType(), required=False),
    NestedField(5, VALUE, BinaryType(), required=False),
    NestedField(6, HEADERS, ListType(7, HEADER_TYPE, element_required=True), required=False),
)

TOPIC_PARTITION_SPEC = PartitionSpec(PartitionField(source_id=1, field_id=1000, transform=IdentityTransform(),
                                                    name=PARTITION))
TOPIC_SORT_ORDER = SortOrder(SortField(source_id=1, transform=IdentityTransform()),
                             SortField(source_id=2, transform=IdentityTransform()))

# The Arrow form used for writing and returned by reads (pyiceberg reads binary/strings as large types).
ARROW_HEADER_TYPE = pa.struct([pa.field("key", pa.large_string(), nullable=False),
                               pa.field("value", pa.large_binary())])
ARROW_SCHEMA = pa.schema([
    pa.field(PARTITION, pa.int32(), nullable=False),
    pa.field(OFFSET, pa.int64(), nullable=False),
    pa.field(TIMESTAMP, pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field(KEY, pa.large_binary()),
    pa.field(VALUE, pa.large_binary()),
    pa.field(HEADERS, pa.large_list(pa.field("element", ARROW_HEADER_TYPE, nullable=False))),
])

# --- table properties ------------------------------------------------------------------------------
MARKER_PROPERTY = "compactor.topic"
MARKER_VALUE = "v1"
PARTITIONS_PROPERTY = "compactor.partitions"
NEXT_OFFSETS_PROPERTY = "compactor.next-offsets"
LOG_START_OFFSETS_PROPERTY = "compactor.log-start-offsets"
# Cumulative logical bytes (key + value + headers) of offsets [0, N_p) per partition: dirty bytes from metadata.
LOGICAL_BYTES_PROPERTY = "compactor.logical-bytes"
CURSOR_MIRROR_PROPERTY = "compactor.compaction-cursor"

# Iceberg properties every topic carries. Retries are off because a blind re-commit of files written with
# offsets computed from an older snapshot would duplicate offsets; the producer retries itself instead.
TOPIC_TABLE_PROPERTIES = {
    "format-version": "2",
    "commit.retry.num-retries": "0",
    "write.parquet.compression-codec": "zstd",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "50",
    "write.distribution-mode": "none",
}
RESERVED_PROPERTIES = frozenset({MARKER_PROPERTY, PARTITIONS_PROPERTY, NEXT_OFFSETS_PROPERTY,
                                 LOG_START_OFFSETS_PROPERTY, LOGICAL_BYTES_PROPERTY, CURSOR_MIRROR_PROPERTY,
                                 *TOPIC_TABLE_PROPERTIES})

# Suffix of the sibling table that holds a topic's compacted view and its cursor.
COMPACTED_SUFFIX = "__compacted"


def schema_matches(schema: Schema) -> bool:
    """Whether an Iceberg schema is exactly the topic schema (names, types, requiredness)."""
    return bool(schema.as_struct() == TOPIC_SCHEMA.as_struct())
