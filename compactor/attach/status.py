"""``status``, ``topic describe`` and ``retention`` of an attached log (no Spark).

The source's log end per partition is read from the source's current snapshot (its partition and offset columns
only, of the rows past the horizons: ``log.offsets_past_horizons``, as the readers' offsets are). Retention
touches only what the product owns: it expires the view's own snapshots (all but the current cursor and those
replaced less than ``compaction.cursor.retain-ms`` ago) and deletes the run directories no remaining snapshot
references. The source's retention is its owner's.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from compactor.attach.cursor import NOW_MS, current_cursor
from compactor.attach.log import offsets_past_horizons, planned_files
from compactor.attach.publish import run_of
from compactor.attach.registry import AttachedLog, require_attached
from compactor.clock import resolve_now_ms
from compactor.iceberg.catalog import translate_storage_errors
from compactor.iceberg.storage import delete_files, list_files
from compactor.results import JsonResult

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from compactor.config import LakeConfig
    from compactor.lake import Lake


def log_ends(attached: AttachedLog, horizons: Mapping[int, int]) -> tuple[dict[int, int], dict[int, int], int | None]:
    """Per partition: the next offset (one past the highest) and the rows at or above the horizon, in the
    source's current snapshot; and that snapshot's id."""
    source = attached.source()
    snapshot = source.current_snapshot()
    if snapshot is None:
        return {}, {}, None
    mapping = attached.mapping
    # the rows past the horizons (a partition the cursor does not know: every row)
    pairs = offsets_past_horizons(source, mapping, planned_files(source, mapping, snapshot.snapshot_id), horizons)
    ends: dict[int, int] = {}
    past: dict[int, int] = {}
    for row in pairs.group_by("p").aggregate([("o", "max"), ("o", "count")]).to_pylist():
        ends[int(row["p"])] = int(row["o_max"]) + 1
        past[int(row["p"])] = int(row["o_count"])
    for p, h in horizons.items():  # a partition with nothing new: its log end is the horizon (it never decreases)
        ends[p] = max(ends.get(p, h), h)
    return ends, {p: past.get(p, 0) for p in ends}, snapshot.snapshot_id


@dataclass
class AttachedStatus(JsonResult):
    """``status`` of an attached log (the ``status --json`` fields that apply, plus its source)."""

    topic: str
    source: str
    layout: str
    source_snapshot_id: int | None
    next_offsets: dict[str, int]
    horizons: dict[str, int]
    dirty_records: dict[str, int]
    cursor: dict[str, Any] | None
    due: bool
    due_reason: str
    settings: dict[str, str] = field(default_factory=dict)
    attached: bool = True
    compacted_table: str = ""


def attached_status(attached: AttachedLog, now_ms: int | None = None) -> AttachedStatus:
    cursor = current_cursor(attached.view)
    horizons = cursor.horizons if cursor else {}
    ends, dirty, snapshot_id = log_ends(attached, horizons)
    now = resolve_now_ms(now_ms)
    expiring = cursor is not None and cursor.min_delete_horizon_ms is not None and cursor.min_delete_horizon_ms <= now
    pending = sum(dirty.values())
    due = pending > 0 or expiring
    reason = (f"{pending} source row(s) past the horizons" if pending else
              "a tombstone's delete horizon passed" if expiring else "nothing new in the source")
    return AttachedStatus(str(attached.name), attached.mapping.source, attached.mapping.layout, snapshot_id,
                          _keys(ends), _keys(horizons), _keys(dirty), cursor.as_json() if cursor else None, due,
                          reason, attached.settings.as_kafka_dict(), compacted_table=str(attached.name))


def describe_attached(attached: AttachedLog) -> dict[str, Any]:
    """``topic describe`` of an attached log: its mapping, source, view, settings and cursor."""
    status = attached_status(attached)
    view = attached.view
    return {**status.as_json(), "mapping": json.loads(attached.mapping.to_json()),
            "compacted_metadata_location": view.metadata_location, "schema": str(view.schema()),
            "partitions": len(status.next_offsets)}


@dataclass
class AttachedRetention(JsonResult):
    """What ``retention`` did on an attached log: only the product's own snapshots and files."""

    dry_run: bool
    expired_snapshots: int
    removed_files: int
    removed_records: int = 0
    removed_bytes: int = 0
    log_start_offsets: dict[str, int] = field(default_factory=dict)
    source_untouched: bool = True


def attached_retention(attached: AttachedLog, config: LakeConfig, *, now_ms: int | None = None,
                       dry_run: bool = False) -> AttachedRetention:
    now = resolve_now_ms(now_ms)
    settings = attached.settings
    view = attached.view
    current = view.current_snapshot()
    if current is None:
        return AttachedRetention(dry_run, 0, 0)
    # a replaced cursor stays while younger than cursor_retain_ms, measured from the run that replaced it
    chain = list(view.snapshots())
    replaced_at: dict[int, int] = {}
    for older, newer in itertools.pairwise(chain):
        clock = (newer.summary.additional_properties if newer.summary else {}).get(NOW_MS)
        replaced_at[older.snapshot_id] = int(clock) if clock else now
    expire = [s.snapshot_id for s in chain if s.snapshot_id != current.snapshot_id
              and replaced_at.get(s.snapshot_id, now) + settings.cursor_retain_ms <= now]
    kept = [s.snapshot_id for s in chain if s.snapshot_id not in expire]
    kept_runs = _runs(view, kept)
    expired_runs = _runs(view, expire) - kept_runs
    data_dir = f"{view.metadata.location.rstrip('/')}/data"
    stale: list[str] = []
    for stored in list_files(config, data_dir, view.io):
        run = run_of(stored.location)
        if run is None or run in kept_runs:
            continue
        failed_run_is_old = int(run.split("-")[1]) + settings.orphan_min_age_ms <= now
        if run in expired_runs or failed_run_is_old:
            stale.append(stored.location)
    if not dry_run:
        if expire:
            with translate_storage_errors(f"expiring snapshots of {attached.name}"):
                view.maintenance.expire_snapshots().by_ids(expire).commit()
        delete_files(config, stale, view.io)
    return AttachedRetention(dry_run, len(expire), len(stale))


@dataclass(frozen=True)
class AttachedAssessment:
    """The cleaner's view of an attached log: due iff the source has rows past the horizons or a tombstone's
    delete horizon passed; the dirty ratio counts rows (new source rows over those plus the view's rows)."""

    due: bool
    due_reason: str
    dirty_ratio: float
    dirty_bytes: int


def assess_attached(lake: Lake, name: str, now_ms: int) -> AttachedAssessment:
    status = attached_status(require_attached(lake.catalog, name), now_ms)
    pending = sum(status.dirty_records.values())
    kept = int((status.cursor or {}).get("stats", {}).get("records_kept", 0))
    return AttachedAssessment(status.due, status.due_reason, pending / (pending + kept) if pending else 0.0, pending)


def retain_attached(lake: Lake, name: str, now_ms: int) -> AttachedRetention:
    return attached_retention(require_attached(lake.catalog, name), lake.config, now_ms=now_ms)


def _runs(view: Table, snapshot_ids: list[int]) -> set[str]:
    """The run directories (``run-<clock>-<id>``) the data and delete files of these snapshots are in."""
    paths = {f.file_path for snapshot_id in snapshot_ids for task in view.scan(snapshot_id=snapshot_id).plan_files()
             for f in (task.file, *task.delete_files)}
    return {run for run in map(run_of, paths) if run is not None}


def _keys(values: Mapping[int, int]) -> dict[str, int]:
    return {str(p): v for p, v in sorted(values.items())}
