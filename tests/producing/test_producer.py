"""Producing: dense offsets, atomic batches, bad input, idempotent batch ids, and racing appenders."""

from __future__ import annotations

import multiprocessing
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from compactor import failpoints
from compactor.config import LakeConfig
from compactor.errors import BatchIdConflictError, CommitConflictError, InvalidRecordError
from compactor.lake import Lake
from compactor.producing.produced import ProduceResult
from compactor.producing.producer import produce
from compactor.topics.partitioner import partition_for_key
from compactor.topics.records import ProducerRecord
from readers.reader import TopicReader
from tests.helpers import rival_commits_first
from tests.helpers import topic_rows as rows


def test_offsets_are_dense_per_partition_in_input_order(lake: Lake) -> None:
    topic = lake.create_topic("a.t", partitions=3)
    records = [ProducerRecord(f"k{i % 7}".encode(), f"v{i}".encode()) for i in range(30)]
    first = produce(topic, records, now_ms=1000)
    second = produce(topic, records, now_ms=2000)
    for batch in (first, second):
        for record, (partition, _) in zip(records, batch.offsets, strict=True):
            assert partition == partition_for_key(record.key or b"", 3)
    per_partition = Counter(p for p, _ in first.offsets)
    stored = rows(topic)
    for p in range(3):
        offsets = [r["offset"] for r in stored if r["partition"] == p]
        assert offsets == list(range(2 * per_partition[p]))
    assert topic.offsets().next_offsets == tuple(2 * per_partition[p] for p in range(3))
    # input order is offset order within a partition, and each record sits at its returned position
    by_position = {(r["partition"], r["offset"]): r for r in stored}
    for record, position in zip(records, second.offsets, strict=True):
        assert by_position[position]["value"] == record.value
        assert by_position[position]["timestamp"].timestamp() * 1000 == 2000


def test_explicit_timestamps_and_headers_are_kept(lake: Lake) -> None:
    topic = lake.create_topic("a.t")
    produce(topic, [ProducerRecord(b"k", b"v", (("a", b"1"), ("a", None)), timestamp_ms=123)], now_ms=999)
    row = rows(topic)[0]
    assert row["timestamp"].timestamp() * 1000 == 123
    assert row["headers"] == [{"key": "a", "value": b"1"}, {"key": "a", "value": None}]


def test_each_file_holds_one_partition_and_a_contiguous_sorted_range(lake: Lake) -> None:
    topic = lake.create_topic("a.t", partitions=2)
    for _ in range(3):
        produce(topic, [ProducerRecord(f"k{i}".encode(), b"v") for i in range(50)])
    for f in topic.refresh().raw_files():
        assert f.last_offset - f.first_offset + 1 == f.record_count
    import pyarrow.parquet as pq

    for f in topic.raw_files():
        table = pq.read_table(f.path.replace("file://", ""))
        offsets = table.column("offset").to_pylist()
        assert offsets == sorted(offsets)
        assert set(table.column("partition").to_pylist()) == {f.partition}


def test_empty_input_commits_nothing(lake: Lake) -> None:
    topic = lake.create_topic("a.t")
    result = produce(topic, [])
    assert result.offsets == [] and result.snapshot_id is None
    assert topic.refresh().snapshot is None


@pytest.mark.parametrize("bad, message", [
    (ProducerRecord(b"k", b"v", partition=2), "partition 2 is out of range"),
    (ProducerRecord(b"k", b"x" * 200), "exceeds max.message.bytes"),
    (ProducerRecord(b"k", b"v", (("h" * 150, b"x" * 60),)), "exceeds max.message.bytes"),
])
def test_one_bad_record_rejects_the_whole_batch(lake: Lake, bad: ProducerRecord, message: str) -> None:
    topic = lake.create_topic("a.t", partitions=2, config={"max.message.bytes": "200"})
    good = [ProducerRecord(b"k", b"v")] * 3
    with pytest.raises(InvalidRecordError, match=message) as info:
        produce(topic, [*good, bad, *good], line_numbers=[1, 2, 3, 9, 10, 11, 12])
    assert info.value.line == 9
    assert topic.refresh().snapshot is None
    assert topic.offsets().next_offsets == (0, 0)


def test_record_exactly_at_the_size_limit_is_accepted(lake: Lake) -> None:
    topic = lake.create_topic("a.t", config={"max.message.bytes": "10"})
    produce(topic, [ProducerRecord(b"k", b"v" * 9)])
    assert len(rows(topic)) == 1


def test_batch_id_makes_resending_idempotent(lake: Lake) -> None:
    topic = lake.create_topic("a.t", partitions=2)
    batch = [ProducerRecord(None, b"a"), ProducerRecord(b"x", b"b"), ProducerRecord(None, b"c")]
    first = produce(topic, batch, batch_id="batch-1")
    produce(topic, [ProducerRecord(None, b"other")] * 3)
    again = produce(topic, batch, batch_id="batch-1")
    assert again.duplicate and not first.duplicate
    assert again.offsets == first.offsets
    assert len(rows(topic)) == 6
    with pytest.raises(BatchIdConflictError, match="different batch"):
        produce(topic, batch[:2], batch_id="batch-1")


