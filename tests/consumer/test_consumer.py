"""The consumer (docs/guarantees.md#consumers-and-groups): poll, positions, commits, seeks, resets, waiting
cheaply. No Spark."""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Any

import pytest
from pyiceberg.table.metadata import TableMetadataUtil

from compactor import Consumer, TopicPartition
from compactor.errors import (
    GroupNotFoundError,
    InputError,
    NotOwnerError,
    OffsetOutOfRangeError,
    TopicNotFoundError,
)
from compactor.groups import GroupStore
from compactor.lake import Lake
from compactor.retention import run_retention
from tests.consumers import FakeClock, produce_keys

T = "shop.orders"


@pytest.fixture
def topic(lake: Lake) -> str:
    lake.create_topic(T, partitions=2)
    return T


def offsets(records: list) -> list[tuple[int, int]]:  # type: ignore[type-arg]
    return [(r.partition, r.offset) for r in records]


def test_poll_returns_each_record_once_in_order_and_positions_follow(lake: Lake, topic: str) -> None:
    produce_keys(lake, topic, ["a", "b", "c"], partition=0)
    produce_keys(lake, topic, ["d"], partition=1)
    with Consumer(lake, topic, group="g") as consumer:
        first = consumer.poll(max_records=2)
        rest = consumer.poll(max_records=10)
        assert offsets(first) == [(0, 0), (0, 1)]
        assert offsets(rest) == [(1, 0), (0, 2)]  # the next poll begins with the next partition
        assert rest[1].key == b"c" and rest[1].value == b"v-c"
        assert consumer.position() == {TopicPartition(T, 0): 3, TopicPartition(T, 1): 1}
        assert consumer.caught_up()
        assert consumer.poll(timeout_ms=0) == []
        produce_keys(lake, topic, ["e"], partition=1)
        assert not consumer.caught_up()
        batches = consumer.poll_batches(timeout_ms=2000)
        assert [b.num_rows for b in batches] == [1]
        assert batches[0].column("offset").to_pylist() == [1]


def test_commit_survives_a_restart_and_only_uncommitted_records_come_again(lake: Lake, topic: str) -> None:
    produce_keys(lake, topic, ["a", "b", "c", "d"], partition=0)
    with Consumer(lake, topic, group="g") as consumer:
        assert offsets(consumer.poll(max_records=2)) == [(0, 0), (0, 1)]
        consumer.commit()
        assert offsets(consumer.poll(max_records=1)) == [(0, 2)]  # returned, not committed
        assert consumer.committed()[TopicPartition(T, 0)] == 2
    with Consumer(lake, topic, group="g") as again:
        assert offsets(again.poll()) == [(0, 2), (0, 3)]
    with Consumer(lake, topic, group="other") as other:  # groups are independent
        assert len(other.poll()) == 4


def test_iteration_follows_appends_until_close(lake: Lake, topic: str) -> None:
    consumer = Consumer(lake, topic, group="g", poll_backoff_ms=(5, 20))
    seen: list[int] = []

    def follow() -> None:
        for record in consumer:
            seen.append(record.offset)
            if len(seen) == 3:
                consumer.close()

    thread = threading.Thread(target=follow)
    thread.start()
    for key in ["a", "b", "c"]:
        produce_keys(lake, topic, [key], partition=0)
    thread.join(timeout=30)
    assert not thread.is_alive() and seen == [0, 1, 2]


