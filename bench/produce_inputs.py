"""The producing benchmarks' records (``bench.produce_bench``, ``bench.dataframe_pieces``): keys ``user-<n>``
and 140 random lowercase letters per value, as an Arrow table, a Parquet file or JSON Lines."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

VALUE_BYTES = 140
KEYS = 100_000


def records_table(count: int, seed: int, keys: int = KEYS * 4) -> pa.Table:
    """``count`` records: keys ``user-<n>`` drawn from ``keys`` values, values of 140 random letters."""
    rng = np.random.default_rng(seed)
    keys_column = pc.binary_join_element_wise(pa.array([b"user-"] * count, pa.binary()),
                                              pa.array(rng.integers(0, keys, count).astype(str)).cast(pa.binary()), b"")
    raw = rng.integers(97, 123, size=count * VALUE_BYTES, dtype=np.uint8).tobytes()
    values = pa.FixedSizeBinaryArray.from_buffers(pa.binary(VALUE_BYTES), count, [None, pa.py_buffer(raw)])
    return pa.table({"key": keys_column, "value": values.cast(pa.binary())})


def write_parquet(path: Path, records: int, keys: int, chunk: int = 1_000_000) -> None:
    """``records`` rows of ``records_table`` in one Parquet file, generated ``chunk`` rows at a time."""
    writer = None
    for start in range(0, records, chunk):
        table = records_table(min(chunk, records - start), seed=start + 1, keys=keys)
        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
    if writer is not None:
        writer.close()


def logical_bytes(table: pa.Table) -> int:
    return sum(int(pc.sum(pc.binary_length(table[c])).as_py() or 0) for c in ("key", "value"))


def write_jsonl(table: pa.Table, path: Path) -> None:
    """The records as JSON Lines (keys and values are plain ASCII, so no escaping is needed)."""
    keys = table["key"].combine_chunks().cast(pa.string())
    values = table["value"].combine_chunks().cast(pa.string())
    lines = pc.binary_join_element_wise('{"key": "', keys, '", "value": "', values, '"}\n', "").cast(pa.large_string())
    offsets = np.frombuffer(lines.buffers()[1], np.int64)
    path.write_bytes(lines.buffers()[2].to_pybytes()[int(offsets[0]): int(offsets[len(lines)])])


__all__ = ["KEYS", "VALUE_BYTES", "logical_bytes", "records_table", "write_jsonl", "write_parquet"]
