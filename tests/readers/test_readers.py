"""docs/guarantees.md#readers through the real job: the reader invariant under concurrent producing and compacting,
pinning, seeking by offset and timestamp in both views, as-of reads, errors, the Spark reader and the table
view. (Raw-only reader behaviour without Spark is in test_raw_reader.py and test_table_view.py.)"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from compactor import schema as ts
from compactor.compaction.job import compact_topic
from compactor.errors import CursorExpiredError, OffsetOutOfRangeError
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.topics.records import ProducerRecord, Record
from readers.positions import StartPosition
from readers.reader import TopicReader, batch_to_records
from readers.spark import read_topic_dataframe
from readers.table_view import TableView
from tests.backends import attach_spark
from tests.conftest import new_lake_config
from tests.helpers import produce_both, raw, view
from tests.model import TopicModel

pytestmark = pytest.mark.spark
HOUR = 3_600_000
NOW = 20 * 24 * HOUR


def raw_at(reader: TopicReader) -> list[Record]:
    """Every record of the reader's pinned raw snapshot ``R``, in partition, offset order (read through the table
    metadata the reader opened on: later appends drop older snapshots' entries from the current metadata)."""
    if reader.raw_snapshot_id is None:
        return []
    table = reader.topic.table.scan(snapshot_id=reader.raw_snapshot_id).to_arrow()
    table = table.sort_by([(ts.PARTITION, "ascending"), (ts.OFFSET, "ascending")])
    return [r for batch in table.to_batches() for r in batch_to_records(batch)]


def check_invariant(reader_records: list[Record], raw_records: list[Record]) -> None:
    """Section 5: per (p, k), the compacted reader's last record is R's highest-offset record."""
    latest_raw: dict[tuple[int, bytes], Record] = {}
    for record in raw_records:
        if record.key is not None:
            latest_raw[(record.partition, record.key)] = record
    last_read: dict[tuple[int, bytes], Record] = {}
    for record in reader_records:
        if record.key is not None:
            last_read[(record.partition, record.key)] = record
    for position, expected in latest_raw.items():
        assert last_read.get(position) == expected, f"{position}: read {last_read.get(position)}, R has {expected}"
    assert set(last_read) <= set(latest_raw)
    for p in {r.partition for r in reader_records}:
        offsets = [r.offset for r in reader_records if r.partition == p]
        assert offsets == sorted(set(offsets)), f"partition {p} is not in strictly increasing offset order"


def rand_batch(rng: random.Random, size: int, keys: int) -> list[ProducerRecord]:
    out = []
    for _ in range(size):
        key = None if rng.random() < 0.1 else f"k{rng.randrange(keys)}".encode()
        value = None if key is not None and rng.random() < 0.15 else rng.randbytes(rng.randrange(1, 9))
        out.append(ProducerRecord(key, value, timestamp_ms=NOW - rng.randrange(HOUR)))
    return out


@pytest.mark.slow
def test_reader_invariant_and_pinning_under_concurrent_produce_and_compact(spark: SparkSession, lake: Lake) -> None:
    """Readers opened at random moments while a producer thread appends and the main thread compacts: each
    satisfies the invariant against its own pinned R, and re-reading it at the end returns the same records."""
    rng = random.Random(5)
    lake.create_topic("c.t", partitions=3, config={"cleanup.policy": "compact"})
    stop = threading.Event()
    errors: list[BaseException] = []

    def producer() -> None:
        local = random.Random(6)
        try:
            while not stop.wait(0.05):  # a batch every 50 ms at most: the runs and reads overlap appends, and
                # the topic does not grow by hundreds of commits that only slow every plan down
                produce(lake.topic("c.t"), rand_batch(local, local.randrange(1, 15), 12), now_ms=NOW)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=producer, daemon=True)
    produce(lake.topic("c.t"), rand_batch(rng, 20, 12), now_ms=NOW)
    thread.start()
    opened: list[tuple[TopicReader, list[Record]]] = []
    try:
        for round_number in range(4):
            for compacted in (True, False):
                reader = TopicReader(lake, "c.t", read_compacted=compacted, now_ms=NOW + round_number)
                opened.append((reader, list(reader.records())))
            compact_topic(lake, "c.t", now_ms=NOW + round_number)
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not errors, errors
    assert any(r.cursor is not None for r, _ in opened), "some reader should have read through a cursor"
    for reader, first_read in opened:
        pinned_raw = raw_at(reader)
        if reader.read_compacted:
            check_invariant(first_read, pinned_raw)
        else:
            assert first_read == pinned_raw
        assert list(reader.records()) == first_read, "an open reader's results changed"


