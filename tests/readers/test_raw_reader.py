"""Raw reads: partition, offset order; streaming; start positions; pinning."""

from __future__ import annotations

import pytest

from compactor.errors import InputError, OffsetOutOfRangeError, TopicNotFoundError
from compactor.iceberg import scan as arrow_io
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.topics.records import ProducerRecord
from readers.positions import StartPosition
from readers.reader import TopicReader


def fill(lake: Lake, batches: int = 4, per_batch: int = 25, partitions: int = 3) -> None:
    topic = lake.create_topic("a.t", partitions=partitions)
    for b in range(batches):
        produce(topic, [ProducerRecord(f"k{i % 11}".encode(), f"b{b}-{i}".encode(), timestamp_ms=b * 1000 + i)
                        for i in range(per_batch)])


def test_records_come_in_partition_offset_order(lake: Lake) -> None:
    fill(lake)
    records = list(TopicReader(lake, "a.t").records())
    assert len(records) == 100
    assert [(r.partition, r.offset) for r in records] == sorted((r.partition, r.offset) for r in records)
    for p in range(3):
        offsets = [r.offset for r in records if r.partition == p]
        assert offsets == list(range(len(offsets)))


def test_reading_streams_file_by_file(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    fill(lake, batches=6)
    reads: list[str] = []
    real = arrow_io.TaskReader.read

    def counting(self: arrow_io.TaskReader, task: object) -> object:
        reads.append(task.file.file_path)  # type: ignore[attr-defined]
        return real(self, task)  # type: ignore[arg-type]

    monkeypatch.setattr(arrow_io.TaskReader, "read", counting)
    batches = TopicReader(lake, "a.t").batches()
    next(batches)
    # after the first batch only the first file and the prefetch window have been read, not the topic
    assert len(reads) <= arrow_io.PREFETCH_FILES + 1
    rest = list(batches)
    assert len(reads) == 18 and len(rest) >= 17


def test_from_offset_and_earliest_latest(lake: Lake) -> None:
    fill(lake, partitions=1)
    reader = TopicReader(lake, "a.t", start={0: 90})
    assert [r.offset for r in reader.records()] == list(range(90, 100))
    assert list(TopicReader(lake, "a.t", start={0: 100}).records()) == []
    assert list(TopicReader(lake, "a.t", start={0: StartPosition.latest()}).records()) == []
    assert len(list(TopicReader(lake, "a.t", start={0: "earliest"}).records())) == 100


def test_out_of_range_offsets_fail_unless_a_reset_policy_is_chosen(lake: Lake) -> None:
    fill(lake, partitions=1)
    with pytest.raises(OffsetOutOfRangeError, match="offset 101 is out of range"):
        TopicReader(lake, "a.t", start={0: 101})
    with pytest.raises(OffsetOutOfRangeError):
        TopicReader(lake, "a.t", start={0: -1})
    assert TopicReader(lake, "a.t", start={0: 101}, reset="latest").start_offsets == {0: 100}
    assert TopicReader(lake, "a.t", start={0: 101}, reset="earliest").start_offsets == {0: 0}


def test_from_timestamp_is_offsets_for_times(lake: Lake) -> None:
    topic = lake.create_topic("a.t")
    stamps = [50, 10, 70, 30, 90, 20]
    produce(topic, [ProducerRecord(b"k", b"v", timestamp_ms=t) for t in stamps])
    for t, expected in [(0, 0), (50, 0), (51, 2), (71, 4), (91, 6)]:
        reader = TopicReader(lake, "a.t", start={0: StartPosition.at_timestamp(t)})
        assert reader.start_offsets[0] == expected, t


def test_unknown_topic_and_partition(lake: Lake) -> None:
    with pytest.raises(TopicNotFoundError):
        TopicReader(lake, "a.nope")
    fill(lake, batches=1)
    with pytest.raises(InputError, match="partition 5 does not exist"):
        TopicReader(lake, "a.t", start={5: 0})


def test_open_reader_is_pinned_against_appends(lake: Lake) -> None:
    fill(lake, batches=2)
    reader = TopicReader(lake, "a.t")
    before = [(r.partition, r.offset, r.value) for r in reader.records()]
    produce(lake.topic("a.t"), [ProducerRecord(b"k0", b"late")] * 10)
    assert [(r.partition, r.offset, r.value) for r in reader.records()] == before
    assert len(list(TopicReader(lake, "a.t").records())) == len(before) + 10


def test_to_arrow_and_pandas(lake: Lake) -> None:
    fill(lake, batches=1)
    table = TopicReader(lake, "a.t").to_arrow()
    assert table.num_rows == 25
    assert table.column_names == ["partition", "offset", "timestamp", "key", "value", "headers"]
    assert len(TopicReader(lake, "a.t").to_pandas()) == 25
