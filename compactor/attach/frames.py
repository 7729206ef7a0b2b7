"""Spark DataFrames of an attached log: the source's rows with the product's bookkeeping columns, and the
records of a ``read`` (pure DataFrame logic; the run and the reader do the I/O around them).

Every frame carries the source's own columns unchanged, then ``_compactor_partition``, ``_compactor_offset``,
``_compactor_timestamp_ms`` and ``_compactor_tombstone`` computed from the mapping, so the view keeps every
source column byte for byte and the rules of compaction (latest per key, tombstones) read only bookkeeping.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping as AnyMapping
from functools import reduce
from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType

from compactor.attach.cursor import UnknownPartitions
from compactor.attach.mapping import NULL_VALUE, AttachError, Mapping
from compactor.attach.registry import DELETE_HORIZON_MS, OFFSET, PARTITION, TIMESTAMP_MS, TOMBSTONE
from compactor.topics.naming import spark_quoted

if TYPE_CHECKING:
    from pyiceberg.schema import Schema


def spark_table(catalog_name: str, identifier: str) -> str:
    return spark_quoted(catalog_name, *identifier.split("."))


def path(column: str) -> Column:
    """A (possibly nested) column by its dotted path, each part quoted."""
    return F.col(".".join(f"`{part}`" for part in column.split(".")))


def read_snapshot(spark: SparkSession, table: str, snapshot_id: int | None) -> DataFrame:
    reader = spark.read.format("iceberg")
    if snapshot_id is not None:
        reader = reader.option("snapshot-id", str(snapshot_id))
    return reader.load(table)


def source_rows(source: DataFrame, mapping: Mapping, schema: Schema,
                horizons: AnyMapping[int, int] | None = None) -> DataFrame:
    """The source rows with the bookkeeping columns; ``horizons`` filters on the source's own offset column first
    (offsets at or above the lowest horizon, or in a partition with no horizon), so Iceberg prunes data files by
    those columns' statistics (whatever the source is partitioned by). Callers keep each partition's own horizon
    with ``above``."""
    if horizons:
        source = source.where((path(mapping.offset) >= F.lit(min(horizons.values())))
                              | unknown_partition(path(mapping.partition), horizons))
    timestamp_type = source.select(path(mapping.timestamp)).schema.fields[0].dataType
    stamp = path(mapping.timestamp)
    millis = stamp.cast("long") if isinstance(timestamp_type, LongType) else F.unix_millis(stamp.cast("timestamp"))
    return checked(lambda: source.select(
        *[F.col(f"`{f.name}`") for f in schema.fields],
        path(mapping.partition).cast("int").alias(PARTITION),
        path(mapping.offset).cast("long").alias(OFFSET),
        millis.alias(TIMESTAMP_MS),
        F.coalesce(tombstone_condition(mapping, schema), F.lit(False)).alias(TOMBSTONE),
    ), mapping)


def unknown_partition(partition: Column, horizons: AnyMapping[int, int]) -> Column:
    """Whether a row's partition has no horizon (``cursor.UnknownPartitions``: never a ``NOT IN``, which Iceberg
    cannot prune files by)."""
    split = UnknownPartitions.of(horizons)
    unknown = (partition < F.lit(split.lowest)) | (partition > F.lit(split.highest)) | partition.isNull()
    return unknown | partition.isin(list(split.gaps)) if split.gaps else unknown


def tombstone_condition(mapping: Mapping, schema: Schema) -> Column:
    if mapping.tombstone == NULL_VALUE:
        values = [F.col(f"`{name}`").isNull() for name in mapping.value_columns(schema)]
        return reduce(lambda a, b: a & b, values)
    try:
        return F.expr(mapping.tombstone)
    except Exception as exc:  # Spark's ParseException: the condition is not SQL
        raise AttachError(f"the tombstone rule {mapping.tombstone!r} of {mapping.source} is not a Spark SQL "
                          f"condition: {str(exc).splitlines()[0]}") from None


def checked(build: Callable[[], DataFrame], mapping: Mapping) -> DataFrame:
    """The frame ``build`` makes, resolved by Spark: a tombstone rule naming a column the source lacks (or not a
    boolean) is an ``AttachError`` naming the rule, raised before anything is read or written."""
    from pyspark.errors import AnalysisException

    try:
        rows = build()
        rows.schema  # noqa: B018 - resolves the plan
    except AnalysisException as exc:
        raise AttachError(f"the tombstone rule {mapping.tombstone!r} of {mapping.source} does not apply to the "
                          f"source: {str(exc).splitlines()[0]}") from None
    return rows


def above(rows: DataFrame, horizons: AnyMapping[int, int]) -> DataFrame:
    """Rows at or above each partition's horizon (every row of a partition that has none)."""
    if not horizons:
        return rows
    known = " OR ".join(f"(`{PARTITION}` = {int(p)} AND `{OFFSET}` >= {int(h)})" for p, h in horizons.items())
    listed = ", ".join(str(int(p)) for p in horizons)
    return rows.where(F.expr(f"{known} OR NOT (`{PARTITION}` IN ({listed}))"))  # SQL text: one call into the JVM


