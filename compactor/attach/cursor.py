"""The cursor of an attached log: the summary of its view's current snapshot (docs/guarantees.md#attached-logs).

A run publishes the view's rows and these properties in one commit on the view table, on condition that the
view's ``main`` is still the snapshot the run started from; so the cursor is always the view's current snapshot.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from compactor.errors import CursorCorruptError, CursorExpiredError

HORIZONS = "compactor.attached.horizons"
SOURCE_SNAPSHOT = "compactor.attached.source-snapshot-id"
NOW_MS = "compactor.attached.now-ms"
STATS = "compactor.attached.stats"
MIN_DELETE_HORIZON = "compactor.attached.min-delete-horizon-ms"


@dataclass(frozen=True)
class UnknownPartitions:
    """The partitions without a horizon, as the predicates both engines prune data files by (a partition
    column's bounds and null counts): below ``lowest`` or above ``highest`` of the known ones, one of the
    ``gaps`` between them, or null. A ``NOT IN`` of the known partitions would match every file whose bounds
    span them, i.e. every file of a source that mixes partitions in its files."""

    lowest: int
    highest: int
    gaps: tuple[int, ...]

    @classmethod
    def of(cls, horizons: Mapping[int, int]) -> UnknownPartitions:
        """The split for non-empty ``horizons``."""
        known = sorted(int(p) for p in horizons)
        return cls(known[0], known[-1], tuple(sorted(set(range(known[0], known[-1] + 1)) - set(known))))


@dataclass(frozen=True)
class AttachedCursor:
    """Horizons per source partition, the source snapshot the run read, its clock and statistics."""

    snapshot_id: int
    horizons: dict[int, int]
    source_snapshot_id: int | None
    now_ms: int
    min_delete_horizon_ms: int | None
    stats: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, str]:
        out = {HORIZONS: json.dumps({str(p): h for p, h in sorted(self.horizons.items())}),
               SOURCE_SNAPSHOT: str(self.source_snapshot_id), NOW_MS: str(self.now_ms),
               STATS: json.dumps(self.stats, sort_keys=True)}
        if self.min_delete_horizon_ms is not None:
            out[MIN_DELETE_HORIZON] = str(self.min_delete_horizon_ms)
        return out

    def as_json(self) -> dict[str, Any]:
        return {"compacted_snapshot_id": self.snapshot_id, "raw_snapshot_id": self.source_snapshot_id,
                "horizons": {str(p): h for p, h in sorted(self.horizons.items())}, "run_time_ms": self.now_ms,
                "strategy": "offset", "stats": self.stats}


def current_cursor(view: Table) -> AttachedCursor | None:
    """The cursor of ``view`` (``None`` before the first run); ``CursorCorruptError`` if its summary is unreadable."""
    snapshot = view.current_snapshot()
    return cursor_at(view, snapshot) if snapshot is not None else None


def cursor_at(view: Table, snapshot: Snapshot) -> AttachedCursor:
    """The cursor a snapshot of ``view`` published; ``CursorCorruptError`` if its summary is not a cursor's."""
    props: Mapping[str, str] = snapshot.summary.additional_properties if snapshot.summary else {}
    if HORIZONS not in props:
        raise CursorCorruptError(f"the view {'.'.join(view.name())} has a snapshot ({snapshot.snapshot_id}) that no "
                                 "compaction run published: the product's table was written by something else")
    try:
        source = props.get(SOURCE_SNAPSHOT)
        return AttachedCursor(snapshot.snapshot_id, {int(p): int(h) for p, h in json.loads(props[HORIZONS]).items()},
                              int(source) if source and source != "None" else None, int(props[NOW_MS]),
                              int(props[MIN_DELETE_HORIZON]) if MIN_DELETE_HORIZON in props else None,
                              json.loads(props.get(STATS, "{}")))
    except (ValueError, KeyError, AttributeError) as exc:
        raise CursorCorruptError(f"the cursor of {'.'.join(view.name())} is unreadable: {exc}") from None


def retained_cursor(view: Table, snapshot_id: int, now_ms: int, retain_ms: int) -> AttachedCursor:
    """The cursor ``snapshot_id`` of ``view`` if it is retained: the current one, or one replaced (by the run of a
    later cursor) less than ``retain_ms`` before ``now_ms`` whose snapshot is still in the view's metadata;
    ``CursorExpiredError`` otherwise."""
    runs: dict[tuple[str, str, str], Snapshot] = {}  # a run's commit may add several snapshots: its last is the cursor
    for snapshot in view.snapshots():
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        if HORIZONS in props:
            key = (props[HORIZONS], props.get(NOW_MS, ""), props.get(SOURCE_SNAPSHOT, ""))
            runs.pop(key, None)
            runs[key] = snapshot
    cursors = [cursor_at(view, s) for s in runs.values()]
    current = view.current_snapshot()
    retained = {c.snapshot_id: c for c in cursors if current is not None and c.snapshot_id == current.snapshot_id}
    for older, newer in itertools.pairwise(cursors):
        if newer.now_ms + retain_ms > now_ms:
            retained.setdefault(older.snapshot_id, older)
    if snapshot_id not in retained:
        kept = sorted(retained) or "none"
        raise CursorExpiredError(f"cursor {snapshot_id} is not retained (retained cursors: {kept}); cursors stay"
                                 " readable for compaction.cursor.retain-ms after they are replaced")
    return retained[snapshot_id]
