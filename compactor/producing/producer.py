"""Producing: append one atomic batch of records to a topic, with per-partition offsets
(docs/guarantees.md#the-raw-log): assigned densely from ``N_p``, or carried by the batch (``keep_offsets``: a
mirror's, with gaps on a mirrored topic).

Three ways in, one path:

* ``produce_arrow(topic, data)``: an Arrow table, record batches (or a reader / iterator of them) or a pandas
  DataFrame with columns ``key``, ``value`` and optionally ``partition``, ``timestamp_ms``, ``headers``
  (``offset`` too for a mirror batch), vectorised end to end;
* ``produce(topic, records)``: ``ProducerRecord`` objects (the record-at-a-time API), on top of the same path;
* ``produce_stream``: chunks of a large input (the command line), with memory bounded by one chunk.

``produce_stream`` is the path, one stage after the other, each entered once: the topic is read once and the
batch's start decided (``producing.replay``: ``N_p``, round-robin start, a replayed batch id); each chunk, already
normalised by its input format (``producing.arrow_input``, ``producing.jsonl``), is validated
(``producing.validation``), placed (``producing.partitioning``: murmur2 or round-robin partitions, ranks within
partitions) and written into the batch's data files (``producing.files``); then one conditional commit
(``producing.commit``) makes the files visible with the new ``N_p``; the result is resolved from the
placements (``producing.produced``; a replay's too). A bad row rejects the whole batch, naming its row (or line),
and leaves the topic unchanged; empty input commits nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from compactor import failpoints
from compactor.clock import resolve_now_ms
from compactor.producing.arrow_input import (
    KEY,
    PARTITION,
    Chunk,
    RowNumbers,
    normalise,
    numbered_chunks,
    records_to_batch,
)
from compactor.producing.commit import DEFAULT_ATTEMPTS, BatchCommit, commit_batch
from compactor.producing.files import StagedFiles
from compactor.producing.partitioning import BatchPlan, CarriedOffsets, Grouping
from compactor.producing.placements import Placements, encode
from compactor.producing.produced import ProduceResult
from compactor.producing.replay import start
from compactor.producing.validation import batch_sizes, validate
from compactor.topics.records import ProducerRecord
from compactor.topics.topic import Topic
from compactor.workers import ahead

# In-memory input is already held by the caller: plan and write it in large chunks (fewer, larger row groups).
IN_MEMORY_CHUNK_ROWS = 1 << 20
# Staging that took longer than this leaves the planned version likely stale: the commit re-reads the topic.
STALE_AFTER_S = 1.0


def produce_stream(topic: Topic, chunks: Iterable[Chunk], *, batch_id: str | None = None, now_ms: int | None = None,
                   keep_offsets: bool = False, placements: Placements | None = None,
                   max_attempts: int = DEFAULT_ATTEMPTS, fresh_id: bool = False, operation: str = "produce",
                   on_chunk: Callable[[int], None] | None = None, positions: Sequence[int] | None = None,
                   properties: Callable[[Mapping[str, str]], Mapping[str, str]] | None = None) -> ProduceResult:
    """Stage every chunk, then commit them as one atomic batch (see the module docstring).

    ``chunks`` are normalised input batches with the row numbers errors should use; ``placements`` keeps each
    row's partition (default: in memory); ``on_chunk`` is called with the rows staged so far (progress). A
    mirror's batch (``keep_offsets``) also records its source positions in the same commit: each ``N_p``
    becomes at least ``positions[p]``, and ``properties`` (given the table's current properties) sets more.
    """
    now = resolve_now_ms(now_ms)
    placements = placements or Placements()
    planned = start(topic, batch_id, now, fresh_id=fresh_id, carries_offsets=keep_offsets)
    partitions, replaying = planned.partitions, planned.replaying
    plan = BatchPlan(partitions, planned.rr_start)
    carried = CarriedOffsets(planned.base, gaps=planned.gaps, check=replaying is None) if keep_offsets else None
    files = StagedFiles(planned.table, planned.base, now)
    started = time.monotonic()

    def planned_chunk(chunk: Chunk) -> tuple[pa.RecordBatch, np.ndarray, np.ndarray, np.ndarray, Grouping]:
        """Validate and plan one chunk (in the read-ahead thread, in input order: ``plan`` counts carry over)."""
        batch, rows = chunk
        sizes = batch_sizes(batch)
        validate(batch, sizes, partitions, planned.settings.max_message_bytes, rows, keep_offsets=keep_offsets)
        assigned = plan.assign(batch)
        ranks, grouping = plan.rank(assigned, sizes)
        placed = ranks
        if carried is not None:  # the files' ranks from N_p, the result's from each partition's first offset
            ranks, placed = carried.ranks(batch, assigned, ranks, rows, grouping)
        keyless = (batch.column(KEY).is_null().to_numpy(zero_copy_only=False)
                   & batch.column(PARTITION).is_null().to_numpy(zero_copy_only=False))
        return batch, encode(assigned, keyless), ranks, placed, grouping

    try:
        # reading, validating and hashing chunk k+1 overlap the writes of chunk k's files
        for batch, codes, ranks, placed, grouping in ahead(chunks, planned_chunk):
            placements.append(codes, placed)
            if replaying is None:
                files.add(batch, ranks, grouping)
            if on_chunk is not None:
                on_chunk(placements.rows)
            failpoints.hit("produce-after-chunk")
        files.finish()
    except BaseException:
        files.discard()
        raise
    if replaying is not None or plan.records == 0:
        files.discard()
        return ProduceResult.landed(replaying, True, 0, placements, partitions, planned.rr_start, now)
    ends = None if carried is None else np.maximum(carried.ends, np.asarray(
        positions if positions is not None else carried.ends, np.int64))
    batch = BatchCommit(files, tuple(files.data_files), files.base.copy(), plan.counts, plan.sizes, batch_id, now,
                        operation, keep_offsets, fresh_id, carried.first if carried is not None else None, ends,
                        properties)
    entry, duplicate, attempts = commit_batch(topic, batch, planned, max_attempts=max_attempts,
                                              refresh_first=time.monotonic() - started > STALE_AFTER_S)
    return ProduceResult.landed(entry, duplicate, attempts, placements, partitions, planned.rr_start, now)


def produce_arrow(topic: Topic, data: Any, *, batch_id: str | None = None, now_ms: int | None = None,
                  keep_offsets: bool = False, max_attempts: int = DEFAULT_ATTEMPTS) -> ProduceResult:
    """Append an Arrow table, record batches or a pandas DataFrame as one atomic batch.

    Columns: ``key``, ``value`` (binary or text), optional ``partition``, ``timestamp_ms`` (integer or timestamp),
    ``headers`` (list of ``{key, value}`` structs or ``[key, value]`` pairs); with ``keep_offsets`` every row
    carries ``partition`` and ``offset``, which strictly increase per partition from its next offset: densely,
    or with gaps on a mirrored topic (a copy of a Kafka topic). Errors name the offending row (1-based).
    """
    return produce_stream(topic, numbered_chunks(data, IN_MEMORY_CHUNK_ROWS), batch_id=batch_id, now_ms=now_ms,
                          keep_offsets=keep_offsets, max_attempts=max_attempts).materialise()


def produce(topic: Topic, records: Sequence[ProducerRecord], *, batch_id: str | None = None,
            now_ms: int | None = None, line_numbers: Sequence[int] | None = None,
            max_attempts: int = DEFAULT_ATTEMPTS) -> ProduceResult:
    """Append ``ProducerRecord`` objects as one atomic batch (errors name ``line_numbers[i]`` when given)."""
    rows = RowNumbers(lines=np.asarray(line_numbers, np.int64), unit="line") if line_numbers is not None \
        else RowNumbers(unit="line")
    # normalised as the one chunk of the stream, like every other input (after the batch's start)
    chunks = ((normalise(records_to_batch(records), rows), rows) for _ in range(1 if records else 0))
    return produce_stream(topic, chunks, batch_id=batch_id, now_ms=now_ms, max_attempts=max_attempts).materialise()


def assign_partitions(records: Sequence[ProducerRecord], partitions: int, rr_start: int) -> list[int]:
    """Explicit partition, else murmur2 of the key, else round-robin from ``rr_start`` (per record)."""
    assigned: list[int] = BatchPlan(partitions, rr_start).assign(normalise(records_to_batch(records))).tolist()
    return assigned


__all__ = ["assign_partitions", "produce", "produce_arrow", "produce_stream"]
