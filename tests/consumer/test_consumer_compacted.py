"""Pulsar's readCompacted rule for consumers (docs/guarantees.md#consumers-and-groups), with real compactions and
retention runs between polls (Spark): compacted rows at or after the position below the horizon, then raw; no record
twice, no key's latest record skipped; below the log start a compacted consumer continues from the view; caught up after
a trailing tombstone the view dropped. Few compactions: every one has new records."""

from __future__ import annotations

import random

import pytest
from pyspark.sql import SparkSession

from compactor import Consumer, TopicPartition
from compactor.compaction.job import compact_topic
from compactor.groups import GroupStore
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.retention import run_retention
from compactor.topics.records import ProducerRecord, Record

pytestmark = pytest.mark.spark
T = "c.orders"
DAY = 86_400_000


def check_compacted(delivered: list[Record], log: list[Record], start: int, what: str) -> None:
    """Offsets strictly increasing, each the log's record, and every key's latest record at or after
    ``start`` delivered."""
    offsets = [r.offset for r in delivered]
    assert offsets == sorted(set(offsets)), f"{what}: offsets repeat or go back: {offsets}"
    for record in delivered:
        assert record == log[record.offset], f"{what}: {record.offset} differs from the log"
    latest: dict[bytes, Record] = {}
    for record in log:
        if record.key is not None:
            latest[record.key] = record
    missing = [r.offset for r in latest.values() if r.offset >= start and r.offset not in set(offsets)]
    assert not missing, f"{what}: the latest records at {missing} were skipped"


def append(lake: Lake, log: list[Record], keys: list[str], now_ms: int, tombstones: tuple[str, ...] = ()) -> None:
    batch = [ProducerRecord(k.encode(), None if k in tombstones else f"{k}-{len(log) + i}".encode(),
                            timestamp_ms=now_ms) for i, k in enumerate(keys)]
    for record, (p, o) in zip(batch, produce(lake.topic(T), batch).offsets, strict=True):
        log.append(Record(p, o, now_ms, record.key, record.value, ()))


def test_compaction_and_retention_between_polls(spark: SparkSession, lake: Lake) -> None:
    lake.create_topic(T, config={"cleanup.policy": "compact", "retention.ms": str(DAY)})
    now = 100 * DAY
    log: list[Record] = []
    append(lake, log, ["a", "b", "a", "c", "b"], now - 3 * DAY)
    early = Consumer(lake, T, group="early", read_compacted=True)
    assert [r.offset for r in early.poll(max_records=2)] == [0, 1]
    early.commit()
    early.close()
    compact_topic(lake, T, now_ms=now)  # horizon 5: the view holds a@2, c@3, b@4
    resumed = Consumer(lake, T, group="early", read_compacted=True)
    got = resumed.poll()
    assert [r.offset for r in got] == [2, 3, 4]  # compacted rows at or after the position: none twice
    append(lake, log, ["d", "a"], now, tombstones=("a",))
    got += resumed.poll(timeout_ms=2000)
    check_compacted(got, log, 2, "resumed")
    assert resumed.caught_up()
    resumed.commit()
    resumed.close()

    late = Consumer(lake, T, group="late", read_compacted=True)  # no position: the whole view
    GroupStore(lake).commit("late-raw", None, "", {TopicPartition(T, 0): (1, -1)})  # retention removes it next
    append(lake, log, ["e"], now)
    compact_topic(lake, T, now_ms=now + 1)  # horizon 8
    removed = run_retention(lake, T, now_ms=now + 1)  # raw records older than a day go, below the horizon
    start = lake.topic(T).offsets().log_start_offsets[0]
    assert removed.removed_records > 0 and start > 1
    got = []
    while batch := late.poll():
        got += batch
    check_compacted(got, log, 0, "a compacted consumer below the log start continues from the view")
    assert late.caught_up()
    late_raw = Consumer(lake, T, group="late-raw", read_compacted=False)
    assert [r.offset for r in late_raw.poll()] == list(range(start, len(log)))  # raw: reset to the log start
    row = next(s for s in GroupStore(lake).partitions("late-raw"))
    assert row.last_reset is not None and (row.last_reset.from_offset, row.last_reset.to_offset) == (1, start)
    late.close()
    late_raw.close()


def test_caught_up_after_a_trailing_tombstone_the_view_dropped(spark: SparkSession, lake: Lake) -> None:
    lake.create_topic(T, config={"cleanup.policy": "compact", "delete.retention.ms": "0"})
    log: list[Record] = []
    append(lake, log, ["x", "y", "x"], 1000, tombstones=("x",))
    with Consumer(lake, T, group="g", read_compacted=True) as consumer:
        assert [r.offset for r in consumer.poll(max_records=1)] == [0]
        assert not consumer.caught_up()
        compact_topic(lake, T, now_ms=2000)  # the tombstone at 2 is the last record; the view drops it
        got = []
        while batch := consumer.poll(timeout_ms=0):
            got += batch
        assert [r.offset for r in got] == [1, 2]  # its fetch was pinned before the run: the tombstone too
        assert consumer.caught_up() and consumer.position() == {TopicPartition(T, 0): 3}
        consumer.seek(0, 1)
        fresh = consumer.poll()
        assert [r.offset for r in fresh] == [1]  # the view now: y@1, the tombstone is gone
        assert consumer.caught_up() and consumer.position() == {TopicPartition(T, 0): 3}


@pytest.mark.slow  # randomised rounds
def test_random_rounds_with_compactions_between_polls(spark: SparkSession, lake: Lake) -> None:
    rng = random.Random(7)
    lake.create_topic(T, config={"cleanup.policy": "compact"})
    log: list[Record] = []
    now = 10 * DAY
    consumer = Consumer(lake, T, group="g", read_compacted=True)
    session_start, session = 0, []
    for round_number in range(3):
        for _ in range(rng.randrange(1, 3)):
            keys = [f"k{rng.randrange(6)}" for _ in range(rng.randrange(1, 8))]
            append(lake, log, keys, now, tombstones=tuple(k for k in keys if rng.random() < 0.1))
        session += consumer.poll(max_records=rng.randrange(1, 6))
        if rng.random() < 0.5:
            consumer.commit()
        if rng.random() < 0.4:  # a restart: from the committed position (at-least-once)
            check_compacted(session, log[: max([r.offset for r in session], default=-1) + 1], session_start,
                            f"round {round_number}, before the restart")
            consumer.close()
            consumer = Consumer(lake, T, group="g", read_compacted=True)
            session_start = consumer.committed()[TopicPartition(T, 0)] or 0
            session = []
        append(lake, log, [f"k{rng.randrange(6)}"], now)
        now += 1000
        compact_topic(lake, T, now_ms=now)
        session += consumer.poll(max_records=rng.randrange(1, 6))
    while batch := consumer.poll():
        session += batch
    check_compacted(session, log, session_start, "final")
    assert consumer.caught_up()
    consumer.close()
