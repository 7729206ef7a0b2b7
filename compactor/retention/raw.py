"""Raw-log retention: remove a prefix of whole data files per partition and advance the log start offset.

docs/guarantees.md#retention. Raw data files of a partition hold contiguous, disjoint offset ranges, so removing whole
files from the front keeps every partition a gap-free ``[LSO_p, N_p)``. Per partition, in offset order:

* by time: a file goes while every record in it has ``timestamp < now - retention.ms`` (its upper timestamp
  bound says so), so no record newer than the limit is ever removed; a file with one young record stops the
  prefix (file-granular removal may stop earlier than record-granular removal would);
* by size (``retention.bytes``): the oldest files go while the partition's size left after the removal is
  still ``>= retention.bytes`` (Kafka's rule);
* the prefix is the longer of the two, then capped: under ``compact`` nothing at or above the horizon of any
  retained cursor goes (no cursor yet: nothing goes, as nothing is compacted).

The removal and the new ``LSO_p`` (plus the logical bytes below it, for the cleaner's dirty figures) are one
Iceberg commit conditioned on the branch head, so a racing producer retries on top of it and a racing
retention fails cleanly. Data files are not deleted here: snapshot expiry deletes them once no retained
snapshot (a pinned reader's lease) needs them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from compactor import properties as props
from compactor.compaction.horizons import RawSnapshotView, range_bytes
from compactor.compaction.triggers import start_bytes
from compactor.topics.settings import TopicSettings
from compactor.topics.state import encode_offsets
from compactor.topics.topic import RawFile


@dataclass
class PartitionPlan:
    """What retention removes from one partition."""

    partition: int
    log_start: int
    new_log_start: int
    files: list[RawFile] = field(default_factory=list)
    reason: str = ""

    @property
    def records(self) -> int:
        return sum(f.record_count for f in self.files)

    @property
    def size_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)


def retention_caps(compacts: bool, retained_horizons: Sequence[Sequence[int]],
                   log_starts: Sequence[int]) -> list[int | None]:
    """Per partition, the offset raw retention must stay below (``None``: no cap).

    Without ``compact`` nothing caps it. Under ``compact`` it is the lowest horizon among the retained cursors
    (a cursor written before a mirrored topic grew has horizon 0 in the partitions added since: nothing goes
    there while it is retained; one written for more partitions than the topic has does not apply); with no
    such cursor nothing is compacted yet, so the cap is the log start and nothing goes.
    """
    if not compacts:
        return [None] * len(log_starts)
    count = len(log_starts)
    applicable = [(*h, *[0] * (count - len(h))) for h in retained_horizons if len(h) <= count]
    return [min((h[p] for h in applicable), default=start) for p, start in enumerate(log_starts)]


def plan_partition(partition: int, files: Sequence[RawFile], log_start: int, next_offset: int,
                   settings: TopicSettings, now_ms: int, cap: int | None) -> PartitionPlan:
    """The prefix of ``files`` (one partition, offset order) that retention removes, and the new LSO."""
    ordered = sorted(files, key=lambda f: f.first_offset)
    by_time = 0
    if settings.retention_ms >= 0:
        limit_us = (now_ms - settings.retention_ms) * 1000
        while by_time < len(ordered):
            newest = ordered[by_time].max_timestamp_us
            if newest is None or newest >= limit_us:
                break
            by_time += 1
    by_size = 0
    if settings.retention_bytes >= 0:
        remaining = sum(f.size_bytes for f in ordered)
        while by_size < len(ordered) and remaining - ordered[by_size].size_bytes >= settings.retention_bytes:
            remaining -= ordered[by_size].size_bytes
            by_size += 1
    count = max(by_time, by_size)
    reason = "retention.ms" if by_time >= by_size else "retention.bytes"
    if cap is not None:
        while count and ordered[count - 1].last_offset >= cap:
            count -= 1
            reason = "capped at the horizon of a retained cursor"
    removed = ordered[:count]
    new_start = ordered[count].first_offset if count < len(ordered) else next_offset
    new_start = max(new_start, log_start)  # LSO never decreases
    return PartitionPlan(partition, log_start, new_start if removed else log_start, removed, reason if removed else "")


def new_properties(raw: RawSnapshotView, plans: Sequence[PartitionPlan], properties: dict[str, str] | object,
                   log_starts: Sequence[int]) -> dict[str, str]:
    """``LSO`` and the cumulative logical bytes below it after ``plans`` (bytes of removed files are read)."""
    starts = list(log_starts)
    below = start_bytes(properties, len(starts))
    for plan in plans:
        if plan.files:
            below[plan.partition] += range_bytes(raw, plan.partition, plan.log_start, plan.new_log_start)
            starts[plan.partition] = plan.new_log_start
    return {props.LOG_START_OFFSETS_PROPERTY: encode_offsets(starts),
            props.LOG_START_BYTES_PROPERTY: json.dumps(below, separators=(",", ":"))}
