"""Where a batch starts, and whether it is a replay: the first step of every produce (docs/guarantees.md#the-raw-log).

A produce reads the topic once, here (``start``): its settings, ``N_p`` and the batch-id record of that one
metadata version. A batch whose id the record holds within ``producer.id.expiration.ms`` is a **replay**: it
writes and appends nothing, and its records get the offsets the original batch gave them, provided it places as
many records in each partition (checked when its result is made: ``producing.produced``; otherwise
``BatchIdConflictError``). A batch id also fixes where keyless records start (``round_robin_start``), so a
re-sent batch places them exactly as the original did.

The id is looked up once per produce, here, against the version the batch is planned on. The commit looks it up
again only when it commits against a newer version than that (``producing.commit``: after a lost race, or
after re-reading a topic that staging left stale), since another sender of the same id may have committed in
between; a commit against the planned version is conditional on it, so it cannot pass such a commit by. Both
look-ups are the batch-id record's (``batch_ids.committed_batch``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pyiceberg.table import Table

from compactor.errors import InputError, InvalidRecordError
from compactor.producing.batch_ids import BatchEntry, committed_batch
from compactor.topics.partitioner import murmur2
from compactor.topics.settings import TopicSettings
from compactor.topics.topic import Topic

MAX_BATCH_ID_LENGTH = 256


def check_batch_id(batch_id: str | None) -> None:
    if batch_id is not None and not (isinstance(batch_id, str) and 0 < len(batch_id) <= MAX_BATCH_ID_LENGTH):
        raise InvalidRecordError(f"a batch id must be a string of 1 to {MAX_BATCH_ID_LENGTH} characters")


def round_robin_start(batch_id: str | None, next_offsets: Sequence[int], partitions: int) -> int:
    """Where keyless records start: from the batch id when there is one (so a re-sent batch places its keyless
    records exactly as the original did), else from the total log end (spreading successive batches)."""
    if batch_id is not None:
        return (murmur2(batch_id.encode("utf-8")) & 0x7FFFFFFF) % partitions
    return int(sum(next_offsets)) % partitions


@dataclass(frozen=True)
class BatchStart:
    """What one produce plans on: one metadata version of the topic, and the replayed entry if any."""

    table: Table
    settings: TopicSettings
    base: np.ndarray  # ``N_p`` per partition
    replaying: BatchEntry | None
    rr_start: int
    gaps: bool = False  # a mirrored topic: carried offsets may have gaps (and every batch must carry them)

    @property
    def partitions(self) -> int:
        return len(self.base)


def start(topic: Topic, batch_id: str | None, now_ms: int, *, fresh_id: bool = False,
          carries_offsets: bool = False) -> BatchStart:
    """Read the topic once and decide where the batch starts (see the module docstring). ``fresh_id``: the id
    was generated for this batch, so it cannot have committed before. A mirrored topic takes only batches that
    carry their offsets (``carries_offsets``)."""
    check_batch_id(batch_id)
    settings = topic.settings
    table = topic.table
    state = topic.offsets()
    if state.gapped and not carries_offsets:
        raise refused_without_offsets(topic)
    replaying = None
    if batch_id is not None and not fresh_id:
        replaying = committed_batch(table, batch_id, now_ms, settings.producer_id_expiration_ms)
    rr_start = replaying.rr_start if replaying else round_robin_start(batch_id, state.next_offsets, state.partitions)
    return BatchStart(table, settings, np.asarray(state.next_offsets, np.int64), replaying, rr_start, state.gapped)


def refused_without_offsets(topic: Topic) -> InputError:
    mirror = topic.mirror
    source = f" of Kafka topic '{mirror.source}'" if mirror is not None else ""
    return InputError(f"{topic.name} is a mirror{source}: its offsets are its source's, so it takes only batches "
                      "that carry their offsets (produce --keep-offsets, keep_offsets=True). Nothing was written")


__all__ = ["MAX_BATCH_ID_LENGTH", "BatchStart", "check_batch_id", "refused_without_offsets", "round_robin_start",
           "start"]