def test_lost_race_replans_offsets_never_reuses_them(lake: Lake) -> None:
    topic = lake.create_topic("a.t")
    rival = lake.topic("a.t")
    with rival_commits_first(lambda: produce(rival.refresh(), [ProducerRecord(b"rival", b"r")]), times=2):
        result = produce(topic, [ProducerRecord(b"me", b"m1"), ProducerRecord(b"me", b"m2")])
    assert result.attempts == 3
    assert result.offsets == [(0, 2), (0, 3)]
    assert [(r["offset"], r["value"]) for r in rows(topic)] == [(0, b"r"), (1, b"r"), (2, b"m1"), (3, b"m2")]
    # the losing attempts' data files were removed (the rebased batch wrote new ones), not left behind
    data_dir = Path(topic.table.metadata.location.replace("file://", "")) / "data"
    assert len(list(data_dir.rglob("*.parquet"))) == 3


def test_a_batch_id_committed_by_another_sender_during_the_race_is_found_again(lake: Lake) -> None:
    """The id is looked up once while planning; a sender of the same id that commits in between makes this
    commit lose its race, and the attempt on the newer version finds the id: the batch is a replay."""
    topic = lake.create_topic("a.t", partitions=2)
    rival = lake.topic("a.t")
    batch = [ProducerRecord(b"k1", b"v1"), ProducerRecord(None, b"v2")]
    sent: dict[str, ProduceResult | None] = {"rival": None}

    def rival_sends_the_same_batch() -> None:
        if sent["rival"] is None:
            with failpoints.enabled({"produce-before-commit": lambda: None}):
                sent["rival"] = produce(rival.refresh(), batch, batch_id="same")

    with failpoints.enabled({"produce-before-commit": rival_sends_the_same_batch}):
        result = produce(topic, batch, batch_id="same")
    first = sent["rival"]
    assert first is not None and not first.duplicate
    assert result.duplicate and result.attempts == 2 and result.snapshot_id == first.snapshot_id
    assert result.offsets == first.offsets
    assert len(rows(topic)) == 2  # appended once


def test_append_conflict_after_bound_writes_nothing(lake: Lake) -> None:
    topic = lake.create_topic("a.t")
    rival = lake.topic("a.t")

    def always_lose() -> None:
        with failpoints.enabled({"produce-before-commit": lambda: None}):
            produce(rival.refresh(), [ProducerRecord(b"rival", b"r")])

    with failpoints.enabled({"produce-before-commit": always_lose}), \
            pytest.raises(CommitConflictError, match="append conflict"):
        produce(topic, [ProducerRecord(b"k", b"v")], max_attempts=3)
    stored = rows(topic)
    assert [r["value"] for r in stored] == [b"r"] * 3  # only the rival's three appends
    data_dir = Path(topic.table.metadata.location.replace("file://", "")) / "data"
    assert len(list(data_dir.rglob("*.parquet"))) == 3


def _producer_process(config: LakeConfig, worker: int, batches: int, size: int,
                      out: Any) -> None:
    lake = Lake(config)
    topic = lake.topic("a.t")
    results = []
    for b in range(batches):
        records = [ProducerRecord(f"w{worker}-k{i % 5}".encode(), f"w{worker}-b{b}-r{i}".encode())
                   for i in range(size)]
        result = produce(topic, records)
        results.append((b, result.offsets))
    out.put((worker, results))


@pytest.mark.slow  # four processes; concurrent threads stay in the loop (test_produce_columnar.py)
def test_concurrent_producers_never_duplicate_or_skip_offsets(lake: Lake) -> None:
    topic = lake.create_topic("a.t", partitions=2)
    workers, batches, size = 4, 6, 7
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    procs = [context.Process(target=_producer_process, args=(lake.config, w, batches, size, queue))
             for w in range(workers)]
    for proc in procs:
        proc.start()
    reported = dict(queue.get(timeout=240) for _ in procs)
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    stored = rows(topic)
    assert len(stored) == workers * batches * size
    for p in range(2):
        offsets = [r["offset"] for r in stored if r["partition"] == p]
        assert offsets == list(range(len(offsets)))
    assert topic.offsets().next_offsets == tuple(
        sum(1 for r in stored if r["partition"] == p) for p in range(2))
    by_position = {(r["partition"], r["offset"]): r["value"] for r in stored}
    for worker, results in reported.items():
        for b, offsets in results:
            for i, position in enumerate(offsets):
                assert by_position[tuple(position)] == f"w{worker}-b{b}-r{i}".encode()


def test_reader_sees_each_batch_whole_or_not_at_all(lake: Lake) -> None:
    topic = lake.create_topic("a.t", partitions=2)
    reader_before = TopicReader(lake, "a.t")
    produce(topic, [ProducerRecord(f"k{i}".encode(), b"v") for i in range(20)])
    assert list(reader_before.records()) == []
    assert len(list(TopicReader(lake, "a.t").records())) == 20


def test_cumulative_logical_bytes_move_with_the_offsets(lake: Lake) -> None:
    topic = lake.create_topic("a.t", partitions=2)
    produce(topic, [ProducerRecord(b"ab", b"cde", (("h", b"1"),), partition=0),
                    ProducerRecord(None, None, partition=1)])
    produce(topic, [ProducerRecord(b"x", b"", partition=1)])
    assert topic.refresh().offsets().logical_bytes == (2 + 3 + 1 + 1, 1)
