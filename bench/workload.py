"""The standard benchmark workload (BENCHMARK.md), generated fast and written as a valid topic.

5,000,000 records in 4 partitions; keys drawn from 500,000 values per partition (about 2.7 versions per
(partition, key)); values about 140 bytes; a few percent tombstones and null keys; timestamps increasing.
Records are generated with numpy and appended with pyiceberg in large batches, each batch committed with the
topic's next offsets and cumulative logical bytes in the same commit, exactly as the producer does, so every
product feature sees an ordinary topic. (The record-at-a-time producer would spend minutes on 5M records.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compactor import properties as props
from compactor import schema as ts
from compactor.topics.state import encode_offsets
from compactor.topics.topic import Topic

BASE_TIME_MS = 1_767_225_600_000


@dataclass(frozen=True)
class Workload:
    records: int = 5_000_000
    partitions: int = 4
    keys_per_partition: int = 500_000
    value_bytes: int = 140
    tombstone_share: float = 0.03
    null_key_share: float = 0.01
    batch_records: int = 500_000
    seed: int = 1


def _batch(rng: np.random.Generator, w: Workload, partition: int, first_offset: int, count: int,
           key_space: int) -> pa.Table:
    key_ids = rng.integers(0, key_space, count)
    keys = pc.binary_join_element_wise(
        pa.array([f"p{partition}-key-".encode()] * count, pa.binary()),
        pa.array(np.char.mod("%07d", key_ids).astype(object)).cast(pa.binary()), b"")
    null_key = rng.random(count) < w.null_key_share
    tombstone = (rng.random(count) < w.tombstone_share) & ~null_key
    keys = pc.if_else(pa.array(null_key), pa.nulls(count, pa.binary()), keys)
    raw_values = rng.integers(32, 127, size=count * w.value_bytes, dtype=np.uint8).tobytes()  # printable text
    values = pa.FixedSizeBinaryArray.from_buffers(pa.binary(w.value_bytes), count, [None, pa.py_buffer(raw_values)])
    values = pc.if_else(pa.array(tombstone), pa.nulls(count, pa.binary()), values.cast(pa.binary()))
    offsets = np.arange(first_offset, first_offset + count, dtype=np.int64)
    stamps = (BASE_TIME_MS + offsets * 10 + partition) * 1000
    return pa.Table.from_arrays([
        pa.array(np.full(count, partition, np.int32)),
        pa.array(offsets),
        pa.array(stamps, pa.timestamp("us", tz="UTC")),
        keys.cast(pa.large_binary()),
        values.cast(pa.large_binary()),
        pa.nulls(count, ts.ARROW_SCHEMA.field(ts.HEADERS).type),
    ], schema=ts.ARROW_SCHEMA)


def append(topic: Topic, w: Workload, records: int, seed: int) -> None:
    """Append ``records`` more records (spread evenly over the partitions) to ``topic``."""
    rng = np.random.default_rng(seed)
    per_partition = records // w.partitions
    for start in range(0, per_partition, w.batch_records):
        count = min(w.batch_records, per_partition - start)
        topic.refresh()
        state = topic.offsets()
        tables = [_batch(rng, w, p, state.next_offsets[p], count, w.keys_per_partition) for p in range(w.partitions)]
        batch = pa.concat_tables(tables)
        sizes = [int(pc.sum(pc.fill_null(pc.binary_length(t.column(ts.KEY)), 0)).as_py() or 0)
                 + int(pc.sum(pc.fill_null(pc.binary_length(t.column(ts.VALUE)), 0)).as_py() or 0) for t in tables]
        new_next = [n + count for n in state.next_offsets]
        new_bytes = [b + s for b, s in zip(state.logical_bytes, sizes, strict=True)]
        tx = topic.table.transaction()
        tx.set_properties({props.NEXT_OFFSETS_PROPERTY: encode_offsets(new_next),
                           props.LOGICAL_BYTES_PROPERTY: encode_offsets(new_bytes)})
        tx.append(batch, snapshot_properties={"compactor.operation": "bench-append",
                                              props.NEXT_OFFSETS_PROPERTY: encode_offsets(new_next)})
        tx.commit_transaction()
    topic.refresh()
