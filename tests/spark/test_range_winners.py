"""The hash tables of a range's keys: one per task of the append pass (``compactor.udf.RangeWinners``, through
``spark.udf.keep_latest``), and phase 1's, which share each partition's keys among several tasks and write the
winners as bits for the append pass's slices (``compactor.udf.SharedWinners``, through
``spark.udf.find_shared_winners`` and ``keep_shared``). Each passes on a keyed row exactly when the row holds its
key's highest offset, and every keyless row, whatever the keys' bytes, their hashes, the offsets' gaps, the rows' order
or how the rows are sliced, and counts the rows and tombstones it read; reads that do not match fail instead. The guard
of the only module that gives a DataFrame an RDD of Spark's internal rows (``SparkSession.internalCreateDataFrame``): a
Spark upgrade that changes it fails here."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import IllegalArgumentException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, IntegerType, LongType, StructField, StructType

from compactor.lake import Lake
from compactor.spark.udf import SharedWinners, find_shared_winners, keep_latest, keep_shared

pytestmark = pytest.mark.spark

SCHEMA = StructType([StructField("partition", IntegerType(), False), StructField("offset", LongType(), False),
                     StructField("key", BinaryType(), True), StructField("value", BinaryType(), True)])
TOMBSTONE = "tombstone"
Record = tuple[int, int, bytes | None, bytes | None]


def records(seed: int) -> list[Record]:
    """Three partitions with dense and sparse offsets (a gap of 10^12: a mirrored topic's), keys of every length
    (empty, one byte, keys that share long prefixes, one of 5 MB: past the table's arena chunks), null keys, tombstones
    and repeated keys, in no order."""
    rng = random.Random(seed)
    keys: list[bytes] = [b"", b"\x00", b"k", b"x" * 300 + b"a", b"x" * 300 + b"b"]
    keys += [f"key-{i}".encode() for i in range(40)]
    out: list[Record] = []
    for partition in range(3):
        offsets = list(range(200)) + ([10**12 + i for i in range(50)] if partition == 2 else [])
        for offset in offsets:
            key = None if rng.random() < 0.05 else rng.choice(keys)
            out.append((partition, offset, key, None if rng.random() < 0.1 else b"v%d" % offset))
    huge = b"\xff" * 5 * 1024 * 1024
    out += [(1, 1000, huge, b"old"), (1, 1001, huge + b"\x00", b"other"), (1, 1002, huge, b"new")]
    rng.shuffle(out)
    return out


def expected(rows: list[Record]) -> list[Record]:
    """Each key's latest record, and every keyless one, in (partition, offset) order."""
    latest: dict[tuple[int, bytes], int] = {}
    for partition, offset, key, _ in rows:
        if key is not None:
            latest[(partition, key)] = max(offset, latest.get((partition, key), -1))
    return sorted((r for r in rows if r[2] is None or latest[(r[0], r[2])] == r[1]), key=lambda r: r[:2])


def frame(spark: SparkSession, rows: list[Record], tasks: int = 2) -> DataFrame:
    """``rows`` spread over ``tasks`` by partition (two frames of the same rows are grouped alike), each flagged as a
    tombstone when keyed with a null value."""
    return (spark.createDataFrame(rows, SCHEMA).repartition(tasks, "partition")
            .withColumn(TOMBSTONE, F.expr("key IS NOT NULL AND value IS NULL")))


def kept(found: DataFrame) -> list[Record]:
    return sorted(((r["partition"], r["offset"], r["key"], r["value"]) for r in found.collect()), key=lambda r: r[:2])


@pytest.mark.parametrize("hash_bits", [64, 1, 0])
def test_each_keys_latest_row_and_every_keyless_one_pass_and_the_range_is_counted(
        spark: SparkSession, hash_bits: int) -> None:
    """With fewer hash bits, keys collide (with none, all do): the table confirms every hash match on the key's
    bytes and partition, so a collision changes nothing."""
    rows = records(seed=hash_bits)
    full = frame(spark, rows)
    found = keep_latest(frame(spark, rows).select("partition", "key", "offset"), full, TOMBSTONE,
                        hash_bits=hash_bits)
    assert found.rows.columns == full.columns
    assert kept(found.rows) == expected(rows)
    assert found.counts() == (len(rows), sum(1 for r in rows if r[2] is not None and r[3] is None))


def test_one_task_holding_every_partition_keeps_them_apart(spark: SparkSession) -> None:
    """The same key in two partitions is two keys (a pass read in one task holds several partitions)."""
    rows: list[Record] = [(0, 5, b"a", b"1"), (1, 3, b"a", b"2"), (0, 7, b"a", None), (1, 9, None, b"3")]
    found = keep_latest(frame(spark, rows, 1).select("partition", "key", "offset"), frame(spark, rows, 1), TOMBSTONE)
    assert kept(found.rows) == [(0, 7, b"a", None), (1, 3, b"a", b"2"), (1, 9, None, b"3")]
    assert found.counts() == (4, 1)


def test_reads_that_do_not_match_fail_instead_of_keeping_rows(spark: SparkSession) -> None:
    rows: list[Record] = [(0, o, b"k%d" % (o % 3), b"v") for o in range(20)]
    full = frame(spark, rows, 1)
    for narrow_rows in ([r for r in rows if r[1] != 7],                   # a row fewer
                        [*rows[:-1], (0, 99, b"k", b"v")],                # as many rows, another offset
                        [(1, o, k, v) for _, o, k, v in rows]):           # another partition
        narrow = frame(spark, narrow_rows, 1).select("partition", "key", "offset")
        with pytest.raises(Py4JJavaError, match="read for its winners"):
            keep_latest(narrow, full, TOMBSTONE).rows.collect()
    with pytest.raises(IllegalArgumentException, match="partition, key, offset"):
        keep_latest(full.select("key", "partition", "offset"), full, TOMBSTONE)
    with pytest.raises(IllegalArgumentException, match="hashBits"):
        keep_latest(full.select("partition", "key", "offset"), full, TOMBSTONE, hash_bits=65)


@pytest.fixture
def bits_in(lake: Lake, tmp_path: Path) -> Callable[..., SharedWinners]:
    """``find_shared_winners`` writing through a lake table's file IO below a directory of its own."""
    lake.create_topic("w.io", partitions=1)
    table = lake.topic("w.io").name.spark_identifier(lake.config.catalog_name)
    directory = (tmp_path / "bits").as_uri()

    def find(narrow: DataFrame, buckets: int, **kwargs: Any) -> SharedWinners:
        return find_shared_winners(narrow, table, directory, buckets, **kwargs)

    return find


def narrow_by_partition(spark: SparkSession, rows: list[Record]) -> DataFrame:
    """``rows``' narrow columns, each partition's in one task (as the grouped scan reads them)."""
    return spark.createDataFrame(rows, SCHEMA).repartition(3, "partition").select("partition", "key", "offset")


def sliced(spark: SparkSession, rows: list[Record], slices: int) -> DataFrame:
    """``rows`` spread over ``slices`` tasks in no order: each partition's rows in several tasks."""
    return (spark.createDataFrame(rows, SCHEMA).repartition(slices)
            .withColumn(TOMBSTONE, F.expr("key IS NOT NULL AND value IS NULL")))


@pytest.mark.parametrize("buckets, hash_bits", [(1, 64), (2, 64), (3, 0)])
def test_shared_tables_keep_each_keys_latest_row_whatever_the_buckets_and_slices(
        spark: SparkSession, bits_in: Callable[..., SharedWinners], buckets: int, hash_bits: int) -> None:
    """Each partition's keys shared among ``buckets`` tasks (with no hash bits kept, every key collides in every
    bucket), the full rows read in 4 slices that split every partition: the same rows as the model keeps, the range
    counted once, as many winners as keys, and a file of bits per partition and bucket (partition 2's offsets are
    sparse: a map of words)."""
    rows = records(seed=10 + buckets)
    shared = bits_in(narrow_by_partition(spark, rows), buckets, hash_bits=hash_bits)
    assert shared.keys == len({(r[0], r[2]) for r in rows if r[2] is not None})
    assert 0 < shared.words <= len(rows)
    assert len(shared.files) == 3 * buckets and all(Path(urlparse(f).path).is_file() for f in shared.files)
    found = keep_shared(sliced(spark, rows, 4), shared, TOMBSTONE)
    assert kept(found.rows) == expected(rows)
    assert found.counts() == (len(rows), sum(1 for r in rows if r[2] is not None and r[3] is None))


def test_a_partition_whose_keys_were_read_in_two_tasks_fails(spark: SparkSession,
                                                           bits_in: Callable[..., SharedWinners]) -> None:
    """A task's table holds only the keys its rows hold: a partition read by two tasks would have two winners for a
    key, so finding them fails."""
    rows: list[Record] = [(0, o, b"k%d" % (o % 3), b"v") for o in range(20)]
    split = spark.createDataFrame(rows, SCHEMA).repartition(2).select("partition", "key", "offset")
    with pytest.raises(Py4JJavaError, match="read by more than one task"):
        bits_in(split, 2)


def test_slices_that_are_not_the_rows_the_winners_were_found_in_fail(
        spark: SparkSession, bits_in: Callable[..., SharedWinners]) -> None:
    """Rows the winners were not found over fail the pass (an offset outside them, another partition) or, where only
    the slices' sums show it (a row fewer, another offset within them), the counts; nothing is counted then."""
    rows: list[Record] = [(0, o, b"k%d" % (o % 3), b"v") for o in range(20)]
    shared = bits_in(narrow_by_partition(spark, rows), 2)
    beyond: list[Record] = [*rows, (0, 25, b"k", b"v")]
    elsewhere: list[Record] = [(1, 3, b"k", b"v")]
    for full_rows in (beyond, elsewhere):
        with pytest.raises(Py4JJavaError, match="read for its winners"):
            keep_shared(sliced(spark, full_rows, 2), shared, TOMBSTONE).rows.collect()
    fewer: list[Record] = [r for r in rows if r[1] != 7]
    moved: list[Record] = [*rows[:-1], (0, 18, b"k", b"v")]  # as many rows, offset 19 read as another 18
    for full_rows in (fewer, moved):
        found = keep_shared(sliced(spark, full_rows, 2), shared, TOMBSTONE)
        found.rows.collect()
        with pytest.raises(Py4JJavaError, match="read for its winners"):
            found.counts()
    with pytest.raises(IllegalArgumentException, match="bucket"):
        bits_in(narrow_by_partition(spark, rows), 0)
    with pytest.raises(IllegalArgumentException, match="partition, key, offset"):
        bits_in(narrow_by_partition(spark, rows).select("key", "partition", "offset"), 2)
