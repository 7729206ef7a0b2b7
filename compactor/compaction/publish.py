"""Publishing a run: ONE catalog commit on the compacted table (SEMANTICS section 3).

The commit adds the cursor snapshot (the staging branch's content, plus the run's position deletes through one
delete manifest, with the cursor's summary), moves ``main`` to it on condition that ``main`` is still the
pinned cursor ``C`` (Iceberg's assert-ref-snapshot-id), tags ``C`` as ``cursor-<C>`` so the replaced cursor
stays protected from expiry while retained, and drops the staging branch. If ``main`` moved, the run has lost
(``CursorMovedError``); if only other refs changed, the commit is rebuilt on the refreshed table and retried.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Sequence

from pyiceberg.catalog import Catalog
from pyiceberg.table.refs import SnapshotRefType

from compactor import properties as props
from compactor.compaction.deletes import DeleteFileInfo, delete_manifest, summary_counts
from compactor.compaction.staging import require_cursor
from compactor.cursor import MAIN, TAG_PREFIX, Cursor, cursor_properties
from compactor.errors import CommitConflictError
from compactor.iceberg.catalog import translate_storage_errors
from compactor.iceberg.commits import RefMove, commit
from compactor.iceberg.snapshots import build_snapshot
from compactor.progress import Progress
from compactor.topics.naming import TopicName
from compactor.topics.topic import Topic

log = logging.getLogger(__name__)
PUBLISH_ATTEMPTS = 5


def publish_cursor(catalog: Catalog, name: TopicName, stage: str, previous: int | None, cursor: Cursor,
                   delete_files: Sequence[DeleteFileInfo], progress: Progress) -> int:
    """Commit ``cursor`` (built on the staging branch ``stage``) if ``main`` is still ``previous``; returns the
    new cursor's snapshot id."""
    started = time.monotonic()
    for _ in range(PUBLISH_ATTEMPTS):
        with translate_storage_errors(f"publishing the cursor of {name}"):
            table = catalog.load_table(name.compacted_identifier)
        require_cursor(table, previous, str(name), "; nothing was published")
        head = table.metadata.snapshot_by_name(stage)
        if head is None:
            raise CommitConflictError(f"the staging branch {stage} of this run disappeared")
        timed = dataclasses.replace(cursor.stats, durations_ms={
            **cursor.stats.durations_ms, "commit_ms": int((time.monotonic() - started) * 1000)})
        summary = cursor_properties(dataclasses.replace(cursor, stats=timed))
        manifests = (lambda sid, t=table: [delete_manifest(t, sid, list(delete_files))]) if delete_files else None
        snapshot = build_snapshot(table, head, summary, manifests, summary_counts(list(delete_files)))
        moves = [RefMove(MAIN, None)]
        if previous is not None:
            moves.append(RefMove(f"{TAG_PREFIX}{previous}", previous, SnapshotRefType.TAG))
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
