"""Producer input as Arrow: the columns a batch may carry and their normalisation (checks: ``producing.validation``).

A batch's rows arrive as Arrow record batches with any of the columns ``key``, ``value`` (binary or text),
``partition`` (an integer), ``timestamp_ms`` (an integer, or an Arrow/pandas timestamp), ``headers`` (a list of
``{key, value}`` structs or of ``[key, value]`` pairs) and, for mirror batches, ``offset``. Missing columns are
null. Everything is normalised to ``INPUT_SCHEMA`` with whole-column operations, so no Python object is made
per record; a malformed column names the first offending row (its line for JSON Lines input).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compactor import schema as ts
from compactor.errors import InputError, InvalidRecordError
from compactor.topics.record_rules import HEADER_KEY_NOT_TEXT
from compactor.topics.records import ProducerRecord

KEY, VALUE, PARTITION, TIMESTAMP_MS, HEADERS, OFFSET = "key", "value", "partition", "timestamp_ms", "headers", "offset"
HEADERS_TYPE = ts.ARROW_SCHEMA.field(ts.HEADERS).type
INPUT_SCHEMA = pa.schema([
    pa.field(KEY, pa.large_binary()),
    pa.field(VALUE, pa.large_binary()),
    pa.field(PARTITION, pa.int64()),
    pa.field(TIMESTAMP_MS, pa.int64()),
    pa.field(HEADERS, HEADERS_TYPE),
    pa.field(OFFSET, pa.int64()),
])
INPUT_COLUMNS = tuple(INPUT_SCHEMA.names)
_TIME_UNITS_PER_MS = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000), "ns": (1, 1_000_000)}


@dataclass(frozen=True)
class RowNumbers:
    """How errors name the rows of one batch: ``line N`` of JSON Lines, or ``row N`` (1-based) of other input."""

    first: int = 1
    lines: np.ndarray | None = None
    unit: str = "row"

    def of(self, index: int) -> int:
        return int(self.lines[index]) if self.lines is not None else self.first + index

    def error(self, index: int, message: str) -> InvalidRecordError:
        return InvalidRecordError(message, self.of(index), self.unit)


# --- normalisation ----------------------------------------------------------------------------------------


def _binary(name: str, column: pa.ChunkedArray | pa.Array) -> pa.Array:
    kind = column.type
    if pa.types.is_null(kind):
        return pa.nulls(len(column), pa.large_binary())
    if not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_string(kind)
            or pa.types.is_large_string(kind) or pa.types.is_fixed_size_binary(kind)):
        raise InputError(f"column '{name}' must be binary or text, got {kind}")
    return _one_chunk(column.cast(pa.large_binary()))


def _integer(name: str, column: pa.ChunkedArray | pa.Array) -> pa.Array:
    kind = column.type
    if pa.types.is_null(kind):
        return pa.nulls(len(column), pa.int64())
    if not pa.types.is_integer(kind):
        raise InputError(f"column '{name}' must be an integer column, got {kind}")
    if pa.types.is_uint64(kind):
        too_big = pc.greater(column, pa.scalar(2**63 - 1, pa.uint64()))
        if pc.any(too_big).as_py():
            raise InputError(f"column '{name}' holds values too large for a 64-bit integer")
    return _one_chunk(column.cast(pa.int64()))


def _timestamps(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Milliseconds since the epoch: integers as given, Arrow (or pandas) timestamps converted (floor)."""
    kind = column.type
    if not pa.types.is_timestamp(kind):
        return _integer(TIMESTAMP_MS, column)
    multiply, divide = _TIME_UNITS_PER_MS[kind.unit]
    raw = _one_chunk(column.cast(pa.int64()))
    values = raw.fill_null(0).to_numpy(zero_copy_only=False)
    with np.errstate(over="ignore"):
        converted = np.floor_divide(values * multiply, divide)
    mask = raw.is_null().to_numpy(zero_copy_only=False) if raw.null_count else None
    return pa.array(converted, pa.int64(), mask=mask)