def test_an_idle_consumer_reads_only_catalog_metadata_with_backoff(lake: Lake, topic: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    produce_keys(lake, topic, ["a"], partition=0)
    consumer = Consumer(lake, topic, group="g", poll_backoff_ms=(10, 80))
    assert len(consumer.poll()) == 1
    parsed: list[object] = []
    real = TableMetadataUtil.parse_raw

    def counting(*args: Any, **kwargs: Any) -> Any:
        parsed.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(TableMetadataUtil, "parse_raw", staticmethod(counting))
    before, opened = consumer.fetcher.loads, consumer.fetcher.opens
    assert consumer.poll(timeout_ms=600) == []
    loads = consumer.fetcher.loads - before
    assert consumer.fetcher.opens == opened and parsed == []  # no fetch opened, no metadata.json parsed
    assert 3 <= loads <= 12  # backed off: 10, 20, 40, 80, 80, ... ms, not a busy loop
    produce_keys(lake, topic, ["b"], partition=0)
    assert offsets(consumer.poll(timeout_ms=2000)) == [(0, 1)]
    assert consumer.fetcher.opens == opened + 1
    consumer.close()


def test_seeks_move_positions_and_bad_seeks_change_nothing(lake: Lake, topic: str) -> None:
    produce_keys(lake, topic, ["a", "b"], partition=0, timestamp_ms=1000)
    produce_keys(lake, topic, ["c", "d"], partition=0, timestamp_ms=5000)
    with Consumer(lake, topic, group="g") as consumer:
        consumer.seek(0, 3)
        assert offsets(consumer.poll()) == [(0, 3)]
        consumer.seek_to_beginning()
        assert consumer.position()[TopicPartition(T, 0)] == 0
        consumer.seek_to_timestamp(4000)
        assert consumer.position()[TopicPartition(T, 0)] == 2
        consumer.seek_to_end([TopicPartition(T, 0)])
        assert consumer.position()[TopicPartition(T, 0)] == 4
        with pytest.raises(OffsetOutOfRangeError, match="beyond the end"):
            consumer.seek(0, 5)
        with pytest.raises(InputError, match="does not exist"):
            consumer.seek(7, 0)
        assert consumer.position()[TopicPartition(T, 0)] == 4


def test_bad_input_is_a_clear_error_that_changes_no_position(lake: Lake, topic: str) -> None:
    produce_keys(lake, topic, ["a", "b"], partition=0)
    with pytest.raises(TopicNotFoundError):
        Consumer(lake, "shop.nothing", group="g")
    with Consumer(lake, topic, group="g") as consumer:
        consumer.poll()
        consumer.commit()
        with pytest.raises(OffsetOutOfRangeError, match="beyond its end"):
            consumer.commit({0: 3})
        consumer.assign([TopicPartition(T, 1)])  # leaves the group: partition 0 is no longer its own
        with pytest.raises(InputError, match="not assigned"):
            consumer.seek(0, 0)
        assert consumer.committed([0]) == {TopicPartition(T, 0): 2}
    store = GroupStore(lake)
    with pytest.raises(GroupNotFoundError, match="unknown consumer group 'nope'"):
        store.require("nope")
    with pytest.raises(GroupNotFoundError):
        store.delete("nope")
    assert store.committed("g", [TopicPartition(T, 0)]) == {TopicPartition(T, 0): 2}


def test_raw_position_below_the_log_start_applies_the_reset_policy_and_records_it(lake: Lake) -> None:
    lake.create_topic(T, partitions=1, config={"retention.ms": "1000"})
    produce_keys(lake, T, ["a", "b"], timestamp_ms=1000)
    produce_keys(lake, T, ["c"], timestamp_ms=10**12)
    clock = FakeClock()
    with Consumer(lake, T, group="g", clock=clock) as consumer:
        assert offsets(consumer.poll(max_records=1)) == [(0, 0)]
        consumer.commit()
        run_retention(lake, T, now_ms=10**12)  # removes the file of offsets 0-1 between two polls
        assert offsets(consumer.poll()) == [(0, 1), (0, 2)]  # its open fetch was pinned before the removal
    with Consumer(lake, T, group="g", clock=clock) as consumer:  # resumes at the committed 1: gone
        assert offsets(consumer.poll()) == [(0, 2)]
        assert consumer.resets == 1
    row = GroupStore(lake).partitions("g")[0]
    assert row.reset_count == 1 and row.last_reset is not None
    assert (row.last_reset.from_offset, row.last_reset.to_offset) == (1, 2)
    GroupStore(lake).commit("g", None, "", {TopicPartition(T, 0): (0, -1)})
    strict = Consumer(lake, T, group="g", auto_offset_reset="error")
    with pytest.raises(OffsetOutOfRangeError, match="below the log start"):
        strict.poll()
    assert strict.committed()[TopicPartition(T, 0)] == 0
    strict.close()


def test_no_committed_position_starts_by_the_policy(lake: Lake, topic: str) -> None:
    produce_keys(lake, topic, ["a", "b"], partition=0)
    with Consumer(lake, topic, group="late", auto_offset_reset="latest") as late:
        assert late.poll() == []
        produce_keys(lake, topic, ["c"], partition=0)
        assert offsets(late.poll(timeout_ms=2000)) == [(0, 2)]
    with Consumer(lake, topic, group="strict", auto_offset_reset="error") as strict, \
            pytest.raises(OffsetOutOfRangeError, match="no committed position"):
        strict.poll()


def test_static_assignment_without_a_group_and_commits_fenced_by_live_members(lake: Lake, topic: str) -> None:
    produce_keys(lake, topic, ["a"], partition=0)
    produce_keys(lake, topic, ["b"], partition=1)
    everything = Consumer(lake, topic)  # no group: every partition, no lease, nothing to commit to
    assert offsets(everything.poll()) == [(0, 0), (1, 0)]
    alone = Consumer(lake, topic, subscribe=False)
    alone.assign([1])
    assert offsets(alone.poll()) == [(1, 0)]
    with pytest.raises(InputError, match="no group"):
        alone.commit()
    member = Consumer(lake, topic, group="g")  # owns both partitions under a lease
    static = Consumer(lake, topic, group="g", subscribe=False)
    static.assign([TopicPartition(T, 0)])
    static.poll()
    with pytest.raises(NotOwnerError, match="not the owner"):
        static.commit()
    member.close()
    static.commit()
    assert static.committed() == {TopicPartition(T, 0): 1}


def test_several_topics(lake: Lake) -> None:
    lake.create_topic("shop.a")
    lake.create_topic("shop.b")
    produce_keys(lake, "shop.a", ["x"])
    produce_keys(lake, "shop.b", ["y", "z"])
    with Consumer(lake, ["shop.a", "shop.b"], group="g") as consumer:
        got = consumer.poll_with_topics()
        assert [(t, r.offset) for t, r in got] == [("shop.a", 0), ("shop.b", 0), ("shop.b", 1)]
        consumer.seek(0, 1, topic="shop.b")
        with pytest.raises(InputError, match="several topics"):
            consumer.seek(0, 0)
        assert consumer.position()[TopicPartition("shop.b", 0)] == 1
        consumer.commit()
        assert consumer.committed() == {TopicPartition("shop.a", 0): 1, TopicPartition("shop.b", 0): 1}


def test_ranges_for_a_batch_engine_then_a_conditional_commit_of_their_ends(lake: Lake, topic: str) -> None:
    produce_keys(lake, topic, ["a", "b"], partition=0)
    with Consumer(lake, topic, group="spark") as consumer:
        ranges = consumer.ranges()
        assert ranges == {TopicPartition(T, 0): (0, 2), TopicPartition(T, 1): (0, 0)}
        consumer.commit({tp: end for tp, (_, end) in ranges.items()})
    with Consumer(lake, topic, group="spark") as again:
        assert again.ranges() == {TopicPartition(T, 0): (2, 2), TopicPartition(T, 1): (0, 0)}


def test_the_package_root_exports_the_consumer_lazily() -> None:
    code = ("import sys, compactor.errors; print('compactor.consumer' in sys.modules); "
            "from compactor import Consumer, TopicPartition; import compactor; "
            "print(Consumer.__module__, 'Consumer' in compactor.__all__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["False", "compactor.consumer.consumer True"]  # loaded on first use only


def test_range_reader_reads_exactly_the_ranges_even_after_more_appends(lake: Lake, topic: str) -> None:
    from compactor.consumer.units import range_reader

    produce_keys(lake, topic, ["a", "b", "c"], partition=0)
    produce_keys(lake, topic, ["d"], partition=1)
    with Consumer(lake, topic, group="spark") as consumer:
        ranges = consumer.ranges()
        produce_keys(lake, topic, ["e"], partition=0)  # after the ranges were taken: not in them
        reader = range_reader(lake, topic, {0: (1, 3), 1: ranges[TopicPartition(T, 1)]}, read_compacted=False)
        got = [(b.column("partition").to_pylist(), b.column("offset").to_pylist()) for b in reader.batches()]
        assert got == [([0, 0], [1, 2]), ([1], [0])]
        with pytest.raises(OffsetOutOfRangeError):
            range_reader(lake, topic, {0: (0, 9)}, read_compacted=False)
