"""Phase 2's pure DataFrame logic: the compacted view's new rows, and the compacted rows a run removes.

Inputs are DataFrames (the raw range, the view at the cursor, and phase 1's masks and keys read from the
scratch table: ``frames``), so these functions are tested on plain DataFrames; this module reads no table and
commits nothing (``tests/test_layering.py`` checks that it imports no I/O).

* ``new_view_rows``: the range's rows the view keeps. Each raw row looks its bit up in its word's mask (a hash
  join on ``(partition, offset >> 6)`` whose build side is about one byte per record of the partition's range);
  neither side is sorted and full rows are never shuffled; only the kept rows are sorted by offset for writing.
  ``latest_range_rows``: the same rows of a small range, each key's latest found in the range's own rows (a
  window per key, sorted within each task, never shuffled). ``key_table_range_rows``: the same rows, from
  those a hash table of the range's keys per task passed on.
* ``classify_view`` / ``surviving_rows``: the compacted rows a run removes, and their complement, from the
  winning keys (a join on ``(partition, key)``), the stored delete horizons, the null-key setting and a
  retention trim. One rule set serves the incremental pass, the rewrite and the trim.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from compactor.schema import (
    DELETE_HORIZON,
    FILE_PATH,
    HEADERS,
    KEY,
    MASK,
    OFFSET,
    PARTITION,
    POS,
    RECORD_BYTES,
    TIMESTAMP,
    VALUE,
    VIEW_COLUMNS,
    WORD,
    WORD_BITS,
    WORD_SHIFT,
)
from compactor.topics.record_rules import spark_record_bytes

SUPERSEDED = "__compactor_superseded"
TOMBSTONE_FLAG = "__compactor_tombstone"  # a raw row's flag: a tombstone (``with_tombstone_flag``)
DOOMED = "__compactor_doomed"
TRIMMED = "__compactor_trimmed"


TOMBSTONE_SQL = f"`{KEY}` IS NOT NULL AND `{VALUE}` IS NULL"
KEY_HASH_SQL = f"xxhash64(`{KEY}`)"  # leads a sort by key (``latest_range_rows``)


def is_tombstone() -> Column:
    return F.expr(TOMBSTONE_SQL)


def mask_rows(scratch: DataFrame) -> DataFrame:
    """Phase 1's winners as offset masks ``(partition, word, mask)``: the scratch table's mask rows."""
    return scratch.where(F.col(KEY).isNull())


def key_rows(scratch: DataFrame) -> DataFrame:
    """Phase 1's winning keys ``(partition, key)``: the scratch table's key rows."""
    return scratch.where(F.col(KEY).isNotNull())


def range_keys(range_rows: DataFrame) -> DataFrame:
    """The distinct keys ``(partition, key)`` of the range's keyed records: phase 1's winning keys under
    ``offset``, where every key of the range supersedes the compacted row of its key."""
    return range_rows.where(F.col(KEY).isNotNull()).select(PARTITION, KEY).distinct()


def contested_rows(scratch: DataFrame) -> DataFrame:
    """The compacted rows phase 1's contest found superseded (``phase1.ranking.contest``), as the delete pass
    writes them: partition, key, delete horizon, record bytes, ``_file`` and ``_pos``."""
    return scratch.where(F.col(FILE_PATH).isNotNull()).select(
        PARTITION, KEY, DELETE_HORIZON, RECORD_BYTES, F.col(FILE_PATH).alias("_file"), F.col(POS).alias("_pos"))


def new_view_rows(range_rows: DataFrame, masks: DataFrame, *, retain_null_keys: bool, now_ms: int,
                  delete_retention_ms: int) -> DataFrame:
    """The range's rows that the compacted view keeps, in view columns, offset-sorted within each task.

    Kept: each key's latest record (its bit is set in ``masks``, columns partition, word, mask); keyless
    records only under ``compaction.null-key=retain``; a tombstone only if ``now < now + delete.retention.ms``
    (so ``delete.retention.ms = 0`` drops it at once), stamped with that delete horizon.
    """
    joined = range_rows.withColumn(WORD, F.expr(f"shiftright(`{OFFSET}`, {WORD_SHIFT})")).join(
        masks.select(PARTITION, WORD, MASK).hint("shuffle_hash"), [PARTITION, WORD],
        "left" if retain_null_keys else "inner")
    # SQL text, not a tree of PySpark functions: each of those is a call into the JVM while the pass is built
    latest = f"coalesce((shiftright(`{MASK}`, CAST(`{OFFSET}` & {WORD_BITS - 1} AS INT)) & 1) = 1, false)"
    return _kept(joined, latest, retain_null_keys=retain_null_keys, now_ms=now_ms,
                 delete_retention_ms=delete_retention_ms)


def latest_range_rows(range_rows: DataFrame, *, retain_null_keys: bool, now_ms: int,
                      delete_retention_ms: int) -> DataFrame:
    """The range's rows that the compacted view keeps, as ``new_view_rows`` keeps them, with each key's latest
    record found among the range's own rows: the highest offset of its key (a window per ``(partition, key)``,
    which sorts the range's rows by key within each task). For small ranges, where that sort costs less than
    reading the range a second time for phase 1's masks.

    The window is partitioned by the key's 64-bit hash first (``KEY_HASH_SQL``; the same key, the same hash, so
    the same groups): Spark's sorter compares rows by a 64-bit prefix of their first sort column before their
    whole sort key, and within a task every row has the same ``partition`` and keys often share their first
    bytes, so without the hash nearly every comparison copied two keys out of their rows (a third of the pass's
    CPU at 50,000 records a task)."""
    top = "__compactor_top"
    latest = f"(`{KEY}` IS NOT NULL AND `{OFFSET}` = `{top}`)"
    groups = Window.partitionBy(F.expr(KEY_HASH_SQL), F.col(PARTITION), F.col(KEY))
    with_top = range_rows.withColumn(top, F.max(OFFSET).over(groups))
    return _kept(with_top, latest, retain_null_keys=retain_null_keys, now_ms=now_ms,
                 delete_retention_ms=delete_retention_ms)


def with_tombstone_flag(range_rows: DataFrame) -> DataFrame:
    """The range's rows with a column ``TOMBSTONE_FLAG``: whether each is a tombstone (for a pass that counts the
    range's tombstones itself, as ``range_stats_columns`` counts them)."""
    return range_rows.withColumn(TOMBSTONE_FLAG, is_tombstone())