def below(rows: DataFrame, horizons: AnyMapping[int, int]) -> DataFrame:
    """Rows below their partition's horizon in ``horizons`` (partitions not in it: none)."""
    if not horizons:
        return rows.where(F.lit(False))
    return rows.where(F.expr(" OR ".join(f"(`{PARTITION}` = {int(p)} AND `{OFFSET}` < {int(h)})"
                                         for p, h in horizons.items())))


def has_key(mapping: Mapping) -> Column:
    return ~reduce(lambda a, b: a & b, [path(k).isNull() for k in mapping.keys])


def winning_offsets(fresh: DataFrame, mapping: Mapping, retain_null_keys: bool) -> DataFrame:
    """Phase 1 over the range: each (partition, key tuple)'s highest offset (key tuples group null-safely),
    plus every keyless row's offset under ``retain_null_keys``, as columns ``partition`` and ``offset`` (the
    native job's names, so that ``phase1.latest.offset_masks`` packs them). Only narrow columns are shuffled."""
    key = [F.col(PARTITION), *[path(k) for k in mapping.keys]]
    # shuffled by key first: a key's versions are spread over the source's files, so a partial aggregation
    # before the exchange would hash nearly every row for little reduction
    keyed = fresh.where(has_key(mapping)).repartition(*key).groupBy(*key).agg(
        F.max(OFFSET).alias("offset")).select(F.col(PARTITION).alias("partition"), "offset")
    if retain_null_keys:
        keyed = keyed.unionByName(fresh.where(~has_key(mapping)).select(F.col(PARTITION).alias("partition"),
                                                                         F.col(OFFSET).alias("offset")))
    return keyed


def latest_per_key(previous: DataFrame | None, fresh: DataFrame, masks: DataFrame, mapping: Mapping, now_ms: int,
                   retain_null_keys: bool, *, broadcast: bool) -> DataFrame:
    """Each (partition, key tuple)'s highest-offset row over the view ``previous`` and the new range ``fresh``,
    tombstones whose delete horizon passed left out; keyless rows kept only when ``retain_null_keys``. Key
    tuples compare null-safely, column by column.

    Phase 2 over the range: each row looks its bit up in ``masks`` (``winning_offsets`` packed by
    ``offset_masks``: columns partition, word, mask; a bit per record of the range), joined on (partition,
    offset >> 6); ``broadcast``, the masks go to every task and full rows are never shuffled.

    Every new offset of a partition is above every offset of the view's (the view holds offsets below the
    horizon, the range those at or above it), so a key in the range wins over the view: the view's rows are kept
    unless the range has their key (an anti-join)."""
    words = masks.select(F.col("partition").alias("_compactor_mp"), F.col("word").alias("_compactor_word"),
                         F.col("mask").alias("_compactor_mask"))
    words = F.broadcast(words) if broadcast else words.hint("shuffle_hash")
    bit = F.expr(f"(shiftright(_compactor_mask, CAST({OFFSET} & 63 AS INT)) & 1) = 1")
    winners = fresh.join(words, (F.col(PARTITION) == F.col("_compactor_mp"))
                         & (F.shiftright(F.col(OFFSET), 6) == F.col("_compactor_word")), "inner").where(bit)
    winners = winners.drop("_compactor_mp", "_compactor_word", "_compactor_mask")
    if previous is not None:
        pairs = [(k, f"_compactor_k{i}") for i, k in enumerate(mapping.keys)]
        keys = fresh.where(has_key(mapping)).select(
            F.col(PARTITION).alias("_compactor_kp"), *[path(k).alias(n) for k, n in pairs])
        same = reduce(lambda a, b: a & b, [path(k).eqNullSafe(F.col(n)) for k, n in pairs],
                      F.col(PARTITION) == F.col("_compactor_kp"))
        kept = previous.where(~has_key(mapping) if retain_null_keys else F.lit(False)).unionByName(
            previous.where(has_key(mapping)).join(keys.distinct(), same, "left_anti"))
        winners = kept.unionByName(winners, allowMissingColumns=True)
    return winners.where(alive(now_ms))


