"""How Spark runs a compaction: the layout of its tasks, the job session's settings, the scans and the jobs' names.

Two layouts, chosen per run by estimated cost (``choose_layout``; measurements in bench/findings.md):

* **partitioned**: one task per topic partition, storage-partitioned end to end (both tables and the phase-1
  scratch table are partitioned by ``identity(partition)``): phase 1 aggregates each partition's range without
  an exchange, and phase 2 joins the range with its winners partition by partition. Cheapest per record, but
  it uses at most as many cores as the topic has partitions with work.
* **sliced**: the raw range and the view are split into offset slices (Iceberg task groups of about
  ``split_bytes``; raw files hold contiguous offset ranges, so a slice is a run of whole files or row groups).
  Phase 1 exchanges only ``(partition, key, offset)`` to find each key's latest offset; phase 2 reads full
  rows slice by slice, each task joining its slice with its partition's winners through Spark's partially
  clustered storage-partitioned join (the winners' side is replicated to the slices of its partition), so full
  rows are never shuffled. Costs about ``SLICED_COST`` times more per record, and uses every slot.

A partitioned run with less work than ``ONE_TASK_WORK`` (not a rewrite) reads each of its scans in **one task**
(``Layout.one_task``: the scan's partitions coalesced, which Spark knows to be a single partition, so its
aggregations and joins need no exchange either): each pass is then one task, and the two passes of an incremental
run fill two slots, where a task per topic partition would pay a task's fixed cost (scheduling, its start, a
Parquet writer per file) more times than the rows cost.

The product's jobs run on ``Lake.job_spark()``, a private session of the same Spark application, so these
settings never reach the caller's session.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from compactor.errors import CommitConflictError, InputError
from compactor.iceberg.catalog import first_line
from compactor.spark.expressions import offset_ranges

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

PARTITIONED = "partitioned"
SLICED = "sliced"
# Task time per record of the sliced layout relative to the partitioned one (the exchange of phase 1 and the
# replicated winners), from full runs forced to each layout on the standard workload on 2 slots
# (bench/findings.md): 1.27 with 4 partitions (sliced 9.0 s, partitioned 7.1 s), 1.50 with 1 partition.
SLICED_COST = 1.3
TASKS_PER_SLOT = 2
# A pass whose slices join nothing (``context.SHARED_KEY_TABLES``'s append pass: each slice tests its rows against
# the bits phase 1 wrote) reads its range in slices this many times smaller: no side is replicated per slice, and
# more slices even out the slots' last tasks. 5M records, 1 partition, first run (medians of 3, alternated, the bits
# then sent through the driver): 6.02 s with the layout's slices against 5.71 s with slices half as large (5.92 s a
# third smaller).
UNJOINED_SLICES = 2
MIN_SPLIT_BYTES = 8 * 1024 * 1024
FILE_OPEN_COST = 1024 * 1024
# Relative cost of a view row: the incremental pass reads four narrow columns, a rewrite whole rows.
NARROW_VIEW_ROW = 0.25
# Below this much work (records, or view rows at their relative cost) a run stays partitioned: slicing it
# would add an exchange and more, smaller tasks for no gain.
SLICED_MIN_WORK = 100_000
# The fixed cost, in records, of a scratch table that a sliced run needs where a partitioned one could hand its
# winners inline (``context.RunContext.winners_inline``): its job, creation, commit, scans and drop. Measured on
# the standard workload in 1 partition after a 1% append (bench/findings.md): partitioned and inline 2.6-3.7 s,
# sliced with the table 3.7-4.2 s, where the estimates alone (510,000 against 331,000) favoured slicing.
SCRATCH_WORK = 300_000
# Below this much work (as ``SLICED_MIN_WORK`` counts it) a run that is not a rewrite reads each pass in one task:
# on 2 slots one task per pass was faster up to 110,000 and no faster at 220,000 (bench/findings.md).
ONE_TASK_WORK = 100_000

# Settings of the job session, whatever the layout: storage-partitioned joins and grouping, and no broadcast
# of anything built from keys or records (docs/guarantees.md#compaction: nothing key- or record-sized is broadcast).
JOB_SETTINGS = {
    "spark.sql.sources.v2.bucketing.enabled": "true",
    "spark.sql.sources.v2.bucketing.pushPartValues.enabled": "true",
    "spark.sql.requireAllClusterKeysForCoPartition": "false",
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    "spark.sql.adaptive.autoBroadcastJoinThreshold": "-1",
    "spark.sql.optimizer.runtime.bloomFilter.enabled": "false",
    # dynamic pruning would plan a broadcast of the range's partitions (inert without broadcasts, but noise)
    "spark.sql.optimizer.dynamicPartitionPruning.enabled": "false",
}
GROUPED_SCANS = "spark.sql.iceberg.planning.preserve-data-grouping"
PARTIAL_CLUSTERING = "spark.sql.sources.v2.bucketing.partiallyClusteredDistribution.enabled"


# What a task's key table (``compactor.udf.RangeWinners``) may take per record it reads, at most: a slot of 16 bytes
# at a load between 3/8 and 3/4, and an arena record of 16 bytes and the key padded to 8, for keys up to about 64
# bytes.
# A run uses the table only while its tasks' records fit the execution memory a task may count on at this rate.
KEY_TABLE_RECORD_BYTES = 128


@dataclass(frozen=True)
class Layout:
    """How the run's tasks are laid out (see the module docstring)."""

    kind: str
    slots: int
    raw_split_bytes: int | None = None   # sliced: target bytes of a raw slice
    view_split_bytes: int | None = None  # sliced: target bytes of a view slice
    reason: str = ""
    one_task: bool = False  # partitioned: each scan read in one task (``ONE_TASK_WORK``)

    @property
    def sliced(self) -> bool:
        return self.kind == SLICED

    def unjoined(self) -> Layout:
        """This layout for a pass whose raw slices join nothing: slices ``UNJOINED_SLICES`` times smaller."""
        if self.raw_split_bytes is None:
            return self
        return dataclasses.replace(self, raw_split_bytes=max(MIN_SPLIT_BYTES, self.raw_split_bytes // UNJOINED_SLICES))


def makespan(work: Sequence[float], slots: int) -> float:
    """The finish time of ``work`` items (one task each) on ``slots`` slots, longest first (LPT)."""
    loads = [0.0] * max(slots, 1)
    for item in sorted(work, reverse=True):
        heapq.heapreplace(loads, loads[0] + item)
    return max(loads)


def split_bytes(total_bytes: int, slots: int) -> int:
    """Target bytes of one slice: ``TASKS_PER_SLOT`` slices per slot, none smaller than ``MIN_SPLIT_BYTES``."""
    return max(MIN_SPLIT_BYTES, -(-total_bytes // max(slots * TASKS_PER_SLOT, 1)))


def choose_layout(work: Sequence[float], slots: int, *, raw_bytes: int, view_bytes: int,
                  force: str | None = None, scratch_if_sliced: bool = False, rewrite: bool = False) -> Layout:
    """The cheaper layout for ``work`` (estimated cost per topic partition) on ``slots`` task slots, unless
    ``force`` names one (tests and benchmarks compare both); ``scratch_if_sliced``: the run would keep a scratch
    table only if sliced (``SCRATCH_WORK``); ``rewrite``: the run writes the whole view (never ``one_task``)."""
    if force not in (None, PARTITIONED, SLICED):
        raise InputError(f"unknown layout {force!r}: use {PARTITIONED!r} or {SLICED!r}")
    busy = sum(1 for w in work if w > 0)
    partitioned = makespan(work, slots)
    sliced = sum(work) / max(slots, 1) * SLICED_COST + (SCRATCH_WORK if scratch_if_sliced else 0)
    estimate = f"estimated {partitioned:.0f} partitioned vs {sliced:.0f} sliced on {slots} slot(s)"
    if force is None and not rewrite and sum(work) < ONE_TASK_WORK:
        return Layout(PARTITIONED, slots, one_task=True, reason=f"too little work for a task per partition: one "
                      f"task per pass ({sum(work):.0f} estimated)")
    small = sum(work) < SLICED_MIN_WORK
    if force == PARTITIONED or (force is None and (small or partitioned <= sliced)):
        why = ("requested" if force else "too little work to slice" if small
               else f"{busy} partition(s) with work keep the slots busy")
        return Layout(PARTITIONED, slots, reason=f"{why} ({estimate})")
    why = "requested" if force else f"{busy} partition(s) with work would leave slots idle"
    return Layout(SLICED, slots, split_bytes(raw_bytes, slots), split_bytes(view_bytes, slots),
                  reason=f"{why} ({estimate})")


def task_slots(spark: SparkSession) -> int:
    """Task slots of the application: ``spark.default.parallelism`` if set, else executors x cores. (Read through
    the session's configuration, which falls back to the application's: ``SparkContext.getConf`` copies the whole
    configuration through py4j, about 14 ms a run.)"""
    configured = spark.conf.get("spark.default.parallelism", None)
    if configured and configured.isdigit():
        return max(int(configured), 1)
    return max(int(spark.sparkContext.defaultParallelism), 1)


def apply_settings(spark: SparkSession, layout: Layout, *, grouped: bool) -> None:
    """Set the job session for the next jobs: ``grouped`` scans report their partitioning (storage-partitioned
    aggregation and joins); a sliced layout's joins cluster the larger side partially (its slices stay apart)."""
    for key, value in {**JOB_SETTINGS, GROUPED_SCANS: str(grouped).lower(),
                       PARTIAL_CLUSTERING: str(layout.sliced).lower()}.items():
        spark.conf.set(key, value)
    minimum = layout.slots * TASKS_PER_SLOT
    current = spark.conf.get("spark.sql.shuffle.partitions") or "0"
    if current.isdigit() and int(current) < minimum:
        spark.conf.set("spark.sql.shuffle.partitions", str(minimum))


def read_table(spark: SparkSession, identifier: str, snapshot_id: int | None, layout: Layout | None,
               split: int | None = None, *, where: Column | None = None) -> DataFrame:
    """An Iceberg table at a snapshot (``None``: current), the rows matching ``where`` if given, read as
    ``layout`` reads a scan: in slices of about ``split`` bytes if given, in one task if ``layout.one_task``."""
    reader = spark.read.format("iceberg")
    if snapshot_id is not None:
        reader = reader.option("snapshot-id", str(snapshot_id))
    if split is not None:
        reader = reader.option("split-size", str(split)).option("file-open-cost", str(FILE_OPEN_COST))
    frame = reader.load(identifier)
    if where is not None:
        frame = frame.where(where)
    return frame.coalesce(1) if layout is not None and layout.one_task else frame


def read_range(spark: SparkSession, identifier: str, ranges: Mapping[int, tuple[int, int]],
               layout: Layout | None) -> DataFrame:
    """The rows of the topic table ``identifier`` in ``ranges`` (``partition -> [lo, hi)``), read from the
    current ``main`` as ``layout`` reads the raw log (``read_table``).

    A run reads its new range ``[H_p(C), H_p)`` of the pinned snapshot ``S`` this way: the rows of that range
    never change once in ``S`` (offsets are never reused, and retention stays below every retained cursor's
    horizon), and appends may drop ``S``'s metadata entry meanwhile (``producing.commit``), so Spark could not
    find ``S`` by id."""
    condition = offset_ranges((p, lo, hi) for p, (lo, hi) in ranges.items())
    if condition is None:
        raise ValueError("read_range needs a non-empty range")
    return read_table(spark, identifier, None, layout, layout.raw_split_bytes if layout else None, where=condition)


@contextlib.contextmanager
def job_description(spark: SparkSession, text: str) -> Iterator[None]:
    """Name the Spark jobs started in this thread (the UI and event log show it), then restore the old name."""
    sc = spark.sparkContext
    previous = sc.getLocalProperty("spark.job.description")
    sc.setJobDescription(text)
    try:
        yield
    finally:
        sc.setLocalProperty("spark.job.description", previous)  # type: ignore[arg-type]


def estimate_work(range_records: Mapping[int, int], view_rows: Mapping[int, int], partitions: int, *,
                  rewrite: bool) -> list[float]:
    """Estimated cost per topic partition: its range records plus its view rows (narrow unless rewritten)."""
    weight = 1.0 if rewrite else NARROW_VIEW_ROW
    return [range_records.get(p, 0) + weight * view_rows.get(p, 0) for p in range(partitions)]


@contextlib.contextmanager
def spark_commit_conflicts(what: str) -> Iterator[None]:
    """Turn an Iceberg ``CommitFailedException`` raised inside a Spark write into ``CommitConflictError``.

    Iceberg retries its own commits first (the compacted table keeps the default retries); if it still lost
    the race, the whole attempt is started again on the refreshed table instead of failing the run.
    """
    try:
        yield
    except Exception as exc:
        if type(exc).__name__ == "Py4JJavaError" and "org.apache.iceberg.exceptions.CommitFailedException" in str(exc):
            raise CommitConflictError(f"{what}: {first_line(exc)}") from exc
        raise
