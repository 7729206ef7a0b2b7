"""Consuming with Spark (issue 20, point 7): ``read_increment``, ``consume_dataframes``, exactly-once
consume-transform-produce through batch ids (with a kill between the produce and the commit), and the
``foreachBatch`` sink of a Structured Streaming query that fails after its output and is restarted."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from compactor import Consumer, TopicPartition
from compactor.compaction.job import compact_topic
from compactor.consumer.increments import Increment, consume_dataframes, read_increment, topic_sink
from compactor.errors import NotOwnerError
from compactor.groups import GroupStore
from compactor.lake import Lake
from compactor.producing.dataframe import produce_dataframe
from compactor.producing.producer import produce
from compactor.retention import run_retention
from compactor.topics.records import ProducerRecord
from readers.reader import TopicReader
from tests.consumers import FakeClock, produce_keys, store_clock

pytestmark = pytest.mark.spark


def rows(frame: DataFrame) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in frame.collect())


def raw_rows(lake: Lake, name: str) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return [(r.partition, r.offset, r.key, r.value) for r in TopicReader(lake, name).records()]


def test_increments_are_units_of_one_partition_each_committed_at_its_end(spark: SparkSession, lake: Lake) -> None:
    lake.create_topic("s.in", partitions=2)
    produce_keys(lake, "s.in", ["a", "b", "c"], partition=0)
    produce_keys(lake, "s.in", ["d", "e"], partition=1)
    first = read_increment(lake, "s.in", group="g")
    assert first.ranges == {TopicPartition("s.in", 0): (0, 3)} and first.offsets == 3 and not first.replayed
    assert rows(first.dataframe) == raw_rows(lake, "s.in")[:3]
    first.commit()
    second = read_increment(lake, "s.in", consumer=first.consumer)
    assert second.ranges == {TopicPartition("s.in", 1): (0, 2)} and second.batch_id != first.batch_id
    second.commit()
    assert first.consumer.committed() == {TopicPartition("s.in", 0): 3, TopicPartition("s.in", 1): 2}
    assert [p.pending for p in GroupStore(lake).partitions("g")] == [None, None]
    empty = read_increment(lake, "s.in", consumer=first.consumer)
    assert empty.empty and rows(empty.dataframe) == []
    produce_keys(lake, "s.in", ["f"], partition=1)
    third = read_increment(lake, "s.in", consumer=first.consumer)
    assert third.ranges == {TopicPartition("s.in", 1): (2, 3)} and rows(third.dataframe) == [(1, 2, b"f", b"v-f")]
    first.consumer.close()


def test_a_compacted_increment_is_the_compacted_view_then_the_tail(spark: SparkSession, lake: Lake) -> None:
    lake.create_topic("s.c", config={"cleanup.policy": "compact"})
    produce_keys(lake, "s.c", ["a", "b", "a", "c", "b"])
    compact_topic(lake, "s.c", now_ms=10_000)
    produce_keys(lake, "s.c", ["a"])
    increment = read_increment(lake, "s.c", group="g", read_compacted=True)
    expected = [(r.partition, r.offset, r.key, r.value)
                for r in TopicReader(lake, "s.c", read_compacted=True).records()]
    assert rows(increment.dataframe) == expected == [(0, 2, b"a", b"v-a"), (0, 3, b"c", b"v-c"),
                                                     (0, 4, b"b", b"v-b"), (0, 5, b"a", b"v-a")]
    assert increment.ranges == {TopicPartition("s.c", 0): (0, 6)}
    increment.consumer.close()


def test_an_uncommitted_range_is_taken_again_whole_after_a_crash(spark: SparkSession, lake: Lake) -> None:
    lake.create_topic("s.r")
    produce_keys(lake, "s.r", ["a", "b"])
    taken = read_increment(lake, "s.r", group="g")
    taken.consumer.close()  # the process "died": nothing committed
    produce_keys(lake, "s.r", ["c"])  # the log grew meanwhile
    again = read_increment(lake, "s.r", group="g")
    assert again.replayed and again.ranges == taken.ranges and again.batch_id == taken.batch_id
    assert rows(again.dataframe) == rows(taken.dataframe)  # not the new record: the range is fixed
    again.commit()
    after = read_increment(lake, "s.r", consumer=again.consumer)
    assert not after.replayed and after.ranges == {TopicPartition("s.r", 0): (2, 3)}
    after.consumer.close()


def upper_into(lake: Lake, output: str) -> Any:
    """A consume-transform-produce step: the increment's values upper-cased into ``output`` under its batch id."""
    def fn(frame: DataFrame, increment: Increment) -> None:
        records = [ProducerRecord(r["key"], (r["value"] or b"").upper(), partition=0) for r in frame.collect()]
        produce(lake.topic(output), records, batch_id=increment.batch_id)
    return fn


