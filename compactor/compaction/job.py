"""The TwoPhaseCompactor: one compaction run of one topic, as Spark jobs (docs/guarantees.md#compaction and
#the-cursor-and-failures).

It reads like Kafka's cleaner (clean -> build the offset map -> recopy), one step after the other, each step
entered once and handing the next what it made:

0. **plan** (``start``, ``plan``, ``horizons``, ``triggers``; pyiceberg only): pin the raw snapshot ``S`` and the
   cursor ``C``, read the settings once, compute the horizons and decide what the run does; if nothing, stop
   (``committed: false``). Then, holding the run's lease (``lease``), open the run: the job session, the layout of
   the Spark work chosen by its estimated cost (``execution``: one task per partition, or offset slices when
   partitions are fewer than task slots), and the run's private staging branch at ``C`` (``staging``). The
   ``RunContext`` (``context``) is the data the phases receive.
1. **phase 1** (``phase1``): each key's latest offset over the new range, into the run's scratch table
   (``scratch``).
2. **phase 2** (``phase2``): ``incremental`` (position-delete the removed compacted rows and write the range's
   kept rows, both as files that Spark does not commit) or ``rewrite`` (write the whole view afresh on the
   staging branch when deletes pile up).
3. **publish** (``publish``): the new cursor, with an incremental run's files, made current by one conditional
   catalog commit if ``C`` still is.
   If another run won, this one starts again from the plan on the new cursor (``max_attempts`` in all).

Any failure before the commit leaves ``main`` (the cursor) as it was; the run's staging branch and scratch
table are dropped (or, if the process died, once older than ``compaction.orphan-min-age-ms``: the scratch
table by the next run and by retention, the staging branch by retention).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from compactor import failpoints
from compactor.clock import resolve_now_ms
from compactor.compaction.context import RunContext
from compactor.compaction.execution import spark_commit_conflicts
from compactor.compaction.lease import RunLease
from compactor.compaction.phase1.winners import Winners, find_winners
from compactor.compaction.phase2.outcome import Phase2Result
from compactor.compaction.phase2.write import write_view
from compactor.compaction.plan import CompactionPlan
from compactor.compaction.publish import publish_run
from compactor.compaction.scratch import drop_scratch
from compactor.compaction.staging import drop_stage_branch
from compactor.compaction.start import Pinned, open_run, pin, plan_run
from compactor.compaction.triggers import assess
from compactor.cursor import CompactionStats, Cursor, ViewStats
from compactor.errors import CommitConflictError, TopicCorruptError
from compactor.iceberg.storage import delete_uncommitted
from compactor.metrics import compaction_metrics
from compactor.progress import Listener, Progress
from compactor.results import CompactOutcome
from compactor.spark.active import active_session
from compactor.topics.naming import TopicName
from compactor.topics.topic import Topic

if TYPE_CHECKING:
    from compactor.lake import Lake


@dataclass
class CompactionResult(CompactOutcome):
    """The outcome of a run, printed by ``compactor compact`` as JSON (docs/reference.md#json-results ``compact``
    fields)."""

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
        self.progress = Progress("compact", str(self.name), listener=listener)

    def run(self) -> CompactionResult:
        for attempt in range(1, self.max_attempts + 1):
            try:
                result = self._attempt()
                result.attempts = attempt
                return result
            except CommitConflictError as exc:
                if attempt == self.max_attempts:
                    raise
                self.progress.phase("restart", f"{exc}; starting again from the plan on the new cursor",
                                    attempt=attempt)
        raise AssertionError("unreachable")

    def _attempt(self) -> CompactionResult:
        """Plan; then, holding the run's lease, phase 1, phase 2 and publish on the job session."""
        topic = self.lake.topic(self.name)
        pinned = pin(topic)
        if self.if_due and self.trim_before_ms is None:
            assessment = assess(pinned.raw, pinned.offsets, topic.properties, pinned.settings, pinned.cursor,
                                self.now_ms)
            if not assessment.due:
                return self._not_committed(pinned.cursor, pinned.raw.snapshot_id, f"not due: {assessment.due_reason}")
        plan = plan_run(pinned, self.now_ms, self.progress, force_rewrite=self.force_rewrite,
                        trim_before_ms=self.trim_before_ms)
        if not plan.has_work:
            return self._not_committed(plan.cursor, plan.raw_snapshot_id, "nothing to compact: no horizon advances "
                                       "and no compacted row needs removing")
        failpoints.hit("after-plan")
        run_id = uuid.uuid4().hex[:12]
        with RunLease(self.lake.config, pinned.view_table.metadata.location, run_id,  # retention spares the run
                      io=pinned.view_table.io):
            run = open_run(self.lake, topic, plan, pinned.view_table, run_id, self.progress,
                           layout=self.forced_layout)
            with active_session(run.spark):  # every Spark step of the run resolves on the job session
                return self._phases(run, pinned, topic)

    def _phases(self, run: RunContext, pinned: Pinned, topic: Topic) -> CompactionResult:
        """Phase 1, phase 2 and the publish of an open run; its scratch table and unpublished stage are dropped."""
        plan = run.plan
        published = False
        winners: Winners | None = None
        try:
            with spark_commit_conflicts(f"writing the staging branch of {self.name}"):
                winners = find_winners(run, self.lake.catalog) if plan.ranges else None
                failpoints.hit("after-phase-1")
                written = write_view(run, winners)
            failpoints.hit("after-write")
            _check_density(self.name, plan, written)
            if not plan.ranges and not plan.strategy_changed and written.survivors.rows == plan.view.rows:
                # only a pass for expired tombstones, keyless rows or a trim, and it found none (the minimums
                # it planned on are lower bounds): the compacted rows did not change, so nothing is published
                return self._not_committed(plan.cursor, plan.raw_snapshot_id,
                                           "nothing to compact: no compacted row needed removing")
            snapshot_id, cursor = publish_run(run, winners, written, pinned.raw, topic, self.lake.catalog)
            published = True
            return self._published(plan, snapshot_id, cursor)
        finally:
            if run.uses_scratch:  # phase 1 made (or began to make) the scratch table
                drop_scratch(self.lake.catalog, self.lake.config, run.scratch)
            if winners is not None and winners.inline is not None and winners.inline.shared is not None:
                delete_uncommitted(run.view_io, winners.inline.shared.files)  # shared key tables' bits
            if not published:
                drop_stage_branch(self.lake.catalog, self.name.compacted_identifier, run.stage)

    def _published(self, plan: CompactionPlan, snapshot_id: int, cursor: Cursor) -> CompactionResult:
        stats = cursor.stats
        seconds = stats.duration_ms / 1000
        self.progress.summary(
            f"published cursor {snapshot_id} ({stats.mode}, {stats.layout} on {stats.slots} slot(s)): "
            f"{stats.records_read} raw records ({stats.bytes_read / 1e6:.1f} MB) in {seconds:.1f}s, "
            f"{stats.bytes_read / 1e6 / max(seconds, 1e-3):.1f} MB/s; view {stats.view_rows_before} -> "
            f"{stats.records_kept} rows", metric="compaction", committed=True,
            dirty_ratio=_dirty_ratio(plan.view.clean_bytes, stats), **compaction_metrics(stats.as_json()))
        return CompactionResult(True, str(self.name), snapshot_id, plan.raw_snapshot_id, cursor.horizons_dict(),
                                self.now_ms, stats, plan.published_reason, plan.cursor.snapshot_id if plan.cursor
                                else None, strategy=plan.settings.strategy.label)

    def _not_committed(self, cursor: Cursor | None, raw_snapshot_id: int | None, reason: str) -> CompactionResult:
        view = cursor.view if cursor else ViewStats()
        stats = CompactionStats.unchanged(view, self.progress.elapsed_ms())
        self.progress.summary(f"no commit: {reason}", metric="compaction", committed=False,
                              dirty_ratio=_dirty_ratio(view.clean_bytes, stats), **compaction_metrics(stats.as_json()))
        return CompactionResult(False, str(self.name), cursor.snapshot_id if cursor else None, raw_snapshot_id,
                                cursor.horizons_dict() if cursor else {}, self.now_ms, stats, reason,
                                cursor.snapshot_id if cursor else None)


def _check_density(name: TopicName, plan: CompactionPlan, written: Phase2Result) -> None:
    if written.range.records != plan.records_in_range:
        why = "counted from the raw files" if plan.range_counts else "offsets are dense"
        raise TopicCorruptError(
            f"{name}: the raw range {plan.ranges} holds {written.range.records} records, expected "
            f"{plan.records_in_range} ({why}); nothing was published")


def _dirty_ratio(clean_bytes: int, stats: CompactionStats) -> float:
    """Kafka's dirty ratio of what the run cleaned: the bytes of the range it read over those plus the view's
    clean bytes at ``C`` (for the same range, the ratio ``status`` and the cleaner assessed the topic at); 0 when
    it read nothing."""
    dirty = stats.bytes_read
    return dirty / (clean_bytes + dirty) if dirty > 0 else 0.0


def compact_topic(lake: Lake, topic: str, **kwargs: Any) -> CompactionResult:
    """Run one compaction of ``topic`` (see ``TwoPhaseCompactor`` for the keyword arguments)."""
    return TwoPhaseCompactor(lake, topic, **kwargs).run()


__all__ = ["CompactionResult", "TwoPhaseCompactor", "compact_topic"]