def alive(now_ms: int) -> Column:
    """A view row stays unless it is a tombstone whose delete horizon passed."""
    return ~F.col(TOMBSTONE) | (F.col(DELETE_HORIZON_MS) > F.lit(now_ms))


REMOVED = "_compactor_removed"


def range_keys(fresh: DataFrame, mapping: Mapping) -> DataFrame:
    """The distinct (partition, key tuple)s of the range's keyed rows, for ``classify_view``."""
    return fresh.where(has_key(mapping)).select(
        F.col(PARTITION).alias("_compactor_kp"),
        *[path(k).alias(f"_compactor_k{i}") for i, k in enumerate(mapping.keys)]).distinct()


def key_bytes(mapping: Mapping) -> Column:
    """The bytes of a row's key columns (as text), to bound what a broadcast of the range's keys holds."""
    return reduce(lambda a, b: a + b, [F.coalesce(F.octet_length(path(k).cast("string")), F.lit(0))
                                       for k in mapping.keys])


def classify_view(view: DataFrame, keys: DataFrame, mapping: Mapping, now_ms: int, retain_null_keys: bool, *,
                  broadcast: bool) -> DataFrame:
    """The view's rows in narrow columns (partition, tombstone, delete horizon, Iceberg's ``_file`` and ``_pos``),
    each marked (column ``REMOVED``) with whether this run removes it: its key is in the range's ``keys``
    (``range_keys``: any record of the key there is newer than the view's), it is a tombstone whose delete horizon
    passed, or it is keyless and keyless rows are now dropped. ``view`` must be read from the table (so it has
    the metadata columns); keys are joined null-safely, column by column (``broadcast``: sent to every task, so
    the view is not shuffled)."""
    pairs = [(k, f"_compactor_k{i}", f"_compactor_v{i}") for i, k in enumerate(mapping.keys)]
    keys = keys.withColumn("_compactor_won", F.lit(True))
    keys = F.broadcast(keys) if broadcast else keys.hint("shuffle_hash")
    narrow = view.select(F.col(PARTITION), F.col(TOMBSTONE), F.col(DELETE_HORIZON_MS), F.col("_file"),
                         F.col("_pos"), *[path(k).alias(v) for k, _, v in pairs])
    same = reduce(lambda a, b: a & b, [F.col(v).eqNullSafe(F.col(n)) for _, n, v in pairs],
                  F.col(PARTITION) == F.col("_compactor_kp"))
    keyless = reduce(lambda a, b: a & b, [F.col(v).isNull() for _, _, v in pairs])
    removed = F.col("_compactor_won").isNotNull() | ~alive(now_ms)
    if not retain_null_keys:
        removed = removed | keyless
    return narrow.join(keys, same, "left").select(PARTITION, TOMBSTONE, DELETE_HORIZON_MS, "_file", "_pos",
                                                  removed.alias(REMOVED))


def with_delete_horizon(new_rows: DataFrame, now_ms: int, delete_retention_ms: int) -> DataFrame:
    """New rows with the delete horizon a tombstone gets when first written into the view (None otherwise)."""
    horizon = F.when(F.col(TOMBSTONE), F.lit(now_ms + delete_retention_ms)).otherwise(F.lit(None).cast("long"))
    return new_rows.withColumn(DELETE_HORIZON_MS, horizon)


def record_columns(rows: DataFrame, mapping: Mapping, schema: Schema) -> DataFrame:
    """The record JSON's fields: partition, offset, timestamp_ms, the key as a JSON object of the key columns, the
    value as a JSON object of the value columns (null for a tombstone), and the headers (Redpanda's) if any."""
    key = F.to_json(F.struct(*[path(k).alias(k) for k in mapping.keys]))
    value = F.to_json(F.struct(*[F.col(f"`{c}`") for c in mapping.value_columns(schema)]))
    headers = path(mapping.headers) if mapping.headers else F.lit(None)
    return rows.select(F.col(PARTITION).alias("partition"), F.col(OFFSET).alias("offset"),
                       F.col(TIMESTAMP_MS).alias("timestamp_ms"), key.alias("key"),
                       F.when(F.col(TOMBSTONE), F.lit(None)).otherwise(value).alias("value"),
                       headers.alias("headers"))