def _headers(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Headers as ``large_list<struct<key large_string, value large_binary>>``; pairs ``[k, v]`` are accepted."""
    column = _one_chunk(column)
    kind = column.type
    if pa.types.is_null(kind):
        return pa.nulls(len(column), HEADERS_TYPE)
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
        raise InputError(f"column 'headers' must be a list of (key, value) structs or pairs, got {kind}")
    items = kind.value_type
    offsets = pc.list_value_length(column).fill_null(0).to_numpy(zero_copy_only=False)
    flat = pc.list_flatten(column)
    if pa.types.is_struct(items) and items.num_fields == 2:
        names = [items.field(i).name for i in range(2)]
        header_keys = flat.field(names.index("key") if "key" in names else 0)
        header_values = flat.field(names.index("value") if "value" in names else 1)
        keys_null = flat.is_null() if flat.null_count else None
    elif pa.types.is_list(items) or pa.types.is_large_list(items) or pa.types.is_fixed_size_list(items):
        lengths = pc.list_value_length(flat).fill_null(0).to_numpy(zero_copy_only=False)
        if len(lengths) and not bool(np.all(lengths == 2)):
            raise _HeaderShapeError(_first_parent(column, np.nonzero(lengths != 2)[0][0]))
        pairs = pc.list_flatten(flat)
        header_keys = pairs.take(pa.array(np.arange(0, len(pairs), 2)))
        header_values = pairs.take(pa.array(np.arange(1, len(pairs), 2)))
        keys_null = None
    else:
        raise InputError(f"column 'headers' must be a list of (key, value) structs or pairs, got {kind}")
    if not (pa.types.is_string(header_keys.type) or pa.types.is_large_string(header_keys.type)):
        if pa.types.is_binary(header_keys.type) or pa.types.is_large_binary(header_keys.type):
            header_keys = header_keys.cast(pa.large_string())
        else:
            raise InputError(f"header keys must be text, got {header_keys.type}")
    missing = header_keys.is_null()
    if keys_null is not None:
        missing = pc.or_(missing, keys_null)
    if len(missing) and pc.any(missing).as_py():
        raise _HeaderKeyError(_first_parent(column, int(np.nonzero(missing.to_numpy(zero_copy_only=False))[0][0])))
    values = _binary("headers value", header_values)
    struct = pa.StructArray.from_arrays([header_keys.cast(pa.large_string()), values],
                                        fields=list(ts.ARROW_HEADER_TYPE))
    boundaries = np.zeros(len(column) + 1, np.int64)
    np.cumsum(offsets, out=boundaries[1:])
    mask = column.is_null()
    return pa.LargeListArray.from_arrays(pa.array(boundaries), struct, type=HEADERS_TYPE,
                                         mask=mask if column.null_count else None)


class _HeaderShapeError(Exception):
    def __init__(self, row: int) -> None:
        self.row = row


class _HeaderKeyError(Exception):
    def __init__(self, row: int) -> None:
        self.row = row


def _first_parent(lists: pa.Array, item: int) -> int:
    """The row of a list array that holds flattened item number ``item``."""
    return int(pc.list_parent_indices(lists).to_numpy(zero_copy_only=False)[item])


def _one_chunk(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column


def normalise(batch: pa.RecordBatch | pa.Table, rows: RowNumbers | None = None) -> pa.RecordBatch:
    """One batch of input in ``INPUT_SCHEMA`` (unknown columns and wrong types are input errors)."""
    rows = rows or RowNumbers()
    names = list(batch.schema.names)
    unknown = sorted(set(names) - set(INPUT_COLUMNS))
    if unknown:
        raise InputError(f"unknown column(s): {', '.join(unknown)} (allowed: {', '.join(INPUT_COLUMNS)})")
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise InputError(f"duplicate column(s): {', '.join(duplicated)}")
    count = batch.num_rows

    def column(name: str) -> pa.ChunkedArray | pa.Array:
        return batch.column(name) if name in names else pa.nulls(count)

    try:
        headers = _headers(column(HEADERS))
    except _HeaderShapeError as exc:
        raise rows.error(exc.row, "headers must be [key, value] pairs") from None
    except _HeaderKeyError as exc:
        raise rows.error(exc.row, HEADER_KEY_NOT_TEXT) from None
    arrays = [_binary(KEY, column(KEY)), _binary(VALUE, column(VALUE)), _integer(PARTITION, column(PARTITION)),
              _timestamps(column(TIMESTAMP_MS)), headers, _integer(OFFSET, column(OFFSET))]
    return pa.RecordBatch.from_arrays(arrays, schema=INPUT_SCHEMA)


def input_batches(data: Any, max_rows: int = 65_536) -> Iterator[pa.RecordBatch]:
    """The record batches of an Arrow table, record batch, reader or iterable of batches, or a pandas
    DataFrame, at most ``max_rows`` rows each, not yet normalised."""
    if isinstance(data, pa.Table):
        yield from data.to_batches(max_chunksize=max_rows)
    elif isinstance(data, pa.RecordBatch):
        for start in range(0, max(data.num_rows, 1), max_rows):
            yield data.slice(start, max_rows)
    elif isinstance(data, pa.RecordBatchReader):
        for batch in data:
            yield from input_batches(batch, max_rows)
    elif _is_pandas(data):
        yield from pa.Table.from_pandas(data, preserve_index=False).to_batches(max_chunksize=max_rows)
    elif isinstance(data, Iterable) and not isinstance(data, str | bytes):
        for item in data:
            if not isinstance(item, pa.RecordBatch | pa.Table):
                raise InputError(f"expected Arrow record batches, got {type(item).__name__}")
            yield from input_batches(item, max_rows)
    else:
        raise InputError(f"cannot produce from {type(data).__name__}: pass an Arrow table, record batches or a "
                         "pandas DataFrame")


Chunk = tuple[pa.RecordBatch, RowNumbers]  # a piece of a batch's input, with the row numbers errors name


def numbered_chunks(data: Any, max_rows: int) -> Iterator[Chunk]:
    """``input_batches`` of ``data``, normalised, each with the 1-based number of its first row among all of
    them."""
    first = 1
    for batch in input_batches(data, max_rows):
        rows = RowNumbers(first)
        yield normalise(batch, rows), rows
        first += batch.num_rows


def _is_pandas(data: Any) -> bool:
    module = type(data).__module__
    return module.startswith("pandas") and type(data).__name__ == "DataFrame"


def records_to_batch(records: Sequence[ProducerRecord]) -> pa.RecordBatch:
    """``ProducerRecord`` objects (the record-at-a-time API) as one normalised batch."""
    headers = [[(name, value) for name, value in r.headers] if r.headers else None for r in records]
    header_structs = [[{"key": k, "value": v} for k, v in h] if h is not None else None for h in headers]
    return pa.RecordBatch.from_arrays([
        pa.array([r.key for r in records], pa.large_binary()),
        pa.array([r.value for r in records], pa.large_binary()),
        pa.array([r.partition for r in records], pa.int64()),
        pa.array([r.timestamp_ms for r in records], pa.int64()),
        pa.array(header_structs, HEADERS_TYPE),
        pa.nulls(len(records), pa.int64()),
    ], schema=INPUT_SCHEMA)


__all__ = ["INPUT_COLUMNS", "INPUT_SCHEMA", "Chunk", "RowNumbers", "input_batches", "normalise", "numbered_chunks",
           "records_to_batch"]
