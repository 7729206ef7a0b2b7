"""Snapshot expiry, stale refs and physical file deletion for one Iceberg table (raw or compacted).

Clocks: every snapshot the product commits records the run's clock (``compactor.now-ms``); a snapshot
without one (a Spark write on a staging branch) takes the clock of the next snapshot that has one, since it
was written just before it. So a controlled ``--now-ms`` drives expiry exactly as it drives compaction, and
wall-clock commit times never matter.

A snapshot is expired iff it is not protected and both hold:

* it is older than ``history.expire.max-snapshot-age-ms`` and not among the newest
  ``history.expire.min-snapshots-to-keep`` of ``main``'s history (Iceberg's rules);
* the snapshot that replaced it is older than ``compaction.cursor.retain-ms`` (the reader lease: a reader
  that pinned it while it was current may still be reading).

Protected: the head of every ref (``main``, retained cursor tags, live staging branches, the base branch),
every retained cursor's snapshot, and on a topic's raw table its raw snapshot window (``topics.window``: the
snapshots Iceberg's own incremental readers may still name). (Appends drop the metadata entries of older raw
*append* snapshots outside that window themselves, keeping the parent of every retention delete, so the files
a delete removed stay referenced, and are deleted here, only once that parent is expired by the rules above;
see ``topics.window``.)
Then every file that only expired snapshots referenced (data files, delete files, manifests, manifest lists)
is deleted, and orphans (files under the table's location that no
snapshot references, such as the output of a crashed run) once they are older than
``compaction.orphan-min-age-ms`` by the storage's own clock (file modification time: real time, since a
writer that is still running must not lose its files). The segment files of a topic's batch-id record are
never orphans while the table's properties list them.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from compactor import properties as props
from compactor.config import LakeConfig
from compactor.errors import CommitConflictError
from compactor.iceberg.catalog import translate_storage_errors
from compactor.iceberg.commits import branch_history, commit
from compactor.iceberg.storage import delete_files, list_files
from compactor.producing.batch_ids import record_files
from compactor.results import JsonResult


@dataclass
class ExpiryResult(JsonResult):
    """What expiry removed from one table."""

    expired_snapshots: list[int] = field(default_factory=list)
    removed_refs: list[str] = field(default_factory=list)
    deleted_files: int = 0
    deleted_bytes: int = 0
    orphan_files: int = 0
    orphan_bytes: int = 0


def snapshot_clocks(table: Table) -> dict[int, int]:
    """The recorded clock of every snapshot (see the module docstring)."""
    ordered = sorted(table.metadata.snapshots, key=lambda s: (s.sequence_number or 0, s.timestamp_ms))
    clocks: dict[int, int] = {}
    pending: list[Snapshot] = []
    for snapshot in ordered:
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        text = summary.get(props.SUMMARY_NOW)
        if text is None or not text.lstrip("-").isdigit():
            pending.append(snapshot)
            continue
        for earlier in pending:
            clocks[earlier.snapshot_id] = int(text)
        pending.clear()
        clocks[snapshot.snapshot_id] = int(text)
    for snapshot in pending:
        clocks[snapshot.snapshot_id] = snapshot.timestamp_ms
    return clocks


def replaced_at(table: Table, clocks: Mapping[int, int]) -> dict[int, int]:
    """When each snapshot stopped being the newest: the clock of the next snapshot committed after it."""
    ordered = sorted(table.metadata.snapshots, key=lambda s: (s.sequence_number or 0, s.timestamp_ms))
    out: dict[int, int] = {}
    for current, following in itertools.pairwise(ordered):
        out[current.snapshot_id] = clocks[following.snapshot_id]
    return out


def choose_expired(table: Table, *, refs: Mapping[str, Any], now_ms: int, max_age_ms: int, min_keep: int,
                   lease_ms: int, protected: Iterable[int]) -> list[int]:
    """The snapshots of ``table`` that expiry removes at ``now_ms`` once only ``refs`` remain (module docstring)."""
    clocks = snapshot_clocks(table)
    replaced = replaced_at(table, clocks)
    keep = set(protected) | {ref.snapshot_id for ref in refs.values()}
    keep |= {s.snapshot_id for s in branch_history(table.metadata)[:max(min_keep, 1)]}
    out = []
    for snapshot in table.metadata.snapshots:
        sid = snapshot.snapshot_id
        if sid in keep or sid not in replaced:
            continue
        if clocks[sid] < now_ms - max_age_ms and replaced[sid] + lease_ms <= now_ms:
            out.append(sid)
    return out


def reachable_files(table: Table, snapshot_ids: Iterable[int]) -> dict[str, int]:
    """Every file (manifest lists, manifests, data and delete files) the given snapshots reference, with sizes."""
    files: dict[str, int] = {}
    seen_manifests: set[str] = set()
    for sid in snapshot_ids:
        snapshot = table.metadata.snapshot_by_id(sid)
        if snapshot is None:
            continue
        files.setdefault(snapshot.manifest_list, 0)
        for manifest in snapshot.manifests(table.io):
            files[manifest.manifest_path] = manifest.manifest_length
            if manifest.manifest_path in seen_manifests:
                continue
            seen_manifests.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):  # live entries only
                files[entry.data_file.file_path] = entry.data_file.file_size_in_bytes
    return files


def _normalise(location: str) -> str:
    """One spelling per file: ``file:/a``, ``file:///a`` and ``/a`` are the same local file."""
    if location.startswith("file:"):
        location = location[5:]
        while location.startswith("//"):
            location = location[1:]
    if location.startswith("s3a://"):
        location = "s3://" + location[6:]
    return location


