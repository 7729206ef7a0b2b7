"""The plan step's reads and the run's start: everything before the Spark work, from metadata.

* ``pin``: pin the raw snapshot ``S`` and the cursor ``C``, and read the settings once;
* ``plan_run``: compute the horizons (``horizons``; a retention trim keeps them) and the plan (``plan``);
* ``open_run``: the job session, the layout chosen by the run's estimated cost (``execution.choose_layout``, from
  the range files' and the view files' statistics), the dead runs' scratch tables dropped, and the run's staging
  branch created at ``C`` (``staging``): the ``RunContext`` that phase 1 and phase 2 receive.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pyiceberg.table import Table

from compactor.compaction.context import RunContext
from compactor.compaction.execution import SLICED_MIN_WORK, Layout, choose_layout, estimate_work, task_slots
from compactor.compaction.horizons import RawSnapshotView, compute_horizons, range_records
from compactor.compaction.plan import CompactionPlan, make_plan, previous_horizons, timestamp_bounds
from compactor.compaction.scratch import drop_stale_scratch, scratch_identifier
from compactor.compaction.staging import create_stage_branch, ensure_base_branch, stage_branch
from compactor.cursor import MAIN, Cursor, parse_cursor
from compactor.cursor.table import ensure_compacted_table
from compactor.errors import PolicyError
from compactor.iceberg.catalog import translate_storage_errors
from compactor.iceberg.expressions import ranges
from compactor.progress import Progress
from compactor.spark.catalog import register_table_storage
from compactor.spark.udf import task_memory_bytes
from compactor.topics.settings import TopicSettings
from compactor.topics.state import PartitionOffsets
from compactor.topics.strategy import TIMESTAMP_STRATEGY
from compactor.topics.topic import Topic

if TYPE_CHECKING:
    from compactor.lake import Lake


@dataclass(frozen=True)
class Pinned:
    """What a run pins at its start: the raw snapshot, the compacted table and its cursor, offsets, settings."""

    raw: RawSnapshotView
    view_table: Table
    cursor: Cursor | None
    offsets: PartitionOffsets
    settings: TopicSettings


def pin(topic: Topic) -> Pinned:
    """Pin the raw snapshot ``S`` and the cursor ``C``; read the settings once."""
    settings = topic.settings
    if not settings.compacts:
        raise PolicyError(f"topic {topic.name} has cleanup.policy={settings.policy_text}; compaction needs "
                          "'compact' (topic config --set cleanup.policy=compact or delete,compact)")
    offsets = topic.offsets()
    snapshot = topic.snapshot
    raw = RawSnapshotView(topic.table, snapshot.snapshot_id if snapshot else None)
    view_table = ensure_compacted_table(topic)
    head = view_table.metadata.snapshot_by_name(MAIN)
    cursor = parse_cursor(head).widened(offsets.partitions) if head is not None else None  # a mirror may grow
    return Pinned(raw, view_table, cursor, offsets, settings)


def plan_run(pinned: Pinned, now_ms: int, progress: Progress, *, force_rewrite: bool = False,
             trim_before_ms: int | None = None) -> CompactionPlan:
    """The horizons (a retention trim keeps them) and the plan (``plan.make_plan``)."""
    previous = previous_horizons(pinned.cursor, pinned.offsets.log_start_offsets)
    if trim_before_ms is not None:
        horizons = list(previous)
    else:
        horizons = compute_horizons(pinned.raw, previous, pinned.offsets.next_offsets, now_ms,
                                    pinned.settings.min_compaction_lag_ms)
    plan = make_plan(raw_snapshot_id=pinned.raw.snapshot_id, cursor=pinned.cursor, offsets=pinned.offsets,
                     horizons=horizons, settings=pinned.settings, now_ms=now_ms, force_rewrite=force_rewrite,
                     trim_before_ms=trim_before_ms)
    if pinned.offsets.gapped and plan.ranges:  # a mirrored topic: a range's width is not its record count
        with translate_storage_errors("planning a compaction"):
            plan = replace(plan, range_counts=tuple((p, range_records(pinned.raw, p, lo, hi))
                                                    for p, (lo, hi) in plan.ranges.items()))
    if plan.has_work:
        progress.phase("plan", "pinned raw snapshot and cursor", raw_snapshot_id=plan.raw_snapshot_id,
                       cursor=plan.cursor.snapshot_id if plan.cursor else None, mode=plan.mode,
                       ranges={str(p): list(r) for p, r in plan.ranges.items()}, records=plan.records_in_range,
                       expire_tombstones=plan.purge_expired, drop_keyless=plan.purge_keyless,
                       trim_before_ms=plan.trim_before_ms, rewrite=plan.rewrite_reason)
    return plan


def open_run(lake: Lake, topic: Topic, plan: CompactionPlan, view_table: Table, run_id: str, progress: Progress, *,
             layout: str | None = None) -> RunContext:
    """The Spark side of the run: the job session, the layout (``layout`` forces one), and the staging branch
    at ``C``; the scratch tables of dead runs are dropped first."""
    spark = lake.job_spark()
    register_table_storage(spark, lake.config, view_table)  # position deletes go below it, through S3A
    chosen, raw_timestamps = _layout(plan, topic, view_table, task_slots(spark), layout)
    progress.phase("layout", chosen.reason, layout=chosen.kind, slots=chosen.slots)
    name, catalog = topic.name, lake.catalog
    stage = stage_branch(plan.now_ms, run_id)
    previous = plan.cursor.snapshot_id if plan.cursor else None
    base = previous if previous is not None else ensure_base_branch(catalog, view_table)
    drop_stale_scratch(catalog, lake.config, name, plan.now_ms, plan.settings.orphan_min_age_ms,
                       view_location=view_table.metadata.location, view_io=view_table.io)
    with translate_storage_errors(f"creating the staging branch of {name}"):
        create_stage_branch(catalog, name.compacted_identifier, stage, base, previous)
    memory = task_memory_bytes(spark) if plan.small_range else None  # the key tables' bound (``append_winners``)
    return RunContext(name, plan, spark, chosen, lake.config.catalog_name, run_id, stage,
                      scratch_identifier(name, plan.now_ms, run_id), view_table, progress, raw_timestamps, memory)


def _layout(plan: CompactionPlan, topic: Topic, view_table: Table, slots: int,
            force: str | None) -> tuple[Layout, tuple[int, int] | None]:
    """Estimate each partition's work from metadata (range records, view rows) and choose the layout; with the
    range files' timestamp bounds (which only the ``timestamp`` strategy uses). A run whose whole work, with all of
    the view's rows counted, is below ``SLICED_MIN_WORK`` stays partitioned without planning any file."""
    if force is None and plan.settings.strategy.kind != TIMESTAMP_STRATEGY:
        all_view_rows = plan.view.rows if plan.cursor is not None and plan.removes_view_rows else 0
        whole = sum(estimate_work(plan.range_records, {0: all_view_rows}, max(plan.partitions, 1),
                                  rewrite=plan.rewrite_reason is not None))
        if whole < SLICED_MIN_WORK:
            return choose_layout([whole], slots, raw_bytes=0, view_bytes=0,
                                 scratch_if_sliced=plan.scratch_only_if_sliced,
                                 rewrite=plan.rewrite_reason is not None), None
    with translate_storage_errors(f"planning {topic.name}"):
        raw_files = topic.raw_files(plan.raw_snapshot_id, ranges(plan.ranges)) if plan.ranges else []
        view_files = ([t.file for t in view_table.scan(snapshot_id=plan.cursor.snapshot_id).plan_files()]
                      if plan.cursor is not None and plan.removes_view_rows else [])
    view_rows: dict[int, int] = {}
    for data_file in view_files:
        partition = int(data_file.partition[0])
        view_rows[partition] = view_rows.get(partition, 0) + int(data_file.record_count)
    work = estimate_work(plan.range_records, view_rows, plan.partitions,
                         rewrite=plan.rewrite_reason is not None)
    chosen = choose_layout(work, slots, raw_bytes=sum(f.size_bytes for f in raw_files),
                           view_bytes=sum(int(f.file_size_in_bytes) for f in view_files), force=force,
                           scratch_if_sliced=plan.scratch_only_if_sliced, rewrite=plan.rewrite_reason is not None)
    return chosen, timestamp_bounds(raw_files)
