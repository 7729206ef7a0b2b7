"""``compactor status``: where a topic's compaction stands and whether it is due, from metadata only.

Kafka's cleaner rules (docs/guarantees.md#retention, "When compaction is due", ``compaction.triggers.assess``): dirty
bytes are the
logical bytes of the cleanable raw offsets ``[H_p(C), H'_p)``, clean bytes the compacted view's; a topic is
due iff dirty > 0 and the dirty ratio exceeds ``min.cleanable.dirty.ratio`` or its oldest cleanable record is
older than ``max.compaction.lag.ms``. Everything comes from Iceberg metadata (table properties, cursor
summaries, file statistics), reading at most the narrow columns of files that straddle a boundary. No JVM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from compactor.clock import resolve_now_ms
from compactor.compaction.horizons import RawSnapshotView
from compactor.compaction.triggers import Assessment, PartitionDirt, assess
from compactor.cursor import Cursor, load_compacted, retained_cursors
from compactor.groups import GroupStore
from compactor.metrics import compaction_metrics
from compactor.results import JsonResult
from compactor.topics.mirrored import MirrorState
from compactor.topics.naming import TopicName
from compactor.topics.state import offsets_to_dict

if TYPE_CHECKING:
    from compactor.lake import Lake


def assess_topic(lake: Lake, name: str | TopicName, now_ms: int | None = None) -> tuple[Assessment, Cursor | None,
                                                                                     list[Cursor]]:
    """Kafka's trigger rules for one topic at ``now_ms``, with its current and retained cursors."""
    topic = lake.topic(name)
    now = resolve_now_ms(now_ms)
    settings = topic.settings
    state = load_compacted(lake.catalog, topic.name)  # cursor first, then the raw snapshot (as readers do)
    topic.refresh()
    offsets = topic.offsets()
    snapshot = topic.snapshot
    raw = RawSnapshotView(topic.table, snapshot.snapshot_id if snapshot else None)
    cursor = state.cursor if state is not None and settings.compacts else None
    if cursor is not None and cursor.partitions > offsets.partitions:
        cursor = None
    elif cursor is not None:
        cursor = cursor.widened(offsets.partitions)  # a mirrored topic may have grown since its last run
    retained = retained_cursors(state, now, settings.cursor_retain_ms) if state is not None and state.cursor else []
    return assess(raw, offsets, topic.properties, settings, cursor, now), cursor, retained


@dataclass
class StatusMetrics(JsonResult):
    """The figures of the last compaction run, as the metric lines carry them."""

    last_compaction: dict[str, Any]
    last_run_time_ms: int | None
    dirty_ratio: float


@dataclass
class TopicStatus(JsonResult):
    """Everything ``compactor status --json`` prints (the docs/reference.md fields, then detail)."""

    topic: str
    now_ms: int
    policy: str
    next_offsets: dict[str, int]
    log_start_offsets: dict[str, int]
    horizons: dict[str, int]
    next_horizons: dict[str, int]
    cursor: dict[str, Any] | None  # the ``compact`` fields of the current cursor (``Cursor.as_json``)
    retained_cursors: list[int]
    clean_bytes: int
    dirty_bytes: int
    dirty_ratio: float
    cleanable_records: int
    oldest_dirty_timestamp_ms: int | None
    oldest_dirty_age_ms: int | None
    max_compaction_delay_ms: int  # Kafka's: how far past max.compaction.lag.ms the oldest dirty record is
    compaction_lag_ms: int | None
    due: bool
    due_reason: str
    per_partition: list[PartitionDirt]
    settings: dict[str, str]
    metrics: StatusMetrics
    groups: list[dict[str, Any]]  # consumer groups with positions here: {"group", "total_lag", "committed"}
    mirror: dict[str, Any] | None = None  # a mirrored topic's source: ``mirror_status``


def mirror_status(state: MirrorState | None, next_offsets: tuple[int, ...]) -> dict[str, Any] | None:
    """What ``status`` shows of a mirrored topic's Kafka source, per partition, as the mirror recorded it with its
    last commit (at ``observed_ms``; status never contacts Kafka): the source's log end, the lag to it (in
    offsets, as Kafka counts lag) and the offsets the mirror skipped. A source end below the position is a
    source created again that has not reached it yet (the mirror waits there)."""
    if state is None:
        return None
    state = state.widened(len(next_offsets))
    lags = [max(state.source_log_end[p] - n, 0) for p, n in enumerate(next_offsets)]
    return {"source": state.source, "topic_id": state.topic_id, "observed_ms": state.observed_ms,
            "source_log_end_offsets": {str(p): state.source_log_end[p] for p in range(len(next_offsets))},
            "source_lag": {str(p): lag for p, lag in enumerate(lags)},
            "skipped_offsets": {str(p): state.skipped[p] for p in range(len(next_offsets))},
            "total_source_lag": sum(lags), "total_skipped": sum(state.skipped[:len(next_offsets)])}


