"""The record rules of docs/guarantees.md#the-raw-log, in one place: a record's bytes, and what makes a record bad.

A record's **bytes** (what counts against ``max.message.bytes``, the topic's logical bytes and compaction's
clean and dirty bytes) are its key + value + header keys and values, nulls counting 0. A record is **bad**
when its partition is outside ``0..P-1``, its bytes exceed ``max.message.bytes``, its timestamp is outside
``0..MAX_TIMESTAMP_MS`` or a header key is not text. Every producing path states these rules here, in the form
it needs, with the same limits and the same messages:

* per record (``record_size``, ``record_problem``): ``ProducerRecord``, the buffered ``Producer.send`` and the
  JSON Lines parser;
* on Arrow columns (``record_sizes``, ``column_problems``): ``produce_arrow`` / ``produce`` / the command line,
  and the raw-log byte counts of compaction (``compaction.horizons``);
* as Spark expressions (``spark_record_bytes``, ``spark_problems``, ``problem_message``): ``produce_dataframe``
  and compaction's phase 2. pyspark is imported only inside those functions.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compactor.clock import MAX_TIMESTAMP_MS

if TYPE_CHECKING:
    from pyspark.sql import Column

MIN_TIMESTAMP_MS = 0
HEADER_KEY_NOT_TEXT = "a header key must be a string"
# The kinds of bad record, in the order a batch reports them when one row breaks several rules.
PARTITION, SIZE, TIMESTAMP, HEADER = "partition", "size", "timestamp", "header"


def partition_out_of_range(partition: object, partitions: int) -> str:
    return f"partition {partition} is out of range: the topic has {partitions} partition(s) (0..{partitions - 1})"


def record_too_large(size: int, max_message_bytes: int, where: str = "") -> str:
    """The message for a record of ``size`` bytes over the limit (``where``: after the problem, before the hint)."""
    return (f"record of {size} bytes exceeds max.message.bytes ({max_message_bytes}){where}; to accept it, raise "
            f"the topic's limit: compactor topic config NAME --set max.message.bytes={size}")


def timestamp_out_of_range(timestamp_ms: object) -> str:
    return f"timestamp_ms must be between {MIN_TIMESTAMP_MS} and {MAX_TIMESTAMP_MS}, got {timestamp_ms}"


def problem_message(kind: str, value: Any, partitions: int, max_message_bytes: int) -> str:
    """The message for a bad record of ``kind`` whose offending value is ``value``."""
    if kind == PARTITION:
        return partition_out_of_range(value, partitions)
    if kind == SIZE:
        return record_too_large(value, max_message_bytes)
    if kind == TIMESTAMP:
        return timestamp_out_of_range(value)
    return HEADER_KEY_NOT_TEXT


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def timestamp_ok(timestamp_ms: int) -> bool:
    return MIN_TIMESTAMP_MS <= timestamp_ms <= MAX_TIMESTAMP_MS


# --- per record ----------------------------------------------------------------------------------------------


def record_size(key: bytes | None, value: bytes | None, headers: Iterable[tuple[str, bytes | None]] = ()) -> int:
    """A record's bytes (see the module docstring)."""
    total = len(key or b"") + len(value or b"")
    for name, header_value in headers:
        total += len(name.encode("utf-8")) + len(header_value or b"")
    return total


def record_problem(partition: object, size: int, timestamp_ms: object, partitions: int,
                   max_message_bytes: int) -> str | None:
    """What is wrong with one record (``None`` if nothing): its partition (``None``: the partitioner's
    choice), its bytes and its timestamp (``None``: the batch clock). Header keys are checked where they are
    read (``HEADER_KEY_NOT_TEXT``)."""
    if partition is not None and not (_is_int(partition) and 0 <= partition < partitions):  # type: ignore[operator]
        return partition_out_of_range(repr(partition), partitions)
    if size > max_message_bytes:
        return record_too_large(size, max_message_bytes)
    if timestamp_ms is not None and not (_is_int(timestamp_ms) and timestamp_ok(timestamp_ms)):  # type: ignore[arg-type]
        return timestamp_out_of_range(repr(timestamp_ms))
    return None


# --- on Arrow columns ----------------------------------------------------------------------------------------


def _lengths(column: pa.Array) -> np.ndarray:
    lengths: np.ndarray = pc.binary_length(column).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    return lengths


