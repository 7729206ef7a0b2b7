"""Topic administration: create, list, describe, config, delete, and what is not a topic."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from compactor import properties as props
from compactor import schema as ts
from compactor.errors import (
    InputError,
    InvalidSettingError,
    InvalidTopicNameError,
    NotATopicError,
    TopicExistsError,
    TopicNotFoundError,
)
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.topics.describe import describe_topic
from compactor.topics.records import ProducerRecord


def test_create_makes_namespace_and_a_topic_table(lake: Lake) -> None:
    topic = lake.create_topic("events.orders", partitions=3, config={"cleanup.policy": "compact"})
    assert topic.partitions == 3
    assert topic.settings.compacts
    table = lake.catalog.load_table("events.orders")
    assert ts.schema_matches(table.schema())
    assert table.metadata.properties[props.MARKER_PROPERTY] == props.MARKER_VALUE
    assert table.metadata.properties["commit.retry.num-retries"] == "0"
    assert table.metadata.properties["compactor.cleanup.policy"] == "compact"
    assert [f.name for f in table.spec().fields] == ["partition"]
    assert topic.offsets().next_offsets == (0, 0, 0)


def test_topic_schema_is_exactly_the_contract(lake: Lake) -> None:
    table = lake.create_topic("a.t").table
    fields = {f.name: (str(f.field_type), f.required) for f in table.schema().fields}
    assert fields == {
        "partition": ("int", True), "offset": ("long", True), "timestamp": ("timestamptz", True),
        "key": ("binary", False), "value": ("binary", False),
        "headers": ("list<struct<8: key: required string, 9: value: optional binary>>", False),
    }


def test_existing_topic_is_an_error(lake: Lake) -> None:
    lake.create_topic("a.t")
    with pytest.raises(TopicExistsError):
        lake.create_topic("a.t")


@pytest.mark.parametrize("name", ["nonamespace", "a..b", ".a", "a.", "a.b c", "a.-x", "a.t__compacted",
                                  "a." + "x" * 260])
def test_bad_names(lake: Lake, name: str) -> None:
    with pytest.raises(InvalidTopicNameError):
        lake.create_topic(name)


@pytest.mark.parametrize("partitions", [0, -1, 10_001])
def test_bad_partition_counts(lake: Lake, partitions: int) -> None:
    with pytest.raises(InputError, match="partitions"):
        lake.create_topic("a.t", partitions=partitions)


def test_bad_settings_at_create_leave_nothing_behind(lake: Lake) -> None:
    with pytest.raises(InvalidSettingError):
        lake.create_topic("a.t", config={"retention.ms": "forever"})
    assert lake.list_topics() == []


def test_list_shows_only_topics(lake: Lake) -> None:
    lake.create_topic("b.two")
    lake.create_topic("a.one")
    lake.create_topic("a.deep.three")
    lake.catalog.create_table("a.plain", schema=Schema(NestedField(1, "x", LongType(), required=False)))
    assert lake.list_topics() == ["a.deep.three", "a.one", "b.two"]


def test_a_table_that_is_not_a_topic(lake: Lake) -> None:
    lake.catalog.create_namespace("a")
    lake.catalog.create_table("a.plain", schema=Schema(NestedField(1, "x", LongType(), required=False)))
    with pytest.raises(NotATopicError, match="not a topic"):
        lake.topic("a.plain")
    # a marker on the wrong schema is not enough either
    lake.catalog.create_table("a.fake", schema=Schema(NestedField(1, "x", LongType(), required=False)),
                              properties={props.MARKER_PROPERTY: props.MARKER_VALUE})
    with pytest.raises(NotATopicError, match="schema"):
        lake.topic("a.fake")


def test_unknown_topic(lake: Lake) -> None:
    with pytest.raises(TopicNotFoundError, match=r"unknown topic 'a\.missing'"):
        lake.topic("a.missing")


def test_config_set_unset_and_validation_leaves_topic_untouched(lake: Lake) -> None:
    topic = lake.create_topic("a.t")
    topic.set_config({"retention.ms": "1000", "cleanup.policy": "delete,compact"})
    assert topic.settings.retention_ms == 1000
    assert topic.settings.cleanup_policy == {"delete", "compact"}
    before = dict(topic.refresh().properties)
    with pytest.raises(InvalidSettingError):
        topic.set_config({"retention.ms": "5", "bogus.key": "1"})
    assert dict(topic.refresh().properties) == before
    topic.set_config({}, ["retention.ms"])
    assert topic.settings.retention_ms == 604800000
    assert "compactor.retention.ms" not in topic.refresh().properties


def test_describe_reports_offsets_sizes_and_erasure_bound(lake: Lake) -> None:
    topic = lake.create_topic("a.t", partitions=2, config={"retention.ms": "1000",
                                                           "history.expire.max-snapshot-age-ms": "200",
                                                           "compaction.cursor.retain-ms": "30",
                                                           "raw.snapshot.window.ms": "20"})
    produce(topic, [ProducerRecord(b"k", b"v", partition=1)] * 3)
    info = describe_topic(topic.refresh())
    assert info.next_offsets == {"0": 0, "1": 3}
    assert info.log_start_offsets == {"0": 0, "1": 0}
    assert info.records == 3
    assert info.by_partition["1"].records == 3 and info.by_partition["1"].bytes > 0
    assert info.erasure_bound.bound_ms == 1230
    assert "partition" in info.schema
    assert info.as_json()["erasure_bound"]["bound_ms"] == 1230
    topic.set_config({"raw.snapshot.window.ms": "50"})  # expiry spares the raw snapshot window too
    assert describe_topic(topic.refresh()).erasure_bound.bound_ms == 1250
    topic.set_config({"retention.ms": "-1"})
    assert describe_topic(topic).erasure_bound.bound_ms is None


def test_delete_drops_tables_and_files(lake: Lake, tmp_path: Path) -> None:
    topic = lake.create_topic("a.t")
    produce(topic, [ProducerRecord(b"k", b"v")])
    location = Path(topic.table.metadata.location.replace("file://", ""))
    assert any(location.rglob("*.parquet"))
    result = lake.delete_topic("a.t")
    assert result.removed_files > 0
    assert not location.exists()
    with pytest.raises(TopicNotFoundError):
        lake.topic("a.t")
    # the name can be used again, and the new topic starts empty at offset 0
    again = lake.create_topic("a.t")
    assert again.offsets().next_offsets == (0,)
    assert again.table.scan().to_arrow().num_rows == 0


def test_properties_of_produced_batch_are_arrow_typed(lake: Lake) -> None:
    topic = lake.create_topic("a.t")
    produce(topic, [ProducerRecord(b"k", b"v", (("h", b"x"),))])
    table = topic.refresh().table.scan().to_arrow()
    assert table.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
