"""``Topic``: one raw log table, its settings and offsets, and its administration (config, describe)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyiceberg.conversions import from_bytes
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.types import LongType, TimestamptzType

from compactor.catalog import translate_storage_errors
from compactor.errors import CommitConflictError, TopicCorruptError
from compactor.topics import schema as ts
from compactor.topics.naming import TopicName
from compactor.topics.settings import TopicSettings, validate_updates
from compactor.topics.state import PartitionOffsets, offsets_to_dict, read_offsets

if TYPE_CHECKING:
    from compactor.lake import Lake

OFFSET_FIELD_ID = 2
TIMESTAMP_FIELD_ID = 3


@dataclass(frozen=True)
class RawFile:
    """One raw data file: its partition, contiguous offset range ``[first, last]`` and timestamp bounds."""

    path: str
    partition: int
    record_count: int
    size_bytes: int
    first_offset: int
    last_offset: int
    min_timestamp_us: int | None
    max_timestamp_us: int | None

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


def file_bound(bounds: Mapping[int, bytes] | None, field_id: int, kind: str) -> int | None:
    if not bounds or field_id not in bounds:
        return None
    value = from_bytes(LongType() if kind == "long" else TimestamptzType(), bounds[field_id])
    return int(value)


class Topic:
    """A topic: the raw log table plus what the product stores about it."""

    def __init__(self, lake: Lake, name: TopicName, table: Table) -> None:
        from compactor.lake import check_is_topic

        check_is_topic(name, table)
        self.lake = lake
        self.name = name
        self.table = table

    # --- state ------------------------------------------------------------------------------------

    def refresh(self) -> Topic:
        with translate_storage_errors(f"loading {self.name}"):
            self.table = self.lake.catalog.load_table(self.name.identifier)
        from compactor.lake import check_is_topic

        check_is_topic(self.name, self.table)
        return self

    @property
    def properties(self) -> Mapping[str, str]:
        return self.table.metadata.properties

    @property
    def settings(self) -> TopicSettings:
        return TopicSettings.from_properties(self.properties)

    @property
    def partitions(self) -> int:
        return self.offsets().partitions

    def offsets(self) -> PartitionOffsets:
        return read_offsets(self.properties)

    @property
    def snapshot(self) -> Snapshot | None:
        return self.table.current_snapshot()

    def raw_files(self, snapshot_id: int | None = None,
                  row_filter: BooleanExpression | None = None) -> list[RawFile]:
        """Data files of a raw snapshot (default: current), ordered by partition then first offset."""
        snap_id = snapshot_id if snapshot_id is not None else (self.snapshot.snapshot_id if self.snapshot else None)
        if snap_id is None:
            return []
        with translate_storage_errors(f"planning {self.name}"):
            tasks = self.table.scan(row_filter=row_filter or AlwaysTrue(), snapshot_id=snap_id).plan_files()
            out = [raw_file_of(task.file) for task in tasks]
        out.sort(key=lambda f: (f.partition, f.first_offset))
        return out

    # --- administration -------------------------------------------------------------------------------

    def set_config(self, updates: Mapping[str, str], removals: Sequence[str] = ()) -> TopicSettings:
        """Validate and apply setting changes in one commit (retrying if another writer got there first)."""
        for attempt in range(10):
            current = dict(self.properties)
            to_set, to_remove, result = validate_updates(current, updates, removals)
            if not to_set and not to_remove:
                return result
            try:
                with translate_storage_errors(f"configuring {self.name}"):
                    tx = self.table.transaction()
                    if to_set:
                        tx.set_properties(to_set)
                    if to_remove:
                        tx.remove_properties(*to_remove)
                    tx.commit_transaction()
                self.refresh()
                return result
            except CommitFailedException:
                time.sleep(0.05 * (attempt + 1))
                self.refresh()
        raise CommitConflictError(f"could not change the settings of {self.name}: other writers kept committing")

    def set_internal_properties(self, updates: Mapping[str, str], removals: Sequence[str] = ()) -> None:
        """Set or remove the product's own (reserved) table properties, retrying on a racing commit."""
        for attempt in range(10):
            present = [k for k in removals if k in self.properties]
            if not updates and not present:
                return
            try:
                with translate_storage_errors(f"updating {self.name}"):
                    tx = self.table.transaction()
                    if updates:
                        tx.set_properties(dict(updates))
                    if present:
                        tx.remove_properties(*present)
                    tx.commit_transaction()
                self.refresh()
                return
            except CommitFailedException:
                time.sleep(0.05 * (attempt + 1))
                self.refresh()
        raise CommitConflictError(f"could not update {self.name}: other writers kept committing")

    def describe(self) -> dict[str, Any]:
        """Schema, settings, sizes, offsets and erasure bound (``topic describe``)."""
        settings = self.settings
        offsets = self.offsets()
        files = self.raw_files()
        per_partition: dict[str, dict[str, int]] = {
            str(p): {"files": 0, "records": 0, "bytes": 0} for p in range(offsets.partitions)
        }
        for f in files:
            entry = per_partition[str(f.partition)]
            entry["files"] += 1
            entry["records"] += f.record_count
            entry["bytes"] += f.size_bytes
        next_offsets, log_starts = offsets.as_dicts()
        snapshot = self.snapshot
        return {
            "topic": str(self.name),
            "table": self.name.identifier,
            "location": self.table.metadata.location,
            "partitions": offsets.partitions,
            "schema": str(self.table.schema()),
            "settings": settings.as_kafka_dict(),
            "next_offsets": next_offsets,
            "log_start_offsets": log_starts,
            "records": sum(e["records"] for e in per_partition.values()),
            "bytes": sum(e["bytes"] for e in per_partition.values()),
            "files": len(files),
            "by_partition": per_partition,
            "current_snapshot_id": snapshot.snapshot_id if snapshot else None,
            "snapshots": len(self.table.metadata.snapshots),
            "compaction_cursor": self.cursor_mirror(),
            "erasure_bound": erasure_bound(settings),
        }

    def cursor_mirror(self) -> dict[str, Any] | None:
        """What the last compaction wrote about its cursor on the raw table (for people; not trusted)."""
        text = self.properties.get(ts.CURSOR_MIRROR_PROPERTY)
        if not text:
            return None
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, dict) else None


