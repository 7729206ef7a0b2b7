"""The compaction strategies in Spark: each record's rank, the winner of each key, and the contest of a new
range's winners with the compacted view's rows (``topics.strategy`` states the rules; this is their Spark form).

A rank ``(has value, value, offset)`` is carried as two columns: ``RANKED`` (whether the record has a value)
and ``SCORE``, the exact number ``value * 2^63 + offset`` as a ``DECIMAL(38, 0)`` (a signed 64-bit value times
2^63 plus an offset below 2^63 stays within 38 digits, and orders exactly as ``(value, offset)``). A decimal
keeps phase 1 a hash aggregation: Spark aggregates a maximum of a decimal in place, whereas a maximum of a
struct would fall back to sorting every key. Per key, the winner is the record of highest ``SCORE`` among
those with a value, else the highest offset; its offset is ``SCORE mod 2^63``.

Offsets in a view are always below those of the new range, so a range winner beats the view's row of its
key iff it ranks at least as high ignoring offsets: ``beats_view``. Under ``offset`` none of this runs: phase 1
keeps its plain ``max(offset)``.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from compactor.compaction.phase1 import WORD_BITS, WORD_SHIFT
from compactor.compaction.scratch import FILE_PATH, MASK, POS, WORD
from compactor.schema import DELETE_HORIZON, HEADERS, KEY, OFFSET, PARTITION, RECORD_BYTES, TIMESTAMP
from compactor.topics.strategy import HEADER_STRATEGY, LONG_BYTES, TIMESTAMP_STRATEGY, Strategy

LOST = "__compactor_lost"
RANKED = "__compactor_ranked"
SCORE = "__compactor_score"
UNPARSABLE = "__compactor_unparsable"
VIEW_RANKED = "__compactor_view_ranked"
VIEW_SCORE = "__compactor_view_score"
SCORE_TYPE = "decimal(38,0)"
ENTRY_TYPE = (f"struct<{KEY}:binary,{FILE_PATH}:string,{POS}:bigint,{DELETE_HORIZON}:bigint,"
              f"{RECORD_BYTES}:bigint>")
SHIFT = 1 << 63
DECIMAL_TEXT = "^[+-]?[0-9]+\\z"  # Java's \z: no line terminator may follow (its $ would allow one)


def _shift() -> Column:
    """2^63 as an exact decimal literal."""
    return F.expr(f"CAST('{SHIFT}' AS {SCORE_TYPE})")


def rank_inputs(strategy: Strategy) -> tuple[str, ...]:
    """The raw columns a strategy's rank reads, beyond partition, key and offset."""
    if strategy.kind == TIMESTAMP_STRATEGY:
        return (TIMESTAMP,)
    if strategy.kind == HEADER_STRATEGY:
        return (HEADERS,)
    return ()


def _last_header(name: str) -> tuple[Column, Column]:
    """Whether header ``name`` occurs, and the value of its last occurrence (null if none or null)."""
    matching = F.filter(F.col(HEADERS), lambda h: h["key"] == F.lit(name))
    count = F.coalesce(F.size(matching), F.lit(0))
    present = count > 0
    return present, F.when(present, F.element_at(matching, F.greatest(count, F.lit(1)))["value"])


def _header_number(value: Column) -> Column:
    """A header value as a signed 64-bit integer: 8 bytes big-endian, else decimal UTF-8 text; else null."""
    as_binary = F.conv(F.hex(value), 16, -10).cast("bigint")  # negative base: read as a signed number
    text = value.cast("string")
    as_text = F.when(text.rlike(DECIMAL_TEXT), F.expr(f"try_cast(cast(`{HEADERS}_value` as string) as bigint)"))
    return F.when(F.length(value) == LONG_BYTES, as_binary).otherwise(as_text)


def with_rank(rows: DataFrame, strategy: Strategy, *, ranked: str = RANKED, score: str = SCORE,
              unparsable: str | None = None, offsets: bool = True) -> DataFrame:
    """``rows`` with the rank columns ``ranked`` and ``score`` (and, if named, ``unparsable``: whether the row
    carries the header with a value that is no number). ``offsets=False`` leaves the offset out of the score
    (``value * 2^63``: the view's side of ``beats_view``, which needs no offsets)."""
    offset = F.col(OFFSET).cast(SCORE_TYPE) if offsets else F.lit(0).cast(SCORE_TYPE)
    if strategy.kind == TIMESTAMP_STRATEGY:
        value: Column = F.unix_micros(F.col(TIMESTAMP))
        has = F.lit(True)
        bad = F.lit(False)
        out = rows
    else:
        present, raw_value = _last_header(strategy.header)
        out = rows.withColumn(f"{HEADERS}_value", raw_value)
        value = _header_number(F.col(f"{HEADERS}_value"))
        has = value.isNotNull()
        bad = present & value.isNull()
    out = out.withColumn(ranked, has).withColumn(
        score, F.when(has, value.cast(SCORE_TYPE) * _shift() + offset))
    if unparsable is not None:
        out = out.withColumn(unparsable, bad)
    return out.drop(f"{HEADERS}_value")


