"""The TwoPhaseCompactor: one compaction run of one topic, as Spark jobs (SEMANTICS sections 2 and 3).

It reads like Kafka's cleaner (clean -> build the offset map -> recopy), one step per module:

0. **plan** (``plan``, pyiceberg only): pin the raw snapshot ``S`` and the cursor ``C``, read the settings once,
   compute the horizons (``horizons``) and decide what the run does; if nothing, stop (``committed: false``).
   Choose the layout of the Spark work by its estimated cost (``execution``): one task per partition, or
   offset slices when partitions are fewer than task slots.
1. **phase 1** (``winners``): each key's latest offset over the new range, into the run's scratch table.
2. **phase 2** on a private staging branch of the compacted table (``staging``), by one of two strategies:
   ``incremental`` (position-delete the removed compacted rows, append the range's kept rows) or ``rewrite``
   (write the whole view afresh when deletes pile up).
3. **publish** (``publish``): one conditional catalog commit makes the new cursor current, if ``C`` still is.
   If another run won, this one starts again from the plan on the new cursor (``max_attempts`` in all).

Any failure before the commit leaves ``main`` (the cursor) as it was; the run's staging branch and scratch
table are dropped (or, if the process died, once older than ``compaction.orphan-min-age-ms``: the scratch
table by the next run and by retention, the staging branch by retention).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pyiceberg.table import Table

from compactor import failpoints
from compactor.clock import resolve_now_ms
from compactor.compaction.context import RunContext
from compactor.compaction.execution import Layout, choose_layout, estimate_work, spark_commit_conflicts, task_slots
from compactor.compaction.horizons import RawSnapshotView, compute_horizons, range_records
from compactor.compaction.incremental import write_incremental
from compactor.compaction.lease import RunLease
from compactor.compaction.outcome import Phase2Result, RunFigures, build_cursor
from compactor.compaction.plan import CompactionPlan, make_plan, previous_horizons, timestamp_bounds
from compactor.compaction.publish import mirror_cursor, publish_cursor
from compactor.compaction.rewrite import write_rewrite
from compactor.compaction.scratch import drop_scratch, drop_stale_scratch
from compactor.compaction.staging import create_stage_branch, drop_stage_branch, ensure_base_branch
from compactor.compaction.triggers import assess
from compactor.compaction.winners import find_winners
from compactor.cursor import MAIN, STAGE_PREFIX, CompactionStats, Cursor, ViewStats, parse_cursor
from compactor.cursor.table import ensure_compacted_table
from compactor.errors import CommitConflictError, CursorMovedError, PolicyError, TopicCorruptError
from compactor.iceberg.catalog import translate_storage_errors
from compactor.iceberg.expressions import ranges
from compactor.progress import Listener, Progress
from compactor.results import JsonResult
from compactor.spark.active import active_session
from compactor.topics.naming import TopicName
from compactor.topics.settings import TopicSettings
from compactor.topics.state import PartitionOffsets
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


@dataclass
class CompactionResult(JsonResult):
    """The outcome of a run, printed by ``compactor compact`` as JSON (INTERFACE.md ``compact`` fields)."""

    committed: bool
    topic: str
    compacted_snapshot_id: int | None
    raw_snapshot_id: int | None
    horizons: dict[str, int]
    run_time_ms: int
    stats: CompactionStats
    reason: str = ""
    previous_cursor: int | None = None
    attempts: int = 1
    strategy: str = "offset"


class TwoPhaseCompactor:
    """Compacts one topic; see the module docstring for the steps.

    ``layout`` forces ``"partitioned"`` or ``"sliced"`` (default: chosen by cost); ``force_rewrite`` writes the
    view afresh; ``trim_before_ms`` (retention under ``delete,compact``) makes a run that only removes compacted
    rows older than it and keeps the horizons.
    """

    def __init__(self, lake: Lake, topic: str | TopicName, *, now_ms: int | None = None, if_due: bool = False,
                 max_attempts: int = 3, listener: Listener | None = None, force_rewrite: bool = False,
                 trim_before_ms: int | None = None, layout: str | None = None) -> None:
        self.lake = lake
        self.name = topic if isinstance(topic, TopicName) else TopicName.parse(topic)
        self.now_ms = resolve_now_ms(now_ms)
        self.if_due = if_due
        self.max_attempts = max_attempts
        self.force_rewrite = force_rewrite
        self.trim_before_ms = trim_before_ms
        self.forced_layout = layout
        self.raw_timestamps: tuple[int, int] | None = None  # the range files' timestamp bounds (``_layout``)
        self.progress = Progress("compact", str(self.name), listener=listener)

    def run(self) -> CompactionResult:
        for attempt in range(1, self.max_attempts + 1):
            try:
                result = self._attempt()
                result.attempts = attempt
                return result
            except (CursorMovedError, CommitConflictError) as exc:
                if attempt == self.max_attempts:
                    raise
                self.progress.phase("restart", f"{exc}; starting again from the plan on the new cursor",
                                    attempt=attempt)
        raise AssertionError("unreachable")

    def _attempt(self) -> CompactionResult:
        topic = self.lake.topic(self.name)
        pinned = self._pin(topic)
        if self.if_due and self.trim_before_ms is None:
            assessment = assess(pinned.raw, pinned.offsets, topic.properties, pinned.settings, pinned.cursor,
                                self.now_ms)
            if not assessment.due:
                return self._not_committed(pinned.cursor, pinned.raw.snapshot_id, f"not due: {assessment.due_reason}")
        plan = self._plan(pinned)
        if not plan.has_work:
            return self._not_committed(plan.cursor, plan.raw_snapshot_id, "nothing to compact: no horizon advances "
                                       "and no compacted row needs removing")
        failpoints.hit("after-plan")
        run_id = uuid.uuid4().hex[:12]
        with RunLease(self.lake.config, pinned.view_table.metadata.location, run_id):  # retention spares the run
            ctx = self._start(plan, topic, pinned.view_table, run_id)
            with active_session(ctx.spark):  # every Spark step of the run resolves on the job session
                return self._execute(ctx, pinned, topic)

    def _execute(self, ctx: RunContext, pinned: Pinned, topic: Topic) -> CompactionResult:
        """Phase 1, phase 2 and the publish of a planned run; its scratch and unpublished stage are dropped."""
        plan = ctx.plan
        published = False
        try:
            with spark_commit_conflicts(f"writing the staging branch of {self.name}"):
                if plan.ranges:
                    find_winners(ctx, self.lake.catalog)  # phase 1
                failpoints.hit("after-phase-1")
                result = write_rewrite(ctx) if plan.rewrite_reason else write_incremental(ctx, self.lake.config)
            failpoints.hit("after-write")
            self._check_density(plan, result)
            if not plan.ranges and not plan.strategy_changed and result.survivors.rows == plan.view.rows:
                # only a pass for expired tombstones, keyless rows or a trim, and it found none (the minimums
                # it planned on are lower bounds): the compacted rows did not change, so nothing is published
                return self._not_committed(plan.cursor, plan.raw_snapshot_id,
                                           "nothing to compact: no compacted row needed removing")
            cursor = self._cursor(plan, result, pinned.raw, topic, ctx)
            failpoints.hit("before-commit")
            previous = plan.cursor.snapshot_id if plan.cursor else None
            snapshot_id = publish_cursor(self.lake.catalog, self.name, ctx.stage, previous, cursor,
                                         result.delete_files, self.progress)
            published = True
            failpoints.hit("after-commit")
            mirror_cursor(topic, snapshot_id, cursor)
            self._summary(snapshot_id, cursor.stats)
            return CompactionResult(True, str(self.name), snapshot_id, plan.raw_snapshot_id, cursor.horizons_dict(),
                                    self.now_ms, cursor.stats, plan.published_reason, previous,
                                    strategy=plan.settings.strategy.label)
        finally:
            if ctx.scratch is not None:
                drop_scratch(self.lake.catalog, self.lake.config, ctx.scratch)
            if not published:
                drop_stage_branch(self.lake.catalog, self.name.compacted_identifier, ctx.stage)

    def _start(self, plan: CompactionPlan, topic: Topic, view_table: Table, run_id: str) -> RunContext:
        """The Spark side of the run: the job session, the layout, and the staging branch at ``C``."""
        spark = self.lake.job_spark()
        layout = self._layout(plan, topic, view_table, task_slots(spark))
        self.progress.phase("layout", layout.reason, layout=layout.kind, slots=layout.slots)
        stage = f"{STAGE_PREFIX}{self.now_ms}-{run_id}"
        catalog = self.lake.catalog
        previous = plan.cursor.snapshot_id if plan.cursor else None
        base = previous if previous is not None else ensure_base_branch(catalog, view_table)
        drop_stale_scratch(catalog, self.lake.config, self.name, self.now_ms, plan.settings.orphan_min_age_ms,
                           view_location=view_table.metadata.location)
        with translate_storage_errors(f"creating the staging branch of {self.name}"):
            create_stage_branch(catalog, self.name.compacted_identifier, stage, base, previous)
        return RunContext(self.name, plan, spark, layout, self.lake.config.catalog_name, run_id, stage,
                          view_table.metadata.location, self.progress, raw_timestamps=self.raw_timestamps)

    # --- the plan (pyiceberg only) ----------------------------------------------------------------------

    def _pin(self, topic: Topic) -> Pinned:
        """Pin the raw snapshot ``S`` and the cursor ``C``; read the settings once."""
        settings = topic.settings
        if not settings.compacts:
            raise PolicyError(f"topic {self.name} has cleanup.policy={settings.policy_text}; compaction needs "
                              "'compact' (topic config --set cleanup.policy=compact or delete,compact)")
        offsets = topic.offsets()
        snapshot = topic.snapshot
        raw = RawSnapshotView(topic.table, snapshot.snapshot_id if snapshot else None)
        view_table = ensure_compacted_table(topic)
        head = view_table.metadata.snapshot_by_name(MAIN)
        cursor = parse_cursor(head).widened(offsets.partitions) if head is not None else None
        return Pinned(raw, view_table, cursor, offsets, settings)

    def _plan(self, pinned: Pinned) -> CompactionPlan:
        """The horizons (a retention trim keeps them) and the plan (``plan.make_plan``)."""
        previous = previous_horizons(pinned.cursor, pinned.offsets.log_start_offsets)
        if self.trim_before_ms is not None:
            horizons = list(previous)
        else:
            horizons = compute_horizons(pinned.raw, previous, pinned.offsets.next_offsets, self.now_ms,
                                        pinned.settings.min_compaction_lag_ms)
        plan = make_plan(raw_snapshot_id=pinned.raw.snapshot_id, cursor=pinned.cursor, offsets=pinned.offsets,
                         horizons=horizons, settings=pinned.settings, now_ms=self.now_ms,
                         force_rewrite=self.force_rewrite, trim_before_ms=self.trim_before_ms)
        if pinned.offsets.gapped and plan.ranges:  # a mirrored topic: a range's width is not its record count
            with translate_storage_errors(f"planning {self.name}"):
                plan = replace(plan, range_counts=tuple((p, range_records(pinned.raw, p, lo, hi))
                                                        for p, (lo, hi) in plan.ranges.items()))
        if plan.has_work:
            self.progress.phase("plan", "pinned raw snapshot and cursor", raw_snapshot_id=plan.raw_snapshot_id,
                                cursor=plan.cursor.snapshot_id if plan.cursor else None, mode=plan.mode,
                                ranges={str(p): list(r) for p, r in plan.ranges.items()},
                                records=plan.records_in_range, expire_tombstones=plan.purge_expired,
                                drop_keyless=plan.purge_keyless, trim_before_ms=plan.trim_before_ms,
                                rewrite=plan.rewrite_reason)
        return plan

    def _layout(self, plan: CompactionPlan, topic: Topic, view_table: Table, slots: int) -> Layout:
        """Estimate each partition's work from metadata (range records, view rows) and choose the layout."""
        with translate_storage_errors(f"planning {self.name}"):
            raw_files = topic.raw_files(plan.raw_snapshot_id, ranges(plan.ranges)) if plan.ranges else []
            view_files = ([t.file for t in view_table.scan(snapshot_id=plan.cursor.snapshot_id).plan_files()]
                          if plan.cursor is not None and plan.removes_view_rows else [])
        self.raw_timestamps = timestamp_bounds(raw_files)
        view_rows: dict[int, int] = {}
        for data_file in view_files:
            partition = int(data_file.partition[0])
            view_rows[partition] = view_rows.get(partition, 0) + int(data_file.record_count)
        work = estimate_work({p: plan.range_records(p) for p in plan.ranges}, view_rows, plan.partitions,
                             rewrite=plan.rewrite_reason is not None)
        return choose_layout(work, slots, raw_bytes=sum(f.size_bytes for f in raw_files),
                             view_bytes=sum(int(f.file_size_in_bytes) for f in view_files), force=self.forced_layout)

    # --- the outcome --------------------------------------------------------------------------------------

    def _check_density(self, plan: CompactionPlan, result: Phase2Result) -> None:
        if result.range.records != plan.records_in_range:
            why = "counted from the raw files" if plan.range_counts else "offsets are dense"
            raise TopicCorruptError(
                f"{self.name}: the raw range {plan.ranges} holds {result.range.records} records, expected "
                f"{plan.records_in_range} ({why}); nothing was published")

    def _cursor(self, plan: CompactionPlan, result: Phase2Result, raw: RawSnapshotView, topic: Topic,
                ctx: RunContext) -> Cursor:
        with translate_storage_errors(f"reading the staging branch of {self.name}"):
            table = self.lake.catalog.load_table(self.name.compacted_identifier)
        figures = RunFigures(ctx.run_id, ctx.layout.kind, ctx.layout.slots, self.progress.elapsed_ms(), ctx.timings,
                             ctx.unparsable)
        return build_cursor(plan, result, table, ctx.stage, raw, topic.properties, figures)

    def _not_committed(self, cursor: Cursor | None, raw_snapshot_id: int | None, reason: str) -> CompactionResult:
        self.progress.summary(f"no commit: {reason}")
        view = cursor.view if cursor else ViewStats()
        return CompactionResult(False, str(self.name), cursor.snapshot_id if cursor else None, raw_snapshot_id,
                                cursor.horizons_dict() if cursor else {}, self.now_ms,
                                CompactionStats.unchanged(view, self.progress.elapsed_ms()), reason,
                                cursor.snapshot_id if cursor else None)

    def _summary(self, snapshot_id: int, stats: CompactionStats) -> None:
        seconds = stats.duration_ms / 1000
        self.progress.summary(
            f"published cursor {snapshot_id} ({stats.mode}, {stats.layout} on {stats.slots} slot(s)): "
            f"{stats.records_read} raw records ({stats.bytes_read / 1e6:.1f} MB) in {seconds:.1f}s, "
            f"{stats.bytes_read / 1e6 / max(seconds, 1e-3):.1f} MB/s; view {stats.view_rows_before} -> "
            f"{stats.records_kept} rows", records_read=stats.records_read, records_kept=stats.records_kept,
            records_removed=stats.records_removed, tombstones_kept=stats.tombstones_kept,
            tombstones_dropped=stats.tombstones_dropped, bytes_read=stats.bytes_read,
            bytes_written=stats.bytes_written, duration_ms=stats.duration_ms)


def compact_topic(lake: Lake, topic: str, **kwargs: Any) -> CompactionResult:
    """Run one compaction of ``topic`` (see ``TwoPhaseCompactor`` for the keyword arguments)."""
    return TwoPhaseCompactor(lake, topic, **kwargs).run()


__all__ = ["CompactionResult", "TwoPhaseCompactor", "compact_topic"]
