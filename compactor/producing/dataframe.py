"""``produce_dataframe``: a Spark DataFrame appended to a topic as one atomic batch; executors write the files.

Columns: ``key``, ``value`` (binary or string) and optionally ``partition``, ``timestamp_ms`` (long or
timestamp) and ``headers`` (array of ``struct<key string, value binary>``). Every step on the executors runs in
the JVM: Kafka's murmur2 and the rows' numbering are compiled functions (``spark.udf``, built by the
set-up into ``compactor-udf.jar``); no Python runs there.

**Order.** Offsets follow the DataFrame's own order: Spark partition by Spark partition, rows in order within
each (the order ``df.collect()`` returns), so per topic partition they are dense and in that order. A keyless
row (without a partition) goes to ``(start + Spark partition + its position in the Spark partition) % P``:
round-robin over row positions, so keyless rows alone are spread exactly evenly; ``start`` derives from the
batch id (or the log end), as for every batch. The DataFrame is
evaluated twice (a narrow counting pass, then the write), so it must be deterministic: sort it, or read it
from files, or ``cache()`` it; the written files are checked against the counts and a mismatch is an error
with nothing committed.

1. **Count** (one stage, compiled ``compactor.udf.TopicCounts``, one line per task to the driver): rows per
   (Spark partition, topic partition), and the first bad row of each kind (partition out of range, timestamp
   out of range, null header key; and, if it reads the values, an oversized record). A bad row fails the batch
   before anything is written, naming its Spark partition and position. Where the DataFrame's rows land in the
   same Spark partitions whichever columns are read (a plan of scans, projections and filters:
   ``producing.spark_plan``) the pass reads only the key and the checked columns, not the values; otherwise it
   reads every column, as the write does.
2. **Write** (``producing.spark_files``): each Spark task numbers its rows per topic partition as they stream by
   (no shuffle, no sort) and writes, per topic partition it holds, one file with a contiguous offset range
   straight into the topic's data directory, through Iceberg's own Parquet writer (compiled
   ``compactor.udf.TopicFiles``: the topic's schema and field ids; no staging table, no Spark commit). The
   writer sums each file's record bytes and refuses an oversized record (naming its Spark partition and row;
   the files written so far are deleted). If the files do not match a narrow count, the batch is counted again
   reading every column and written again (a source whose partitioning follows the projection); a mismatch
   after a full count is an error. Where the input's busy tasks are fewer than the cores and reading it again
   is a file scan (a Parquet file of one row group is one task), the write reads it as several copies side by
   side, each writing one contiguous part of every (Spark partition, topic partition) cell (``_shares``).
3. **Commit** (driver, pyiceberg): the files, with statistics read from their footers, are appended to the topic
   in one conditional commit with the new ``N_p`` (``producing.commit``), exactly like every other append. On a
   lost race the write runs again with the new bases. Files of a failed run are never committed: they are
   deleted, or (after a crash) left to orphan cleanup.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from compactor.clock import resolve_now_ms
from compactor.errors import CountMismatchError, InputError
from compactor.lake import Lake
from compactor.producing.commit import DEFAULT_ATTEMPTS, BatchCommit, commit_batch
from compactor.producing.produced import BatchSummary, landed_summary
from compactor.producing.replay import start
from compactor.producing.spark_counts import ROW_BITS, Counts, bad_row
from compactor.producing.spark_files import SparkFiles
from compactor.producing.spark_plan import placement_ignores_projection
from compactor.spark.udf import headers_type, murmur2_partition, topic_counts
from compactor.topics.record_rules import SIZE, spark_problems, spark_record_bytes
from compactor.topics.topic import Topic

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

# Copies of the input written side by side (``_shares``): each copy reads all of the input again, so a copy pays
# for itself only with enough rows to write, and a plan only qualifies if reading it again is a file scan.
SHARE_MIN_ROWS = 500_000
MAX_SHARES = 8


def _prepare(df: DataFrame, partitions: int, rr_start: int) -> DataFrame:
    """The input with typed columns, its position ``_row``, Spark partition ``_pid``, topic partition ``_p``
    and record size ``_size``. A keyless row without a partition takes ``(start + Spark partition + its
    position in the Spark partition) % partitions``: round-robin over row positions."""
    from pyspark.sql import functions as F

    names = set(df.columns)
    unknown = sorted(names - {"key", "value", "partition", "timestamp_ms", "headers"})
    if unknown:
        raise InputError(f"unknown column(s): {', '.join(unknown)} (allowed: key, value, partition, timestamp_ms, "
                         "headers)")

    def column(name: str, kind: str) -> Any:
        return F.col(name).cast(kind) if name in names else F.lit(None).cast(kind)

    stamps = F.col("timestamp_ms")
    if "timestamp_ms" in names and dict(df.dtypes)["timestamp_ms"].startswith("timestamp"):
        stamps = F.unix_millis(F.col("timestamp_ms"))
    # two projections, not a chain of withColumn: each step is analysed on the driver
    frame = df.select(column("key", "binary").alias("key"), column("value", "binary").alias("value"),
                      column("partition", "bigint").alias("partition"),
                      (stamps.cast("bigint") if "timestamp_ms" in names else F.lit(None).cast("bigint"))
                      .alias("timestamp_ms"),
                      F.coalesce(column("headers", headers_type()), F.array().cast(headers_type()))
                      .alias("headers"),
                      F.monotonically_increasing_id().alias("_row"))
    pid = F.shiftright(F.col("_row"), ROW_BITS).cast("int")
    position = F.col("_row").bitwiseAND(F.lit((1 << ROW_BITS) - 1))
    round_robin = ((position + pid + F.lit(rr_start)) % partitions).cast("int")
    headers = "headers" if "headers" in names else None
    return frame.select(
        "*", pid.alias("_pid"),
        F.coalesce(F.col("partition").cast("int"), murmur2_partition(F.col("key"), partitions), round_robin)
        .alias("_p"),
        spark_record_bytes("key", "value", headers).alias("_size"))


def _count(frame: DataFrame, partitions: int, max_message_bytes: int, *, headers: bool = True,
           values: bool = True) -> Counts:
    """The counting pass (compiled ``TopicCounts``: one stage, one line per task); raises ``InvalidRecordError``
    for the first bad row (nothing is written). Without ``headers`` (the input has no such column) the header
    check, a higher-order function evaluated without code generation, is skipped; without ``values`` the pass
    does not read the values (nor check the record size: the write does)."""
    from pyspark.sql import functions as F

    checks = spark_problems(F.col("partition"), F.col("_size"), F.col("timestamp_ms"),
                            F.col("headers") if headers else None, partitions, max_message_bytes)
    if not values:
        del checks[SIZE]
    kinds = list(checks)
    problem, value = F.lit(0), F.lit(None).cast("bigint")
    for code, name in reversed(list(enumerate(kinds, 1))):  # the first kind listed wins on a row with several
        condition, offending = checks[name]
        problem = F.when(condition, F.lit(code)).otherwise(problem)
        if offending is not None:
            value = F.when(condition, offending.cast("bigint")).otherwise(value)
    lines = topic_counts(frame.select(F.col("_pid"), F.col("_p"), problem.alias("_problem"),
                                      value.alias("_value")), partitions)
    cells: dict[tuple[int, int], int] = {}
    counts = np.zeros(partitions, np.int64)
    problems: list[tuple[int, int, str, int | None]] = []  # (Spark partition, row, kind, offending value)
    for line in lines:
        pid_text, counted, bad = line.split("\t")
        pid = int(pid_text)
        for p, n in enumerate(int(x) for x in counted.split(",")):
            if n:
                cells[(pid, p)] = n
                counts[p] += n
        for entry in filter(None, bad.split(";")):
            kind_text, row_text, offending_text = entry.split(":")
            problems.append((pid, int(row_text), kinds[int(kind_text) - 1],
                             int(offending_text) if offending_text else None))
    if problems:  # the first bad row: one kind per row, so (Spark partition, row) decides
        spark_partition, row, kind, bad_value = min(problems, key=lambda problem: problem[:2])
        raise bad_row(kind, bad_value, partitions, max_message_bytes, spark_partition, row)
    return Counts(cells, counts, values)


def _shares(cores: int, counted: Counts, rescan_is_a_scan: bool) -> int:
    """How many copies of the input the write reads side by side (``SparkFiles.rows``): one per core of
    ``cores`` the input's busy tasks would leave idle (a 1M-row Parquet file of one row group is one task), at
    most ``MAX_SHARES``, with at least ``SHARE_MIN_ROWS`` rows per copy; one unless reading the input again is
    a file scan (``rescan_is_a_scan``: a plan of scans, projections and filters). Measured on 2 cores
    (bench/README.md): 1M rows of one task written 15% faster as two copies; 500,000 rows broke even."""
    if not rescan_is_a_scan:
        return 1
    busy = len({pid for pid, _ in counted.cells}) or 1
    return max(1, min(cores // busy, int(counted.counts.sum()) // SHARE_MIN_ROWS, MAX_SHARES))


def _write(lake: Lake, target: Topic, frame: DataFrame, counted: Counts, now: int, max_message_bytes: int,
           shares: int = 1) -> SparkFiles:
    """The batch's files, written for the topic's current ``N_p`` (a lost race rewrites them in the commit)."""
    fresh = target.refresh()
    stage = SparkFiles(lake, target, frame, counted, now, max_message_bytes, shares)
    stage.files_for(fresh.table, np.asarray(fresh.offsets().next_offsets, np.int64))
    return stage


def produce_dataframe(lake: Lake, topic: str | Topic, df: DataFrame, *, batch_id: str | None = None,
                      now_ms: int | None = None, max_attempts: int = DEFAULT_ATTEMPTS) -> BatchSummary:
    """Append the rows of ``df`` to ``topic`` as one atomic batch (see the module docstring)."""
    now = resolve_now_ms(now_ms)
    target = topic if isinstance(topic, Topic) else lake.topic(topic)
    planned = start(target, batch_id, now)
    partitions, replaying = planned.partitions, planned.replaying
    frame = _prepare(df, partitions, planned.rr_start)
    max_bytes = planned.settings.max_message_bytes
    headers = "headers" in df.columns
    narrow = placement_ignores_projection(df)
    counted = _count(frame, partitions, max_bytes, headers=headers, values=not narrow)
    if replaying is not None:
        return landed_summary(replaying, True, 0, counted.counts)
    if int(counted.counts.sum()) == 0:
        return BatchSummary.of(None, batch_id=batch_id)
    try:
        cores = int(df.sparkSession.sparkContext.defaultParallelism)
        stage = _write(lake, target, frame, counted, now, max_bytes, _shares(cores, counted, narrow))
    except CountMismatchError:
        if counted.values:
            raise
        log.warning("the DataFrame's rows were placed differently when all its columns were read than when only "
                    "its keys were counted; counting again with every column")
        counted = _count(frame, partitions, max_bytes, headers=headers, values=True)
        stage = _write(lake, target, frame, counted, now, max_bytes)
    batch = BatchCommit(stage, tuple(stage.data_files), stage.base, counted.counts, stage.sizes, batch_id, now,
                        "produce-dataframe")
    # Spark's write takes long: the commit starts from a fresh read of the topic
    entry, duplicate, attempts = commit_batch(target, batch, planned, max_attempts=max_attempts, refresh_first=True)
    return landed_summary(entry, duplicate, attempts, counted.counts)


__all__ = ["produce_dataframe"]
