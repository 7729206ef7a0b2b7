"""Batches that carry their own offsets (docs/guarantees.md#the-raw-log): dense from exactly ``N_p`` on a produced
topic; on a mirrored topic strictly increasing from at least ``N_p``, gaps allowed, with a mirror's source positions and
record committed beside the rows. A mirrored topic takes no batch without offsets. No broker here: the topic is
marked as a mirror directly (tests/kafka_helpers.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from compactor import Producer, ProducerRecord, produce, produce_arrow, produce_dataframe
from compactor.cli.main import main
from compactor.errors import InputError, InvalidRecordError
from compactor.lake import Lake
from compactor.producing.arrow_input import RowNumbers, normalise
from compactor.producing.placements import Placements
from compactor.producing.producer import produce_stream
from compactor.properties import MIRROR_PROPERTY
from compactor.topics.mirrored import MirrorState
from tests.helpers import topic_rows
from tests.kafka_helpers import mirrored_topic


def carried(pairs: list[tuple[int, int]], value: bytes = b"v") -> pa.Table:
    return pa.table({"partition": [p for p, _ in pairs], "offset": [o for _, o in pairs],
                     "key": [f"k{p}-{o}".encode() for p, o in pairs], "value": [value] * len(pairs)})


def stored(lake: Lake, name: str) -> list[tuple[int, int]]:
    return [(r["partition"], r["offset"]) for r in topic_rows(lake.topic(name))]


def test_a_mirrored_topic_keeps_offsets_with_gaps(lake: Lake) -> None:
    topic = mirrored_topic(lake, "k.gaps", partitions=2)
    first = produce_arrow(topic, carried([(0, 3), (1, 10), (0, 7), (0, 8)]), keep_offsets=True)
    assert first.offsets == [(0, 3), (1, 10), (0, 7), (0, 8)]
    assert topic.refresh().offsets().next_offsets == (9, 11)
    second = produce_arrow(topic, carried([(1, 11), (0, 20)]), keep_offsets=True)  # dense continuation is fine
    assert second.offsets == [(1, 11), (0, 20)]
    assert stored(lake, "k.gaps") == [(0, 3), (0, 7), (0, 8), (0, 20), (1, 10), (1, 11)]
    assert topic.refresh().offsets().next_offsets == (21, 12)
    assert topic.offsets().gapped and not lake.create_topic("k.plain").offsets().gapped


@pytest.mark.parametrize(("pairs", "message"), [
    ([(0, 4)], "row 1: partition 0: expected an offset of at least 5, found 4 \\(an overlap\\)"),
    ([(0, 9), (0, 9)], "row 2: partition 0: expected an offset of at least 10, found 9"),
    ([(1, 2), (0, 12), (1, 1)], "row 3: partition 1: expected an offset of at least 3, found 1"),
])
def test_carried_offsets_must_strictly_increase_from_the_log_end(lake: Lake, pairs: list[tuple[int, int]],
                                                                  message: str) -> None:
    topic = mirrored_topic(lake, "k.bad", partitions=2)
    produce_arrow(topic, carried([(0, 4)]), keep_offsets=True)
    before = topic.refresh().snapshot
    with pytest.raises(InvalidRecordError, match=message):
        produce_arrow(topic, carried(pairs), keep_offsets=True)
    assert topic.refresh().snapshot == before and topic.offsets().next_offsets == (5, 0)


def test_chunks_of_one_batch_must_increase_across_their_boundary(lake: Lake) -> None:
    topic = mirrored_topic(lake, "k.chunks")
    chunks = [(normalise(carried([(0, 5), (0, 6)])), RowNumbers()),
              (normalise(carried([(0, 6)])), RowNumbers(first=3))]
    with pytest.raises(InvalidRecordError, match="row 3: partition 0: expected an offset of at least 7, found 6"):
        produce_stream(topic, chunks, keep_offsets=True)
    assert topic.refresh().snapshot is None


def test_a_mirror_records_its_position_and_state_in_the_same_commit(lake: Lake) -> None:
    topic = mirrored_topic(lake, "k.position", partitions=3)
    state = MirrorState("src", "id-1", (0, 4, 0), (12, 20, 6), 1_000)

    result = produce_stream(topic, [(normalise(carried([(0, 2), (0, 9)])), RowNumbers())], keep_offsets=True,
                            positions=[12, 20, 6], properties=lambda current: {MIRROR_PROPERTY: state.to_property()})
    table = topic.refresh().table
    assert topic.offsets().next_offsets == (12, 20, 6)  # past the last record: the source's position
    assert topic.mirror == state
    # one commit: the snapshot that added the rows is current in the very metadata version that holds the state
    current = table.current_snapshot()
    assert current is not None and current.snapshot_id == result.snapshot_id
    assert [len(table.metadata.snapshots)] == [1]


def test_positions_never_move_a_log_end_back(lake: Lake) -> None:
    topic = mirrored_topic(lake, "k.back")
    produce_arrow(topic, carried([(0, 30)]), keep_offsets=True)
    produce_stream(topic, [(normalise(carried([(0, 31)])), RowNumbers())], keep_offsets=True, positions=[10])
    assert topic.refresh().offsets().next_offsets == (32,)


def test_a_produced_topic_still_refuses_gaps(lake: Lake) -> None:
    topic = lake.create_topic("k.dense", partitions=1)
    with pytest.raises(InvalidRecordError, match=r"expected offset 0, found 2 \(a gap\).*gaps only on a mirrored"):
        produce_arrow(topic, carried([(0, 2)]), keep_offsets=True)


def test_a_mirrored_topic_takes_no_batch_without_offsets(lake: Lake) -> None:
    topic = mirrored_topic(lake, "k.only", source="orders")
    refused = "k.only is a mirror of Kafka topic 'orders'.*takes only batches that carry their offsets"
    with pytest.raises(InputError, match=refused):
        produce(topic, [ProducerRecord(key=b"a", value=b"1")])
    with pytest.raises(InputError, match=refused):
        produce_arrow(topic, pa.table({"key": [b"a"], "value": [b"1"]}))
    with pytest.raises(InputError, match=refused):  # refused before any Spark work: no DataFrame is touched
        produce_dataframe(lake, topic, Any)  # type: ignore[arg-type]
    producer = Producer(lake, topic, linger_ms=0)
    with pytest.raises(InputError, match=refused):
        producer.send(b"1", b"a").result(timeout=30)
    producer.close()
    assert topic.refresh().snapshot is None


def test_a_replayed_batch_id_returns_its_carried_offsets(lake: Lake) -> None:
    topic = mirrored_topic(lake, "k.replay", partitions=2)
    first = produce_arrow(topic, carried([(0, 5), (1, 2), (0, 9)]), keep_offsets=True, batch_id="b1")
    again = produce_arrow(topic, carried([(0, 5), (1, 2), (0, 9)]), keep_offsets=True, batch_id="b1")
    assert again.duplicate and again.offsets == first.offsets == [(0, 5), (1, 2), (0, 9)]
    assert len(topic_rows(topic.refresh())) == 3


def run(capsys: pytest.CaptureFixture[str], lake: Lake, *args: str) -> tuple[int, str, str]:
    code = main(["--warehouse", lake.config.warehouse, *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_command_line_prints_carried_offsets_with_gaps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lake = Lake(warehouse=str(tmp_path / "warehouse"))  # the command line's default catalog
    mirrored_topic(lake, "k.cli", partitions=2)
    lines = [{"partition": p, "offset": o, "key": f"k{o}", "value": "v"} for p, o in
             [(1, 4), (0, 100), (1, 9), (0, 101), (0, 250)]]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    code, out, _ = run(capsys, lake, "produce", "k.cli", "--file", str(path), "--keep-offsets", "--batch-records", "2")
    assert code == 0
    assert [(r["partition"], r["offset"]) for r in map(json.loads, out.splitlines())] == [
        (1, 4), (0, 100), (1, 9), (0, 101), (0, 250)]
    assert lake.topic("k.cli").offsets().next_offsets == (251, 10)
    code, _, err = run(capsys, lake, "produce", "k.cli", "--file", str(path))
    assert code == 1 and "takes only batches that carry their offsets" in err


def test_spooled_placements_replay_carried_ranks() -> None:
    placements = Placements(spool=True, keep_ranks=True)
    codes = np.asarray([0, 1, 0], np.int32)
    placements.append(codes, np.asarray([3, 0, 40], np.int64))
    placements.append(np.asarray([1], np.int32), np.asarray([7], np.int64))
    resolved = [(p.tolist(), o.tolist()) for p, o in placements.resolve(np.asarray([10, 20]), 2)]
    placements.close()
    assert resolved == [([0, 1, 0, 1], [13, 20, 50, 27])]


def test_only_a_mirrored_topic_grows(lake: Lake) -> None:
    topic = mirrored_topic(lake, "k.grow", partitions=1)
    produce_arrow(topic, carried([(0, 5)]), keep_offsets=True)
    topic.add_partitions(3)
    offsets = topic.refresh().offsets()
    assert (offsets.partitions, offsets.next_offsets, offsets.log_start_offsets) == (3, (6, 0, 0), (0, 0, 0))
    assert topic.mirror is not None and topic.mirror.skipped == (0, 0, 0)
    produce_arrow(topic, carried([(2, 0), (1, 3)]), keep_offsets=True)
    assert stored(lake, "k.grow") == [(0, 5), (1, 3), (2, 0)]
    with pytest.raises(InputError, match="not a mirror: its partition count is fixed"):
        lake.create_topic("k.fixed").add_partitions(2)


