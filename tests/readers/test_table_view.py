"""Reads that need no compaction, hence no JVM: the table view over a raw log (key lookups pruned by the key
column's bounds, explicit partitions) and the typed error for an unknown topic. (The table view over a
compacted topic is in test_readers.py.)"""

from __future__ import annotations

import pytest

from compactor.errors import TopicNotFoundError
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.topics.partitioner import partition_for_key
from compactor.topics.records import ProducerRecord
from readers.reader import TopicReader
from readers.table_view import TableView

NOW = 20 * 24 * 3_600_000


def test_unknown_topic_is_a_typed_error(lake: Lake) -> None:
    with pytest.raises(TopicNotFoundError):
        TopicReader(lake, "no.such", read_compacted=True)
    with pytest.raises(TopicNotFoundError):
        TableView(lake, "no.such")


def test_table_view_lookup_prunes_files_by_key(lake: Lake) -> None:
    lake.create_topic("v.p", partitions=1)
    for band in "abcd":  # four files, each with a narrow key range
        produce(lake.topic("v.p"), [ProducerRecord(f"{band}{i}".encode(), f"{band}{i}!".encode(), partition=0)
                                    for i in range(5)], now_ms=NOW)
    table_view = TableView(lake, "v.p")
    assert table_view.get("c3") == b"c3!"
    assert table_view.last_lookup.files == 1, "only the file whose key bounds contain c3 should be read"
    assert table_view.get("zz") is None
    assert table_view.last_lookup.files == 0


def test_table_view_keys_on_explicit_partitions(lake: Lake) -> None:
    lake.create_topic("v.e", partitions=2)
    key = b"placed"
    other = 1 - partition_for_key(key, 2)
    produce(lake.topic("v.e"), [ProducerRecord(key, b"x", partition=other, timestamp_ms=1),
                                ProducerRecord(key, b"y", partition=1 - other, timestamp_ms=2)], now_ms=NOW)
    assert TableView(lake, "v.e").get(key) == b"y"  # the default partitioner's partition
    assert TableView(lake, "v.e").get(key, partition=other) == b"x"
    assert TableView(lake, "v.e", key_partitioned=False).get(key) == b"y"  # newest by timestamp
