"""A batch's commit, built here and only here: the conditional append, re-planned on a lost race.

A batch is staged first (its data files written with offsets ``N_p + rank``: ``producing.files``, or
``producing.spark_files`` for a DataFrame), planned on one metadata version of the topic
(``producing.replay.start``). Then, per attempt, against one metadata version ``V`` (the planned one first):

1. if ``V`` is newer than the planned version and the batch carries an id, the id is looked up again in
   ``V``'s batch-id record (``batch_ids.committed_batch``: another sender of the id may have committed in
   between, see ``producing.replay``); found within ``producer.id.expiration.ms``, the staged files are
   discarded and the original batch's entry returned, as a replay;
2. a batch that carries its offsets must start exactly at each ``N_p`` (at or above it on a mirrored topic,
   whose offsets may have gaps), and its files are never rewritten; any other batch whose files were written
   for other ``N_p`` has them rewritten (``Staged.files_for``: the one time the commit goes back to the files),
   and a mirrored topic refuses it;
3. one commit (``iceberg.commits.commit``) adds the append snapshot (``iceberg.snapshots.build_append``),
   moves ``main`` **only if ``main`` is still ``V``'s**, sets the new ``N_p`` (for a carried batch: one past its
   last offset, or the source position a mirror records, whichever is higher), log bytes, batch-id record
   and any properties the batch brings (a mirror's record of its source), and drops the snapshot entries
   outside the raw snapshot window (``topics.window``).

A lost race (``main`` moved) discards this attempt's metadata files, re-reads the topic and goes back to step
1, up to ``max_attempts``, then fails with "append conflict" having written nothing. A commit whose outcome
cannot be learned raises ``OutcomeUnknownError`` (exit 75), saying to re-send with the same batch id. Once the
commit has landed nothing discards the batch's files, whatever fails afterwards; an interrupt (Ctrl-C) leaves
the files to orphan cleanup, since it may have come while the catalog committed them.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from compactor import failpoints
from compactor import properties as props
from compactor.errors import CommitConflictError, OutcomeUnknownError
from compactor.iceberg.catalog import first_line
from compactor.iceberg.commits import RefMove, commit
from compactor.iceberg.snapshots import build_append
from compactor.iceberg.storage import delete_uncommitted
from compactor.producing.batch_ids import BatchEntry, BatchIdRecord, committed_batch
from compactor.producing.partitioning import mirror_error
from compactor.producing.replay import BatchStart, refused_without_offsets
from compactor.topics.state import encode_offsets, read_offsets
from compactor.topics.topic import Topic
from compactor.topics.window import SnapshotWindow

DEFAULT_ATTEMPTS = 60


class Staged(Protocol):
    """A batch's data files, written for the ``N_p`` it was planned on, that the commit can have rewritten."""

    def files_for(self, table: Table, base: np.ndarray) -> list[DataFile]:
        """The batch's data files rewritten with offsets starting at ``base[p]`` (another append moved ``N_p``)."""

    def discard(self) -> None:
        """Delete every file staged for this batch."""


@dataclass(frozen=True)
class BatchCommit:
    """What to commit: the staged files (``files``, written for the base offsets ``base``), the batch's
    per-partition counts and bytes, and how to commit it. A batch that carries its offsets (``mirror``) says where
    each partition's rows start (``first``, -1 where it has none) and the ``N_p`` it leaves (``ends``);
    ``properties`` gives further properties to set, from the table's current ones."""

    staged: Staged
    files: tuple[DataFile, ...]
    base: np.ndarray
    counts: np.ndarray
    sizes: np.ndarray
    batch_id: str | None
    now_ms: int
    operation: str = "produce"
    mirror: bool = False
    fresh_id: bool = False
    first: np.ndarray | None = None
    ends: np.ndarray | None = None
    properties: Callable[[Mapping[str, str]], Mapping[str, str]] | None = None


@dataclass(frozen=True)
class _Files:
    """The batch's data files as they stand, and the base offsets they are written for."""

    base: np.ndarray
    files: tuple[DataFile, ...]


def commit_batch(topic: Topic, batch: BatchCommit, planned: BatchStart, *, max_attempts: int = DEFAULT_ATTEMPTS,
                 refresh_first: bool = False) -> tuple[BatchEntry, bool, int]:
    """Commit ``batch``, planned on ``planned``, as one atomic batch (see the module docstring): the entry it
    committed as (or the original's, for a replay), whether it was a replay, and the attempts it took.
    ``refresh_first``: staging took long enough that the planned version is likely stale."""
    table: Table | None = None
    landed: tuple[BatchEntry, Table | None] | None = None
    files = _Files(batch.base, batch.files)
    attempts = 0
    try:
        for attempts in range(1, max_attempts + 1):
            table = topic.refresh().table if attempts > 1 or refresh_first else planned.table
            landed, files = _attempt(topic, table, batch, planned, files)
            if landed is not None:
                break
            _backoff(attempts)
    except OutcomeUnknownError:
        raise  # the files may be committed: keep them
    except Exception:
        batch.staged.discard()
        raise
    # An interrupt (KeyboardInterrupt, SystemExit) is not caught: it may have come while the catalog committed,
    # so the files stay, and orphan cleanup removes them if the batch did not land.
    if landed is None:
        batch.staged.discard()
        raise CommitConflictError(
            f"append conflict: {max_attempts} attempts to append to {topic.name} lost the race with other "
            "appenders; nothing was written. Retry later, or produce larger, fewer batches."
        )
    entry, committed = landed
    if committed is None:
        return entry, True, attempts
    failpoints.hit("produce-after-commit")  # committed: from here on nothing may discard the batch's files
    topic.adopt(committed)
    return entry, False, attempts


