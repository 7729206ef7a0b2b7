"""Phase 1's pure DataFrame logic: each key's latest offset in the new range, as the scratch table's rows.

Phase 1 reads only ``partition``, ``key`` and ``offset`` of the new raw range and finds the latest offset of
every non-null key by grouping on the exact key bytes: no digest, so no collision can merge two keys. It runs
as a local hash aggregation per partition (partitioned layout) or as a partial aggregation per slice followed
by an exchange of ``(partition, key, offset)`` only (sliced layout); Spark spills it to disk when the keys
outgrow memory, so memory is bounded per task.

The winners leave phase 1 in two forms, as rows of the scratch table (its layout: ``schema.SCRATCH_SCHEMA``):

* **masks**: offsets are dense, so the winners of 64 consecutive offsets are one 64-bit word with a bit set
  for each offset that is its key's latest. Phase 2 looks each raw row's bit up in a hash table of these
  words, about one byte per record of the partition's range, without sorting or shuffling full rows.
* **keys**: the winning keys, with which phase 2 finds the compacted rows the new range supersedes (only
  written when a compacted view exists).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from compactor.schema import KEY, MASK, OFFSET, PARTITION, WORD, WORD_SHIFT
from compactor.spark.expressions import offset_bit, offset_masks

NARROW_COLUMNS = (PARTITION, KEY, OFFSET)


def latest_offsets(range_rows: DataFrame) -> DataFrame:
    """``(partition, key, offset)`` of the highest offset of each non-null key in the range."""
    return (range_rows.where(F.col(KEY).isNotNull())
            .select(PARTITION, KEY, OFFSET)
            .groupBy(PARTITION, KEY)
            .agg(F.max(OFFSET).alias(OFFSET)))


def scratch_rows(winners: DataFrame, *, with_keys: bool) -> DataFrame:
    """The scratch table's rows: a mask row per word (``key`` null) and, ``with_keys``, a row per winning key
    (``word`` and ``mask`` null). One aggregation makes both, so the winners are computed once: each word
    collects its (at most 64) keys and is exploded into its mask row and its key rows."""
    if not with_keys:
        return offset_masks(winners).select(PARTITION, WORD, MASK, F.lit(None).cast("binary").alias(KEY))
    words = (winners.select(PARTITION, F.shiftright(F.col(OFFSET), WORD_SHIFT).alias(WORD), offset_bit().alias(MASK),
                            KEY)
             .groupBy(PARTITION, WORD)
             .agg(F.bit_or(MASK).alias(MASK), F.collect_list(KEY).alias("keys")))
    exploded = words.select(PARTITION, WORD, MASK, F.explode(
        F.concat(F.array(F.lit(None).cast("binary")), F.col("keys"))).alias(KEY))
    mask_row = F.col(KEY).isNull()
    return exploded.select(PARTITION, F.when(mask_row, F.col(WORD)).alias(WORD),
                           F.when(mask_row, F.col(MASK)).alias(MASK), KEY)


def winner_count(mask_rows: Column) -> Column:
    """Aggregate over scratch rows: how many winners the mask rows (``mask_rows``) hold, one bit each."""
    return F.coalesce(F.sum(F.when(mask_rows, F.bit_count(F.col(MASK)))), F.lit(0)).cast("bigint").alias("winners")
