"""The compiled Spark functions (``compactor.udf.*``): Kafka's partitioner, the producer's counting pass, row
offsets and file writer, and a compaction run's winners and file writer, JVM-only work on executors.

All are Java classes in ``compactor/spark/java`` (``compactor.udf.*``), compiled by the set-up into
``compactor-udf.jar``, which every session puts on its classpath and ``spark-submit --jars`` ships to the
executors (``compactor.spark.jars``). The partitioner and the offsets run as Spark's ``ScalaUDF`` over the
columns' own values (the key's bytes reach Kafka's murmur2 as they are: no decoding to a string, no reflection
per row); the counting pass and the writers run over a query's rows, each as a SQL execution of its own. No
Python runs on the executors. A session without the jar is an error naming the set-up step, never a slower fallback.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from compactor.errors import MissingJarsError
from compactor.spark import internals
from compactor.spark.jars import UDF_JAR

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyspark.sql import Column, DataFrame, SparkSession

PACKAGE = "compactor.udf"


def _functions(name: str = "Functions") -> Any:
    """The JVM class ``compactor.udf.<name>`` on the active context (an error naming the set-up without it: a
    missing jar, or one built before the class existed)."""
    from py4j.java_gateway import JavaClass

    if internals.jvm() is None:
        raise MissingJarsError("a compiled Spark function needs a running SparkSession (Lake.spark())")
    found = internals.java_class(f"{PACKAGE}.{name}")
    if not isinstance(found, JavaClass):
        raise MissingJarsError(f"the Spark session cannot load {PACKAGE}.{name}: {UDF_JAR} is not on its "
                               "classpath (or was built from older sources). Run infra/setup.sh (it builds the "
                               "jar with javac), then start the session again; under spark-submit, pass the jar "
                               "with --jars (python -m compactor.deploy prints the command)")
    return found


def _compiled(factory: str) -> Any:
    """The JVM ``UserDefinedFunction`` that ``compactor.udf.Functions.<factory>()`` builds."""
    return getattr(_functions(), factory)()


# ``TaskOffset.SKIP``: a row another copy of the input writes
TASK_OFFSET_SKIP = -(1 << 63)


def murmur2_partition(key: Column, partitions: int) -> Column:
    """``(murmur2(key) & 0x7fffffff) % partitions`` for a binary column (null for a null key): Kafka's
    ``Utils.toPositive(Utils.murmur2(key)) % partitions``, compiled (``compactor.udf.Murmur2Partition``)."""
    from pyspark.sql import functions as F

    return internals.java_call(_compiled("murmur2Partition"), key, F.lit(partitions).cast("int"))


def task_offset(spark_partition: Column, topic_partition: Column, cells: Mapping[tuple[int, int], tuple[int, int]],
                partitions: int, share: int = 0, shares: int = 1) -> Column:
    """Each row's offset: its cell's first offset (``cells[(Spark partition, topic partition)]`` holds the cell's
    first offset and rows) plus its position among that cell's rows in its task, counted as the task produces
    them (``compactor.udf.TaskOffset``; no sort, an array index per row). Non-deterministic, so Spark evaluates it
    exactly once per row where it stands; a retried task starts again from 0. A row in a cell missing from
    ``cells`` gets a negative offset. With ``shares`` > 1, the rows of each cell outside copy ``share``'s part of
    its positions get ``TASK_OFFSET_SKIP`` (see ``TaskOffset``)."""
    import numpy as np

    packed_cells = sorted((pid * partitions + p, first, rows) for (pid, p), (first, rows) in cells.items())
    packed = np.asarray(packed_cells, ">i8").reshape(-1).tobytes()  # (cell, first offset, rows), big-endian longs
    return internals.java_call(_functions().taskOffset(packed, partitions, share, shares), spark_partition,
                               topic_partition)


def topic_files(rows: DataFrame, table: str, batch: str, overrides: Mapping[str, str],
                max_record_bytes: int) -> list[str]:
    """Write ``rows`` (the topic's columns, in schema order, then each record's bytes and its row id in the
    producer's input, ``monotonically_increasing_id()``, which errors name) into new data files of
    the Iceberg table ``table`` (as the session's catalog names it), one file per (Spark task, topic partition),
    through Iceberg's Parquet writer (``compactor.udf.TopicFiles``); ``overrides`` replace table write
    properties. A record over ``max_record_bytes`` fails the write (its files deleted). Commits nothing: returns
    ``path\tpartition\trows\tbytes\trecord bytes`` per file. ``batch`` goes into the file names."""
    writer = _functions("TopicFiles")  # the jar is on the classpath (else an error naming the set-up)
    files = writer.write(internals.java_frame(rows), _iceberg_table(rows, table), batch, dict(overrides),
                         max_record_bytes)
    return _strings(files)


def view_files(rows: DataFrame, table: str, batch: str, flush_positions: int) -> list[str]:
    """Write ``rows`` (the compacted table's columns in schema order, then ``_file`` and ``_pos``: a row with a
    ``_file`` is a position to delete, any other a row to keep) into new data and position-delete files of the
    Iceberg table ``table`` (as the session's catalog names it), in one job (``compactor.udf.ViewFiles``).
    Commits nothing: returns a line per file, ``data\t`` and a ``topic_files`` line, or ``deletes\tpath\t
    partition\tpositions\tbytes\tfirst path\tlast path``. ``batch`` goes into the file names; a task writes out
    its positions whenever ``flush_positions`` have gathered (so its memory for them is bounded)."""
    writer = _functions("ViewFiles")
    return _strings(writer.write(internals.java_frame(rows), _iceberg_table(rows, table), batch, flush_positions))


@dataclass(frozen=True)
class LatestRows:
    """What ``keep_latest`` returns: the rows, and the JVM result whose counts the job reading them fills."""

    rows: DataFrame
    result: Any

    def counts(self) -> tuple[int, int]:
        """How many rows of the range were read, and how many of them were flagged tombstones (once a job has read
        ``rows``)."""
        return int(self.result.records()), int(self.result.tombstones())


def keep_latest(narrow: DataFrame, full: DataFrame, tombstone: str, *, hash_bits: int = 64) -> LatestRows:
    """The rows of ``full`` (a raw range, with a boolean column ``tombstone`` by the caller's rule) that a compacted
    view can keep: each keyed row that is its key's latest in the range, and every keyless row
    (``compactor.udf.RangeWinners``). ``narrow`` is the same range's ``partition, key, offset``; both are read in
    the same grouping (the partitioned layout), and each task holds its keys in a hash table of its own heap, so the
    caller bounds the records a task reads (``plan.HASH_KEYS_LIMIT``, and ``task_memory_bytes``). Mismatched reads
    fail the job. ``hash_bits`` below 64 makes keys' hashes collide, for tests of the confirmation on the key's
    bytes."""
    from pyspark.sql import DataFrame as SparkDataFrame

    result = _functions("RangeWinners").keep(internals.java_frame(narrow), internals.java_frame(full), tombstone,
                                             hash_bits)
    return LatestRows(SparkDataFrame(result.rows(), full.sparkSession), result)


@dataclass(frozen=True)
class SharedWinners:
    """What ``find_shared_winners`` found: how many keys won and over how many 64-bit words of bits, the files of
    bits its tasks wrote (the caller deletes them), and the JVM's ``SharedWinners`` for ``keep_shared``."""

    keys: int
    words: int
    files: tuple[str, ...]
    handle: Any


def find_shared_winners(narrow: DataFrame, table: str, directory: str, buckets: int, *,
                        hash_bits: int = 64) -> SharedWinners:
    """Find each key's latest offset in ``narrow`` (a range's ``partition, key, offset``, read grouped by partition)
    in ``buckets`` tasks per partition, each holding the keys of one bucket of their hashes in a hash table of its
    own heap and writing the winners it found, a bit per offset, to a file below ``directory`` through the Iceberg
    table ``table``'s file IO (``compactor.udf.SharedWinners``): one Spark job, which sends the driver only the
    files and each partition's counts. The caller bounds the records a task reads by the memory a task may count on
    (``task_memory_bytes``). A partition read by more than one task fails the job."""
    found = _functions("SharedWinners").find(internals.java_frame(narrow), _iceberg_table(narrow, table), directory,
                                             buckets, hash_bits)
    return SharedWinners(int(found.keys()), int(found.words()), tuple(_strings(found.files())), found)


def keep_shared(full: DataFrame, winners: SharedWinners, tombstone: str) -> LatestRows:
    """The rows of ``full`` that a compacted view can keep, as ``keep_latest`` keeps them, by the winners
    ``find_shared_winners`` wrote: ``full`` is the same range, read in any grouping (slices of a partition), with a
    boolean column ``tombstone``; each task reads the bits of the partitions it meets. Its counts are given once the
    rows read, summed per partition, match those the winners were found in; otherwise reading them fails."""
    from pyspark.sql import DataFrame as SparkDataFrame

    result = winners.handle.keep(internals.java_frame(full), tombstone)
    return LatestRows(SparkDataFrame(result.rows(), full.sparkSession), result)


def task_memory_bytes(spark: SparkSession) -> int:
    """The execution memory a task may count on: Spark's unified memory of the smallest executor divided among its
    task slots (in local mode the driver's among all of them); 0 while no executor has registered
    (``compactor.udf.RangeWinners.taskMemory``)."""
    return int(_functions("RangeWinners").taskMemory(internals.java_session(spark)))


def _iceberg_table(rows: DataFrame, table: str) -> Any:
    """The JVM Iceberg ``Table`` that ``rows``' session's catalog names ``table``."""
    return internals.java_class("org.apache.iceberg.spark.Spark3Util").loadIcebergTable(
        internals.java_session(rows.sparkSession), table)


def parse_file_line(line: str) -> tuple[str, int, int, int, int]:
    """One line of ``topic_files``: the file's path, topic partition, rows, bytes and record bytes."""
    path, partition, rows, size, record_bytes = line.split("\t")
    return path, int(partition), int(rows), int(size), int(record_bytes)


def topic_counts(rows: DataFrame, partitions: int) -> list[str]:
    """The counting pass over ``rows`` (Spark partition, topic partition, problem kind, problem value), one stage
    and one line per task (``compactor.udf.TopicCounts``): ``spark partition\tcounts per topic partition\t
    kind:row:value;...`` for the first bad row of each kind."""
    counter = _functions("TopicCounts")
    return _strings(counter.count(internals.java_frame(rows), partitions))


def _strings(lines: Any) -> list[str]:
    """A JVM ``List`` of strings as Python strings, read as an array: py4j's list iterator ends on a Java
    exception, which PySpark converts at a cost of tens of milliseconds."""
    return [str(line) for line in lines.toArray()]


def register_functions(session: SparkSession) -> None:
    """Register ``kafka_partition(key binary, partitions int)`` for Spark SQL in ``session`` (the same compiled
    function: ``SELECT kafka_partition(key, 4) FROM ...``)."""
    _functions().register(internals.java_session(session))


def headers_type() -> str:
    return "array<struct<key:string,value:binary>>"


__all__ = ["TASK_OFFSET_SKIP", "LatestRows", "SharedWinners", "find_shared_winners", "headers_type", "keep_latest",
           "keep_shared", "murmur2_partition", "parse_file_line", "register_functions", "task_memory_bytes",
           "task_offset", "topic_counts", "topic_files", "view_files"]
