"""Consumers on a topic mirrored from the test broker, whose offsets have gaps, one at the end
(docs/guarantees.md#the-raw-log and #consumers-and-groups): Kafka's look-ups (``beginning_offsets``, ``end_offsets``,
``offsets_for_times``), seeks into gaps and to the end, positions moved to ``N_p`` past a trailing marker, lag in
offsets in ``group describe`` and ``status``, and the units of replay of the exactly-once path. The compacted consumer
on gaps is in ``test_gaps_through_the_product.py`` (it needs a compaction)."""

from __future__ import annotations

from compactor import Consumer, TopicPartition
from compactor.consumer.admin import describe_group, reset_group
from compactor.consumer.units import take_unit
from compactor.lake import Lake
from compactor.status import topic_status
from readers import TopicReader
from tests.kafka_helpers import gapped, in_transaction, mirror_once, transactional
from tests.servers import KafkaBroker

T0 = 1_800_000_000_000


def test_lookups_seeks_and_lag_count_offsets_past_gaps(lake: Lake, kafka_broker: KafkaBroker) -> None:
    topic, name = gapped(lake, kafka_broker)  # records at 0 1 5 6 8; N_p = 10 (a commit marker at 9)
    tp = TopicPartition(name, 0)
    stamps = {r.offset: r.timestamp_ms for r in TopicReader(lake, name)}

    def first_at(t: int) -> int | None:  # Kafka's offsetsForTimes over the records the lake holds
        return min((o for o, s in stamps.items() if s >= t), default=None)

    with Consumer(lake, name, group="g", read_compacted=False, auto_offset_reset="earliest") as consumer:
        assert consumer.beginning_offsets() == {tp: 0} and consumer.end_offsets() == {tp: 10}
        for t in (stamps[0], stamps[1] + 1, stamps[5], stamps[8]):
            found = consumer.offsets_for_times({0: t})[tp]
            assert found is not None and found.offset == first_at(t)
            assert found.timestamp_ms == stamps[found.offset]
        assert consumer.offsets_for_times({0: stamps[8] + 1}) == {tp: None}  # nothing at or after: N_p is no record
        consumer.seek_to_timestamp(stamps[8] + 1)
        assert consumer.position() == {tp: 10}
        consumer.seek(0, 9)  # the trailing marker: nothing to return, and the position moves to N_p
        assert consumer.poll(max_records=10) == [] and consumer.position() == {tp: 10} and consumer.caught_up()
        consumer.seek(0, 2)  # a commit marker
        assert [r.offset for r in consumer.poll(max_records=1)] == [5]
        assert consumer.position() == {tp: 6} and not consumer.caught_up()
        consumer.seek_to_end()
        assert consumer.position() == {tp: 10} and consumer.caught_up()
        consumer.commit({tp: 9})  # committed at the marker: one offset of lag, and no record to age
    lagging = describe_group(lake, "g", now_ms=T0).partitions[0]
    assert (lagging.committed_offset, lagging.log_end_offset, lagging.lag, lagging.lag_ms) == (9, 10, 1, None)
    assert topic_status(lake, name, now_ms=T0).groups == [{"group": "g", "total_lag": 1, "committed": {"0": 9}}]
    # group reset into a gap, and to a time past the last record (N_p)
    reset_group(lake, "g", name, ["offset", "0:7"])
    with Consumer(lake, name, group="g", read_compacted=False) as consumer:
        assert [r.offset for r in consumer.poll(max_records=10)] == [8] and consumer.position() == {tp: 10}
    reset_group(lake, "g", name, ["timestamp", f"0:{stamps[8] + 1}"])
    assert describe_group(lake, "g", now_ms=T0).partitions[0].committed_offset == 10
    with Consumer(lake, name, group="late", read_compacted=False, auto_offset_reset="latest") as consumer:
        assert consumer.position() == {tp: 10} and consumer.poll(max_records=10) == []
        # a record comes after a gap (aborted at 10, its marker at 11; 12, its marker at 13): the consumer takes it
        producer = transactional(kafka_broker)
        in_transaction(producer, topic, [(0, b"x", b"no", None)], commit=False)
        in_transaction(producer, topic, [(0, b"y", b"yes", None)], commit=True)
        mirror_once(lake, kafka_broker, topic)
        assert consumer.end_offsets() == {tp: 14}
        assert [(r.offset, r.value) for r in consumer.poll(max_records=10)] == [(12, b"yes")]
        assert consumer.position() == {tp: 14} and consumer.caught_up()
        consumer.commit()
    assert describe_group(lake, "late", now_ms=T0).partitions[0].lag == 0


def test_units_of_replay_span_gaps_and_end_at_the_log_end(lake: Lake, kafka_broker: KafkaBroker) -> None:
    topic, name = gapped(lake, kafka_broker)
    tp = TopicPartition(name, 0)
    with Consumer(lake, name, group="etl", read_compacted=False) as consumer:
        unit = take_unit(consumer, name)
        assert unit is not None and (unit.tp, unit.start, unit.end, unit.offsets) == (tp, 0, 10, 10)
        assert [r.offset for r in unit.reader.records()] == [0, 1, 5, 6, 8]  # five records in ten offsets
        consumer.commit({tp: unit.end})
        assert take_unit(consumer, name) is None  # nothing new: the trailing marker forms no unit
        in_transaction(transactional(kafka_broker), topic, [(0, b"z", b"1", None)], commit=True)  # 10 (11)
        mirror_once(lake, kafka_broker, topic)
        unit = take_unit(consumer, name)
        assert unit is not None and (unit.start, unit.end) == (10, 12)
        assert [r.offset for r in unit.reader.records()] == [10]
        consumer.commit({tp: unit.end})
    assert describe_group(lake, "etl", now_ms=T0).partitions[0].lag == 0
