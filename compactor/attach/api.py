"""The Python API of attached logs, on a ``Lake`` (exported from ``compactor``): ``attach_table``,
``detach_table``, ``compact_attached`` and ``read_attached`` (the verbs ``topic attach``, ``topic detach``, and
``compact`` and ``read`` on an attached log)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from compactor.attach.compaction import AttachedCompactionResult, compact_attached
from compactor.attach.reading import read_attached
from compactor.attach.registry import AttachedLog, new_view_location
from compactor.attach.registry import attach_table as _attach
from compactor.attach.registry import detach_table as _detach
from compactor.topics.naming import TopicName

if TYPE_CHECKING:
    from compactor.lake import Lake


def attach_table(lake: Lake, name: str, *, table: str, layout: str, partition_column: str | None = None,
                 offset_column: str | None = None, timestamp_column: str | None = None,
                 key_columns: Sequence[str] = (), tombstone_when: str | None = None,
                 config: Mapping[str, str] | None = None) -> AttachedLog:
    """Make the append-only Iceberg table ``table`` the raw log of topic ``name`` without writing to it (layouts
    ``kafka-connect``, ``redpanda``, ``columns``; ``tombstone_when``: ``null-value`` or a SQL condition of the
    forms ``attach.condition`` allows). Settings default to ``cleanup.policy=compact``."""
    settings = {"cleanup.policy": "compact", **dict(config or {})}
    return _attach(lake.open(create=True), name, table=table, layout=layout, partition_column=partition_column,
                   offset_column=offset_column, timestamp_column=timestamp_column, key_columns=key_columns,
                   tombstone_when=tombstone_when, config=settings,
                   location=new_view_location(lake.config.warehouse, TopicName.parse(name)))


def detach_table(lake: Lake, name: str) -> dict[str, Any]:
    """Drop an attached log's view and registration (the source table stays as it was)."""
    return _detach(lake.catalog, lake.config, name)


__all__ = ["AttachedCompactionResult", "attach_table", "compact_attached", "detach_table", "read_attached"]
