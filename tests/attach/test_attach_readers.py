"""Readers, ``TableView`` and consumers on an attached log (docs/attaching.md, "Reading"): records whose key is the
JSON object of the key columns and whose value is the JSON object of the value columns (null for a tombstone), at
the source's offsets (with gaps); compacted reads are the view below each horizon, then the source from it."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from compactor import Consumer, TopicPartition, attach_table, compact_attached, read_increment
from compactor.attach.reading import read_attached
from compactor.attach.registry import require_attached
from compactor.attach.status import attached_status
from compactor.consumer.admin import describe_group
from compactor.consumer.units import take_unit
from compactor.errors import CursorExpiredError
from compactor.lake import Lake
from readers import StartPosition, TableView, TopicReader, read_topic_dataframe
from readers.attached import record_object
from tests.attach.sources import BASE_MS, connect_rows, connect_table
from tests.attach.test_attach_columns import cli
from tests.consumers import FakeClock, store_clock

T = "lake.orders"
TP0, TP1 = TopicPartition(T, 0), TopicPartition(T, 1)


def row(id_: str | None, region: str | None, amount: int | None, p: int, o: int) -> dict[str, Any]:
    return {"id": id_, "region": region, "amount": amount, "_kafka_metadata_partition": p,
            "_kafka_metadata_offset": o, "_kafka_metadata_timestamp": BASE_MS + o}


FIRST = [row("1", "eu", 10, 0, 0), row("1", "us", 20, 0, 3), row("2", "eu", 30, 1, 5), row("1", "eu", 11, 0, 7),
         row("2", "eu", None, 1, 8), row("3", None, 40, 0, 9)]  # ("2", "eu") in partition 1: a tombstone at 8
TAIL = [row("1", "us", 21, 0, 12), row("4", "eu", 50, 1, 20)]


def attached_log(lake: Lake) -> Any:
    """A Kafka Connect sink table with a composite key (id, region), offsets with gaps, attached as ``T``."""
    source = connect_table(lake.catalog, "sink.orders")
    source.append(connect_rows(source, FIRST))
    attach_table(lake, T, table="sink.orders", layout="kafka-connect", key_columns=["id", "region"])
    return source


def key(id_: str, region: str | None = None) -> bytes:
    return json.dumps({"id": id_, **({"region": region} if region else {})}, separators=(",", ":")).encode()


def positions(records: Any) -> list[tuple[int, int]]:
    return [(r.partition, r.offset) for r in records]


@pytest.mark.spark
def test_readers_and_the_table_view_read_an_attached_log_compacted_and_raw(lake: Lake, spark: object) -> None:
    source = attached_log(lake)
    first = compact_attached(lake, T, now_ms=BASE_MS + 100)
    assert first.horizons == {"0": 10, "1": 9}
    source.append(connect_rows(source, TAIL))

    raw = list(TopicReader(lake, T))
    assert positions(raw) == [(0, 0), (0, 3), (0, 7), (0, 9), (0, 12), (1, 5), (1, 8), (1, 20)]
    assert (raw[0].key, raw[0].value, raw[0].timestamp_ms) == (key("1", "eu"), b'{"amount":10}', BASE_MS)
    assert raw[3].key == key("3") and raw[6].value is None  # a null key column left out; the tombstone
    compacted = list(TopicReader(lake, T, read_compacted=True))
    assert positions(compacted) == [(0, 3), (0, 7), (0, 9), (0, 12), (1, 8), (1, 20)]  # the view, then the tail
    # the same records as Spark's read (the view's tombstone flags are Spark's, the tail's pyarrow's)
    assert [record_object(r) for r in compacted] == list(read_attached(lake, T, read_compacted=True))
    frame = read_topic_dataframe(lake, T, read_compacted=True, ordered=True)  # made on the driver
    assert [(r.partition, r.offset, r.key, r.value) for r in frame.collect()] == [
        (r.partition, r.offset, r.key, r.value) for r in compacted]

    # start positions: an offset in a gap continues at the next record; a timestamp; latest
    reader = TopicReader(lake, T, read_compacted=True, start={0: 4, 1: StartPosition.at_timestamp(BASE_MS + 9)})
    assert positions(reader) == [(0, 7), (0, 9), (0, 12), (1, 20)]
    assert reader.start_offsets == {0: 4, 1: 20} and reader.pinned.end == (13, 21)
    assert list(TopicReader(lake, T, start={0: "latest", 1: "latest"})) == []

    view = TableView(lake, T)
    assert view.to_dict() == {key("1", "us"): b'{"amount":21}', key("1", "eu"): b'{"amount":11}',
                              key("3"): b'{"amount":40}', key("4", "eu"): b'{"amount":50}'}
    assert view.get({"id": "1", "region": "us"}) == b'{"amount":21}'  # the tail's record beats the view's
    assert view.get(key("1", "eu").decode()) == b'{"amount":11}' and view.get({"id": "3", "region": None})
    assert view.get({"id": "2", "region": "eu"}) is None  # its latest record is a tombstone

    # as of a retained cursor: that view, to its horizons, whatever came since
    second = compact_attached(lake, T, now_ms=BASE_MS + 200)
    assert second.horizons == {"0": 13, "1": 21}
    old = first.compacted_snapshot_id
    now = BASE_MS + 300  # cursors are retained for compaction.cursor.retain-ms (1 h) on the runs' clocks
    as_of = TopicReader(lake, T, read_compacted=True, as_of_cursor=old, now_ms=now)
    assert positions(as_of) == [(0, 3), (0, 7), (0, 9), (1, 8)]
    assert TableView(lake, T, as_of_cursor=old, now_ms=now).get({"id": "1", "region": "us"}) == b'{"amount":20}'
    with pytest.raises(CursorExpiredError, match="not retained"):
        TopicReader(lake, T, read_compacted=True, as_of_cursor=old, now_ms=BASE_MS + 200 + 3_600_000)

    # an exactly-once increment (a unit of the group's ranges) as a DataFrame
    increment = read_increment(lake, T, "spark", read_compacted=True)
    assert increment.ranges == {TP0: (0, 13)} and increment.batch_id
    assert sorted((r.offset, r.value) for r in increment.dataframe.collect()) == [
        (7, b'{"amount":11}'), (9, b'{"amount":40}'), (12, b'{"amount":21}')]
    assert increment.commit() == {TP0: 13}
    increment.consumer.close()

    # a partition the cursor does not know, at offsets below every horizon: all of it is the tail
    source.append(connect_rows(source, [row("5", "eu", 60, 2, 1)]))
    assert positions(TopicReader(lake, T, read_compacted=True, start={0: "latest", 1: "latest"})) == [(2, 1)]
    status = attached_status(require_attached(lake.catalog, T))
    assert status.next_offsets == {"0": 13, "1": 21, "2": 2} and status.dirty_records["2"] == 1


def test_a_group_of_two_consumes_an_attached_log_with_commits_and_a_rebalance(lake: Lake) -> None:
    source = attached_log(lake)
    clock = FakeClock(time.time_ns() // 1_000_000)
    store_clock(lake, clock)
    settings: dict[str, Any] = {"session_timeout_ms": 10_000, "heartbeat_interval_ms": 1_000, "clock": clock}
    a = Consumer(lake, T, group="g", member_id="a", **settings)
    got = a.poll(max_records=5)
    assert positions(got) == [(0, 0), (0, 3), (0, 7), (0, 9), (1, 5)]  # offsets with gaps
    a.commit()
    assert a.committed() == {TP0: 10, TP1: 6} and a.end_offsets() == {TP0: 10, TP1: 9}
    b = Consumer(lake, T, group="g", member_id="b", **settings)
    clock.advance(1_000)
    assert a.poll() == [] and a.assignment() == [TP0]  # partition 1 moves to b
    source.append(connect_rows(source, TAIL))
    assert positions(b.poll()) == [(1, 8), (1, 20)]  # from a's commit on: nothing twice, nothing lost
    assert positions(a.poll()) == [(0, 12)]
    a.commit()
    b.commit()
    lag = {(p.partition, p.committed_offset, p.lag) for p in describe_group(lake, "g").partitions}
    assert lag == {(0, 13, 0), (1, 21, 0)}
    b.seek(1, 6)  # a gap: the next record is 8
    assert positions(b.poll()) == [(1, 8), (1, 20)]
    a.close()
    b.close()


def test_exactly_once_units_of_an_attached_log_replay_the_same_records(lake: Lake) -> None:
    source = attached_log(lake)
    crashed = Consumer(lake, T, group="eo")
    unit = take_unit(crashed, T)
    assert unit is not None and (unit.tp, unit.start, unit.end) == (TP0, 0, 10)
    records = [b.column("offset").to_pylist() for b in unit.reader.batches()]
    crashed.close()  # before its commit
    source.append(connect_rows(source, TAIL))
    with Consumer(lake, T, group="eo") as again:
        replay = take_unit(again, T)
        assert replay is not None and replay.replayed and replay.batch_id == unit.batch_id
        assert [b.column("offset").to_pylist() for b in replay.reader.batches()] == records == [[0, 3, 7, 9]]
        again.commit({replay.tp: replay.end})
        taken = [(u.tp.partition, u.start, u.end) for u in iter(lambda: take_unit(again, T), None)
                 if again.commit({u.tp: u.end})]
    assert taken == [(1, 0, 21), (0, 10, 13)]


@pytest.mark.spark
@pytest.mark.slow
def test_read_and_consume_on_an_attached_log_in_a_fresh_process(lake: Lake, spark: object) -> None:
    source = attached_log(lake)
    cursor = compact_attached(lake, T, now_ms=BASE_MS + 100).compacted_snapshot_id
    source.append(connect_rows(source, TAIL))
    read = cli(lake, "read", T, "--compacted", "--as-of-cursor", str(cursor), "--now-ms", str(BASE_MS + 200))
    assert read.returncode == 0, read.stderr
    lines = [json.loads(line) for line in read.stdout.splitlines()]
    assert [(r["partition"], r["offset"]) for r in lines] == [(0, 3), (0, 7), (0, 9), (1, 8)]
    assert lines[0]["key"] == {"id": "1", "region": "us"} and lines[0]["value"] == {"amount": 20}
    assert lines[3]["value"] is None
    read = cli(lake, "read", T, "--raw", "--from-timestamp", f"0:{BASE_MS + 8}", "--from-offset", "1:6")
    assert [(json.loads(line)["partition"], json.loads(line)["offset"]) for line in read.stdout.splitlines()] == [
        (0, 9), (0, 12), (1, 8), (1, 20)], read.stderr
    consumed = cli(lake, "consume", T, "--group", "cli", "--compacted", "--timeout-ms", "200")
    assert consumed.returncode == 0, consumed.stderr
    assert sorted((r["partition"], r["offset"], r["value"] and r["value"]["amount"]) for r in map(
        json.loads, consumed.stdout.splitlines())) == [(0, 3, 20), (0, 7, 11), (0, 9, 40), (0, 12, 21), (1, 8, None),
                                                       (1, 20, 50)]
    again = cli(lake, "consume", T, "--group", "cli", "--compacted", "--timeout-ms", "200")
    assert again.returncode == 0 and again.stdout == "", again.stderr  # committed: nothing comes twice


def test_offsets_and_status_read_only_the_source_files_past_the_horizons(lake: Lake) -> None:
    """The row filter for "past the horizons" (``attach.log.past_horizons``) lets pyiceberg skip every source file
    below the horizons of the partitions it knows, although each file mixes partitions, and keeps a file of a
    partition without a horizon (a ``NOT IN`` of the known partitions skipped none)."""
    from compactor.attach.log import past_horizons
    from compactor.iceberg.scan import tasks_matching

    def rows(partitions: range, offsets: range) -> list[dict[str, Any]]:
        return [{"id": f"k{o}", "region": "eu", "amount": o, "_kafka_metadata_partition": p,
                 "_kafka_metadata_offset": o, "_kafka_metadata_timestamp": BASE_MS}
                for p in partitions for o in offsets]

    source = connect_table(lake.catalog, "sink.files")
    for partitions, offsets in ((range(2), range(10)), (range(2), range(10, 20)), (range(3, 4), range(4))):
        source.append(connect_rows(source, rows(partitions, offsets)))
    attached = attach_table(lake, "lake.files", table="sink.files", layout="kafka-connect", key_columns=["id"])
    tasks = list(source.refresh().scan().plan_files())
    kept = tasks_matching(source.schema(), tasks, past_horizons(attached.mapping, {0: 10, 1: 12}))
    assert len(tasks) == 3 and len(kept) == 2
    assert {task.file.record_count for task in kept} == {20, 4}  # the file of offsets 10..19, and partition 3's
