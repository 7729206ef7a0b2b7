"""``Mirror`` against the test broker (docs/guarantees.md#mirrors): records byte for byte, transactions and their gaps,
exactly once across runs, Kafka's committed offsets for its tools, partitions and topics added at the source."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from compactor import Mirror, MirrorSummary
from compactor.errors import InvalidSettingError, InvalidTopicNameError, KafkaTopicNotFoundError
from compactor.lake import Lake
from compactor.status import topic_status
from compactor.topics.describe import describe_topic
from readers import TopicReader
from tests.kafka_helpers import (
    admin,
    consume_all,
    create_topic,
    in_transaction,
    offsets,
    produce,
    transactional,
    wait_for,
)
from tests.servers import KafkaBroker

T0 = 1_800_000_000_000


def lake_records(lake: Lake, name: str) -> list[tuple[Any, ...]]:
    """The lake topic's raw records as ``(partition, offset, key, value, headers, timestamp)``."""
    return [(r.partition, r.offset, r.key, r.value, list(r.headers), r.timestamp_ms)
            for r in TopicReader(lake, name)]


def once(lake: Lake, broker: KafkaBroker, *topics: str, **kwargs: Any) -> MirrorSummary:
    return Mirror(lake, broker.bootstrap, topics, once=True, **kwargs).run()


@contextmanager
def running(mirror: Mirror) -> Iterator[Callable[[], MirrorSummary]]:
    """``mirror`` running in a thread; the block gets a function that stops it and returns its summary."""
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["summary"] = mirror.run()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=work, daemon=True)
    thread.start()

    def stop() -> MirrorSummary:
        mirror.request_stop()
        thread.join(120)
        assert not thread.is_alive(), "the mirror did not stop"
        if "error" in outcome:
            raise outcome["error"]
        summary: MirrorSummary = outcome["summary"]
        return summary

    try:
        yield stop
    finally:
        if thread.is_alive():
            mirror.request_stop()
            thread.join(120)


def test_records_land_byte_for_byte_with_their_offsets(lake: Lake, kafka_broker: KafkaBroker) -> None:
    topic = create_topic(kafka_broker, partitions=3, config={
        "cleanup.policy": "compact", "delete.retention.ms": "5000", "max.message.bytes": "2000000"})
    sent = [
        (0, b"k", b"v", None),
        (0, b"", b"", [("h", b"1"), ("h", None), ("h", b""), ("other", b"\xff\x00")]),  # empty, not null
        (1, b"\xff\xfe binary", None, None),  # a tombstone with a binary key
        (2, b"k2", b"x" * 1000, [("trace", b"abc")]),
        (1, b"k", b"v2", None),
    ]
    produce(kafka_broker, topic, sent)
    summary = once(lake, kafka_broker, topic)
    name = f"kafka.{topic}"
    assert lake_records(lake, name) == consume_all(kafka_broker, topic, partitions=3)
    assert [(r.partition, r.offset, r.key, r.value) for r in TopicReader(lake, name)] == [
        (0, 0, b"k", b"v"), (0, 1, b"", b""), (1, 0, b"\xff\xfe binary", None), (1, 1, b"k", b"v2"),
        (2, 0, b"k2", b"x" * 1000)]
    assert summary.stopped == "once" and summary.records_copied == 5 and summary.offsets_skipped == 0
    assert [(p.partition, p.position, p.copied, p.lag) for p in summary.partitions] == [(0, 2, 2, 0), (1, 2, 2, 0),
                                                                                       (2, 1, 1, 0)]
    created = describe_topic(lake.topic(name))
    assert created.partitions == 3 and created.mirror_of == topic
    assert {k: created.settings[k] for k in ("cleanup.policy", "delete.retention.ms", "max.message.bytes")} == {
        "cleanup.policy": "compact", "delete.retention.ms": "5000", "max.message.bytes": "2000000"}


def test_read_committed_leaves_gaps_for_markers_and_aborted_records(lake: Lake, kafka_broker: KafkaBroker) -> None:
    topic = create_topic(kafka_broker)
    producer = transactional(kafka_broker)
    in_transaction(producer, topic, [(0, b"a", b"1", None), (0, b"b", b"2", None)], commit=True)  # 0, 1; marker 2
    in_transaction(producer, topic, [(0, b"a", b"aborted", None)], commit=False)  # 3; marker 4
    produce(kafka_broker, topic, [(0, b"c", b"plain", None)])  # 5
    in_transaction(producer, topic, [(0, b"d", b"4", None)], commit=True)  # 6; marker 7
    summary = once(lake, kafka_broker, topic)
    name = f"kafka.{topic}"
    assert [(r.offset, r.value) for r in TopicReader(lake, name)] == [(0, b"1"), (1, b"2"), (5, b"plain"), (6, b"4")]
    assert lake.topic(name).offsets().next_offsets == (8,) == (offsets(kafka_broker, topic)[1],)  # past the marker
    assert summary.partitions[0].position == 8 and summary.partitions[0].copied == 4
    # exactly once across runs: a second run copies nothing, a third only what came since
    assert once(lake, kafka_broker, topic).records_copied == 0
    in_transaction(producer, topic, [(0, b"e", b"5", None)], commit=True)  # 8; marker 9
    assert once(lake, kafka_broker, topic).records_copied == 1
    assert [r.offset for r in TopicReader(lake, name)] == [0, 1, 5, 6, 8]
    assert lake.topic(name).offsets().next_offsets == (10,)
    status = topic_status(lake, name, now_ms=T0).mirror
    assert status is not None and status["source_log_end_offsets"] == {"0": 10} and status["source_lag"] == {"0": 0}
    # read_uncommitted, for those who want it: aborted records land as well
    other = once(lake, kafka_broker, topic, namespace="dirty", kafka_config={"isolation.level": "read_uncommitted"})
    assert [(r.offset, r.value) for r in TopicReader(lake, f"dirty.{topic}")][2] == (3, b"aborted")
    assert other.records_copied == 6


