"""Spark column expressions the product builds in more than one place (the Spark twins of ``iceberg.expressions``)."""

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
