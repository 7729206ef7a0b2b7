"""Source gaps against the test broker (docs/guarantees.md#mirrors): retention at the source overtaking a stopped
mirror, and a source topic deleted and created again. Each is an error naming the partition and the offsets, unless the
mirror is told to skip, which is counted in its summary and in ``status``; a skip survives a restart."""

from __future__ import annotations

import time
from typing import Any

import pytest

from compactor import Mirror, MirrorSummary
from compactor.errors import SourceGapError
from compactor.lake import Lake
from compactor.status import topic_status
from readers import TopicReader
from tests.kafka_helpers import admin, consume_all, create_topic, offsets, produce, set_config, wait_for
from tests.servers import KafkaBroker

T0 = 1_800_000_000_000


def once(lake: Lake, broker: KafkaBroker, topic: str, **kwargs: Any) -> MirrorSummary:
    return Mirror(lake, broker.bootstrap, [topic], once=True, **kwargs).run()


def records(count: int, tag: str) -> list[Any]:
    return [(0, f"k{i}".encode(), f"{tag}{i}".encode(), None) for i in range(count)]


def test_retention_overtaking_a_stopped_mirror_is_a_gap(lake: Lake, kafka_broker: KafkaBroker) -> None:
    topic = create_topic(kafka_broker, config={"segment.ms": "100"})
    produce(kafka_broker, topic, records(3, "a"))
    assert once(lake, kafka_broker, topic).records_copied == 3  # the mirror stops at 3
    for wave in "bcd":  # three more segments: each wave rolls the one before (segment.ms has passed)
        time.sleep(0.15)
        produce(kafka_broker, topic, records(2, wave))
    set_config(kafka_broker, topic, **{"retention.ms": "1"})  # every closed segment goes
    wait_for(lambda: offsets(kafka_broker, topic)[0] > 3, "the source's retention")
    start, end = offsets(kafka_broker, topic)
    name = f"kafka.{topic}"

    with pytest.raises(SourceGapError, match=f"partition 0: the mirror's position is 3 but the source holds offsets "
                                             f"\\[{start}, {end}\\).*retention removed offsets \\[3, {start}\\)"):
        once(lake, kafka_broker, topic)
    assert lake.topic(name).offsets().next_offsets == (3,)  # nothing moved

    summary = once(lake, kafka_broker, topic, on_source_gap="skip")
    assert summary.offsets_skipped == start - 3 and summary.partitions[0].skipped == start - 3
    assert [r.offset for r in TopicReader(lake, name)] == [0, 1, 2, *range(start, end)]
    assert [(r.offset, r.value) for r in TopicReader(lake, name)][3:] == [
        (o, v) for _, o, _, v, _, _ in consume_all(kafka_broker, topic)]
    status = topic_status(lake, name, now_ms=T0).mirror
    assert status is not None and status["skipped_offsets"] == {"0": start - 3} and status["source_lag"] == {"0": 0}
    assert once(lake, kafka_broker, topic).records_copied == 0  # recorded: the next run has no gap to judge


def _recreate(broker: KafkaBroker, topic: str) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.cimpl import NewTopic

    client = admin(broker)
    client.delete_topics([topic])[topic].result(timeout=60)

    def created() -> bool:
        try:
            client.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=60)
        except KafkaException:  # still being deleted
            return False
        return True

    wait_for(created, "the topic created again")


def test_a_source_deleted_and_created_again_is_a_gap(lake: Lake, kafka_broker: KafkaBroker) -> None:
    topic = create_topic(kafka_broker)
    produce(kafka_broker, topic, records(5, "old"))
    assert once(lake, kafka_broker, topic).records_copied == 5
    _recreate(kafka_broker, topic)
    produce(kafka_broker, topic, records(2, "new"))  # the new topic's log: [0, 2), below the mirror's position 5
    name = f"kafka.{topic}"

    with pytest.raises(SourceGapError, match=r"partition 0: the mirror's position is 5 but the source holds offsets "
                                             r"\[0, 2\): its topic id changed from .* to .*deleted and created"):
        once(lake, kafka_broker, topic)

    waiting = once(lake, kafka_broker, topic, on_source_gap="skip")
    assert waiting.offsets_skipped == 5 and waiting.partitions[0].waiting  # [0, 5) of the new topic: never copied
    assert once(lake, kafka_broker, topic).records_copied == 0  # the skip was recorded: no gap after a restart
    produce(kafka_broker, topic, records(6, "more"))  # the new topic reaches past the position: [2, 8)
    resumed = once(lake, kafka_broker, topic)
    assert resumed.records_copied == 3 and not resumed.partitions[0].waiting
    assert [(r.offset, r.value) for r in TopicReader(lake, name)] == [
        *[(i, f"old{i}".encode()) for i in range(5)], (5, b"more3"), (6, b"more4"), (7, b"more5")]
    status = topic_status(lake, name, now_ms=T0).mirror
    assert status is not None and status["skipped_offsets"] == {"0": 5}
