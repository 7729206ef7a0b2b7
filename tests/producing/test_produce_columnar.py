"""The columnar producer: Arrow, record batches and pandas as one atomic batch, vectorised placement equal to the
record-at-a-time path, errors naming their row, mirror batches, and lost races."""

from __future__ import annotations

import random
import threading

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor import failpoints
from compactor.errors import InputError, InvalidRecordError
from compactor.lake import Lake
from compactor.producing.producer import produce, produce_arrow
from compactor.topics.partitioner import (
    PARALLEL_KEYS,
    murmur2,
    murmur2_array,
    partition_for_key,
    partitions_for_keys,
)
from compactor.topics.records import ProducerRecord
from tests.helpers import data_file_paths as data_files
from tests.helpers import rival_commits_first
from tests.helpers import topic_rows as rows

T0 = 1_800_000_000_000


# --- the vectorised partitioner -------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=70)), max_size=60), st.integers(1, 50),
       st.integers(0, 5), st.booleans())
def test_vectorised_murmur2_agrees_with_the_scalar_one(keys: list[bytes | None], partitions: int, skip: int,
                                                       large: bool) -> None:
    array = pa.array([b"pad"] * skip + keys, pa.large_binary() if large else pa.binary()).slice(skip)
    hashes = murmur2_array(array)
    assert hashes.tolist() == [murmur2(k if k is not None else b"") for k in keys]
    assert partitions_for_keys(array, partitions).tolist() == [
        partition_for_key(k if k is not None else b"", partitions) for k in keys]


def test_large_key_arrays_are_hashed_in_parallel_slices_with_the_same_result() -> None:
    keys = pa.array([f"user-{i}".encode() for i in range(PARALLEL_KEYS + 12_345)], pa.large_binary())
    expected = (murmur2_array(keys) & 0x7FFFFFFF) % 9
    assert np.array_equal(partitions_for_keys(keys, 9), expected)
    assert partitions_for_keys(keys, 9)[-1] == partition_for_key(f"user-{len(keys) - 1}".encode(), 9)


