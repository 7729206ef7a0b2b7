"""Producing: append one atomic batch of records to a topic, with dense per-partition offsets (SEMANTICS 1).

Three ways in, one path:

* ``produce_arrow(topic, data)``: an Arrow table, record batches (or a reader / iterator of them) or a pandas
  DataFrame with columns ``key``, ``value`` and optionally ``partition``, ``timestamp_ms``, ``headers``
  (``offset`` too for a mirror batch), vectorised end to end;
* ``produce(topic, records)``: ``ProducerRecord`` objects (the record-at-a-time API), on top of the same path;
* ``produce_stream``: chunks of a large input (the command line), with memory bounded by one chunk.

Each chunk is normalised (``producing.columns``), validated (``producing.validation``), planned (``producing.plan``:
murmur2 or round-robin partitions, ranks within partitions) and written into the batch's data files
(``producing.files``); nothing is visible until ``producing.append`` commits the files with the new ``N_p`` in one
conditional commit. A bad row rejects the whole batch, naming its row (or line), and leaves the topic unchanged;
empty input commits nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from compactor import failpoints
from compactor.clock import resolve_now_ms
from compactor.producing.append import (
    DEFAULT_ATTEMPTS,
    Committed,
    check_batch_id,
    commit_batch,
    committed_entry,
    round_robin_start,
)
from compactor.producing.batch_ids import BatchIdRecord
from compactor.producing.columns import (
    KEY,
    PARTITION,
    Chunk,
    RowNumbers,
    normalise,
    numbered_chunks,
    records_to_batch,
)
from compactor.producing.files import StagedFiles
from compactor.producing.placements import Placements, encode, verify_replay
from compactor.producing.plan import BatchPlan, check_mirror
from compactor.producing.validation import batch_sizes, validate
from compactor.results import JsonResult
from compactor.topics.records import ProducerRecord
from compactor.topics.topic import Topic

# In-memory input is already held by the caller: plan and write it in large chunks (fewer, larger row groups).
IN_MEMORY_CHUNK_ROWS = 1 << 20


@dataclass(frozen=True)
class BatchSummary(JsonResult):
    """One committed (or replayed) batch: what the command line prints for columnar input."""

    batch_id: str | None
    records: int
    duplicate: bool
    snapshot_id: int | None
    attempts: int
    first_offsets: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ProduceResult:
    """Where each input record landed (arrays in input order) and how the commit went."""

    partitions: np.ndarray
    offset_array: np.ndarray
    snapshot_id: int | None
    duplicate: bool
    attempts: int
    now_ms: int
    batch_id: str | None = None

    @property
    def offsets(self) -> list[tuple[int, int]]:
        """``(partition, offset)`` per record, in input order (Python objects: for small batches)."""
        return list(zip(self.partitions.tolist(), self.offset_array.tolist(), strict=True))

    @property
    def records(self) -> int:
        return len(self.partitions)


@dataclass
class BatchOutcome:
    """A committed batch and the placements to turn into per-record offsets (``resolve``)."""

    committed: Committed | None
    placements: Placements
    partitions: int
    rr_shift: int
    now_ms: int

    @property
    def records(self) -> int:
        return self.placements.rows

    def resolve(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        if self.committed is None:
            return iter(())
        return self.placements.resolve(self.committed.base, self.partitions, self.rr_shift)

    def summary(self) -> BatchSummary:
        c = self.committed
        if c is None:
            return BatchSummary(None, 0, False, None, 0)
        return batch_summary(c.batch_id, c.base, c.counts, c.snapshot_id, c.duplicate, c.attempts)


def batch_summary(batch_id: str | None, base: np.ndarray, counts: np.ndarray, snapshot_id: int | None,
                  duplicate: bool, attempts: int) -> BatchSummary:
    """The summary of a batch placed at ``base`` with ``counts`` records per partition."""
    touched = [p for p in range(len(counts)) if counts[p]]
    return BatchSummary(batch_id, int(counts.sum()), duplicate, snapshot_id, attempts,
                        {str(p): int(base[p]) for p in touched}, {str(p): int(counts[p]) for p in touched})


class _FileStage:
    """The ``Staged`` protocol over files written by this process."""

    def __init__(self, files: StagedFiles, plan: BatchPlan) -> None:
        self.files = files
        self.counts = plan.counts
        self.sizes = plan.sizes
        self.rr_start = plan.rr_start

    def files_for(self, table: Table, base: np.ndarray) -> list[DataFile]:
        touched = np.nonzero(self.counts)[0]
        if not np.array_equal(base[touched], self.files.base[touched]):
            self.files.rebase(table, base)
        return self.files.data_files

    def staged_base(self) -> np.ndarray:
        return self.files.base

    def discard(self) -> None:
        self.files.discard()


def produce_stream(topic: Topic, chunks: Iterable[Chunk], *, batch_id: str | None = None, now_ms: int | None = None,
                   keep_offsets: bool = False, placements: Placements | None = None,
                   max_attempts: int = DEFAULT_ATTEMPTS, fresh_id: bool = False, operation: str = "produce",
                   on_chunk: Callable[[int], None] | None = None) -> BatchOutcome:
    """Stage every chunk, then commit them as one atomic batch (see the module docstring).

    ``chunks`` are raw input batches with the row numbers errors should use; ``placements`` keeps each row's
    partition (default: in memory); ``on_chunk`` is called with the rows staged so far (progress).
    """
    now = resolve_now_ms(now_ms)
    check_batch_id(batch_id)
    placements = placements or Placements()
    settings = topic.settings  # read once
    table = topic.table
    state = topic.offsets()
    partitions = state.partitions
    window = settings.producer_id_expiration_ms
    replaying = None
    if batch_id is not None and not fresh_id:
        replaying = committed_entry(table, BatchIdRecord.of(table.metadata.properties), batch_id, now, window)
    rr_start = replaying.rr_start if replaying else round_robin_start(batch_id, state.next_offsets, partitions)
    plan = BatchPlan(partitions, rr_start)
    base = np.asarray(state.next_offsets, np.int64)
    files = StagedFiles(table, base, now)
    started = time.monotonic()
    try:
        for raw, rows in chunks:
            batch = normalise(raw, rows)
            sizes = batch_sizes(batch)
            validate(batch, sizes, partitions, settings.max_message_bytes, rows, keep_offsets=keep_offsets)
            assigned = plan.assign(batch)
            ranks, grouping = plan.rank(assigned, sizes)
            if keep_offsets and replaying is None:
                check_mirror(batch, assigned, ranks, base, rows)
            keyless = (batch.column(KEY).is_null().to_numpy(zero_copy_only=False)
                       & batch.column(PARTITION).is_null().to_numpy(zero_copy_only=False))
            placements.append(encode(assigned, keyless), ranks)
            if replaying is None:
                files.add(batch, ranks, grouping)
            if on_chunk is not None:
                on_chunk(placements.rows)
            failpoints.hit("produce-after-chunk")
        files.finish()
    except BaseException:
        files.discard()
        raise
    if plan.records == 0:
        files.discard()
        return BatchOutcome(None, placements, partitions, 0, now)
    if replaying is not None:
        files.discard()
        entry_base, entry_counts = replaying.arrays(partitions)
        verify_replay(placements, entry_counts, partitions, 0)
        committed = Committed(entry_base, entry_counts, replaying.rr_start, replaying.snapshot_id, True, 0, batch_id)
        return BatchOutcome(committed, placements, partitions, 0, now)
    committed = commit_batch(topic, _FileStage(files, plan), now_ms=now, batch_id=batch_id, settings=settings,
                             mirror=keep_offsets, fresh_id=fresh_id, operation=operation,
                             max_attempts=max_attempts, staged_at=started)
    shift = 0
    if committed.duplicate:
        shift = committed.rr_start - rr_start
        verify_replay(placements, committed.counts, partitions, shift)
    return BatchOutcome(committed, placements, partitions, shift, now)


def _materialise(outcome: BatchOutcome) -> ProduceResult:
    parts: list[np.ndarray] = []
    offsets: list[np.ndarray] = []
    for p, o in outcome.resolve():
        parts.append(p)
        offsets.append(o)
    outcome.placements.close()
    c = outcome.committed
    return ProduceResult(
        np.concatenate(parts) if parts else np.zeros(0, np.int32),
        np.concatenate(offsets) if offsets else np.zeros(0, np.int64),
        c.snapshot_id if c else None, bool(c and c.duplicate), c.attempts if c else 0, outcome.now_ms,
        c.batch_id if c else None)


def produce_arrow(topic: Topic, data: Any, *, batch_id: str | None = None, now_ms: int | None = None,
                  keep_offsets: bool = False, max_attempts: int = DEFAULT_ATTEMPTS) -> ProduceResult:
    """Append an Arrow table, record batches or a pandas DataFrame as one atomic batch.

    Columns: ``key``, ``value`` (binary or text), optional ``partition``, ``timestamp_ms`` (integer or timestamp),
    ``headers`` (list of ``{key, value}`` structs or ``[key, value]`` pairs); with ``keep_offsets`` every row
    carries ``partition`` and ``offset`` and the batch must continue each partition's next offset densely (a
    mirror of a Kafka topic). Errors name the offending row (1-based).
    """
    return _materialise(produce_stream(topic, numbered_chunks(data, IN_MEMORY_CHUNK_ROWS), batch_id=batch_id,
                                       now_ms=now_ms, keep_offsets=keep_offsets, max_attempts=max_attempts))


def produce(topic: Topic, records: Sequence[ProducerRecord], *, batch_id: str | None = None,
            now_ms: int | None = None, line_numbers: Sequence[int] | None = None,
            max_attempts: int = DEFAULT_ATTEMPTS) -> ProduceResult:
    """Append ``ProducerRecord`` objects as one atomic batch (errors name ``line_numbers[i]`` when given)."""
    rows = RowNumbers(lines=np.asarray(line_numbers, np.int64), unit="line") if line_numbers is not None \
        else RowNumbers(unit="line")
    chunk = [(records_to_batch(records), rows)] if records else []
    return _materialise(produce_stream(topic, chunk, batch_id=batch_id, now_ms=now_ms, max_attempts=max_attempts))


def assign_partitions(records: Sequence[ProducerRecord], partitions: int, rr_start: int) -> list[int]:
    """Explicit partition, else murmur2 of the key, else round-robin from ``rr_start`` (per record)."""
    assigned: list[int] = BatchPlan(partitions, rr_start).assign(normalise(records_to_batch(records))).tolist()
    return assigned


__all__ = ["BatchOutcome", "BatchSummary", "ProduceResult", "assign_partitions", "batch_summary", "produce",
           "produce_arrow", "produce_stream"]
