"""How a consumer reads (issue 29; docs/guarantees.md#consumers-and-groups, "Polls"): every partition with records gets
its turn under a per-partition cap, an unreadable data file is retried once and then named in a clear error within the
poll's timeout, and waiting costs the same however large the topic grew."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
from typing import Any

import pytest
from pyiceberg.manifest import ManifestFile

from compactor import Consumer, TopicPartition
from compactor.errors import DataFileMissingError
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.topics.records import ProducerRecord
from readers.reader import TopicReader
from tests.consumers import FakeClock, produce_keys, store_clock

T = "shop.orders"


def test_two_topics_and_their_partitions_take_turns(lake: Lake) -> None:
    """Issue 29, defect 9 (starvation): a consumer of two topics drained the first one's backlog before the
    second got anything."""
    lake.create_topic("shop.busy", partitions=2)
    lake.create_topic("shop.quiet")
    for partition in (0, 1):
        produce(lake.topic("shop.busy"), [ProducerRecord(b"k", b"x" * 100, partition=partition)] * 6_000)
    produce_keys(lake, "shop.quiet", ["q"])
    with Consumer(lake, ["shop.busy", "shop.quiet"], group="g") as consumer:
        polls = [consumer.poll_with_topics(max_records=100) for _ in range(3)]  # three partitions: three turns
        assert [len(p) for p in polls] == [100, 100, 100]
        assert {(t, r.partition) for p in polls for t, r in p} == {("shop.busy", 0), ("shop.busy", 1),
                                                                    ("shop.quiet", 0)}
        large = consumer.poll_with_topics(max_records=20_000)  # a poll larger than a turn takes from each
        assert {(t, r.partition) for t, r in large} == {("shop.busy", 0), ("shop.busy", 1)}
        capped = Consumer(lake, "shop.busy", group="capped", max_partition_fetch_bytes=2_000)
        batches = capped.poll_batches(max_records=500)
        assert sum(b.num_rows for b in batches) == 500
        assert all(b.nbytes <= 2_000 + 200 for b in batches)  # about 2,000 bytes per partition's turn
        turns = [b.column("partition")[0].as_py() for b in batches]
        assert all(x != y for x, y in itertools.pairwise(turns))  # ... and the partitions alternate
        capped.close()


def _delete_data_file(lake: Lake, partition: int) -> str:
    tasks = [t for t in lake.topic(T).table.scan().plan_files() if int(t.file.partition[0]) == partition]
    path = tasks[0].file.file_path
    os.remove(path.removeprefix("file://"))
    return path


def test_a_missing_data_file_is_retried_once_then_named_within_the_timeout(lake: Lake) -> None:
    """Issue 29, defect 3: ``poll()`` re-opened its fetch forever on a missing file (any error whose text
    contained "not found"), ignoring its timeout and sending no heartbeat."""
    lake.create_topic(T, partitions=2)
    produce_keys(lake, T, ["a"], partition=0)
    produce_keys(lake, T, ["b"], partition=1)
    path = _delete_data_file(lake, 1)
    consumer = Consumer(lake, T, group="g")
    outcome: list[BaseException | list[Any]] = []

    def poll() -> None:
        try:
            outcome.append(consumer.poll(timeout_ms=500))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the poll did not return"
    error = outcome[0]
    assert isinstance(error, DataFileMissingError), error
    assert path in str(error) and f"{T} partition 1" in str(error) and "after loading the table again" in str(error)
    assert consumer.fetcher.loads <= 3
    assert consumer.position()[TopicPartition(T, 1)] == 0  # nothing of partition 1 was skipped
    consumer.close()


def test_consume_names_a_missing_data_file_and_exits_in_a_fresh_process(lake: Lake) -> None:
    lake.create_topic(T)
    produce_keys(lake, T, ["a"])
    path = _delete_data_file(lake, 0)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTOR_")}
    env.update(COMPACTOR_CATALOG_NAME=lake.config.catalog_name, COMPACTOR_WAREHOUSE=lake.config.warehouse,
               PYTHONPATH=os.getcwd())
    done = subprocess.run([sys.executable, "-m", "compactor.cli.main", "consume", T, "--group", "g", "--raw",
                           "--timeout-ms", "500"], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("compactor: error:") and path in lines[-1] and "partition 0" in lines[-1]


def test_an_append_to_a_partition_it_does_not_own_does_not_reopen_its_fetch(
        lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29, defect 10: any commit to the topic (an append elsewhere, a compaction, retention) made every
    member re-open its fetch: catalog loads, a metadata parse and a full plan over all partitions."""
    lake.create_topic(T, partitions=2)
    clock = FakeClock()
    store_clock(lake, clock)
    a = Consumer(lake, T, group="g", clock=clock, member_id="a", session_timeout_ms=10_000,
                 heartbeat_interval_ms=1_000)
    b = Consumer(lake, T, group="g", clock=clock, member_id="b", session_timeout_ms=10_000,
                 heartbeat_interval_ms=1_000)
    clock.advance(1_000)
    a.poll()
    b.poll()
    assert (a.assignment(), b.assignment()) == ([TopicPartition(T, 0)], [TopicPartition(T, 1)])
    produce_keys(lake, T, ["x"], partition=0)
    assert [r.offset for r in a.poll()] == [0]
    opened: list[object] = []
    real = TopicReader.__init__

    def counting(self: TopicReader, *args: Any, **kwargs: Any) -> None:
        opened.append(args)
        real(self, *args, **kwargs)

    monkeypatch.setattr(TopicReader, "__init__", counting)
    for key in ("p", "q", "r"):
        produce_keys(lake, T, [key], partition=1)
        assert a.poll() == []
    assert opened == []  # only b's partition changed: a read nothing again
    assert [r.offset for r in b.poll()] == [0, 1, 2]
    a.close()
    b.close()


def test_a_reopened_fetch_plans_only_the_manifests_added_since(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    lake.create_topic(T)
    for i in range(56):  # a history of 56 appends (56 files)
        produce_keys(lake, T, [f"k{i}"])
    consumer = Consumer(lake, T, group="g")
    assert len(consumer.poll(max_records=1000)) == 56
    entries: list[int] = []
    polling = [False]
    real = ManifestFile.fetch_manifest_entry

    def counting(self: ManifestFile, *args: Any, **kwargs: Any) -> Any:
        found = real(self, *args, **kwargs)
        if polling[0]:  # what the consumer reads (an append reads manifests too, to merge them)
            entries.append(len(found))
        return found

    monkeypatch.setattr(ManifestFile, "fetch_manifest_entry", counting)
    for i in range(10):
        produce_keys(lake, T, [f"n{i}"])
        polling[0] = True
        assert [r.key for r in consumer.poll(timeout_ms=2000)] == [f"n{i}".encode()]
        polling[0] = False
    # size-tiered manifests: mostly the one new manifest of one file, now and then a merge (of 8, and here once
    # of 64, when the history crosses 64 files); a full plan would read every file's entry at every re-open
    # (57 to 66 entries each time, over 600 in all)
    assert sum(entries) <= 10 * 9, entries
    consumer.close()