def record_sizes(key: pa.Array, value: pa.Array, headers: pa.Array) -> np.ndarray:
    """Each row's bytes (see the module docstring), from its key, value and headers columns (a list of
    ``{key, value}`` structs: the input's and the data files' layout alike)."""
    sizes: np.ndarray = _lengths(key) + _lengths(value)
    if headers.null_count < len(headers):
        flat = pc.list_flatten(headers)
        if len(flat):
            per_item = _lengths(pc.struct_field(flat, "key")) + _lengths(pc.struct_field(flat, "value"))
            parents = pc.list_parent_indices(headers).to_numpy(zero_copy_only=False)
            sizes += np.bincount(parents, weights=per_item, minlength=len(sizes)).astype(np.int64)
    return sizes


def _first(mask: np.ndarray) -> int | None:
    bad = np.nonzero(mask)[0]
    return int(bad[0]) if len(bad) else None


def column_problems(partition: pa.Array, sizes: np.ndarray, timestamp_ms: pa.Array, partitions: int,
                    max_message_bytes: int) -> list[tuple[int, str]]:
    """The first bad row of each kind, as ``(row index, message)`` (header keys are checked on conversion)."""
    problems: list[tuple[int, str]] = []
    if partition.null_count < len(partition):
        values = partition.fill_null(0).to_numpy(zero_copy_only=False)
        i = _first(partition.is_valid().to_numpy(zero_copy_only=False) & ((values < 0) | (values >= partitions)))
        if i is not None:
            problems.append((i, partition_out_of_range(int(values[i]), partitions)))
    i = _first(sizes > max_message_bytes)
    if i is not None:
        problems.append((i, record_too_large(int(sizes[i]), max_message_bytes)))
    if timestamp_ms.null_count < len(timestamp_ms):
        values = timestamp_ms.fill_null(MIN_TIMESTAMP_MS).to_numpy(zero_copy_only=False)
        i = _first((values < MIN_TIMESTAMP_MS) | (values > MAX_TIMESTAMP_MS))
        if i is not None:
            problems.append((i, timestamp_out_of_range(int(values[i]))))
    return problems


# --- as Spark expressions ------------------------------------------------------------------------------------


def spark_record_bytes(key: str, value: str, headers: str | None) -> Column:
    """Each row's bytes (see the module docstring) as a Spark expression over the columns named ``key``,
    ``value`` and ``headers`` (``None`` when there is no such column). The sum over headers is a higher-order
    function, evaluated without code generation, so it runs only for rows that carry headers; a null header key
    counts 0 (refused separately). Written as one SQL expression: built from PySpark's functions (the lambda
    above all), it took many calls into the JVM each time a pass was built."""
    from pyspark.sql import functions as F

    plain = f"CAST(coalesce(length(`{key}`), 0) + coalesce(length(`{value}`), 0) AS BIGINT)"
    if headers is None:
        return F.expr(plain)
    summed = (f"aggregate(`{headers}`, CAST(0 AS BIGINT), (total, h) -> total + coalesce(octet_length(h.key), 0) "
              "+ coalesce(length(h.value), 0))")
    return F.expr(f"{plain} + CASE WHEN size(`{headers}`) > 0 THEN {summed} ELSE CAST(0 AS BIGINT) END")


def spark_problems(partition: Column, size: Column, timestamp_ms: Column, headers: Column | None,
                   partitions: int, max_message_bytes: int) -> dict[str, tuple[Column, Column | None]]:
    """Per kind of bad record: the condition a bad row meets, and the column holding its offending value
    (``None`` for header keys). Without ``headers`` (no such column) the header check is left out."""
    from pyspark.sql import functions as F

    checks: dict[str, tuple[Column, Column | None]] = {
        PARTITION: (partition.isNotNull() & ((partition < 0) | (partition >= partitions)), partition),
        SIZE: (size > max_message_bytes, size),
        TIMESTAMP: (timestamp_ms.isNotNull()
                    & ((timestamp_ms < MIN_TIMESTAMP_MS) | (timestamp_ms > MAX_TIMESTAMP_MS)), timestamp_ms),
    }
    if headers is not None:
        checks[HEADER] = (F.coalesce(F.exists(headers, lambda h: h.getField("key").isNull()), F.lit(False)), None)
    return checks


__all__ = ["HEADER_KEY_NOT_TEXT", "MIN_TIMESTAMP_MS", "column_problems", "partition_out_of_range",
           "problem_message", "record_problem", "record_size", "record_sizes", "record_too_large",
           "spark_problems", "spark_record_bytes", "timestamp_ok", "timestamp_out_of_range"]
