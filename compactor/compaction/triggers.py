"""When is a topic due for compaction (Kafka's cleaner rules, docs/guarantees.md#retention, "When compaction is due").

Cleanable records are raw offsets ``[H_p(C), H'_p)`` where ``H'_p`` is the horizon a run at ``now`` would
compute. ``dirty`` is their logical bytes (key + value + headers), ``clean`` the compacted view's. A topic is
due iff ``dirty > 0`` and (``dirty / (clean + dirty) > min.cleanable.dirty.ratio`` or the smallest timestamp
among cleanable records ``< now - max.compaction.lag.ms``).

All figures come from metadata: ``N_p`` and cumulative logical bytes from the raw table's properties, the
horizons, the bytes at the horizon and the clean bytes from the cursor. Only with ``min.compaction.lag.ms > 0``
are the files of the lag window read (narrow columns), to place ``H'_p`` on the exact record.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from compactor import properties as props
from compactor.compaction.horizons import (
    RawSnapshotView,
    bytes_at,
    compute_horizons,
    min_timestamp_ms,
    range_records,
)
from compactor.cursor import Cursor
from compactor.errors import TopicCorruptError
from compactor.results import JsonResult
from compactor.topics.settings import TopicSettings
from compactor.topics.state import PartitionOffsets


@dataclass(frozen=True)
class PartitionDirt(JsonResult):
    """One partition's cleanable range ``[horizon, next_horizon)``, its dirty bytes and oldest record."""

    partition: int
    horizon: int
    next_horizon: int
    dirty_bytes: int
    min_cleanable_timestamp_ms: int | None


@dataclass(frozen=True)
class Assessment(JsonResult):
    """How dirty a topic is at ``now`` and whether it is due."""

    now_ms: int
    horizons: list[int]
    next_horizons: list[int]
    cleanable_records: int
    dirty_bytes: int
    clean_bytes: int
    dirty_ratio: float
    min_cleanable_timestamp_ms: int | None
    due: bool
    due_reason: str
    per_partition: list[PartitionDirt] = field(default_factory=list)


def start_bytes(properties: dict[str, str] | Any, partitions: int) -> list[int]:
    """Cumulative logical bytes at each partition's log start (recorded by retention; 0 before any)."""
    text = properties.get(props.LOG_START_BYTES_PROPERTY)
    if not text:
        return [0] * partitions
    try:
        values = json.loads(text)
    except json.JSONDecodeError:
        raise TopicCorruptError(f"{props.LOG_START_BYTES_PROPERTY} is not valid JSON: {text[:80]!r}") from None
    return [int(v) for v in values] if isinstance(values, list) and len(values) == partitions else [0] * partitions


def assess(raw: RawSnapshotView, offsets: PartitionOffsets, properties: Any, settings: TopicSettings,
           cursor: Cursor | None, now_ms: int) -> Assessment:
    """Apply Kafka's trigger rules to one pinned raw snapshot and the current cursor."""
    partitions = offsets.partitions
    cumulative = list(offsets.logical_bytes) or [0] * partitions
    if cursor is not None and cursor.partitions == partitions:
        previous = [max(h, s) for h, s in zip(cursor.horizons, offsets.log_start_offsets, strict=True)]
        stored = list(cursor.bytes_at_horizon)
        base_bytes = stored if len(stored) == partitions else None
        clean = cursor.view.clean_bytes
    else:
        previous = list(offsets.log_start_offsets)
        base_bytes = start_bytes(properties, partitions)
        clean = 0
    horizons = compute_horizons(raw, previous, offsets.next_offsets, now_ms, settings.min_compaction_lag_ms)
    dirty_total = 0
    cleanable = 0
    oldest: int | None = None
    rows: list[PartitionDirt] = []
    for p in range(partitions):
        start, end, nxt = previous[p], horizons[p], offsets.next_offsets[p]
        if base_bytes is not None and (cursor is None or start == cursor.horizons[p]):
            at_start = int(base_bytes[p])
        else:
            at_start = bytes_at(raw, p, start, nxt, cumulative[p])
        dirty = bytes_at(raw, p, end, nxt, cumulative[p]) - at_start if end > start else 0
        first_ts = min_timestamp_ms(raw, p, start, end) if end > start else None
        dirty_total += max(dirty, 0)
        if end > start:
            cleanable += range_records(raw, p, start, end) if offsets.gapped else end - start
        if first_ts is not None:
            oldest = first_ts if oldest is None else min(oldest, first_ts)
        rows.append(PartitionDirt(p, start, end, max(dirty, 0), first_ts))
    ratio = dirty_total / (clean + dirty_total) if dirty_total > 0 else 0.0
    due, reason = decide(settings, dirty_total, ratio, oldest, now_ms)
    return Assessment(now_ms, previous, horizons, cleanable, dirty_total, clean, ratio, oldest, due, reason, rows)


def decide(settings: TopicSettings, dirty: int, ratio: float, oldest: int | None, now_ms: int) -> tuple[bool, str]:
    """Kafka's due rule on the figures: dirty > 0 and (ratio above the minimum, or the oldest cleanable record
    past ``max.compaction.lag.ms``); with the reason, for people."""
    if not settings.compacts:
        return False, f"cleanup.policy={settings.policy_text} does not compact"
    if dirty <= 0:
        return False, "nothing cleanable (dirty bytes = 0)"
    if ratio > settings.min_cleanable_dirty_ratio:
        return True, f"dirty ratio {ratio:.4f} > min.cleanable.dirty.ratio {settings.min_cleanable_dirty_ratio}"
    deadline = now_ms - settings.max_compaction_lag_ms
    if oldest is not None and oldest < deadline:
        return True, (f"oldest cleanable record ({oldest}) is older than max.compaction.lag.ms "
                      f"({settings.max_compaction_lag_ms})")
    return False, (f"dirty ratio {ratio:.4f} <= min.cleanable.dirty.ratio {settings.min_cleanable_dirty_ratio} "
                   "and no cleanable record is past max.compaction.lag.ms")