def test_a_commit_comes_every_batch_records(lake: Lake, kafka_broker: KafkaBroker) -> None:
    topic = create_topic(kafka_broker)
    produce(kafka_broker, topic, [(0, b"k%d" % i, b"v", None) for i in range(25)])
    summary = once(lake, kafka_broker, topic, batch_records=10, commit_interval_ms=600_000)
    assert summary.records_copied == 25 and summary.commits == 3  # 10, 10, then the last 5 at the end
    table = lake.topic(f"kafka.{topic}").table
    assert sorted(f.record_count for f in (t.file for t in table.scan().plan_files())) == [5, 10, 10]


def test_kafka_sees_the_mirrors_position_only_for_its_tools(lake: Lake, kafka_broker: KafkaBroker) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    topic = create_topic(kafka_broker, partitions=2)
    produce(kafka_broker, topic, [(0, b"a", b"1", None), (1, b"b", b"2", None), (1, b"c", b"3", None)])
    group = f"tools-{uuid.uuid4().hex[:6]}"
    once(lake, kafka_broker, topic, kafka_config={"group.id": group})
    client = admin(kafka_broker)
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0), TopicPartition(topic, 1)])
    listed = client.list_consumer_group_offsets([request])[group].result(timeout=60)
    assert {tp.partition: tp.offset for tp in listed.topic_partitions} == {0: 1, 1: 2}
    # the mirror never reads them back: moved by Kafka's tools, they change nothing
    client.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 0)])])[
        group].result(timeout=60)
    assert once(lake, kafka_broker, topic, kafka_config={"group.id": group}).records_copied == 0


def test_partitions_added_at_the_source_are_picked_up(lake: Lake, kafka_broker: KafkaBroker) -> None:
    from confluent_kafka.admin import NewPartitions  # type: ignore[attr-defined]

    topic = create_topic(kafka_broker, partitions=1)
    produce(kafka_broker, topic, [(0, b"a", b"1", None)])
    name = f"kafka.{topic}"
    mirror = Mirror(lake, kafka_broker.bootstrap, [topic], commit_interval_ms=50, metadata_refresh_ms=200)
    with running(mirror) as stop:
        wait_for(lambda: lake.catalog.table_exists(name) and lake.topic(name).offsets().next_offsets == (1,),
                 "the first record")
        client = admin(kafka_broker)
        client.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=60)
        produce(kafka_broker, topic, [(2, b"c", b"3", None), (1, b"b", b"2", None)])
        wait_for(lambda: lake.topic(name).offsets().next_offsets == (1, 1, 1), "the new partitions' records")
        summary = stop()
    assert lake_records(lake, name) == consume_all(kafka_broker, topic, partitions=3)
    assert [(p.partition, p.position, p.copied) for p in summary.partitions] == [(0, 1, 1), (1, 1, 1), (2, 1, 1)]
    assert summary.stopped == "signal"


def test_a_pattern_follows_topics_created_later(lake: Lake, kafka_broker: KafkaBroker) -> None:
    prefix = f"pat{uuid.uuid4().hex[:6]}"
    first = create_topic(kafka_broker, prefix=prefix)
    produce(kafka_broker, first, [(0, b"a", b"1", None)])
    mirror = Mirror(lake, kafka_broker.bootstrap, pattern=f"{prefix}-.*", commit_interval_ms=50,
                    metadata_refresh_ms=200)
    with running(mirror) as stop:
        wait_for(lambda: lake.catalog.table_exists(f"kafka.{first}"), "the first topic")
        later = create_topic(kafka_broker, prefix=prefix)
        produce(kafka_broker, later, [(0, b"b", b"2", None)])
        wait_for(lambda: lake.catalog.table_exists(f"kafka.{later}")
                 and lake.topic(f"kafka.{later}").offsets().next_offsets == (1,), "the topic created later")
        summary = stop()
    assert {p.source for p in summary.partitions} == {first, later}
    assert lake_records(lake, f"kafka.{later}") == consume_all(kafka_broker, later)


def test_what_cannot_be_mirrored_is_a_clear_error(lake: Lake, kafka_broker: KafkaBroker) -> None:
    with pytest.raises(KafkaTopicNotFoundError, match="has no topic 'no-such-topic'"):
        once(lake, kafka_broker, "no-such-topic")
    dotted = f"with.dot-{uuid.uuid4().hex[:6]}"
    client = admin(kafka_broker)
    from confluent_kafka.cimpl import NewTopic

    client.create_topics([NewTopic(dotted, 1, 1)])[dotted].result(timeout=60)
    with pytest.raises(InvalidTopicNameError, match=f"has a '.'.*--rename {dotted}=kafka.NAME"):
        once(lake, kafka_broker, dotted)
    produce(kafka_broker, dotted, [(0, b"a", b"1", None)])
    assert once(lake, kafka_broker, dotted, renames={dotted: "ns.with_dot"}).records_copied == 1
    topic = create_topic(kafka_broker)
    lake.create_topic(f"kafka.{topic}")
    from compactor.producing.producer import produce as produce_here
    from compactor.topics.records import ProducerRecord

    produce_here(lake.topic(f"kafka.{topic}"), [ProducerRecord(key=b"mine", value=b"1")])
    with pytest.raises(InvalidSettingError, match="exists and is not a mirror"):
        once(lake, kafka_broker, topic)
    with pytest.raises(InvalidSettingError, match=f"mirrors Kafka topic '{dotted}'"):
        once(lake, kafka_broker, topic, renames={topic: "ns.with_dot"})
