"""Committing one staged batch: the conditional append, re-planning on a lost race, idempotence by batch id.

A batch is staged first (its data files written with offsets ``N_p + rank``; see ``producing.files`` and
``producing.dataframe``). Then, per attempt:

1. the table's ``N_p``, log bytes and batch-id record are read from one metadata version;
2. if the batch carries an id that the record (or, for older topics, a retained snapshot) says committed
   within ``producer.id.expiration.ms``, the staged files are discarded and the original placement returned;
3. a mirror batch must start exactly at each ``N_p``; any other batch has its files rebased to ``N_p``;
4. one commit adds the snapshot, moves ``main`` **only if ``main`` is still the snapshot step 1 read**, sets the
   new ``N_p``, log bytes and batch-id record, and drops the snapshot entries outside the raw snapshot window
   (``topics.window``).

A lost race (``main`` moved) discards this attempt's metadata files and goes back to step 1, up to
``max_attempts``, then fails with "append conflict" having written nothing. A commit whose outcome cannot be
learned raises ``OutcomeUnknownError`` (exit 75), saying to re-send with the same batch id. Once the commit
has landed nothing discards the batch's files, whatever fails afterwards; an interrupt (Ctrl-C) leaves the
files to orphan cleanup, since it may have come while the catalog committed them.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    AssertTableUUID,
    RemoveSnapshotsUpdate,
    SetPropertiesUpdate,
    SetSnapshotRefUpdate,
    TableUpdate,
)

from compactor import failpoints
from compactor import properties as props
from compactor.errors import AppendConflictError, CommitConflictError, InvalidRecordError, OutcomeUnknownError
from compactor.iceberg.catalog import first_line
from compactor.iceberg.commits import send
from compactor.iceberg.storage import delete_uncommitted
from compactor.producing.batch_ids import BatchEntry, BatchIdRecord
from compactor.producing.plan import mirror_error
from compactor.producing.snapshots import build_append
from compactor.topics.partitioner import murmur2
from compactor.topics.settings import TopicSettings
from compactor.topics.state import encode_offsets, read_offsets
from compactor.topics.topic import Topic
from compactor.topics.window import SnapshotWindow

MAX_BATCH_ID_LENGTH = 256
DEFAULT_ATTEMPTS = 60
log = logging.getLogger(__name__)


class Staged(Protocol):
    """A batch whose data files are (or can be) written for any base offsets."""

    counts: np.ndarray
    sizes: np.ndarray
    rr_start: int

    def files_for(self, table: Table, base: np.ndarray) -> list[DataFile]:
        """The batch's data files with offsets starting at ``base[p]`` (rewritten if staged for another base)."""

    def staged_base(self) -> np.ndarray:
        """The base offsets the files are currently written for."""

    def discard(self) -> None:
        """Delete every file staged for this batch."""


@dataclass(frozen=True)
class Committed:
    """Where a batch landed: per-partition base offsets and counts, the snapshot, and how it went."""

    base: np.ndarray
    counts: np.ndarray
    rr_start: int
    snapshot_id: int | None
    duplicate: bool
    attempts: int
    batch_id: str | None


def check_batch_id(batch_id: str | None) -> None:
    if batch_id is not None and not (isinstance(batch_id, str) and 0 < len(batch_id) <= MAX_BATCH_ID_LENGTH):
        raise InvalidRecordError(f"a batch id must be a string of 1 to {MAX_BATCH_ID_LENGTH} characters")


def round_robin_start(batch_id: str | None, next_offsets: Sequence[int], partitions: int) -> int:
    """Where keyless records start: from the batch id when there is one (so a re-sent batch places its keyless
    records exactly as the original did), else from the total log end (spreading successive batches)."""
    if batch_id is not None:
        return (murmur2(batch_id.encode("utf-8")) & 0x7FFFFFFF) % partitions
    return int(sum(next_offsets)) % partitions