def _attempt(topic: Topic, table: Table, batch: BatchCommit, planned: BatchStart,
             staged: _Files) -> tuple[tuple[BatchEntry, Table | None] | None, _Files]:
    """One conditional commit against ``table``: the entry and the committed table (``None`` for a replay), or
    ``None`` when another commit won the race; with the batch's files as they now stand."""
    window_ms = planned.settings.producer_id_expiration_ms
    properties = table.metadata.properties
    state = read_offsets(properties)
    if (batch.batch_id is not None and not batch.fresh_id
            and table.metadata_location != planned.table.metadata_location):  # see step 1 of the module docstring
        found = committed_batch(table, batch.batch_id, batch.now_ms, window_ms)
        if found is not None:
            batch.staged.discard()
            return (found, None), staged
    base = np.asarray(state.next_offsets, np.int64)
    if batch.mirror:  # carried offsets never move: the files stay as written (step 2)
        _check_carried(batch, staged.base, base, gaps=state.gapped)
        ends = np.maximum(base, batch.ends if batch.ends is not None else base + batch.counts)
    else:
        if state.gapped:
            raise refused_without_offsets(topic)
        touched = np.nonzero(batch.counts)[0]
        if (base[touched] != staged.base[touched]).any():  # another append moved N_p: rewrite the files (step 2)
            staged = _Files(base, tuple(batch.staged.files_for(table, base)))
        ends = base + batch.counts
    new_next = encode_offsets(ends.tolist())
    summary = {props.SUMMARY_OPERATION: batch.operation, props.SUMMARY_NOW: str(batch.now_ms),
               props.NEXT_OFFSETS_PROPERTY: new_next}
    if batch.batch_id is not None:
        summary[props.SUMMARY_BATCH_ID] = batch.batch_id
    parent = table.current_snapshot()
    built = build_append(table, parent, staged.files, summary)
    first = base if batch.first is None else np.where(batch.first >= 0, batch.first, base)
    entry = BatchEntry.of(batch.batch_id, batch.now_ms, built.snapshot.snapshot_id, planned.rr_start,
                          first.tolist(), batch.counts.tolist())
    updated = {props.NEXT_OFFSETS_PROPERTY: new_next, props.LOGICAL_BYTES_PROPERTY: encode_offsets(
        (np.asarray(state.logical_bytes, np.int64) + batch.sizes).tolist())}
    if batch.properties is not None:
        updated.update(batch.properties(properties))
    written = list(built.written)
    if batch.batch_id is not None:
        record, segment_files = BatchIdRecord.of(properties).with_entry(table, entry, batch.now_ms, window_ms)
        written.extend(segment_files)
        updated[props.BATCH_IDS_PROPERTY] = record.to_property()
    failpoints.hit("produce-before-commit")
    try:
        committed = commit(topic.catalog, table, snapshot=built.snapshot, moves=[RefMove("main", None)],
                           properties=updated, remove_snapshots=SnapshotWindow.of(planned.settings).prunable(
                               table.metadata),
                           expect={"main": parent.snapshot_id if parent else None}, what=f"appending to {topic.name}")
    except CommitConflictError:
        delete_uncommitted(table.io, written)  # definitely not committed: the next attempt plans again
        return None, staged
    except OutcomeUnknownError as exc:
        raise OutcomeUnknownError(
            f"whether the append to {topic.name} landed cannot be known ({first_line(exc)}); "
            "re-send with the same batch id (--batch-id) to make the retry safe") from exc
    except Exception:
        delete_uncommitted(table.io, written)  # ``commit`` resolved any ambiguity: this commit did not land
        raise
    return (entry, committed), staged


def _check_carried(batch: BatchCommit, staged_base: np.ndarray, base: np.ndarray, *, gaps: bool) -> None:
    """A carried batch's rows must start at each touched partition's ``N_p`` (at or above it with ``gaps``)."""
    first = batch.first if batch.first is not None else staged_base
    touched = np.nonzero(batch.counts)[0]
    wrong = touched[(first[touched] < base[touched]) if gaps else (first[touched] != base[touched])]
    if len(wrong):
        p = int(wrong[0])
        raise mirror_error(p, int(base[p]), int(first[p]), gaps=gaps)


def _backoff(attempt: int) -> None:
    delay = min(0.5, 0.005 * (2 ** min(attempt, 10)))
    time.sleep(delay * (0.5 + random.random()))


__all__ = ["DEFAULT_ATTEMPTS", "BatchCommit", "Staged", "commit_batch"]
