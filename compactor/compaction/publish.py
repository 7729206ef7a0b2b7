"""Publishing a run: the new cursor, and ONE catalog commit on the compacted table
(docs/guarantees.md#the-cursor-and-failures).

``build_cursor`` makes the cursor from the plan and what phase 2 wrote: the new horizons and compacted starts,
and the run's statistics. The commit (``publish_cursor``) adds the cursor snapshot (the staging branch's content,
plus an incremental run's new data files through one data manifest and its position deletes through one delete
manifest, with the cursor's summary), moves ``main`` to it on
condition that ``main`` is still the pinned cursor ``C`` (Iceberg's assert-ref-snapshot-id), tags ``C`` as
``cursor-<C>`` so the replaced cursor stays protected from expiry while retained, and drops the staging branch.
If ``main`` moved, the run has lost ("cursor moved"); if only other refs changed, the commit is rebuilt on
the refreshed table and retried. Then the cursor is mirrored on the raw table, for people.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pyiceberg.catalog import Catalog
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.refs import SnapshotRefType

from compactor import failpoints
from compactor import properties as props
from compactor.compaction.context import RunContext
from compactor.compaction.horizons import RawSnapshotView, bytes_at
from compactor.compaction.phase2.outcome import Phase2Result
from compactor.compaction.plan import CompactionPlan
from compactor.compaction.staging import require_cursor
from compactor.compaction.triggers import start_bytes
from compactor.cursor import MAIN, CompactionStats, Cursor, cursor_properties, cursor_tag
from compactor.errors import CommitConflictError
from compactor.iceberg.catalog import translate_storage_errors
from compactor.iceberg.commits import RefMove, branch_history, commit
from compactor.iceberg.manifests import DeleteFileInfo, delete_manifest, delete_summary
from compactor.iceberg.snapshots import build_snapshot
from compactor.progress import Progress
from compactor.topics.naming import TopicName
from compactor.topics.topic import Topic

if TYPE_CHECKING:
    from compactor.compaction.phase1.winners import Winners

log = logging.getLogger(__name__)
PUBLISH_ATTEMPTS = 5


@dataclasses.dataclass(frozen=True)
class RunFigures:
    """How the run went, beyond its rows: for the statistics."""

    run_id: str
    layout: str
    slots: int
    duration_ms: int
    durations_ms: Mapping[str, int]
    unparsable: int = 0


def publish_run(run: RunContext, winners: Winners | None, written: Phase2Result, raw: RawSnapshotView, topic: Topic,
                catalog: Catalog) -> tuple[int, Cursor]:
    """Build the run's cursor, commit it (failure points ``before-commit`` and ``after-commit`` around the
    commit) and mirror it on the raw table; returns the new cursor's snapshot id and the cursor."""
    with translate_storage_errors(f"reading the staging branch of {run.name}"):
        stage_table = catalog.load_table(run.name.compacted_identifier)
    durations = {**({"phase1_ms": winners.ms} if winners is not None else {}), **written.durations_ms}
    figures = RunFigures(run.run_id, run.layout.kind, run.layout.slots, run.progress.elapsed_ms(), durations,
                         winners.unparsable if winners is not None else 0)
    cursor = build_cursor(run.plan, written, stage_table, run.stage, raw, topic.properties, figures)
    failpoints.hit("before-commit")
    previous = run.plan.cursor.snapshot_id if run.plan.cursor else None
    snapshot_id = publish_cursor(catalog, run.name, run.stage, previous, cursor, written.delete_files, run.progress,
                                 written.data_files)
    failpoints.hit("after-commit")
    mirror_cursor(topic, snapshot_id, cursor)
    return snapshot_id, cursor