def _unreferenced(table: Table, expired: Iterable[int]) -> dict[str, int]:
    """Files that only the ``expired`` snapshots reference (what deleting them frees)."""
    gone = set(expired)
    candidates = reachable_files(table, gone)
    live = {_normalise(k) for k in reachable_files(table, [s.snapshot_id for s in table.metadata.snapshots
                                                           if s.snapshot_id not in gone])}
    return {k: v for k, v in candidates.items() if _normalise(k) not in live}


def _landed(expired: list[int], dropped: list[str]) -> Callable[[TableMetadata], bool]:
    def check(metadata: TableMetadata) -> bool:
        return (not any(metadata.snapshot_by_id(s) for s in expired)
                and not any(name in metadata.refs for name in dropped))
    return check


def expire_table(catalog: Catalog, config: LakeConfig, table: Table, *, now_ms: int, max_age_ms: int, min_keep: int,
                 lease_ms: int, orphan_min_age_ms: int, protected: Iterable[int] = (),
                 spare: Callable[[TableMetadata], Iterable[int]] | None = None,
                 stale_refs: Iterable[str] = (), orphans_before_ms: int | None = None, dry_run: bool = False,
                 attempts: int = 5) -> ExpiryResult:
    """Remove ``stale_refs``, expire snapshots, delete unreferenced files and old orphans (module docstring).

    ``spare`` names more snapshots to protect, chosen on the metadata of each attempt (a topic's raw snapshot
    window, ``topics.window``, which moves with every append).

    The ref removals and snapshot removals are one commit, conditioned on ``main`` not having moved; on a
    conflict the choice is made again on the new metadata. Files are deleted only after that commit, and
    only those that no remaining snapshot references.
    """
    result = ExpiryResult()
    protected = set(protected)
    stale = list(stale_refs)
    for attempt in range(attempts):
        if attempt:
            time.sleep(0.05 * attempt)
            with translate_storage_errors(f"reloading {table.name()}"):
                table = catalog.load_table(table.name())
        drop = [r for r in stale if r in table.metadata.refs]
        remaining = {name: ref for name, ref in table.metadata.refs.items() if name not in drop}
        spared = protected | set(spare(table.metadata) if spare is not None else ())
        expired = choose_expired(table, refs=remaining, now_ms=now_ms, max_age_ms=max_age_ms, min_keep=min_keep,
                                 lease_ms=lease_ms, protected=spared)
        freed = _unreferenced(table, expired)
        result.expired_snapshots, result.removed_refs = expired, drop
        result.deleted_files, result.deleted_bytes = len(freed), sum(freed.values())
        if dry_run or (not drop and not expired):
            break
        main = table.metadata.refs.get("main")
        try:
            commit(catalog, table, removals=drop, remove_snapshots=expired,
                   expect={"main": main.snapshot_id if main else None}, landed=_landed(expired, drop),
                   what=f"expiring snapshots of {table.name()}")
        except CommitConflictError:
            continue
        with translate_storage_errors(f"deleting expired files of {table.name()}"):
            table = catalog.load_table(table.name())
            live = {_normalise(k) for k in reachable_files(table, [s.snapshot_id for s in table.metadata.snapshots])}
            doomed = {k: v for k, v in freed.items() if _normalise(k) not in live}
            delete_files(config, doomed, table.io)
        result.deleted_files, result.deleted_bytes = len(doomed), sum(doomed.values())
        break
    else:
        raise CommitConflictError(f"could not expire snapshots of {table.name()}: other writers kept committing")
    if not dry_run:
        result.orphan_files, result.orphan_bytes = remove_orphans(config, table, orphan_min_age_ms,
                                                                  before_ms=orphans_before_ms)
    return result


def remove_orphans(config: LakeConfig, table: Table, min_age_ms: int, *,
                   before_ms: int | None = None) -> tuple[int, int]:
    """Delete files under the table's location that no snapshot or metadata version references, once they
    are older than ``min_age_ms`` by their modification time, and modified before ``before_ms`` if given (the
    start of the earliest run at work: what it wrote is not an orphan yet)."""
    live = {_normalise(k) for k in reachable_files(table, [s.snapshot_id for s in table.metadata.snapshots])}
    metadata = table.metadata
    live |= {_normalise(entry.metadata_file) for entry in metadata.metadata_log}
    live.add(_normalise(table.metadata_location))
    live |= {_normalise(path) for path in record_files(metadata.properties)}  # the batch-id record's segments
    cutoff = time.time() * 1000 - min_age_ms
    if before_ms is not None:
        cutoff = min(cutoff, before_ms - 1000)  # file times have a second's resolution on some stores
    orphans: dict[str, int] = {}
    with translate_storage_errors(f"listing the files of {table.name()}"):
        for stored in list_files(config, metadata.location.rstrip("/") + "/", table.io):
            name = _normalise(stored.location)
            if name in live or name.endswith(".json"):  # metadata versions are Iceberg's to remove
                continue
            if stored.mtime_ms is None or stored.mtime_ms > cutoff:
                continue
            orphans[stored.location] = stored.size
    if orphans:
        with translate_storage_errors(f"deleting orphan files of {table.name()}"):
            delete_files(config, orphans, table.io)
    return len(orphans), sum(orphans.values())