def committed_entry(table: Table, record: BatchIdRecord, batch_id: str, now_ms: int,
                    window_ms: int) -> BatchEntry | None:
    """The committed batch with this id within the window, from the record or (older topics) a snapshot.

    Older topics' appends carried their batch plan in the snapshot summary (``compactor.batch``), every one of
    them; appends since carry none. The snapshots are in commit order, so the search stops at the first append
    without a plan: it costs O(1) on a topic that never had the older format, not O(snapshots in the window).
    """
    entry = record.find(table, batch_id, now_ms, window_ms)
    if entry is not None:
        return entry
    for snapshot in table.metadata.snapshots:
        summary = snapshot.summary.additional_properties if snapshot.summary is not None else {}
        if (props.SUMMARY_BATCH not in summary and props.SUMMARY_NOW in summary
                and snapshot.summary is not None and snapshot.summary.operation == Operation.APPEND):
            break  # an append of the current format: every later snapshot is one too
        if summary.get(props.SUMMARY_BATCH_ID) != batch_id or props.SUMMARY_BATCH not in summary:
            continue
        try:
            info = json.loads(summary[props.SUMMARY_BATCH])
            clock = int(summary.get(props.SUMMARY_NOW, snapshot.timestamp_ms))
            candidate = BatchEntry.of(batch_id, clock, snapshot.snapshot_id, int(info["rr"]), info["base"],
                                      info["counts"])
        except (KeyError, TypeError, ValueError):
            continue
        if now_ms - candidate.now_ms < window_ms and (entry is None or candidate.now_ms > entry.now_ms):
            entry = candidate
    return entry


def commit_batch(topic: Topic, staged: Staged, *, now_ms: int, batch_id: str | None, settings: TopicSettings,
                 mirror: bool = False, fresh_id: bool = False, operation: str = "produce",
                 max_attempts: int = DEFAULT_ATTEMPTS, stale_after_s: float = 1.0,
                 staged_at: float | None = None) -> Committed:
    """Commit ``staged`` as one atomic batch (see the module docstring).

    ``fresh_id``: the id was generated for this batch, so it cannot have committed before the first attempt.
    The topic is re-read before the first attempt if staging took longer than ``stale_after_s``.
    """
    started = staged_at if staged_at is not None else time.monotonic()
    landed: tuple[Committed, Table | None] | None = None
    try:
        for attempt in range(1, max_attempts + 1):
            if attempt > 1 or time.monotonic() - started > stale_after_s:
                topic.refresh()
            landed = _attempt(topic, staged, attempt, now_ms=now_ms, batch_id=batch_id, settings=settings,
                              mirror=mirror, check_id=batch_id is not None and (attempt > 1 or not fresh_id),
                              operation=operation)
            if landed is not None:
                break
            _backoff(attempt)
    except OutcomeUnknownError:
        raise  # the files may be committed: keep them
    except Exception:
        staged.discard()
        raise
    # An interrupt (KeyboardInterrupt, SystemExit) is not caught: it may have come while the catalog committed,
    # so the files stay, and orphan cleanup removes them if the batch did not land.
    if landed is None:
        staged.discard()
        raise AppendConflictError(
            f"append conflict: {max_attempts} attempts to append to {topic.name} lost the race with other "
            "appenders; nothing was written. Retry later, or produce larger, fewer batches."
        )
    outcome, committed = landed
    if not outcome.duplicate:
        _after_commit(topic, committed)
    return outcome


def _after_commit(topic: Topic, committed: Table | None) -> None:
    """The batch is committed: from here on nothing may discard its files. The topic object takes the committed
    metadata; if it has to be re-read and that fails, the next append re-reads it (its commit is conditional)."""
    failpoints.hit("produce-after-commit")
    if committed is not None:
        topic.adopt(committed)
        return
    try:
        topic.refresh()
    except Exception:
        log.debug("could not re-read %s after committing to it", topic.name, exc_info=True)


