"""``Topic``: one raw log table, its settings and offsets, and its administration (config, describe).

A ``Topic`` holds the table as loaded at one moment (``refresh`` reloads it) and the catalog it came from; it
knows nothing of the ``Lake`` that opened it, so everything below the lake can use topics.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from compactor import properties as props
from compactor import schema as ts
from compactor.errors import CommitConflictError, InputError, NotATopicError, TopicCorruptError
from compactor.iceberg.bounds import file_bound
from compactor.iceberg.catalog import translate_storage_errors
from compactor.schema import OFFSET_FIELD_ID, TIMESTAMP_FIELD_ID
from compactor.topics.mirrored import MirrorState
from compactor.topics.naming import TopicName
from compactor.topics.settings import TopicSettings, validate_updates
from compactor.topics.state import PartitionOffsets, grown_properties, read_offsets

PROPERTY_COMMIT_ATTEMPTS = 10

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



class Topic:
    """A topic: the raw log table plus what the product stores about it."""

    def __init__(self, catalog: Catalog, name: TopicName, table: Table) -> None:
        check_is_topic(name, table)
        self.catalog = catalog
        self.name = name
        self.table = table

    # --- state ------------------------------------------------------------------------------------

    def refresh(self) -> Topic:
        with translate_storage_errors(f"loading {self.name}"):
            table = self.catalog.load_table(self.name.identifier)
        check_is_topic(self.name, table)
        self.table = table
        return self

    def adopt(self, table: Table) -> Topic:
        """Use ``table`` (this topic's table as a commit just returned it) instead of re-reading the catalog."""
        check_is_topic(self.name, table)
        self.table = table
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
    def mirror(self) -> MirrorState | None:
        """What a mirrored topic records of its Kafka source (``None``: the topic is not a mirror)."""
        return MirrorState.of(self.properties)

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
        outcome: list[TopicSettings] = []

        def change(current: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
            to_set, to_remove, result = validate_updates(current, updates, removals)
            outcome[:] = [result]
            return to_set, to_remove

        self._commit_properties(change, f"change the settings of {self.name}")
        return outcome[0]

    def set_internal_properties(self, updates: Mapping[str, str], removals: Sequence[str] = ()) -> None:
        """Set or remove the product's own (reserved) table properties, retrying on a racing commit."""
        self._commit_properties(lambda current: (dict(updates), [k for k in removals if k in current]),
                                f"update {self.name}")

    def add_partitions(self, partitions: int) -> None:
        """Grow a mirrored topic to ``partitions`` partitions (its source's count, which only grows); the new
        partitions start empty. A produced topic's partition count is fixed at create."""

        def change(current: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
            if MirrorState.of(current) is None:
                raise InputError(f"{self.name} is not a mirror: its partition count is fixed at create")
            if read_offsets(current).partitions >= partitions:
                return {}, []
            return grown_properties(current, partitions), []

        self._commit_properties(change, f"add partitions to {self.name}")

    def change_properties(self, change: Any, what: str) -> None:
        """Commit ``change(current properties) -> (to set, to remove)`` on the latest metadata (no snapshot), the
        change computed again on the refreshed table after a lost race."""
        self._commit_properties(change, what)

    def _commit_properties(self, change: Any, what: str) -> None:
        """Commit ``change(current properties) -> (to set, to remove)`` on the latest metadata; a lost race is
        retried on the refreshed table (the change is computed again, so validation sees what is current)."""
        for attempt in range(PROPERTY_COMMIT_ATTEMPTS):
            to_set, to_remove = change(dict(self.properties))
            if not to_set and not to_remove:
                return
            try:
                with translate_storage_errors(what):
                    tx = self.table.transaction()
                    if to_set:
                        tx.set_properties(to_set)
                    if to_remove:
                        tx.remove_properties(*to_remove)
                    tx.commit_transaction()
                self.refresh()
                return
            except CommitFailedException:
                time.sleep(0.05 * (attempt + 1))
                self.refresh()
        raise CommitConflictError(f"could not {what}: other writers kept committing")

    def cursor_mirror(self) -> dict[str, Any] | None:
        """What the last compaction wrote about its cursor on the raw table (for people; not trusted)."""
        text = self.properties.get(props.CURSOR_MIRROR_PROPERTY)
        if not text:
            return None
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, dict) else None


def check_is_topic(name: TopicName, table: Table) -> None:
    """Raise ``NotATopicError`` unless ``table`` carries the topic marker and the topic schema."""
    properties = table.metadata.properties
    if properties.get(props.MARKER_PROPERTY) != props.MARKER_VALUE:
        raise NotATopicError(f"table '{name}' is not a topic (it lacks the '{props.MARKER_PROPERTY}' marker)")
    if not ts.schema_matches(table.schema()):
        raise NotATopicError(f"table '{name}' carries the topic marker but its schema is not a topic's")


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


__all__ = ["RawFile", "Topic", "check_is_topic", "raw_file_of"]
