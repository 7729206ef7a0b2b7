"""Arrow batches of the topic schema, and the same rows as ``Record`` objects."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from compactor import schema as ts
from compactor.topics.records import Record


def to_topic_schema(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` in the topic's Arrow schema (the compacted table's extra columns dropped, types aligned)."""
    if batch.schema.equals(ts.ARROW_SCHEMA, check_metadata=False):
        return batch
    columns = [batch.column(name).cast(ts.ARROW_SCHEMA.field(name).type) for name in ts.COLUMNS]
    return pa.RecordBatch.from_arrays(columns, schema=ts.ARROW_SCHEMA)


def batch_to_records(batch: pa.RecordBatch) -> Iterator[Record]:
    """Arrow rows of the topic schema as ``Record`` objects."""
    partitions = batch.column(ts.PARTITION).to_pylist()
    offsets = batch.column(ts.OFFSET).to_pylist()
    stamps = batch.column(ts.TIMESTAMP).cast(pa.int64()).to_pylist()
    keys = batch.column(ts.KEY).to_pylist()
    values = batch.column(ts.VALUE).to_pylist()
    headers = batch.column(ts.HEADERS).to_pylist()
    for i in range(batch.num_rows):
        hdrs = tuple((h["key"], h["value"]) for h in headers[i]) if headers[i] else ()
        yield Record(partitions[i], offsets[i], stamps[i] // 1000, keys[i], values[i], hdrs)
