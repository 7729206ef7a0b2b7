"""The buffered producer: futures, grouping of many threads' sends into few commits, per-batch failure, and
retries that keep their batch id."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest

from compactor import failpoints
from compactor.errors import InputError, InvalidRecordError, OutcomeUnknownError, TopicCorruptError
from compactor.lake import Lake
from compactor.producing.buffered import Producer, RecordMetadata
from compactor.topics.partitioner import partition_for_key
from tests.helpers import topic_rows as rows

T0 = 1_800_000_000_000


def test_sends_from_many_threads_group_into_few_commits(lake: Lake) -> None:
    lake.create_topic("b.t", partitions=3)
    futures: dict[tuple[int, int], Future[RecordMetadata]] = {}
    commits = {"n": 0}

    def count() -> None:
        commits["n"] += 1

    with failpoints.enabled({"produce-before-commit": count}), \
            Producer(lake, "b.t", linger_ms=200, clock=lambda: T0) as producer:
        def work(worker: int) -> None:
            for i in range(250):
                futures[(worker, i)] = producer.send(f"{worker}:{i}", key=f"k{i % 13}")

        threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        producer.flush()
    assert commits["n"] <= 4  # 1,000 sends, a handful of atomic batches
    stored = {(r["partition"], r["offset"]): r for r in rows(lake.topic("b.t"))}
    assert len(stored) == 1000
    for (worker, i), future in futures.items():
        partition, offset = future.result()
        assert partition == partition_for_key(f"k{i % 13}".encode(), 3)
        assert stored[(partition, offset)]["value"] == f"{worker}:{i}".encode()
        assert stored[(partition, offset)]["timestamp"].timestamp() * 1000 == T0
    for p in range(3):  # each thread's records keep their send order within a partition
        for worker in range(4):
            mine = [o for (w, i), f in sorted(futures.items()) if w == worker
                    for q, o in [f.result()] if q == p]
            assert mine == sorted(mine)


def test_a_failed_commit_fails_exactly_its_batch(lake: Lake) -> None:
    lake.create_topic("b.fail")
    state = {"fail": True}

    def first_commit_breaks() -> None:
        if state["fail"]:
            state["fail"] = False
            raise TopicCorruptError("injected: not retryable")

    with Producer(lake, "b.fail", linger_ms=10_000) as producer:
        with failpoints.enabled({"produce-before-commit": first_commit_breaks}):
            doomed = [producer.send(b"a"), producer.send(b"b")]
            producer.flush()
        kept = [producer.send(b"c"), producer.send(b"d")]
        producer.flush()
    for future in doomed:
        with pytest.raises(TopicCorruptError, match="injected"):
            future.result()
    assert [f.result() for f in kept] == [RecordMetadata(0, 0), RecordMetadata(0, 1)]
    assert [r["value"] for r in rows(lake.topic("b.fail"))] == [b"c", b"d"]


def test_an_unknown_outcome_is_retried_with_the_same_batch_id(lake: Lake) -> None:
    lake.create_topic("b.retry")
    state = {"calls": 0}

    def lost_reply() -> None:  # the commit landed, but the producer never heard
        state["calls"] += 1
        if state["calls"] == 1:
            raise OutcomeUnknownError("injected: the catalog went away after the commit")

    with failpoints.enabled({"produce-after-commit": lost_reply}), Producer(lake, "b.retry") as producer:
        sent = [producer.send(f"v{i}") for i in range(5)]
        producer.flush()
    assert [f.result() for f in sent] == [RecordMetadata(0, i) for i in range(5)]
    assert len(rows(lake.topic("b.retry"))) == 5  # not appended twice
    assert state["calls"] == 1  # the retry found its batch id and committed nothing


def test_bad_records_are_refused_by_send(lake: Lake) -> None:
    lake.create_topic("b.bad", partitions=2, config={"max.message.bytes": "10"})
    with Producer(lake, "b.bad") as producer:
        with pytest.raises(InvalidRecordError, match="partition 2 is out of range"):
            producer.send(b"v", partition=2)
        with pytest.raises(InvalidRecordError, match=r"exceeds max\.message\.bytes"):
            producer.send(b"x" * 11)
        with pytest.raises(InvalidRecordError, match="timestamp_ms must be"):
            producer.send(b"v", timestamp_ms=-1)
        with pytest.raises(InputError, match="value must be bytes"):
            producer.send(3)  # type: ignore[arg-type]
        ok = producer.send(b"v", key="k", headers={"h": "1"})
    assert ok.result().partition == partition_for_key(b"k", 2)
    assert rows(lake.topic("b.bad"))[0]["headers"] == [{"key": "h", "value": b"1"}]
    with pytest.raises(InputError, match="closed"):
        producer.send(b"late")
