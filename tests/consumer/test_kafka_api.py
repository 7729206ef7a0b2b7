"""The Kafka consumer methods people reach for (issue 29, point 12): ``beginning_offsets``, ``end_offsets``,
``offsets_for_times``, ``pause``/``resume``/``paused``, ``subscribe(pattern=...)`` that picks up topics created
later, and auto-commit (``enable_auto_commit``, ``auto_commit_interval_ms``)."""

from __future__ import annotations

import pytest

from compactor import Consumer, TopicPartition
from compactor.consumer.positions import OffsetAndTimestamp
from compactor.consumer.rebalance import ConsumerRebalanceListener
from compactor.errors import InputError
from compactor.lake import Lake
from compactor.retention import run_retention
from tests.consumers import FakeClock, produce_keys, store_clock

T = "shop.orders"
TP0, TP1 = TopicPartition(T, 0), TopicPartition(T, 1)


def test_offset_lookups(lake: Lake) -> None:
    lake.create_topic(T, partitions=2, config={"retention.ms": "1000"})
    produce_keys(lake, T, ["a", "b"], partition=0, timestamp_ms=1_000)
    produce_keys(lake, T, ["c"], partition=0, timestamp_ms=10**12)
    produce_keys(lake, T, ["d"], partition=1, timestamp_ms=10**12 + 5_000)
    run_retention(lake, T, now_ms=10**12)  # removes offsets 0-1 of partition 0
    with Consumer(lake, T, group="g") as consumer:
        assert consumer.beginning_offsets() == {TP0: 2, TP1: 0}
        assert consumer.end_offsets([TP1]) == {TP1: 1}
        found = consumer.offsets_for_times({TP0: 0, TP1: 10**12 + 6_000})
        assert found == {TP0: OffsetAndTimestamp(2, 10**12), TP1: None}  # partition 1 has nothing that late
        assert consumer.offsets_for_times({1: 10**12}) == {TP1: OffsetAndTimestamp(0, 10**12 + 5_000)}


def test_paused_partitions_return_nothing_and_stay_owned(lake: Lake) -> None:
    lake.create_topic(T, partitions=2)
    produce_keys(lake, T, ["a"], partition=0)
    produce_keys(lake, T, ["b"], partition=1)
    with Consumer(lake, T, group="g") as consumer:
        consumer.pause([TP1])
        assert consumer.paused() == [TP1]
        assert [(r.partition, r.offset) for r in consumer.poll()] == [(0, 0)]
        produce_keys(lake, T, ["c"], partition=1)
        assert consumer.poll() == [] and consumer.assignment() == [TP0, TP1]
        consumer.resume([TP1])
        assert consumer.paused() == []
        got = []
        while batch := consumer.poll():
            got += [(r.partition, r.offset) for r in batch]
        assert got == [(1, 0), (1, 1)]  # from where it paused
        with pytest.raises(InputError, match="does not exist"):
            consumer.pause([TopicPartition(T, 5)])


def test_a_pattern_subscription_picks_up_topics_created_later(lake: Lake) -> None:
    lake.create_topic("shop.a")
    lake.create_topic("other.z")
    produce_keys(lake, "shop.a", ["x"])
    clock = FakeClock()
    store_clock(lake, clock)
    heard: list[tuple[str, list[TopicPartition]]] = []

    class Heard(ConsumerRebalanceListener):
        def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
            heard.append(("assigned", partitions))

    consumer = Consumer(lake, group="g", pattern=r"shop\..*", listener=Heard(), clock=clock,
                        metadata_max_age_ms=60_000)
    assert consumer.subscription() == ["shop.a"]
    assert [r.key for r in consumer.poll()] == [b"x"]
    lake.create_topic("shop.b", partitions=2)
    produce_keys(lake, "shop.b", ["y"], partition=1)
    assert consumer.poll() == []  # not looked for yet
    clock.advance(60_000)
    assert [(r.partition, r.key) for r in consumer.poll()] == [(1, b"y")]
    assert consumer.subscription() == ["shop.a", "shop.b"]
    assert heard[-1] == ("assigned", [TopicPartition("shop.b", 0), TopicPartition("shop.b", 1)])
    with pytest.raises(InputError, match="one of them"):
        consumer.subscribe(["shop.a"], pattern="x")
    consumer.close()


def test_auto_commit_commits_what_earlier_polls_returned(lake: Lake) -> None:
    lake.create_topic(T, partitions=2)
    produce_keys(lake, T, ["a", "b", "c"], partition=0)
    clock = FakeClock()
    store_clock(lake, clock)
    consumer = Consumer(lake, T, group="g", clock=clock, enable_auto_commit=True, auto_commit_interval_ms=5_000,
                        member_id="a", session_timeout_ms=10_000, heartbeat_interval_ms=1_000)
    assert len(consumer.poll(max_records=2)) == 2
    assert consumer.committed([TP0]) == {TP0: None}  # the interval has not passed
    clock.advance(5_000)
    assert len(consumer.poll()) == 1  # commits 2 first, then returns c
    assert consumer.committed([TP0]) == {TP0: 2}
    other = Consumer(lake, T, group="g", clock=clock, member_id="b", session_timeout_ms=10_000,
                     heartbeat_interval_ms=1_000)
    clock.advance(1_000)
    consumer.poll()  # partition 1 moves: committed first, as Kafka's auto-commit does on revocation
    assert consumer.committed([TP1]) == {TP1: 0}
    consumer.close()  # and at close
    assert consumer.committed([TP0]) == {TP0: 3}
    other.close()
