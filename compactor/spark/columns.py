"""Spark column expressions the product builds in more than one place."""

from __future__ import annotations

from collections.abc import Iterable
from functools import reduce
from typing import TYPE_CHECKING

from compactor.schema import OFFSET, PARTITION

if TYPE_CHECKING:
    from pyspark.sql import Column


def offset_ranges(ranges: Iterable[tuple[int, int, int]]) -> Column | None:
    """Rows of partition ``p`` with ``lo <= offset < hi``, for each ``(p, lo, hi)``; ``None`` when there are none.

    The Spark twin of ``iceberg.expressions.ranges``: Iceberg prunes data files by these bounds.
    """
    from pyspark.sql import functions as F

    terms = [(F.col(PARTITION) == p) & (F.col(OFFSET) >= lo) & (F.col(OFFSET) < hi)
             for p, lo, hi in sorted(ranges) if hi > lo]
    return reduce(lambda a, b: a | b, terms) if terms else None


def record_bytes(key: Column, value: Column, headers: Column | None) -> Column:
    """Key + value + header keys and values, in bytes: what counts against ``max.message.bytes`` (the Spark twin
    of ``producing.validation.record_sizes``). ``headers`` is ``None`` when there is no such column. The sum over
    headers is a higher-order function, evaluated without code generation, so it runs only for rows that
    carry headers; a null header key counts 0 (the producer refuses such rows separately)."""
    from pyspark.sql import functions as F

    plain = (F.coalesce(F.length(key), F.lit(0)) + F.coalesce(F.length(value), F.lit(0))).cast("bigint")
    if headers is None:
        return plain
    summed = F.aggregate(headers, F.lit(0).cast("bigint"),
                         lambda total, h: total + F.coalesce(F.octet_length(h.getField("key")), F.lit(0))
                         + F.coalesce(F.length(h.getField("value")), F.lit(0)))
    return plain + F.when(F.size(headers) > 0, summed).otherwise(F.lit(0).cast("bigint"))
