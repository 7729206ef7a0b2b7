"""The two phases as pure DataFrame logic, apart from catalogs and commits (tested on plain DataFrames).

Phase 1 reads only ``partition``, ``key``, ``offset`` (and ``timestamp`` is not needed once the horizon is
known) of the new raw range and finds the latest offset of every key by grouping on the exact key bytes:
no digest, so no collision can merge two keys. Phase 2 keeps the full rows of the range whose offset won
and stamps tombstones with their delete horizon.

Both phases run partition by partition without a shuffle when Spark's storage-partitioned grouping is on
(the raw table and the compacted view are partitioned by ``identity(partition)``, see ``job.SPARK_SETTINGS``).
Phase 1 is a local hash aggregation (it spills to disk when the keys outgrow memory). Phase 2 does not join
the winners row by row: offsets are dense, so the winners become one 64-bit mask per 64 consecutive offsets
(``latest_offset_masks``), and each raw row looks its bit up in a hash join on ``(partition, offset >> 6)``.
The join's hash table holds about one byte per record of the task's range (a 100M-record partition: ~100
MB per task), neither side is sorted, and full rows are never shuffled; only the kept rows are sorted by
offset for writing (on the standard workload, paired runs: 0.8-1.5 s less than the sort-merge join on
``(partition, offset)``, which sorted all 5M raw rows; see bench/README.md). Nothing is collected to the
driver or broadcast: broadcast joins are disabled for the job. Finding superseded view rows is a hash join
whose build side is only the new range's keys.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from compactor.schema import (
    DELETE_HORIZON,
    HEADERS,
    KEY,
    OFFSET,
    PARTITION,
    RECORD_BYTES,
    TIMESTAMP,
    VALUE,
    VIEW_COLUMNS,
)

WORD = "__compactor_word"
MASK = "__compactor_mask"
WORD_SHIFT = 6
WORD_BITS = 1 << WORD_SHIFT
SUPERSEDED = "__compactor_superseded"
DOOMED = "__compactor_doomed"
TRIMMED = "__compactor_trimmed"


def is_tombstone() -> Column:
    return F.col(KEY).isNotNull() & F.col(VALUE).isNull()


def record_bytes() -> Column:
    """Key + value + header keys and values, in bytes (the rule ``max.message.bytes`` uses)."""
    # the higher-order function is interpreted row by row, so it only runs for rows that carry headers
    summed = F.aggregate(
        F.col(HEADERS),
        F.lit(0).cast("bigint"),
        lambda acc, h: acc + F.octet_length(h["key"]) + F.coalesce(F.length(h["value"]), F.lit(0)),
    )
    header_bytes = F.when(F.size(F.col(HEADERS)) > 0, summed).otherwise(F.lit(0).cast("bigint"))
    return (F.coalesce(F.length(KEY), F.lit(0)) + F.coalesce(F.length(VALUE), F.lit(0))).cast("bigint") + header_bytes


def latest_offsets(range_rows: DataFrame) -> DataFrame:
    """Phase 1: ``(partition, key, offset)`` of the highest offset of each non-null key in the range."""
    return (range_rows.where(F.col(KEY).isNotNull())
            .select(PARTITION, KEY, OFFSET)
            .groupBy(PARTITION, KEY)
            .agg(F.max(OFFSET).alias(OFFSET)))


def new_view_rows(range_rows: DataFrame, winners: DataFrame, *, retain_null_keys: bool, now_ms: int,
                  delete_retention_ms: int) -> DataFrame:
    """Phase 2 (new rows): the range's rows that the compacted view keeps, in view columns, offset-sorted.

    Kept: each key's latest record; keyless records only under ``compaction.null-key=retain``; a tombstone
    only if ``now < now + delete.retention.ms`` (so ``delete.retention.ms = 0`` drops it at once).
    """
    masks = latest_offset_masks(winners)
    joined = range_rows.withColumn(WORD, F.shiftright(F.col(OFFSET), WORD_SHIFT)).join(
        masks.hint("shuffle_hash"), [PARTITION, WORD], "left" if retain_null_keys else "inner")
    latest = F.coalesce(F.expr(f"(shiftright(`{MASK}`, CAST(`{OFFSET}` & {WORD_BITS - 1} AS INT)) & 1) = 1"),
                        F.lit(False))
    kept = joined.where(latest | F.col(KEY).isNull() if retain_null_keys else latest)
    horizon = now_ms + delete_retention_ms
    if not now_ms < horizon:
        kept = kept.where(~is_tombstone())
    kept = (kept.withColumn(DELETE_HORIZON, F.when(is_tombstone(), F.lit(horizon)).otherwise(F.lit(None))
                            .cast("bigint"))
            .withColumn(RECORD_BYTES, record_bytes()))
    return kept.select(*VIEW_COLUMNS).sortWithinPartitions(PARTITION, OFFSET)


def latest_offset_masks(winners: DataFrame) -> DataFrame:
    """Phase 1's winners as one 64-bit mask per 64 consecutive offsets: ``(partition, word, mask)``.

    Offsets are dense, so a word covers 64 records of the range and its mask has a bit set for each that is
    its key's latest. The masks are what phase 2's join builds its hash table from: about one byte per
    record in the range, per task, instead of a row per winner, and no sort of either side.
    """
    bit = F.expr(f"shiftleft(CAST(1 AS BIGINT), CAST(`{OFFSET}` & {WORD_BITS - 1} AS INT))")
    return (winners.select(PARTITION, F.shiftright(F.col(OFFSET), WORD_SHIFT).alias(WORD), bit.alias(MASK))
            .groupBy(PARTITION, WORD).agg(F.bit_or(MASK).alias(MASK)))


def classify_view(view_rows: DataFrame, winners: DataFrame | None, *, now_ms: int, drop_null_keys: bool,
                  with_positions: bool = False, trim_before_ms: int | None = None) -> DataFrame:
    """Mark each compacted row that this run removes (column ``DOOMED``), reading only narrow columns.

    Removed: rows whose key won again in the new range (a newer record or tombstone supersedes them),
    tombstones whose stored delete horizon has passed (``delete_horizon_ms <= now``), and keyless rows when
    the setting is now ``drop``. ``with_positions`` keeps Iceberg's ``_file`` and ``_pos`` columns, so the
    marked rows can be written as position deletes by the same pass. ``trim_before_ms`` (retention under
    ``delete,compact``) also removes rows whose timestamp is older than it, and marks them (column
    ``TRIMMED``) so the run can advance the compacted start (``trim_starts``).
    """
    columns = [PARTITION, KEY, OFFSET, TIMESTAMP, DELETE_HORIZON, RECORD_BYTES]
    if with_positions:  # the incremental pass needs no offsets or timestamps: keep it as narrow as possible
        columns = [PARTITION, KEY, DELETE_HORIZON, RECORD_BYTES]
        if trim_before_ms is not None:
            columns.append(TIMESTAMP)
    if with_positions:  # Iceberg's metadata columns: the data file and row position, for position deletes
        columns += ["_file", "_pos"]
    narrow = view_rows.select(*columns)
    if winners is not None:
        keys = winners.select(PARTITION, KEY, F.lit(True).alias(SUPERSEDED))
        narrow = narrow.join(keys.hint("shuffle_hash"), [PARTITION, KEY], "left")
        superseded = F.col(SUPERSEDED).isNotNull()
    else:
        superseded = F.lit(False)
    expired = F.col(DELETE_HORIZON).isNotNull() & (F.col(DELETE_HORIZON) <= F.lit(now_ms))
    doomed = superseded | expired
    if trim_before_ms is not None:
        trimmed = F.unix_millis(F.col(TIMESTAMP)) < F.lit(trim_before_ms)
        narrow = narrow.withColumn(TRIMMED, trimmed)
        doomed = doomed | trimmed
    if drop_null_keys:
        doomed = doomed | F.col(KEY).isNull()
    return narrow.withColumn(DOOMED, doomed)


def trim_starts(classified: DataFrame) -> DataFrame:
    """Per partition of a trimmed view: rows the retention trim removes, and the lowest offset the view keeps.

    ``classified`` is ``classify_view`` with ``trim_before_ms`` and without positions (it needs offsets).
    One row per topic partition that has compacted rows, so the driver receives at most a row per partition.
    """
    return (classified.groupBy(PARTITION)
            .agg(F.count(F.when(F.col(TRIMMED), F.lit(1))).alias("trimmed"),
                 F.min(F.when(~F.col(DOOMED), F.col(OFFSET))).alias("first_kept")))


def surviving_rows(view_rows: DataFrame, winners: DataFrame | None, *, now_ms: int,
                   drop_null_keys: bool, trim_before_ms: int | None = None) -> DataFrame:
    """Full compacted rows that this run keeps (the complement of ``classify_view``), for a rewrite."""
    rows = view_rows
    if winners is not None:
        rows = rows.join(winners.select(PARTITION, KEY).hint("shuffle_hash"), [PARTITION, KEY], "left_anti")
    keep = F.col(DELETE_HORIZON).isNull() | (F.col(DELETE_HORIZON) > F.lit(now_ms))
    if drop_null_keys:
        keep = keep & F.col(KEY).isNotNull()
    if trim_before_ms is not None:
        keep = keep & (F.unix_millis(F.col(TIMESTAMP)) >= F.lit(trim_before_ms))
    return rows.where(keep).select(*VIEW_COLUMNS)


def view_stats_columns(prefix: str, condition: Column | None = None, *, minimums: bool = True) -> list[Column]:
    """Aggregates describing compacted rows (optionally only those matching ``condition``).

    ``minimums=False`` leaves out the smallest delete horizon and timestamp (and so the timestamp column).
    """
    def only(col: Column) -> Column:
        return col if condition is None else F.when(condition, col)

    one = F.lit(1)
    columns = [
        F.count(only(one)).alias(f"{prefix}rows"),
        F.count(only(F.when(F.col(DELETE_HORIZON).isNotNull(), one))).alias(f"{prefix}tombstones"),
        F.count(only(F.when(F.col(KEY).isNull(), one))).alias(f"{prefix}null_key_rows"),
        F.coalesce(F.sum(only(F.col(RECORD_BYTES))), F.lit(0)).cast("bigint").alias(f"{prefix}clean_bytes"),
    ]
    if minimums:
        columns += [F.min(only(F.col(DELETE_HORIZON))).alias(f"{prefix}min_tombstone_delete_horizon"),
                    F.min(only(F.unix_millis(F.col(TIMESTAMP)))).alias(f"{prefix}min_timestamp_ms")]
    return columns


def range_stats_columns() -> list[Column]:
    """Aggregates describing the raw records read: how many (a density check) and how many tombstones.

    Their bytes are known from metadata (cumulative logical bytes), so no per-row size is computed here.
    """
    return [
        F.count(F.lit(1)).alias("records"),
        F.count(F.when(is_tombstone(), F.lit(1))).alias("tombstones"),
    ]