def _attempt(topic: Topic, staged: Staged, attempt: int, *, now_ms: int, batch_id: str | None,
             settings: TopicSettings, mirror: bool, check_id: bool,
             operation: str) -> tuple[Committed, Table | None] | None:
    """One conditional commit: the outcome and the committed table (None when only learned by re-reading, or
    when the batch id had committed before), or None when another commit won the race."""
    window_ms = settings.producer_id_expiration_ms
    table = topic.table
    properties = table.metadata.properties
    state = read_offsets(properties)
    record = BatchIdRecord.of(properties)
    if check_id and batch_id is not None:
        entry = committed_entry(table, record, batch_id, now_ms, window_ms)
        if entry is not None:
            staged.discard()
            base, counts = entry.arrays(state.partitions)
            return Committed(base, counts, entry.rr_start, entry.snapshot_id, True, attempt, batch_id), None
    base = np.asarray(state.next_offsets, np.int64)
    if mirror:
        touched = np.nonzero(staged.counts)[0]
        moved = touched[base[touched] != staged.staged_base()[touched]]
        if len(moved):
            p = int(moved[0])
            raise mirror_error(p, int(base[p]), int(staged.staged_base()[p]))
    files = staged.files_for(table, base)
    new_next = base + staged.counts
    new_bytes = np.asarray(state.logical_bytes, np.int64) + staged.sizes
    summary = {props.SUMMARY_OPERATION: operation, props.SUMMARY_NOW: str(now_ms),
               props.NEXT_OFFSETS_PROPERTY: encode_offsets(new_next.tolist())}
    if batch_id is not None:
        summary[props.SUMMARY_BATCH_ID] = batch_id
    parent = table.current_snapshot()
    built = build_append(table, parent, files, summary)
    snapshot_id = built.snapshot.snapshot_id
    updates_props = {props.NEXT_OFFSETS_PROPERTY: encode_offsets(new_next.tolist()),
                     props.LOGICAL_BYTES_PROPERTY: encode_offsets(new_bytes.tolist())}
    written = list(built.written)
    if batch_id is not None:
        entry = BatchEntry.of(batch_id, now_ms, snapshot_id, staged.rr_start, base.tolist(), staged.counts.tolist())
        new_record, segment_files = record.with_entry(table, entry, now_ms, window_ms)
        written.extend(segment_files)
        updates_props[props.BATCH_IDS_PROPERTY] = new_record.to_property()
    dropped = SnapshotWindow.of(settings).prunable(table.metadata)
    updates: list[TableUpdate] = [
        AddSnapshotUpdate(snapshot=built.snapshot),
        SetSnapshotRefUpdate(ref_name="main", type=SnapshotRefType.BRANCH, snapshot_id=snapshot_id,
                             max_ref_age_ms=None, max_snapshot_age_ms=None, min_snapshots_to_keep=None),
        SetPropertiesUpdate(updates=updates_props),
    ]
    if dropped:
        updates.append(RemoveSnapshotsUpdate(snapshot_ids=dropped))
    requirements = (AssertTableUUID(uuid=table.metadata.table_uuid),
                    AssertRefSnapshotId(ref="main", snapshot_id=parent.snapshot_id if parent else None))
    failpoints.hit("produce-before-commit")
    try:
        committed = send(topic.catalog, table, requirements, tuple(updates),
                         lambda metadata: metadata.snapshot_by_id(snapshot_id) is not None,
                         f"appending to {topic.name}")
    except CommitConflictError:
        delete_uncommitted(table.io, written)  # definitely not committed: the next attempt plans again
        return None
    except OutcomeUnknownError as exc:
        raise OutcomeUnknownError(
            f"the append to {topic.name} failed and the table could not be re-read ({first_line(exc)}); "
            "re-send with the same batch id (--batch-id) to make the retry safe") from exc
    except Exception:
        delete_uncommitted(table.io, written)  # ``send`` resolved any ambiguity: this commit did not land
        raise
    return Committed(base, staged.counts.copy(), staged.rr_start, snapshot_id, False, attempt, batch_id), committed


def _backoff(attempt: int) -> None:
    delay = min(0.5, 0.005 * (2 ** min(attempt, 10)))
    time.sleep(delay * (0.5 + random.random()))


__all__ = ["DEFAULT_ATTEMPTS", "Committed", "Staged", "check_batch_id", "commit_batch", "committed_entry",
           "round_robin_start"]
