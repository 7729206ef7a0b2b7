"""Spark column expressions the product builds in more than one place (the Spark twins of ``iceberg.expressions``),
and the offset masks phase 1 packs its winners into."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from compactor.schema import MASK, OFFSET, PARTITION, WORD, WORD_BITS, WORD_SHIFT

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def offset_ranges(ranges: Iterable[tuple[int, int, int]]) -> Column | None:
    """Rows of partition ``p`` with ``lo <= offset < hi``, for each ``(p, lo, hi)``; ``None`` when there are none.

    The Spark twin of ``iceberg.expressions.ranges``: Iceberg prunes data files by these bounds.
    """
    from pyspark.sql import functions as F

    terms = [f"(`{PARTITION}` = {int(p)} AND `{OFFSET}` >= {int(lo)} AND `{OFFSET}` < {int(hi)})"
             for p, lo, hi in sorted(ranges) if hi > lo]
    return F.expr(" OR ".join(terms)) if terms else None  # SQL text: one call into the JVM, not five per term


def offset_bit(offset: str = OFFSET) -> Column:
    """A row's bit in its word's mask: ``1 << (offset mod 64)`` (``offset``: the offset column's name)."""
    from pyspark.sql import functions as F

    return F.expr(f"shiftleft(CAST(1 AS BIGINT), CAST(`{offset}` & {WORD_BITS - 1} AS INT))")


def offset_masks(winners: DataFrame) -> DataFrame:
    """Offsets ``(partition, offset)`` as one 64-bit mask per 64 consecutive offsets: ``(partition, word, mask)``
    (phase 1's winners of a native run, and of an attached log's run)."""
    from pyspark.sql import functions as F

    return (winners.select(PARTITION, F.shiftright(F.col(OFFSET), WORD_SHIFT).alias(WORD), offset_bit().alias(MASK))
            .groupBy(PARTITION, WORD).agg(F.bit_or(MASK).alias(MASK)))