def test_vectorised_murmur2_matches_kafka_vectors() -> None:
    keys = [b"21", b"foobar", b"a-little-bit-long-string", b"a-little-bit-longer-string",
            b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", b"abc"]
    assert murmur2_array(pa.array(keys)).tolist() == [-973932308, -790332482, -985981536, -1486304829,
                                                       -58897971, 479470107]


# --- the same contract as record-at-a-time producing --------------------------------------------------------


def random_records(rng: random.Random, count: int, partitions: int) -> list[ProducerRecord]:
    out = []
    for i in range(count):
        key = None if rng.random() < 0.2 else f"k{rng.randrange(30)}".encode()
        value = None if key is not None and rng.random() < 0.1 else rng.randbytes(rng.randrange(0, 20))
        headers = tuple((f"h{j}", None if rng.random() < 0.3 else rng.randbytes(3)) for j in range(rng.randrange(3)))
        partition = rng.randrange(partitions) if rng.random() < 0.2 else None
        stamp = rng.randrange(10**12) if rng.random() < 0.5 else None
        out.append(ProducerRecord(key, value, headers, partition, stamp))
        if i % 17 == 0:
            out.append(ProducerRecord(None, b"keyless"))
    return out


def as_table(records: list[ProducerRecord]) -> pa.Table:
    return pa.table({
        "key": pa.array([r.key for r in records], pa.binary()),
        "value": pa.array([r.value for r in records], pa.binary()),
        "partition": pa.array([r.partition for r in records], pa.int32()),
        "timestamp_ms": pa.array([r.timestamp_ms for r in records], pa.int64()),
        "headers": pa.array([[{"key": k, "value": v} for k, v in r.headers] for r in records],
                            pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    })


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_arrow_batches_land_exactly_where_records_do(lake: Lake, seed: int) -> None:
    rng = random.Random(seed)
    records = random_records(rng, 300, 3)
    scalar = lake.create_topic("s.scalar", partitions=3)
    columnar = lake.create_topic("s.columnar", partitions=3)
    for round_number in range(2):
        expected = produce(scalar, records, now_ms=T0 + round_number)
        batches = as_table(records).to_batches(max_chunksize=70)  # an iterator of record batches
        got = produce_arrow(columnar, iter(batches), now_ms=T0 + round_number)
        assert got.offsets == expected.offsets
    assert rows(columnar) == rows(scalar)


def test_pandas_and_text_columns(lake: Lake) -> None:
    topic = lake.create_topic("s.pd", partitions=2)
    frame = pd.DataFrame({"key": ["a", None, "c"], "value": ["x", "y", None],
                          "timestamp_ms": pd.to_datetime([1000, 2500, 4000], unit="ms", utc=True)})
    result = produce_arrow(topic, frame, now_ms=T0)
    stored = {(r["partition"], r["offset"]): r for r in rows(topic)}
    for i, position in enumerate(result.offsets):
        row = stored[position]
        assert row["value"] == (frame["value"][i].encode() if frame["value"][i] is not None else None)
        assert row["timestamp"].timestamp() * 1000 == [1000, 2500, 4000][i]
    assert result.offsets[0][0] == partition_for_key(b"a", 2)


def test_headers_as_pairs_and_a_record_batch_reader(lake: Lake) -> None:
    topic = lake.create_topic("s.h")
    table = pa.table({"key": [b"k"], "value": [b"v"], "headers": [[["trace", "abc"], ["n", None]]]})
    produce_arrow(topic, pa.RecordBatchReader.from_batches(table.schema, table.to_batches()))
    assert rows(topic)[0]["headers"] == [{"key": "trace", "value": b"abc"}, {"key": "n", "value": None}]


def test_empty_input_commits_nothing(lake: Lake) -> None:
    topic = lake.create_topic("s.e")
    assert produce_arrow(topic, pa.table({"key": pa.array([], pa.binary())})).records == 0
    assert produce_arrow(topic, iter([]), batch_id="empty").snapshot_id is None
    assert topic.refresh().snapshot is None


BAD_INPUTS = [
    (pa.table({"key": [b"a"], "colour": [1]}), InputError, "unknown column"),
    (pa.table({"key": [1, 2]}), InputError, "column 'key' must be binary or text"),
    (pa.table({"value": [b"a", b"b", b"c"], "partition": [0, 1, 5]}), InvalidRecordError,
     r"row 3: partition 5 is out of range"),
    (pa.table({"value": [b"a", b"x" * 300]}), InvalidRecordError, r"row 2: record of 300 bytes exceeds"),
    (pa.table({"value": [b"a"], "timestamp_ms": [-5]}), InvalidRecordError, r"row 1: timestamp_ms must be"),
    (pa.table({"value": [b"a", b"b"], "headers": [[["k", "v"]], [["k", "v", "extra"]]]}), InvalidRecordError,
     r"row 2: headers must be \[key, value\] pairs"),
    (pa.table({"value": [b"a"], "headers": pa.array([[{"key": None, "value": b"v"}]],
                                                    pa.list_(pa.struct([("key", pa.string()),
                                                                        ("value", pa.binary())])))}),
     InvalidRecordError, r"row 1: a header key must be a string"),
    (pa.table({"value": [b"a"], "offset": [0]}), InvalidRecordError, r"row 1: a mirror batch .* needs 'partition'"),
]


@pytest.mark.parametrize("bad, error, message", BAD_INPUTS)
def test_bad_input_is_a_clear_error_and_writes_nothing(lake: Lake, bad: pa.Table, error: type[Exception],
                                                       message: str) -> None:
    topic = lake.create_topic("s.bad", partitions=2, config={"max.message.bytes": "200"})
    mirror = "mirror" in message
    with pytest.raises(error, match=message):
        produce_arrow(topic, bad, keep_offsets=mirror)
    assert topic.refresh().snapshot is None
    assert data_files(topic) == []


def test_a_bad_row_in_a_later_chunk_names_its_row_and_discards_earlier_chunks(lake: Lake) -> None:
    topic = lake.create_topic("s.late", partitions=2)
    good = pa.record_batch({"value": pa.array([b"v"] * 100)})
    bad = pa.record_batch({"value": pa.array([b"v"] * 9 + [b"v"]), "timestamp_ms": pa.array([1] * 9 + [-1])})
    with pytest.raises(InvalidRecordError, match="row 210: timestamp_ms"):
        produce_arrow(topic, iter([good, good, bad]))
    assert topic.refresh().snapshot is None
    assert data_files(topic) == []


def test_lost_race_rebases_every_partition(lake: Lake) -> None:
    topic = lake.create_topic("s.race", partitions=3)
    rival = lake.topic("s.race")
    rival_rows = pa.table({"key": [f"r{i}".encode() for i in range(30)], "value": [b"rival"] * 30})
    mine = pa.table({"key": [f"m{i % 50}".encode() for i in range(3000)], "value": [b"mine"] * 3000})
    with rival_commits_first(lambda: produce_arrow(rival.refresh(), rival_rows)):
        result = produce_arrow(topic, mine)
    assert result.attempts == 2
    stored = rows(topic)
    for p in range(3):
        assert [r["offset"] for r in stored if r["partition"] == p] == list(
            range(sum(1 for r in stored if r["partition"] == p)))
    by_position = {(r["partition"], r["offset"]): r["value"] for r in stored}
    assert all(by_position[position] == b"mine" for position in result.offsets)
    assert len(data_files(topic)) == len(topic.raw_files())  # the stale files of the lost attempt are gone


def test_concurrent_threads_get_dense_disjoint_offsets(lake: Lake) -> None:
    lake.create_topic("s.threads", partitions=2)
    results: dict[int, list[tuple[int, int]]] = {}
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            topic = lake.topic("s.threads")
            for batch in range(4):
                table = pa.table({"key": [f"w{worker}-{i}".encode() for i in range(20)],
                                  "value": [f"{worker}:{batch}:{i}".encode() for i in range(20)]})
                results[worker * 10 + batch] = produce_arrow(topic, table).offsets
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    stored = rows(lake.topic("s.threads"))
    assert len(stored) == 4 * 4 * 20
    for p in range(2):
        offsets = [r["offset"] for r in stored if r["partition"] == p]
        assert offsets == list(range(len(offsets)))
    by_position = {(r["partition"], r["offset"]): r["value"] for r in stored}
    for key, offsets in results.items():
        worker, batch = divmod(key, 10)
        assert [by_position[o] for o in offsets] == [f"{worker}:{batch}:{i}".encode() for i in range(20)]


# --- mirror batches (keep offsets) ------------------------------------------------------------------------------


def mirror_table(pairs: list[tuple[int, int]]) -> pa.Table:
    return pa.table({"partition": [p for p, _ in pairs], "offset": [o for _, o in pairs],
                     "key": [f"k{o}".encode() for _, o in pairs], "value": [b"m"] * len(pairs)})


def test_a_mirror_batch_keeps_its_offsets(lake: Lake) -> None:
    topic = lake.create_topic("m.t", partitions=2)
    produce_arrow(topic, mirror_table([(0, 0), (1, 0), (0, 1)]), keep_offsets=True)
    result = produce_arrow(topic, mirror_table([(1, 1), (0, 2), (1, 2), (0, 3)]), keep_offsets=True)
    assert result.offsets == [(1, 1), (0, 2), (1, 2), (0, 3)]
    assert topic.refresh().offsets().next_offsets == (4, 3)


@pytest.mark.parametrize("pairs, message", [
    ([(0, 3), (0, 4)], "partition 0: expected offset 2, found 3 \\(a gap\\)"),
    ([(1, 0)], "partition 1: expected offset 1, found 0 \\(an overlap\\)"),
    ([(0, 2), (0, 4)], "row 2: partition 0: expected offset 3, found 4"),
])
def test_a_mirror_gap_or_overlap_is_refused(lake: Lake, pairs: list[tuple[int, int]], message: str) -> None:
    topic = lake.create_topic("m.bad", partitions=2)
    produce_arrow(topic, mirror_table([(0, 0), (0, 1), (1, 0)]), keep_offsets=True)
    before = topic.refresh().snapshot
    with pytest.raises(InvalidRecordError, match=message):
        produce_arrow(topic, mirror_table(pairs), keep_offsets=True)
    assert topic.refresh().snapshot == before
    assert len(data_files(topic)) == 2


def test_a_mirror_batch_that_loses_a_race_is_refused(lake: Lake) -> None:
    topic = lake.create_topic("m.race")
    rival = lake.topic("m.race")

    def rival_first() -> None:
        with failpoints.enabled({"produce-before-commit": lambda: None}):
            produce_arrow(rival.refresh(), pa.table({"value": [b"r"]}))

    with failpoints.enabled({"produce-before-commit": rival_first}), \
            pytest.raises(InvalidRecordError, match="expected offset 1, found 0"):
        produce_arrow(topic, mirror_table([(0, 0), (0, 1)]), keep_offsets=True)
    assert [r["value"] for r in rows(topic)] == [b"r"]


def test_vectorised_plan_handles_many_partitions(lake: Lake) -> None:
    topic = lake.create_topic("s.many", partitions=40)
    keys = [f"key-{i}".encode() for i in range(2000)]
    result = produce_arrow(topic, pa.table({"key": keys, "value": keys}))
    assert result.partitions.tolist() == [partition_for_key(k, 40) for k in keys]
    counts = np.bincount(result.partitions, minlength=40)
    assert sorted(result.offset_array[result.partitions == 7].tolist()) == list(range(int(counts[7])))