def raw_file_of(data_file: Any) -> RawFile:
    partition = int(data_file.partition[0])
    first = file_bound(data_file.lower_bounds, OFFSET_FIELD_ID, "long")
    last = file_bound(data_file.upper_bounds, OFFSET_FIELD_ID, "long")
    if first is None or last is None:
        raise TopicCorruptError(f"raw data file {data_file.file_path} has no offset statistics")
    return RawFile(
        path=data_file.file_path,
        partition=partition,
        record_count=int(data_file.record_count),
        size_bytes=int(data_file.file_size_in_bytes),
        first_offset=first,
        last_offset=last,
        min_timestamp_us=file_bound(data_file.lower_bounds, TIMESTAMP_FIELD_ID, "ts"),
        max_timestamp_us=file_bound(data_file.upper_bounds, TIMESTAMP_FIELD_ID, "ts"),
    )


def erasure_bound(settings: TopicSettings) -> dict[str, Any]:
    """SEMANTICS section 4, "Erasure bound": how long a superseded or deleted value can survive."""
    parts = {
        "retention_ms": settings.retention_ms,
        "snapshot_expiry_ms": settings.expire_max_snapshot_age_ms,
        "cursor_retain_ms": settings.cursor_retain_ms,
        "max_compaction_lag_ms": settings.max_compaction_lag_ms,
    }
    if settings.retention_ms < 0:
        return {**parts, "bound_ms": None, "text": "unbounded: retention.ms is -1, so the raw log keeps every value"}
    total = settings.retention_ms + settings.expire_max_snapshot_age_ms + settings.cursor_retain_ms
    return {
        **parts,
        "bound_ms": total,
        "text": (f"a superseded or deleted value is physically gone at most {total} ms after the compaction "
                 "horizon passes it (retention.ms + history.expire.max-snapshot-age-ms + "
                 "compaction.cursor.retain-ms), plus the time until a run passes it (due within "
                 "max.compaction.lag.ms when the cleaner runs)"),
    }


__all__ = ["RawFile", "Topic", "erasure_bound", "offsets_to_dict"]