def build_compacted_topic(lake: Lake) -> TopicModel:
    """One partition: offsets 0..9 with keys a,b,a,c,b,a,d,c,e,a at timestamps 1000*(o+1), compacted with the
    horizon at 10, then a tail of offsets 10..11 (keys f, a)."""
    lake.create_topic("s.t", config={"cleanup.policy": "compact"})
    model = TopicModel(1)
    keys = "abacbadcea"
    produce_both(lake, "s.t", model, [ProducerRecord(k.encode(), f"v{i}".encode(), timestamp_ms=1000 * (i + 1))
                                      for i, k in enumerate(keys)], NOW)
    compact_topic(lake, "s.t", now_ms=NOW)
    produce_both(lake, "s.t", model, [ProducerRecord(b"f", b"v10", timestamp_ms=11000),
                                      ProducerRecord(b"a", b"v11", timestamp_ms=12000)], NOW)
    return model


@pytest.fixture
def compacted_topic(spark: SparkSession, lake: Lake) -> TopicModel:
    """``build_compacted_topic`` in this test's lake, for the tests that change it."""
    return build_compacted_topic(lake)


@pytest.fixture(scope="module")
def compacted_lake(spark_session: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    """``build_compacted_topic`` compacted once, for the tests that only read it."""
    shared = attach_spark(Lake(new_lake_config(tmp_path_factory.mktemp("readers") / "warehouse")), spark_session)
    build_compacted_topic(shared)
    yield shared
    shared.close()


def offsets(records: list[Record]) -> list[int]:
    return [r.offset for r in records]


def test_compacted_view_is_compacted_rows_then_tail(compacted_lake: Lake) -> None:
    lake = compacted_lake
    # latest below 10: b@4, d@6, c@7, e@8, a@9; then the tail 10, 11
    assert offsets(view(lake, "s.t")) == [4, 6, 7, 8, 9, 10, 11]
    assert offsets(raw(lake, "s.t")) == list(range(12))


def test_seek_by_offset_in_the_compacted_view(compacted_lake: Lake) -> None:
    lake = compacted_lake
    assert offsets(view(lake, "s.t", start={0: 7})) == [7, 8, 9, 10, 11]
    # offset 5 was removed by compaction: not an error, reading continues at the next higher offset
    assert offsets(view(lake, "s.t", start={0: 5})) == [6, 7, 8, 9, 10, 11]
    assert offsets(view(lake, "s.t", start={0: 12})) == []  # N_p is valid: nothing yet
    assert offsets(view(lake, "s.t", start={0: 0})) == [4, 6, 7, 8, 9, 10, 11]  # compacted start is 0
    with pytest.raises(OffsetOutOfRangeError, match="out of range"):
        view(lake, "s.t", start={0: 13})
    assert offsets(view(lake, "s.t", start={0: 13}, reset="latest")) == []
    assert offsets(view(lake, "s.t", start={0: 13}, reset="earliest")) == [4, 6, 7, 8, 9, 10, 11]


def test_seek_by_timestamp_uses_the_view_being_read(compacted_lake: Lake) -> None:
    lake = compacted_lake
    # offset o has timestamp 1000*(o+1). In the raw view 3500 -> offset 3; in the compacted view offset 3
    # is gone, so the first record with timestamp >= 3500 is offset 4.
    assert offsets(raw(lake, "s.t", start={0: StartPosition.at_timestamp(3500)}))[0] == 3
    assert offsets(view(lake, "s.t", start={0: StartPosition.at_timestamp(3500)})) == [4, 6, 7, 8, 9, 10, 11]
    assert offsets(view(lake, "s.t", start={0: StartPosition.at_timestamp(11000)})) == [10, 11]
    assert offsets(view(lake, "s.t", start={0: StartPosition.at_timestamp(99_000)})) == []


def test_as_of_a_retained_cursor_and_expiry(compacted_topic: TopicModel, spark: SparkSession, lake: Lake) -> None:
    first = TopicReader(lake, "s.t", read_compacted=True).cursor
    assert first is not None
    before = [r for r in view(lake, "s.t") if r.offset < 12]
    lake.topic("s.t").set_config({"compaction.cursor.retain-ms": str(HOUR)})
    compact_topic(lake, "s.t", now_ms=NOW + 1000)  # replaces the first cursor
    produce(lake.topic("s.t"), [ProducerRecord(b"a", b"later", timestamp_ms=13000)], now_ms=NOW)
    # as of the first cursor: its compacted rows, then raw offsets [H, N_p(S(C))): the raw log at that time
    as_of = view(lake, "s.t", as_of_cursor=first.snapshot_id, now_ms=NOW + 2000)
    assert offsets(as_of) == [4, 6, 7, 8, 9]
    assert as_of == [r for r in before if r.offset < 10]
    assert offsets(view(lake, "s.t", now_ms=NOW + 2000)) == [4, 6, 7, 8, 10, 11, 12]  # 11 superseded only in the tail
    # a later run, more than retain-ms after the first cursor was replaced, ends its retention
    produce(lake.topic("s.t"), [ProducerRecord(b"z", b"z", timestamp_ms=14000)], now_ms=NOW)
    compact_topic(lake, "s.t", now_ms=NOW + 1000 + HOUR + 1)
    with pytest.raises(CursorExpiredError, match=str(first.snapshot_id)):
        view(lake, "s.t", as_of_cursor=first.snapshot_id, now_ms=NOW + 1000 + HOUR + 2)
    with pytest.raises(CursorExpiredError, match="12345"):
        view(lake, "s.t", as_of_cursor=12345)


def test_spark_reader_returns_the_python_readers_records(compacted_topic: TopicModel, spark: SparkSession,
                                                          lake: Lake) -> None:
    lake.create_topic("s.multi", partitions=3, config={"cleanup.policy": "compact"})
    rng = random.Random(3)
    produce(lake.topic("s.multi"), rand_batch(rng, 60, 10), now_ms=NOW)
    compact_topic(lake, "s.multi", now_ms=NOW)
    produce(lake.topic("s.multi"), rand_batch(rng, 20, 10), now_ms=NOW)
    cases = [("s.t", True, None), ("s.t", False, None), ("s.t", True, {0: 5}), ("s.multi", True, None),
             ("s.multi", False, {1: 3}), ("s.multi", True, {2: "latest"})]
    for name, compacted, start in cases:
        expected = list(TopicReader(lake, name, read_compacted=compacted, start=start).records())
        frame = read_topic_dataframe(lake, name, read_compacted=compacted, start=start, ordered=True)
        assert frame.columns == list(ts.COLUMNS)
        table = pa.Table.from_pylist([row.asDict(recursive=True) for row in frame.collect()])
        got = [Record(r["partition"], r["offset"], int(r["timestamp"].timestamp() * 1000), r["key"] and bytes(r["key"]),
                      r["value"] and bytes(r["value"]),
                      tuple((h["key"], h["value"] and bytes(h["value"])) for h in r["headers"] or ()))
               for r in table.to_pylist()]
        assert got == expected, (name, compacted, start)


@pytest.mark.slow  # pinning stays in the loop (test_retention_compacted.py)
def test_spark_reader_is_pinned(compacted_topic: TopicModel, spark: SparkSession, lake: Lake) -> None:
    frame = read_topic_dataframe(lake, "s.t", read_compacted=True)
    before = frame.count()
    produce(lake.topic("s.t"), [ProducerRecord(b"new", b"x")], now_ms=NOW)
    compact_topic(lake, "s.t", now_ms=NOW + 5)
    assert frame.count() == before == 7


def test_table_view_matches_the_latest_live_value_per_key(spark: SparkSession, lake: Lake) -> None:
    rng = random.Random(9)
    lake.create_topic("v.t", partitions=3, config={"cleanup.policy": "compact"})
    model = TopicModel(3)
    for round_number in range(3):
        produce_both(lake, "v.t", model, rand_batch(rng, 80, 25), NOW)
        if round_number < 2:
            compact_topic(lake, "v.t", now_ms=NOW + round_number)
    latest: dict[bytes, Record] = {}
    for record in [r for part in model.log for r in part]:
        if record.key is not None:
            latest[record.key] = record  # default partitioner: a key lives in one partition
    expected = {k: r.value for k, r in latest.items() if r.value is not None}
    table_view = TableView(lake, "v.t")
    assert table_view.to_dict() == expected
    assert any(r.value is None for r in latest.values()), "the scenario should include tombstoned keys"
    for key, record in latest.items():
        assert table_view.get(key) == record.value
        assert table_view.last_lookup.segments >= 1
    assert table_view.get("never-produced") is None
    assert "never-produced" not in table_view
    keys = list(table_view.keys())
    assert len(keys) == len(set(keys)) == len(expected)


def test_cli_reads_the_compacted_view_from_an_offset(compacted_lake: Lake, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    lake = compacted_lake
    import json

    from compactor.cli.main import main

    monkeypatch.setenv("COMPACTOR_CATALOG_NAME", lake.config.catalog_name)
    base = ["--warehouse", lake.config.warehouse]
    assert main([*base, "read", "s.t", "--compacted", "--from-offset", "0:5"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["offset"] for r in lines] == [6, 7, 8, 9, 10, 11]
    assert lines[-1] == {"partition": 0, "offset": 11, "timestamp_ms": 12000, "key": "a", "value": "v11",
                         "headers": []}
    assert main([*base, "read", "s.t", "--compacted", "--from-timestamp", "0:11000"]) == 0
    assert [json.loads(line)["offset"] for line in capsys.readouterr().out.splitlines()] == [10, 11]
    assert main([*base, "read", "s.t", "--compacted", "--from-offset", "0:99"]) != 0
    assert "out of range" in capsys.readouterr().err