def topic_status(lake: Lake, name: str | TopicName, now_ms: int | None = None) -> TopicStatus:
    """Where ``name``'s compaction stands at ``now_ms``, from metadata only."""
    now = resolve_now_ms(now_ms)
    assessment, cursor, retained = assess_topic(lake, name, now)
    topic = lake.topic(name)
    settings = topic.settings
    offsets = topic.offsets()
    oldest = assessment.min_cleanable_timestamp_ms
    return TopicStatus(
        topic=str(topic.name),
        now_ms=now,
        policy=settings.policy_text,
        next_offsets=offsets_to_dict(offsets.next_offsets),
        log_start_offsets=offsets_to_dict(offsets.log_start_offsets),
        horizons=offsets_to_dict(assessment.horizons),
        next_horizons=offsets_to_dict(assessment.next_horizons),
        cursor=cursor.as_json() if cursor is not None else None,
        retained_cursors=[c.snapshot_id for c in retained],
        clean_bytes=assessment.clean_bytes,
        dirty_bytes=assessment.dirty_bytes,
        dirty_ratio=assessment.dirty_ratio,
        cleanable_records=assessment.cleanable_records,
        oldest_dirty_timestamp_ms=oldest,
        oldest_dirty_age_ms=now - oldest if oldest is not None else None,
        max_compaction_delay_ms=max(0, now - oldest - settings.max_compaction_lag_ms) if oldest is not None else 0,
        compaction_lag_ms=now - cursor.now_ms if cursor is not None else None,
        due=assessment.due,
        due_reason=assessment.due_reason,
        per_partition=assessment.per_partition,
        settings=settings.as_kafka_dict(),
        metrics=StatusMetrics(last_compaction=compaction_metrics(cursor.stats.as_json() if cursor is not None else {}),
                              last_run_time_ms=cursor.now_ms if cursor is not None else None,
                              dirty_ratio=assessment.dirty_ratio),
        groups=group_lags(lake, str(topic.name), offsets.next_offsets),
        mirror=mirror_status(topic.mirror, offsets.next_offsets),
    )


def group_lags(lake: Lake, topic: str, next_offsets: tuple[int, ...]) -> list[dict[str, Any]]:
    """The consumer groups with committed positions on ``topic``, each with its total lag in offsets (records, on
    a topic without gaps)."""
    out: list[dict[str, Any]] = []
    store = GroupStore.if_any(lake)
    if store is None:
        return out
    for group, committed in sorted(store.groups_on_topic(topic).items()):
        lag = sum(max(0, next_offsets[p] - o) for p, o in committed.items() if p < len(next_offsets))
        out.append({"group": group, "total_lag": lag, "committed": {str(p): o for p, o in sorted(committed.items())}})
    return out


def render_text(status: TopicStatus) -> str:
    """A few human lines for ``compactor status`` without ``--json``."""
    cursor = status.cursor
    lines = [
        f"topic {status.topic}  policy {status.policy}",
        f"  offsets   next {status.next_offsets}  log start {status.log_start_offsets}",
        f"  cursor    {cursor['compacted_snapshot_id'] if cursor else 'none (never compacted)'}"
        f"  horizons {status.horizons}  retained {status.retained_cursors}",
        f"  dirty     {status.dirty_bytes} bytes of {status.cleanable_records} records; clean "
        f"{status.clean_bytes} bytes; ratio {status.dirty_ratio:.4f}",
        f"  due       {'yes' if status.due else 'no'}: {status.due_reason}",
    ]
    if status.mirror is not None:
        mirror = status.mirror
        lines.append(f"  mirror    of Kafka topic {mirror['source']}: source log end {mirror['source_log_end_offsets']}"
                     f"  lag {mirror['source_lag']}  skipped {mirror['skipped_offsets']}")
    if status.oldest_dirty_age_ms is not None:
        lines.append(f"  oldest dirty record is {status.oldest_dirty_age_ms} ms old; max compaction delay "
                     f"{status.max_compaction_delay_ms} ms")
    return "\n".join(lines)