def key_table_range_rows(range_rows: DataFrame, *, retain_null_keys: bool, now_ms: int,
                         delete_retention_ms: int) -> DataFrame:
    """The range's rows that the compacted view keeps, as ``new_view_rows`` keeps them, from the rows a hash table
    of the range's keys per task passed on (``spark.udf.keep_latest``): each keyed row its key's latest record, and
    the keyless ones."""
    return _kept(range_rows, f"`{KEY}` IS NOT NULL", retain_null_keys=retain_null_keys, now_ms=now_ms,
                 delete_retention_ms=delete_retention_ms)


def _kept(rows: DataFrame, latest: str, *, retain_null_keys: bool, now_ms: int,
          delete_retention_ms: int) -> DataFrame:
    """``rows`` (the range's, with the columns ``latest`` reads) that the view keeps, in view columns, sorted by
    offset within each task: each key's latest record (``latest``, a SQL condition), keyless records only under
    ``compaction.null-key=retain``, a tombstone only while ``now < now + delete.retention.ms``."""
    keep = [f"({latest} OR `{KEY}` IS NULL)" if retain_null_keys else latest]
    horizon = now_ms + delete_retention_ms
    if not now_ms < horizon:
        keep.append(f"NOT ({TOMBSTONE_SQL})")
    stamped = {DELETE_HORIZON: F.expr(f"CAST(CASE WHEN {TOMBSTONE_SQL} THEN {horizon} END AS BIGINT)"),
               RECORD_BYTES: spark_record_bytes(KEY, VALUE, HEADERS)}
    return (rows.where(F.expr(" AND ".join(keep)))
            .select(*[stamped[c].alias(c) if c in stamped else F.col(c) for c in VIEW_COLUMNS])
            .sortWithinPartitions(PARTITION, OFFSET))


def classify_view(view_rows: DataFrame, keys: DataFrame | None, *, now_ms: int, drop_null_keys: bool,
                  with_positions: bool = False, trim_before_ms: int | None = None,
                  hash_keys: bool = True) -> DataFrame:
    """Mark each compacted row that this run removes (column ``DOOMED``), reading only narrow columns.

    Removed: rows whose key won again in the new range (``keys``: partition, key), tombstones whose stored
    delete horizon has passed (``delete_horizon_ms <= now``), and keyless rows when the setting is now
    ``drop``. ``with_positions`` keeps Iceberg's ``_file`` and ``_pos`` columns, so the marked rows can be
    written as position deletes by the same pass. ``trim_before_ms`` (retention under ``delete,compact``)
    also removes rows older than it, and marks them (column ``TRIMMED``) so the run can advance the compacted
    start (``trim_starts``). ``hash_keys`` builds a hash table of the keys (they fit a task's memory);
    otherwise the join sorts both sides and spills.
    """
    columns = [PARTITION, KEY, OFFSET, TIMESTAMP, DELETE_HORIZON, RECORD_BYTES]
    if with_positions:  # the incremental pass needs no offsets or timestamps: keep it as narrow as possible
        columns = [PARTITION, KEY, DELETE_HORIZON, RECORD_BYTES]
        if trim_before_ms is not None:
            columns.append(TIMESTAMP)
        columns += ["_file", "_pos"]  # Iceberg's metadata columns: the data file and row position
    narrow = view_rows.select(*columns)
    if keys is not None:
        marked = keys.select(PARTITION, KEY, F.lit(True).alias(SUPERSEDED))
        narrow = narrow.join(marked.hint("shuffle_hash" if hash_keys else "merge"), [PARTITION, KEY], "left")
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


def surviving_rows(view_rows: DataFrame, keys: DataFrame | None, *, now_ms: int, drop_null_keys: bool,
                   trim_before_ms: int | None = None, hash_keys: bool = True) -> DataFrame:
    """Full compacted rows that this run keeps (the complement of ``classify_view``), for a rewrite."""
    rows = view_rows
    if keys is not None:
        rows = rows.join(keys.select(PARTITION, KEY).hint("shuffle_hash" if hash_keys else "merge"),
                         [PARTITION, KEY], "left_anti")
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
    """Aggregates describing the raw records read: how many (a density check) and how many tombstones (the key
    table counts both itself, the tombstones by ``with_tombstone_flag``).

    Their bytes are known from metadata (cumulative logical bytes), so no per-row size is computed here.
    """
    return [
        F.count(F.lit(1)).alias("records"),
        F.count(F.when(is_tombstone(), F.lit(1))).alias("tombstones"),
    ]
