"""A guard against a source that is not append-only by offset: rows appended since the cursor at offsets the
view already compacted (below every horizon of the partitions their file holds). Such rows would never reach the
view (runs read only at or above the horizons), so a run refuses to go on and says so.

It reads only metadata: the data files that ``append`` snapshots added after the cursor's source snapshot (when
that snapshot is still an ancestor of the pinned one; after the owner expired it, the guard cannot look, and the
run goes on), with their offset and partition column statistics. Rewrites (``replace``), copy-on-write deletes
(``overwrite``, ``delete``) are the owner's maintenance and are not checked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.types import NestedField

from compactor.attach.mapping import AttachError
from compactor.attach.mapping import Mapping as ColumnMapping


def check_appends_above(source: Table, mapping: ColumnMapping, chain: Sequence[Snapshot],
                        horizons: Mapping[int, int]) -> None:
    """Raise ``AttachError`` if an append of ``chain`` (the source's snapshots since the cursor's: ``ancestry``)
    added rows below the horizons."""
    if not horizons:
        return
    schema = source.schema()
    offset_field = schema.find_field(mapping.offset)
    partition_field = schema.find_field(mapping.partition)
    for snapshot in chain:
        snapshot_id = snapshot.snapshot_id
        if snapshot.summary is None or snapshot.summary.operation.value != "append":
            continue
        for manifest in snapshot.manifests(source.io):
            if manifest.added_snapshot_id != snapshot_id:
                continue
            for entry in manifest.fetch_manifest_entry(source.io, discard_deleted=True):
                if entry.status != ManifestEntryStatus.ADDED:
                    continue
                data = entry.data_file
                lowest = int_bound(data.lower_bounds, offset_field)
                p_lo = int_bound(data.lower_bounds, partition_field)
                p_hi = int_bound(data.upper_bounds, partition_field)
                if lowest is None or p_lo is None or p_hi is None:
                    continue
                floors = [horizons.get(p, 0) for p in range(p_lo, p_hi + 1)]
                if floors and lowest < min(floors):
                    raise AttachError(
                        f"the source {mapping.source} appended rows at offset {lowest} of partition(s) {p_lo}..{p_hi} "
                        f"(snapshot {snapshot_id}, file {data.file_path}), below the horizon(s) the view already "
                        "compacted: it is not an append-only log by offset; nothing was written. Detach and attach "
                        "it again to compact it afresh")


def int_bound(bounds: Mapping[int, bytes] | None, field: NestedField) -> int | None:
    """A file's integer bound of ``field`` (an int or long column), or ``None`` without statistics."""
    if not bounds or field.field_id not in bounds:
        return None
    return int(from_bytes(field.field_type, bounds[field.field_id]))  # type: ignore[arg-type]


def ancestry(source: Table, pinned: int, since: int) -> list[Snapshot] | None:
    """The snapshots after ``since`` up to ``pinned``, oldest first; ``None`` if ``since`` is not an ancestor
    (expired, or the history was rewritten). One pass over the metadata's snapshots, not a search per parent."""
    by_id = {snapshot.snapshot_id: snapshot for snapshot in source.metadata.snapshots}
    chain: list[Snapshot] = []
    current = by_id.get(pinned)
    while current is not None:
        if current.snapshot_id == since:
            return list(reversed(chain))
        chain.append(current)
        current = by_id.get(current.parent_snapshot_id) if current.parent_snapshot_id is not None else None
    return None
