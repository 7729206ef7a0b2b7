"""The table layouts: the raw log (a topic), its compacted view and a compaction run's scratch table. The data
model every layer shares.

A topic is an Iceberg table with exactly the columns of docs/guarantees.md#the-raw-log. It is partitioned by
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
# Iceberg field ids of the columns the product reads statistics of (shared by the raw and compacted tables).
PARTITION_FIELD_ID, OFFSET_FIELD_ID, TIMESTAMP_FIELD_ID = 1, 2, 3
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

# Suffix of the sibling table that holds a topic's compacted view and its cursor.
COMPACTED_SUFFIX = "__compacted"


# --- the compacted table ``ns.t__compacted``: the topic's columns plus two bookkeeping columns -------------
# ``delete_horizon_ms``: set on tombstones when a run first writes them (``now + delete.retention.ms`` of that
# run, KIP-534), never recomputed; null on every other row, so "is a tombstone" is "has a horizon".
# ``record_bytes``: key + value + headers bytes of the row, so clean bytes and the size of superseded rows are
# known from narrow columns alone (without reading values).
DELETE_HORIZON = "delete_horizon_ms"
RECORD_BYTES = "record_bytes"
VIEW_COLUMNS = (*COLUMNS, DELETE_HORIZON, RECORD_BYTES)
COMPACTED_SCHEMA = Schema(
    *TOPIC_SCHEMA.fields,
    NestedField(10, DELETE_HORIZON, LongType(), required=False),
    NestedField(11, RECORD_BYTES, LongType(), required=False),
)


# --- a compaction run's scratch table: phase 1's winners, read by phase 2 ---------------------------------------
# Offsets are dense, so the winners of 64 consecutive offsets are one 64-bit mask: a mask row holds ``word`` =
# offset >> WORD_SHIFT and ``mask`` (a bit per offset that is its key's latest), with ``key`` null; a key row holds
# a winning key (``word`` and ``mask`` null). Under a compaction.strategy other than offset, a run with a view
# also keeps on a key row the position and bookkeeping of the compacted row the winner supersedes (CONTEST_SCHEMA).
WORD, MASK = "word", "mask"
WORD_SHIFT = 6
WORD_BITS = 1 << WORD_SHIFT
FILE_PATH, POS = "file_path", "pos"
SCRATCH_SCHEMA = Schema(
    NestedField(1, PARTITION, IntegerType(), required=True),
    NestedField(2, WORD, LongType(), required=False),
    NestedField(3, MASK, LongType(), required=False),
    NestedField(4, KEY, BinaryType(), required=False),
)
CONTEST_SCHEMA = Schema(
    *SCRATCH_SCHEMA.fields,
    NestedField(5, FILE_PATH, StringType(), required=False),
    NestedField(6, POS, LongType(), required=False),
    NestedField(7, DELETE_HORIZON, LongType(), required=False),
    NestedField(8, RECORD_BYTES, LongType(), required=False),
)


def schema_matches(schema: Schema) -> bool:
    """Whether an Iceberg schema is exactly the topic schema (names, types, requiredness)."""
    return bool(schema.as_struct() == TOPIC_SCHEMA.as_struct())
