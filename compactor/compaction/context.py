"""What the Spark steps of one run receive: the plan, how the run is laid out, and where it writes (data only).

The plan step makes one ``RunContext`` (``start.open_run``); phase 1 and phase 2 read its fields and return what they
did (``phase1.winners.Winners``, ``phase2.write.Phase2Result``), which the next step receives in turn. Nothing
here reads a table or calls back into a step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from compactor.compaction.execution import KEY_TABLE_RECORD_BYTES, Layout
from compactor.compaction.plan import CompactionPlan
from compactor.compaction.scratch import scratch_location
from compactor.progress import Progress
from compactor.topics.naming import TopicName, spark_quoted

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table
    from pyspark.sql import SparkSession

# how the append pass finds the range's winners (``RunContext.append_winners``)
WINDOW, KEY_TABLE, SHARED_KEY_TABLES, MASKS = "window", "key table", "shared key tables", "masks"


@dataclass(frozen=True)
class RunContext:
    """One attempt of a run, as its Spark steps receive it."""

    name: TopicName
    plan: CompactionPlan
    spark: SparkSession             # the job session (``Lake.job_spark``), active while the steps run
    layout: Layout
    catalog_name: str
    run_id: str
    stage: str                      # the private staging branch of the compacted table (``staging.stage_branch``)
    scratch: str                    # the phase-1 scratch table's catalog identifier (``scratch.scratch_identifier``)
    view: Table                     # the compacted table as pinned (its location, schema, properties and IO)
    progress: Progress
    raw_timestamps: tuple[int, int] | None = None  # bounds (µs) of the range files' timestamps, if all known
    task_memory: int | None = None  # the execution memory a task may count on (bytes), when the plan may use it

    @property
    def view_location(self) -> str:
        """The compacted table's location (scratch and position delete files go below it)."""
        return self.view.metadata.location

    @property
    def view_io(self) -> FileIO:
        """The compacted table's file IO (a REST catalog's vended credentials)."""
        return self.view.io

    @property
    def winners_inline(self) -> bool:
        """Whether phase 1 hands its winners to phase 2 as a DataFrame instead of a scratch table: a small range
        (``CompactionPlan.small_range``) in the partitioned layout. (Sliced, the winners go through the table: Spark
        replicates to the view's slices only a side that is a scan grouped by partition, with no exchange in between,
        and the inline winners are aggregated across the slices of a sliced range. A window run's winning keys, the
        raw range's own keys, could be replicated; read that way at 5M records on 1 partition, the delete pass took
        longer on 2 cores: bench/README.md. A sliced first run's winners can skip the table another way:
        ``shared_key_tables``.)"""
        return self.plan.small_range and not self.layout.sliced

    @property
    def append_winners(self) -> str:
        """How the append pass tells each key's latest record of the range (its progress reports it): ``window``
        (among the rows it reads, ``plan.winners_in_window``), ``key table`` (from a hash table of the range's keys
        per task, ``plan.winners_in_key_table``, while it fits a task's memory), ``shared key tables`` (a sliced first
        run: phase 1 found them in key tables that share each partition's keys among ``key_table_buckets`` tasks,
        and wrote them as a bit per offset, ``shared_key_tables``) or ``masks`` (joined with phase 1's offset
        masks, inline or from the scratch table). The first two need the winners inline."""
        if self.winners_inline and self.plan.winners_in_window:
            return WINDOW
        if self.winners_inline and self.plan.winners_in_key_table and self.key_table_fits:
            return KEY_TABLE
        if self.shared_key_tables:
            return SHARED_KEY_TABLES
        return MASKS

    @property
    def uses_scratch(self) -> bool:
        """Whether phase 1 hands its winners to phase 2 through the scratch table (the run drops it at its end)."""
        return bool(self.plan.ranges) and not self.winners_inline and self.append_winners != SHARED_KEY_TABLES

    @property
    def key_table_buckets(self) -> int:
        """In how many tasks phase 1 shares each partition's keys under ``shared key tables``: enough for the
        partitions with work to fill the task slots."""
        busy = max(len(self.plan.ranges), 1)
        return max(-(-self.layout.slots // busy), 1)

    @property
    def shared_key_tables(self) -> bool:
        """Whether a sliced first run under ``offset`` finds its winners in key tables shared among
        ``key_table_buckets`` tasks a partition (each reads the partition's narrow columns and holds the keys of one
        bucket of their hashes) and writes them as bits for the append pass's slices, instead of aggregating them
        into the scratch table: while a task's share of a partition's keys fits the memory a task may count on."""
        plan = self.plan
        if not (self.layout.sliced and plan.cursor is None and plan.small_range):
            return False
        return self._fits_a_task(-(-max(plan.range_records.values(), default=0) // self.key_table_buckets))

    @property
    def key_table_fits(self) -> bool:
        """Whether a task's key table fits the execution memory a task may count on (``task_memory``): the records
        a task reads (a partition's range, or the whole range when each pass is read in one task) at
        ``KEY_TABLE_RECORD_BYTES`` each. Past it the masks, which Spark aggregates and can spill, take over."""
        plan = self.plan
        return self._fits_a_task(plan.records_in_range if self.layout.one_task
                                 else max(plan.range_records.values(), default=0))

    def _fits_a_task(self, records: int) -> bool:
        """Whether a key table of ``records`` records, at ``KEY_TABLE_RECORD_BYTES`` each, fits the execution memory a
        task may count on (``task_memory``; none known, no table)."""
        return self.task_memory is not None and records * KEY_TABLE_RECORD_BYTES <= self.task_memory

    @property
    def scratch_location(self) -> str:
        """Where phase 1 keeps its files (its scratch table, or shared key tables' bits)."""
        return scratch_location(self.view_location, self.plan.now_ms, self.run_id)

    @property
    def raw_table(self) -> str:
        """The topic's table as Spark names it."""
        return self.name.spark_identifier(self.catalog_name)

    @property
    def view_table(self) -> str:
        """The compacted table as Spark names it (read at the cursor ``C``)."""
        return self.name.spark_identifier(self.catalog_name, compacted=True)

    @property
    def stage_table(self) -> str:
        """The staging branch of the compacted table as Spark names it (phase 2 writes there)."""
        return self.name.spark_identifier(self.catalog_name, compacted=True, branch=self.stage)

    @property
    def scratch_table(self) -> str:
        """The scratch table as Spark names it."""
        return spark_quoted(self.catalog_name, *self.scratch.split("."))
