"""The standard benchmark workload (BENCHMARK.md), generated fast and written as a valid topic.

5,000,000 records in 4 partitions; keys drawn from 500,000 values per partition (about 2.7 versions per
(partition, key)); values about 140 bytes; a few percent tombstones and null keys; timestamps increasing.
Records are generated with numpy as Arrow tables and appended through the product's columnar producer
(``produce_arrow``) in large atomic batches, each record placed on its partition explicitly, so the topic is
an ordinary topic written the way users write them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compactor.producing.producer import produce_arrow
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
    # "" (the standard workload), or for the strategy benchmark: "timestamp" (timestamps shuffled over the
    # whole log, so later offsets often carry older times) or "header" (a "version" header, 8 bytes big-endian,
    # drawn at random: later offsets often carry lower versions)
    shuffled: str = ""


def _batch(rng: np.random.Generator, w: Workload, partition: int, first_offset: int, count: int,
           key_space: int) -> pa.Table:
    """``count`` records of ``partition`` as producer input (explicit partition; timestamps from the offsets
    they will get, so they increase)."""
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
    stamps = BASE_TIME_MS + offsets * 10 + partition
    if w.shuffled == "timestamp":
        stamps = BASE_TIME_MS + rng.integers(0, w.records * 10, count)
    columns = {
        "key": keys.cast(pa.large_binary()),
        "value": values.cast(pa.large_binary()),
        "partition": pa.array(np.full(count, partition, np.int32)),
        "timestamp_ms": pa.array(stamps),
    }
    if w.shuffled == "header":
        columns["headers"] = version_headers(rng.integers(0, 1 << 40, count))
    return pa.table(columns)


def version_headers(versions: np.ndarray) -> pa.Array:
    """One ``version`` header per record, its value 8 bytes big-endian (Kafka's ``LongSerializer``)."""
    count = len(versions)
    data = versions.astype(">i8").tobytes()
    values = pa.FixedSizeBinaryArray.from_buffers(pa.binary(8), count, [None, pa.py_buffer(data)]).cast(pa.binary())
    names = pa.array(["version"] * count, pa.string())
    entries = pa.StructArray.from_arrays([names, values], names=["key", "value"])
    return pa.ListArray.from_arrays(pa.array(np.arange(count + 1, dtype=np.int32)), entries)


def append(topic: Topic, w: Workload, records: int, seed: int) -> None:
    """Append ``records`` more records (spread evenly over the partitions) to ``topic`` through the producer:
    one atomic batch of ``batch_records`` records per partition at a time."""
    rng = np.random.default_rng(seed)
    per_partition = records // w.partitions
    for start in range(0, per_partition, w.batch_records):
        count = min(w.batch_records, per_partition - start)
        next_offsets = topic.refresh().offsets().next_offsets
        batch = pa.concat_tables([_batch(rng, w, p, next_offsets[p], count, w.keys_per_partition)
                                  for p in range(w.partitions)])
        produce_arrow(topic, batch, now_ms=BASE_TIME_MS + int(next_offsets[0]) * 10)
    topic.refresh()
