"""What phase 2 produced, whichever way it wrote the view: the figures the new cursor is built from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyiceberg.table import Table

from compactor.compaction.deletes import DeleteFileInfo
from compactor.compaction.horizons import RawSnapshotView, bytes_at
from compactor.compaction.plan import CompactionPlan
from compactor.compaction.triggers import start_bytes
from compactor.cursor import CompactionStats, Cursor, ViewStats
from compactor.iceberg.commits import branch_history


@dataclass(frozen=True)
class RangeFigures:
    """The raw records of the new range as phase 2 read them (the count is also a density check)."""

    records: int = 0
    tombstones: int = 0

    @classmethod
    def from_metrics(cls, metrics: Mapping[str, object]) -> RangeFigures:
        return cls(int(metrics.get("records") or 0), int(metrics.get("tombstones") or 0))  # type: ignore[call-overload]


@dataclass(frozen=True)
class Phase2Result:
    """The new view as phase 2 left it on the staging branch.

    ``survivors``: the compacted rows of ``C`` it keeps; ``appended``: the rows of the new range it added;
    ``delete_files``: position deletes still to register with the cursor commit (incremental runs);
    ``trims``: per partition trimmed by a retention trim, how many rows went and the lowest offset kept.
    """

    survivors: ViewStats
    appended: ViewStats
    range: RangeFigures = RangeFigures()
    delete_files: tuple[DeleteFileInfo, ...] = ()
    trims: Mapping[int, tuple[int, int | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class RunFigures:
    """How the run went, beyond its rows: for the statistics."""

    run_id: str
    layout: str
    slots: int
    duration_ms: int
    durations_ms: Mapping[str, int]
    unparsable: int = 0


def build_cursor(plan: CompactionPlan, result: Phase2Result, stage_table: Table, stage: str, raw: RawSnapshotView,
                 properties: Mapping[str, str], run: RunFigures) -> Cursor:
    """The cursor the run publishes: the new horizons and compacted starts, and its statistics."""
    previous = plan.cursor
    head = stage_table.metadata.snapshot_by_name(stage)
    summary = head.summary.additional_properties if head is not None and head.summary else {}
    deletes = result.delete_files
    written = _bytes_written(stage_table, stage, previous.snapshot_id if previous else None)
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
        view_data_files=int(summary.get("total-data-files", 0) or 0),
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