def ranked_latest(ranked_rows: DataFrame) -> DataFrame:
    """``(partition, key, offset, RANKED, SCORE)`` of each non-null key's winner among ``ranked_rows`` (columns
    partition, key, offset and the rank columns of ``with_rank``)."""
    best = (ranked_rows.where(F.col(KEY).isNotNull())
            .groupBy(PARTITION, KEY)
            .agg(F.max(F.col(SCORE)).alias(SCORE), F.max(OFFSET).alias(OFFSET)))
    winner = F.coalesce(F.pmod(F.col(SCORE), _shift()).cast("bigint"), F.col(OFFSET))
    return best.select(PARTITION, KEY, winner.alias(OFFSET), F.col(SCORE).isNotNull().alias(RANKED), SCORE)


def beats_view() -> Column:
    """Whether a range winner (``RANKED``, ``SCORE``) supersedes the view's row of its key (``VIEW_RANKED``,
    ``VIEW_SCORE`` without the offset; both null when the key has no row): it ranks at least as high, offsets
    aside (``SCORE = value * 2^63 + offset >= value' * 2^63`` iff ``value >= value'``)."""
    no_row = F.col(VIEW_RANKED).isNull()
    return (no_row | ~F.col(VIEW_RANKED)
            | (F.col(RANKED) & (F.col(SCORE) >= F.col(VIEW_SCORE))))


def contest(winners: DataFrame, view_rows: DataFrame, strategy: Strategy, *, hash_keys: bool) -> DataFrame:
    """The range winners ``(partition, key, offset)`` with ``LOST`` (the view's row of the key outranks
    the winner, which is then neither appended nor allowed to remove the view's row) and, where the winner
    supersedes a compacted row, that row's position and bookkeeping (``scratch.CONTEST_SCHEMA``'s columns): one
    narrow pass over the view serves the contest and the position deletes alike."""
    view = with_rank(view_rows.where(F.col(KEY).isNotNull()).select(
        PARTITION, KEY, *rank_inputs(strategy), DELETE_HORIZON, RECORD_BYTES, "_file", "_pos"),
        strategy, ranked=VIEW_RANKED, score=VIEW_SCORE, offsets=False)
    joined = winners.hint("shuffle_hash" if hash_keys else "merge").join(
        view.select(PARTITION, KEY, VIEW_RANKED, VIEW_SCORE, DELETE_HORIZON, RECORD_BYTES, "_file", "_pos"),
        [PARTITION, KEY], "left")
    supersedes = beats_view() & F.col(VIEW_RANKED).isNotNull()
    return joined.select(PARTITION, KEY, OFFSET, (~beats_view()).alias(LOST),
                         *(F.when(supersedes, F.col(source)).alias(target) for source, target in (
                             ("_file", FILE_PATH), ("_pos", POS), (DELETE_HORIZON, DELETE_HORIZON),
                             (RECORD_BYTES, RECORD_BYTES))))


def contest_scratch_rows(contested: DataFrame) -> DataFrame:
    """The scratch table's rows (``scratch.CONTEST_SCHEMA``) of contested winners: per word a mask row with the
    bits of the winners that beat the view (a word whose keys all lost keeps a zero mask, so that phase 2 still
    reads its range), and per such winner a key row with the compacted row it supersedes, if any."""
    bit = F.when(~F.col(LOST), F.expr(f"shiftleft(CAST(1 AS BIGINT), CAST(`{OFFSET}` & {WORD_BITS - 1} AS INT))"))
    fields = (KEY, FILE_PATH, POS, DELETE_HORIZON, RECORD_BYTES)
    entry = F.when(~F.col(LOST), F.struct(*fields))
    words = (contested.select(PARTITION, F.shiftright(F.col(OFFSET), WORD_SHIFT).alias(WORD),
                              F.coalesce(bit, F.lit(0).cast("bigint")).alias(MASK), entry.alias("entry"))
             .groupBy(PARTITION, WORD)
             .agg(F.bit_or(MASK).alias(MASK), F.collect_list("entry").alias("entries")))  # skips lost keys
    empty = F.lit(None).cast(ENTRY_TYPE)
    exploded = words.select(PARTITION, WORD, MASK, F.explode(F.concat(F.array(empty), F.col("entries"))).alias("e"))
    mask_row = F.col("e").isNull()
    return exploded.select(PARTITION, F.when(mask_row, F.col(WORD)).alias(WORD),
                           F.when(mask_row, F.col(MASK)).alias(MASK), *(F.col("e")[f].alias(f) for f in fields))
