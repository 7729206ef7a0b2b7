"""``topic describe``: a topic's schema, settings, sizes, offsets and erasure bound, as a typed result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compactor.iceberg.catalog import load_table_if_exists
from compactor.results import JsonResult
from compactor.topics.settings import TopicSettings
from compactor.topics.state import offsets_to_dict
from compactor.topics.topic import Topic


@dataclass(frozen=True)
class ErasureBound(JsonResult):
    """docs/guarantees.md#retention, "Erasure bound": how long a superseded or deleted value can survive."""

    retention_ms: int
    snapshot_expiry_ms: int
    cursor_retain_ms: int
    max_compaction_lag_ms: int
    raw_snapshot_window_ms: int
    bound_ms: int | None
    text: str


@dataclass
class PartitionSize(JsonResult):
    """Data files, records and bytes of one partition's raw log."""

    files: int = 0
    records: int = 0
    bytes: int = 0


@dataclass(frozen=True)
class TopicDescription(JsonResult):
    """Everything ``compactor topic describe --json`` prints."""

    topic: str
    table: str
    location: str
    partitions: int
    schema: str
    settings: dict[str, str]
    next_offsets: dict[str, int]
    log_start_offsets: dict[str, int]
    records: int
    bytes: int
    files: int
    by_partition: dict[str, PartitionSize]
    current_snapshot_id: int | None
    snapshots: int
    compaction_cursor: dict[str, Any] | None
    erasure_bound: ErasureBound
    # The compacted view's table, for other engines (docs/other-engines.md): its identifier
    # and its current metadata.json, or None before the first compaction (and once the view is dropped).
    compacted_table: str | None = None
    compacted_metadata_location: str | None = None
    # The raw log table's current metadata.json (its identifier is ``table``), for the raw tail past the horizons.
    metadata_location: str | None = None
    # A mirrored topic's Kafka source (its offsets are the source's, with gaps), or None for a produced topic.
    mirror_of: str | None = None


def erasure_bound(settings: TopicSettings) -> ErasureBound:
    """The erasure bound of a topic with ``settings`` (``bound_ms`` is None when retention is unlimited)."""
    parts = {"retention_ms": settings.retention_ms, "snapshot_expiry_ms": settings.expire_max_snapshot_age_ms,
             "cursor_retain_ms": settings.cursor_retain_ms, "max_compaction_lag_ms": settings.max_compaction_lag_ms,
             "raw_snapshot_window_ms": settings.raw_snapshot_window_ms}
    if settings.retention_ms < 0:
        return ErasureBound(**parts, bound_ms=None,
                            text="unbounded: retention.ms is -1, so the raw log keeps every value")
    # expiry spares a raw snapshot for the reader lease and for the raw snapshot window, whichever is longer
    total = (settings.retention_ms + settings.expire_max_snapshot_age_ms
             + max(settings.cursor_retain_ms, settings.raw_snapshot_window_ms))
    return ErasureBound(**parts, bound_ms=total, text=(
        f"a superseded or deleted value is physically gone at most {total} ms after the compaction horizon "
        "passes it (retention.ms + history.expire.max-snapshot-age-ms + the longer of compaction.cursor.retain-ms "
        "and raw.snapshot.window.ms), "
        "plus the time until a run passes it (due within max.compaction.lag.ms when the cleaner runs)"))


def compacted_metadata_location(topic: Topic) -> str | None:
    """The current metadata file of ``topic``'s compacted table, or None when it has none."""
    table = load_table_if_exists(topic.catalog, topic.name.compacted_identifier)
    return str(table.metadata_location) if table is not None else None


def describe_topic(topic: Topic) -> TopicDescription:
    """Schema, settings, sizes, offsets and erasure bound of ``topic`` as loaded."""
    settings = topic.settings
    offsets = topic.offsets()
    files = topic.raw_files()
    per_partition = {str(p): PartitionSize() for p in range(offsets.partitions)}
    for f in files:
        entry = per_partition[str(f.partition)]
        entry.files += 1
        entry.records += f.record_count
        entry.bytes += f.size_bytes
    snapshot = topic.snapshot
    compacted_location = compacted_metadata_location(topic)
    return TopicDescription(
        topic=str(topic.name),
        table=topic.name.identifier,
        location=topic.table.metadata.location,
        partitions=offsets.partitions,
        schema=str(topic.table.schema()),
        settings=settings.as_kafka_dict(),
        next_offsets=offsets_to_dict(offsets.next_offsets),
        log_start_offsets=offsets_to_dict(offsets.log_start_offsets),
        records=sum(e.records for e in per_partition.values()),
        bytes=sum(e.bytes for e in per_partition.values()),
        files=len(files),
        by_partition=per_partition,
        current_snapshot_id=snapshot.snapshot_id if snapshot else None,
        snapshots=len(topic.table.metadata.snapshots),
        compaction_cursor=topic.cursor_mirror(),
        erasure_bound=erasure_bound(settings),
        compacted_table=topic.name.compacted_identifier if compacted_location else None,
        compacted_metadata_location=compacted_location,
        metadata_location=str(topic.table.metadata_location),
        mirror_of=mirror.source if (mirror := topic.mirror) is not None else None,
    )