def test_exactly_once_across_a_rebalance_a_zombie_and_retention_under_a_pending_range(
        spark: SparkSession, lake: Lake) -> None:
    """Issue 29, defect 1: a pending range covered every partition its member owned and its batch id hashed
    them all, so a group scaled from one member to two mid-range took fresh ranges under new ids and appended
    the input twice; and ``set_pending`` was not fenced, so a zombie could overwrite the new owner's range."""
    lake.create_topic("s.src", partitions=2, config={"retention.ms": "1000"})
    lake.create_topic("s.out")
    world = FakeClock(int(time.time() * 1000))
    store_clock(lake, world)
    produce_keys(lake, "s.src", ["a", "b", "c"], partition=0, timestamp_ms=1_000)  # old: retention may take them
    produce_keys(lake, "s.src", ["d", "e"], partition=1, timestamp_ms=world.now + 10**9)  # kept
    step = upper_into(lake, "s.out")

    def member(name: str, clock: Any) -> Consumer:
        return Consumer(lake, "s.src", group="etl", clock=clock, member_id=name, session_timeout_ms=10_000,
                        heartbeat_interval_ms=1_000)

    zombie = member("zombie", FakeClock(world.now))  # a process that stalls (its heartbeat with it)
    slow = read_increment(lake, "s.src", consumer=zombie)
    assert slow.ranges == {TopicPartition("s.src", 0): (0, 3)}
    world.advance(10_001)  # the zombie's lease lapses before it produced
    run_retention(lake, "s.src", now_ms=world.now)  # and retention removes the whole pending range
    assert lake.topic("s.src").offsets().log_start_offsets[0] == 3
    one, two = member("one", world), member("two", world)  # the group scales to two members mid-range
    for _ in range(3):
        world.advance(1_000)
        one.settle()
        two.settle()
    assert sorted([*one.assignment(), *two.assignment()]) == [TopicPartition("s.src", 0), TopicPartition("s.src", 1)]
    owner = one if TopicPartition("s.src", 0) in one.assignment() else two
    replay = read_increment(lake, "s.src", consumer=owner)
    assert replay.replayed and replay.ranges == slow.ranges and replay.batch_id == slow.batch_id
    assert rows(replay.dataframe) == rows(slow.dataframe)  # the snapshot it was taken from, still retained
    step(replay.dataframe, replay)
    step(slow.dataframe, slow)  # the zombie wakes up and produces its range too: the same batch id
    zombie.pause([TopicPartition("s.src", 0)])
    with pytest.raises(NotOwnerError):  # it cannot take a range of a partition it lost (a fenced pending range)
        read_increment(lake, "s.src", consumer=zombie)
    with pytest.raises(NotOwnerError):  # nor commit its own
        slow.commit()
    replay.commit()
    other = two if owner is one else one
    for consumer in (owner, other):
        while not (increment := read_increment(lake, "s.src", consumer=consumer)).empty:
            step(increment.dataframe, increment)
            increment.commit()
    produced = sorted(r.value or b"" for r in TopicReader(lake, "s.out").records())
    assert produced == [b"V-A", b"V-B", b"V-C", b"V-D", b"V-E"], "each input record is in the output once"
    for consumer in (one, two, zombie):
        consumer.close()


def transform(lake: Lake) -> Any:
    def fn(frame: DataFrame, increment: Increment) -> None:
        out = frame.select("key", F.upper(F.col("value").cast("string")).cast("binary").alias("value"))
        produce_dataframe(lake, "s.out", out, batch_id=increment.batch_id)
    return fn


