"""The records of an attached log as the readers see them, without Spark: rows of the source (or of the view)
turned into Arrow batches of the topic's schema (docs/attaching.md, "Reading").

* ``partition``, ``offset`` and ``timestamp`` come from the mapping's columns (the view's bookkeeping columns for
  the view's rows); offsets keep the source's gaps.
* ``key`` is the JSON object of the key columns, ``value`` the JSON object of the value columns (``null`` for a
  tombstone), as UTF-8 bytes: compact JSON in column order, null fields left out, binary as base64, timestamps
  as ISO-8601 (what Spark's ``to_json`` writes, so ``compactor read`` and the readers agree).
* ``headers`` are Redpanda's (the key as text), or none.

The tombstone rule of the view's rows is the view's ``_compactor_tombstone`` column (computed by the compaction
run). Rows of the source evaluate the rule here: ``null-value`` on the value columns, or the condition parsed by
pyiceberg's expression parser (comparisons, ``IN``, ``IS NULL``, ``LIKE 'prefix%'``, ``AND``/``OR``/``NOT``, which
Spark reads the same way), converted to a pyarrow expression; a null result is false, as in the run.
``topic attach`` refuses a condition this cannot evaluate (``attach.condition``).
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from collections.abc import Mapping as AnyMapping
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyiceberg.expressions import And, BooleanExpression, EqualTo, IsNull, Reference
from pyiceberg.io.pyarrow import expression_to_pyarrow
from pyiceberg.schema import Schema
from pyiceberg.types import BinaryType, IntegerType, LongType, StringType

from compactor import schema as ts
from compactor.attach.condition import check_condition
from compactor.attach.jsonrows import json_objects
from compactor.attach.mapping import NULL_VALUE, AttachError, Mapping
from compactor.attach.registry import OFFSET, PARTITION, TIMESTAMP_MS, TOMBSTONE


class RecordMaker:
    """Turns Arrow rows of one attached log's source (``source_batch``) or view (``view_batch``) into batches of
    the topic's Arrow schema (see the module docstring)."""

    def __init__(self, mapping: Mapping, schema: Schema) -> None:
        self.mapping = mapping
        self.schema = schema
        self.values = mapping.value_columns(schema)
        self._rule = None if mapping.tombstone == NULL_VALUE else expression_to_pyarrow(
            check_condition(mapping.tombstone, schema, mapping.source), schema)

    def source_batch(self, rows: pa.Table) -> pa.Table:
        """Source rows (every column) as topic records, in offset order."""
        stamp = column(rows, self.mapping.timestamp)
        if pa.types.is_integer(stamp.type):
            micros = pc.multiply(stamp.cast(pa.int64()), 1000).cast(pa.timestamp("us", tz="UTC"))
        else:
            micros = stamp.cast(pa.timestamp("us", tz=stamp.type.tz or "UTC"), safe=False)
        return self._records(rows, column(rows, self.mapping.partition), column(rows, self.mapping.offset),
                             micros, self.tombstones(rows))

    def view_batch(self, rows: pa.Table) -> pa.Table:
        """View rows as topic records (their bookkeeping columns say partition, offset, time and tombstone)."""
        micros = pc.multiply(rows[TIMESTAMP_MS].cast(pa.int64()), 1000).cast(pa.timestamp("us", tz="UTC"))
        return self._records(rows, rows[PARTITION], rows[OFFSET], micros, pc.fill_null(rows[TOMBSTONE], False))

    def tombstones(self, rows: pa.Table) -> pa.Array | pa.ChunkedArray:
        """Whether each source row is a tombstone under the mapping's rule (null counts as false)."""
        if self._rule is None:
            if not self.values:
                return pa.array([False] * rows.num_rows)
            nulls = [pc.is_null(rows[name]) for name in self.values]
            flags = nulls[0]
            for more in nulls[1:]:
                flags = pc.and_(flags, more)
            return flags
        result = ds.dataset(rows).to_table(columns={"t": self._rule})["t"]
        return pc.fill_null(result, False)

    def _records(self, rows: pa.Table, partitions: Any, offsets: Any, micros: Any, tombstone: Any) -> pa.Table:
        keys = _objects(rows, self.mapping.keys)
        values = pc.if_else(pc.fill_null(tombstone, False), pa.scalar(None, pa.large_binary()),
                            _objects(rows, self.values))
        headers = _headers(column(rows, self.mapping.headers)) if self.mapping.headers else [None] * rows.num_rows
        table = pa.table({
            ts.PARTITION: partitions.cast(pa.int32()),
            ts.OFFSET: offsets.cast(pa.int64()),
            ts.TIMESTAMP: micros,
            ts.KEY: keys,
            ts.VALUE: values,
            ts.HEADERS: pa.array(headers, ts.ARROW_SCHEMA.field(ts.HEADERS).type),
        })
        return table.cast(ts.ARROW_SCHEMA).sort_by([(ts.OFFSET, "ascending")])


