"""Kafka records between two commits of a mirror, kept as columns and turned into one Arrow batch per commit.

Each record is kept byte for byte: offset, timestamp, key, value and headers as librdkafka delivers them, a null
key or value apart from an empty one, headers in order with duplicates and null values. A record without a
timestamp (``TIMESTAMP_NOT_AVAILABLE``, from very old clients) gets the batch's clock, as any record without one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from compactor.producing.arrow_input import HEADERS_TYPE, INPUT_SCHEMA

_NO_TIMESTAMP = 0  # librdkafka's TIMESTAMP_NOT_AVAILABLE


@dataclass
class PendingRecords:
    """One lake topic's records since its last commit, column by column, in the order Kafka delivered them."""

    partitions: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int | None] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    headers: list[Any] = field(default_factory=list)
    bytes: int = 0

    def __len__(self) -> int:
        return len(self.offsets)

    def extend(self, messages: Sequence[Any]) -> None:
        """Keep records (librdkafka ``Message`` objects without an error), one column at a time: a comprehension
        per column costs less than a loop that appends to six lists (bench/mirror_bench.py)."""
        self.partitions.extend([m.partition() for m in messages])
        self.offsets.extend([m.offset() for m in messages])
        self.timestamps.extend([None if kind == _NO_TIMESTAMP else stamp
                                for kind, stamp in (m.timestamp() for m in messages)])
        keys = [m.key() for m in messages]
        self.keys.extend(keys)
        self.values.extend([m.value() for m in messages])
        self.headers.extend([m.headers() for m in messages])
        self.bytes += sum(map(len, messages)) + sum(len(k) for k in keys if k is not None)

    def clear(self) -> None:
        for column in (self.partitions, self.offsets, self.timestamps, self.keys, self.values, self.headers):
            column.clear()
        self.bytes = 0

    def located(self, row: int) -> tuple[int, int]:
        """``(partition, offset)`` of the ``row``-th record kept (1-based), for error messages."""
        return self.partitions[row - 1], self.offsets[row - 1]

    def to_batch(self) -> pa.RecordBatch:
        """The records as one normalised producer batch (``producing.arrow_input.INPUT_SCHEMA``, offsets kept)."""
        return pa.RecordBatch.from_arrays([
            pa.array(self.keys, pa.large_binary()),
            pa.array(self.values, pa.large_binary()),
            pa.array(self.partitions, pa.int64()),
            pa.array(self.timestamps, pa.int64()),
            _headers(self.headers),
            pa.array(self.offsets, pa.int64()),
        ], schema=INPUT_SCHEMA)


def _headers(headers: Sequence[Any]) -> pa.Array:
    """Kafka's headers (``None`` or a list of ``(key, value)``) as the producer's headers column."""
    if not any(headers):
        return pa.nulls(len(headers), HEADERS_TYPE)
    return pa.array([[{"key": k, "value": v} for k, v in h] if h else None for h in headers], HEADERS_TYPE)


__all__ = ["PendingRecords"]
