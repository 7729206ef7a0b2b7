"""The compacted table (``cursor.table``): created on first use beside its topic, and refused when it belongs to
another topic (one dropped and created again under the same name)."""

from __future__ import annotations

import pytest

from compactor.cursor.table import ensure_compacted_table
from compactor.errors import CursorCorruptError
from compactor.lake import Lake
from compactor.schema import COMPACTED_SCHEMA


def test_the_compacted_table_is_made_once_and_belongs_to_its_topic(lake: Lake) -> None:
    topic = lake.create_topic("v.t", partitions=2)
    table = ensure_compacted_table(topic)
    assert table.name() == ("v", "t__compacted")
    assert [f.name for f in table.schema().fields] == [f.name for f in COMPACTED_SCHEMA.fields]
    assert table.metadata.location == topic.table.metadata.location.rstrip("/") + "-compacted"
    assert ensure_compacted_table(lake.topic("v.t")).metadata.table_uuid == table.metadata.table_uuid

    lake.delete_topic("v.t")  # the view goes with its topic
    again = lake.create_topic("v.t", partitions=2)
    assert ensure_compacted_table(again).metadata.table_uuid != table.metadata.table_uuid


def test_a_compacted_table_of_another_topic_is_refused(lake: Lake) -> None:
    first, second = lake.create_topic("v.a"), lake.create_topic("v.b")
    ensure_compacted_table(first)
    lake.catalog.rename_table("v.a__compacted", "v.b__compacted")  # v.a's view, under v.b's name
    with pytest.raises(CursorCorruptError, match=r"v\.b__compacted does not belong to this topic.*drop it"):
        ensure_compacted_table(second)