def build_cursor(plan: CompactionPlan, result: Phase2Result, stage_table: Table, stage: str, raw: RawSnapshotView,
                 properties: Mapping[str, str], run: RunFigures) -> Cursor:
    """The cursor the run publishes: the new horizons and compacted starts, and its statistics."""
    previous = plan.cursor
    head = stage_table.metadata.snapshot_by_name(stage)
    summary = head.summary.additional_properties if head is not None and head.summary else {}
    deletes = result.delete_files
    written = (_bytes_written(stage_table, stage, previous.snapshot_id if previous else None)
               + sum(int(f.file_size_in_bytes) for f in result.data_files))
    at_horizon = [bytes_at(raw, p, h, n, b) for p, (h, n, b) in
                  enumerate(zip(plan.horizons, plan.next_offsets, plan.logical_bytes, strict=True))]
    if previous is not None and len(previous.bytes_at_horizon) == len(at_horizon):
        at_previous = list(previous.bytes_at_horizon)
    else:
        at_previous = start_bytes(properties, len(at_horizon))
    stats = CompactionStats.of_run(
        before=plan.view, survivors=result.survivors, appended=result.appended,
        records_read=result.range.records, tombstones_read=result.range.tombstones,
        bytes_read=sum(max(a - b, 0) for a, b in zip(at_horizon, at_previous, strict=True)),
        bytes_written=written + sum(f.size_bytes for f in deletes),
        duration_ms=run.duration_ms, mode=plan.mode, rewrite_reason=plan.rewrite_reason, layout=run.layout,
        slots=run.slots, durations_ms=dict(run.durations_ms), unparsable_strategy_values=run.unparsable,
        view_position_deletes=int(summary.get("total-position-deletes", 0) or 0) + sum(f.record_count for f in deletes),
        view_data_files=int(summary.get("total-data-files", 0) or 0) + len(result.data_files),
        view_delete_files=int(summary.get("total-delete-files", 0) or 0) + len(deletes),
    )
    start = list(previous.compacted_start) if previous else list(plan.log_starts)
    for partition, (trimmed, first_kept) in result.trims.items():
        if trimmed:  # nothing below first_kept is left; an emptied partition continues at its horizon
            start[partition] = max(start[partition], plan.horizons[partition] if first_kept is None else first_kept)
    return Cursor(
        snapshot_id=0,
        horizons=plan.horizons,
        compacted_start=tuple(start),
        raw_snapshot_id=plan.raw_snapshot_id,
        raw_next_offsets=plan.next_offsets,
        now_ms=plan.now_ms,
        settings=plan.settings.as_kafka_dict(),
        stats=stats,
        view=result.survivors.plus(result.appended),
        previous=previous.snapshot_id if previous else None,
        run_id=run.run_id,
        policy_compact=True,
        bytes_at_horizon=tuple(at_horizon),
    )


def _bytes_written(table: Table, stage: str, stop_at: int | None) -> int:
    """Bytes of the data and delete files the run's staging snapshots added (``stage``'s history down to the
    cursor ``stop_at``)."""
    total = 0
    for snapshot in branch_history(table.metadata, stage):
        if snapshot.snapshot_id == stop_at:
            break
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        total += int(summary.get("added-files-size", 0) or 0)
    return total


def publish_cursor(catalog: Catalog, name: TopicName, stage: str, previous: int | None, cursor: Cursor,
                   delete_files: Sequence[DeleteFileInfo], progress: Progress,
                   data_files: Sequence[DataFile] = ()) -> int:
    """Commit ``cursor`` (built on the staging branch ``stage``, with the run's new ``data_files`` and
    ``delete_files``) if ``main`` is still ``previous``; returns the new cursor's snapshot id."""
    started = time.monotonic()
    for _ in range(PUBLISH_ATTEMPTS):
        with translate_storage_errors(f"publishing the cursor of {name}"):  # loading and the manifests it writes
            table = catalog.load_table(name.compacted_identifier)
            require_cursor(table, previous, str(name), "; nothing was published")
            head = table.metadata.snapshot_by_name(stage)
            if head is None:
                raise CommitConflictError(f"the staging branch {stage} of this run disappeared")
            timed = dataclasses.replace(cursor.stats, durations_ms={
                **cursor.stats.durations_ms, "commit_ms": int((time.monotonic() - started) * 1000)})
            summary = cursor_properties(dataclasses.replace(cursor, stats=timed))
            manifests = (lambda sid, t=table: [delete_manifest(t, sid, delete_files)]) if delete_files else None
            snapshot = build_snapshot(table, head, summary, manifests, delete_summary(delete_files),
                                      data_files=data_files)
        moves = [RefMove(MAIN, None)]
        if previous is not None:
            moves.append(RefMove(cursor_tag(previous), previous, SnapshotRefType.TAG))
        try:
            commit(catalog, table, snapshot=snapshot, moves=moves, removals=[stage],
                   expect={MAIN: previous, stage: head.snapshot_id}, what=f"publishing the cursor of {name}")
        except CommitConflictError as exc:
            progress.phase("publish retry", str(exc))
            continue
        progress.phase("published", compacted_snapshot_id=snapshot.snapshot_id,
                       commit_ms=int((time.monotonic() - started) * 1000))
        return int(snapshot.snapshot_id)
    raise CommitConflictError(f"could not publish the cursor of {name} after {PUBLISH_ATTEMPTS} attempts: "
                              "the compacted table kept changing")


def mirror_cursor(topic: Topic, snapshot_id: int, cursor: Cursor) -> None:
    """Show the cursor on the raw table too (for people and tools; nothing trusts it). Best effort."""
    value = json.dumps({"compacted_table": topic.name.compacted_identifier, "compacted_snapshot_id": snapshot_id,
                        "horizons": cursor.horizons_dict(), "raw_snapshot_id": cursor.raw_snapshot_id,
                        "run_time_ms": cursor.now_ms}, separators=(",", ":"))
    try:
        topic.set_internal_properties({props.CURSOR_MIRROR_PROPERTY: value})
    except Exception as exc:  # the cursor is published; the mirror is for people
        log.warning("could not mirror the cursor of %s on the raw table: %s", topic.name, exc)