def key_of(mapping: Mapping, values: AnyMapping[str, Any]) -> bytes:
    """The record key (as the readers carry it) of the key columns' ``values``; ``AttachError`` if a key column is
    not given or another column is."""
    if set(values) != set(mapping.keys):
        raise AttachError(f"a key of {mapping.source} names the key columns {', '.join(mapping.keys)}; got "
                          f"{', '.join(map(str, values)) or 'none'}")
    return _json({name: _plain(values[name]) for name in mapping.keys if values[name] is not None})


def key_predicate(mapping: Mapping, schema: Schema, key: bytes) -> BooleanExpression | None:
    """A row filter on the key columns that matches the rows whose record key is ``key`` (for pruning files by
    the key columns' statistics), or ``None`` when ``key`` is not such a JSON object or a column's type has no
    plain JSON form (the caller then compares keys on every row)."""
    try:
        values = json.loads(key)
    except ValueError:
        return None
    if not isinstance(values, dict) or not set(values) <= set(mapping.keys):
        return None
    terms: list[BooleanExpression] = []
    for name in mapping.keys:
        kind = schema.find_field(name).field_type
        value = values.get(name)
        if value is None:
            terms.append(IsNull(term=Reference(name)))
        elif (isinstance(kind, StringType) and isinstance(value, str)) or \
                (isinstance(kind, IntegerType | LongType) and isinstance(value, int) and not isinstance(value, bool)):
            terms.append(EqualTo(term=Reference(name), value=value))
        elif isinstance(kind, BinaryType) and isinstance(value, str):
            terms.append(EqualTo(term=Reference(name), value=base64.b64decode(value)))
        else:
            return None
    return terms[0] if len(terms) == 1 else And(*terms)


def column(rows: pa.Table, dotted: str) -> pa.ChunkedArray:
    """A (possibly nested) column of ``rows`` by its dotted path."""
    parts = dotted.split(".")
    found: Any = rows.column(parts[0])
    for part in parts[1:]:
        found = pc.struct_field(found, part)
    return found


def _objects(rows: pa.Table, names: Sequence[str]) -> pa.Array:
    """Each row's named (dotted) columns as a JSON object (null fields left out), as ``large_binary``: built by
    Arrow kernels where the columns' types allow (``attach.jsonrows``), else row by row."""
    present = set(rows.column_names)
    columns = [(name, column(rows, name)) for name in names if name.split(".")[0] in present]
    fast = json_objects(columns, rows.num_rows)
    if fast is not None:
        return fast
    lists = [(name, values.to_pylist()) for name, values in columns]
    return pa.array([_json({name: _plain(values[i]) for name, values in lists if values[i] is not None})
                     for i in range(rows.num_rows)], pa.large_binary())


def _plain(value: Any) -> Any:
    """A column value as JSON-ready data (Spark's ``to_json`` rendering; nulls inside structs left out)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):  # an Arrow map
            return {str(k): _plain(v) for k, v in value}
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, datetime.datetime):
        text = value.isoformat(timespec="milliseconds")
        return text.replace("+00:00", "Z")
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value) if value != value.to_integral_value() else int(value)
    return value


def _json(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _headers(values: pa.ChunkedArray) -> list[list[dict[str, Any]] | None]:
    out: list[list[dict[str, Any]] | None] = []
    for headers in values.to_pylist():
        if not headers:
            out.append(None)
            continue
        out.append([{"key": h["key"].decode("utf-8", "replace") if isinstance(h["key"], bytes) else str(h["key"]),
                     "value": h["value"] if not isinstance(h["value"], str) else h["value"].encode()}
                    for h in headers if h is not None and h.get("key") is not None])
    return out


__all__ = ["RecordMaker", "column", "key_of", "key_predicate"]