@pytest.mark.slow  # a JVM of its own; a crash before the commit stays in the loop in-process (above)
def test_consume_transform_produce_exactly_once_across_a_kill(spark: SparkSession, lake: Lake) -> None:
    lake.create_topic("s.src", partitions=2)
    lake.create_topic("s.out", partitions=2)
    produce_keys(lake, "s.src", [f"k{i}" for i in range(6)], partition=0)
    produce_keys(lake, "s.src", [f"j{i}" for i in range(4)], partition=1)
    script = (
        "from compactor.lake import Lake\n"
        "from compactor.consumer.increments import consume_dataframes\n"
        "from tests.consumer.test_consume_spark import transform\n"
        f"lake = Lake(warehouse={lake.config.warehouse!r})\n"
        "consume_dataframes(lake, 's.src', 'etl', transform(lake), max_increments=1, session_timeout_ms=6000)\n")
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "COMPACTOR_CATALOG_NAME": lake.config.catalog_name,
           "COMPACTOR_FAILPOINTS": "consume-before-commit=exit", "COMPACTOR_SPARK_CORES": "1"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 137, proc.stderr[-3000:]  # killed after its produce, before its commit
    assert len(raw_rows(lake, "s.out")) == 6  # the first unit: partition 0
    produce_keys(lake, "s.src", ["late"], partition=0)  # new input arrives before the restart
    # a new member: it gets the partitions once the killed one's lease lapsed (6 s), and takes the same range
    summary = consume_dataframes(lake, "s.src", "etl", transform(lake), max_increments=3, idle_timeout_ms=30_000,
                                 session_timeout_ms=6000)
    assert summary.replayed == 1 and summary.increments == 3 and summary.offsets == 11
    produced = sorted((key, value) for _, _, key, value in raw_rows(lake, "s.out"))
    expected = sorted((key, (value or b"").upper()) for _, _, key, value in raw_rows(lake, "s.src"))
    assert produced == expected, "each input record is in the output exactly once"


def test_a_restarted_streaming_query_appends_each_epoch_once(spark: SparkSession, lake: Lake, tmp_path: Path) -> None:
    lake.create_topic("s.stream", partitions=2)
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    schema = "key STRING, value STRING"
    spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(5)], schema).write.json(str(source / "one"))
    sink = topic_sink(lake, "s.stream", query_id="orders-to-topic")
    failures = {"left": 1}

    def fails_after_its_output(frame: DataFrame, epoch: int) -> None:
        sink(frame, epoch)
        if failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("the query dies after its output, before Spark records the epoch")

    def run(fn: Any) -> None:
        stream = spark.readStream.schema(schema).json(str(source / "*"))
        frame = stream.select(F.col("key").cast("binary").alias("key"), F.col("value").cast("binary").alias("value"))
        query = (frame.writeStream.foreachBatch(fn).option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        try:
            query.awaitTermination(120)
        finally:
            query.stop()

    with pytest.raises(Exception, match="dies after its output"):
        run(fails_after_its_output)
    assert len(raw_rows(lake, "s.stream")) == 5
    run(fails_after_its_output)  # restarted from the checkpoint: the same epoch again, replayed
    assert len(raw_rows(lake, "s.stream")) == 5
    spark.createDataFrame([("k9", "v9")], schema).write.json(str(source / "two"))
    run(sink)
    assert sorted(k or b"" for _, _, k, _ in raw_rows(lake, "s.stream")) == [b"k0", b"k1", b"k2", b"k3", b"k4", b"k9"]
    with pytest.raises(Exception, match="query_id"):
        topic_sink(lake, "s.stream", query_id="")


def test_a_committed_position_below_the_log_start_resets_by_the_policy(spark: SparkSession, lake: Lake) -> None:
    """docs/guarantees.md#consumers-and-groups: a raw range whose committed start retention removed (and no pending
    range) applies auto.offset.reset (recorded), instead of failing every later call."""
    from compactor.producing.producer import produce
    from compactor.retention import run_retention
    from compactor.topics.records import ProducerRecord

    lake.create_topic("s.lso", config={"retention.ms": "1000"})
    for key in ("a", "b"):  # one file each, both old
        produce(lake.topic("s.lso"), [ProducerRecord(key.encode(), b"v", timestamp_ms=1000)] * 2)
    first = read_increment(lake, "s.lso", group="g")
    assert first.ranges == {TopicPartition("s.lso", 0): (0, 4)}
    first.consumer.commit({TopicPartition("s.lso", 0): 2})  # as if the group had stopped half way
    first.consumer.close()
    produce(lake.topic("s.lso"), [ProducerRecord(b"c", b"v", timestamp_ms=10**13)] * 2)
    assert run_retention(lake, "s.lso", now_ms=10**12).log_start_offsets == {"0": 4}
    again = read_increment(lake, "s.lso", group="g")
    assert again.ranges == {TopicPartition("s.lso", 0): (4, 6)} and not again.replayed
    assert again.consumer.resets == 1
    assert rows(again.dataframe) == [(0, 4, b"c", b"v"), (0, 5, b"c", b"v")]
    again.consumer.close()
