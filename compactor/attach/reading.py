"""Reading an attached log (docs/guarantees.md#attached-logs): compacted (the view's rows below each partition's
horizon, then the source's rows from the horizon on) or raw (the source's rows), per partition in offset order,
as the record JSON of ``compactor read``: ``key`` an object of the key columns, ``value`` an object of the value
columns (null for a tombstone). Both tables are read at one pinned snapshot each (the cursor, then the source).

Reads run on Spark (the tombstone rule may be a Spark SQL condition), started on first use.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from compactor.attach.cursor import current_cursor
from compactor.attach.registry import require_attached
from compactor.errors import OffsetOutOfRangeError
from compactor.topics.records import encode_bytes

if TYPE_CHECKING:
    from compactor.lake import Lake


def read_attached(lake: Lake, name: str, *, read_compacted: bool,
                  from_offsets: Mapping[int, int] | None = None) -> Iterator[dict[str, Any]]:
    """The records of the attached log ``name``, as record-JSON objects, in partition then offset order;
    ``from_offsets`` starts named partitions at an offset (an offset with no record continues at the next)."""
    from pyspark.sql import functions as F

    from compactor.attach import frames
    from compactor.spark.active import active_session

    attached = require_attached(lake.catalog, name)
    cursor = current_cursor(attached.view) if read_compacted else None
    source = attached.source()
    pinned = source.current_snapshot()
    schema = source.schema()
    for p, o in (from_offsets or {}).items():
        if o < 0:
            raise OffsetOutOfRangeError(f"start offset {o} of partition {p} is negative")
    if pinned is None:
        return
    spark = lake.job_spark()
    catalog_name = lake.config.catalog_name
    with active_session(spark):
        raw = frames.source_rows(frames.read_snapshot(spark, frames.spark_table(catalog_name, attached.mapping.source),
                                                      pinned.snapshot_id), attached.mapping, schema)
        if cursor is not None:
            view = frames.read_snapshot(spark, frames.spark_table(catalog_name, attached.name.identifier),
                                        cursor.snapshot_id)
            columns = raw.columns
            view = view.select(*[F.col(f"`{c}`") if c in view.columns else F.lit(None).alias(c) for c in columns])
            rows = view.unionByName(frames.above(raw, cursor.horizons))
        else:
            rows = raw
        if from_offsets:
            rows = frames.above(rows, dict(from_offsets))
        records = frames.record_columns(rows, attached.mapping, schema).orderBy("partition", "offset")
        for row in records.toLocalIterator():
            yield _record(row.asDict(recursive=True))


def _record(row: dict[str, Any]) -> dict[str, Any]:
    headers = row.get("headers") or []
    return {"partition": row["partition"], "offset": row["offset"], "timestamp_ms": row["timestamp_ms"],
            "key": json.loads(row["key"]), "value": json.loads(row["value"]) if row["value"] is not None else None,
            "headers": [[_text(h.get("key")), _text(h.get("value"))] for h in headers]}


def _text(value: Any) -> Any:
    return encode_bytes(bytes(value)) if isinstance(value, (bytes, bytearray)) else value


__all__ = ["read_attached"]
