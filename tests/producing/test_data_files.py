"""The producer's data files: per-column Parquet settings (``producing.files.file_writer_kwargs``), the bounds
the compactor plans with, rows read back as written; and the read-ahead that overlaps reading with writing
(``workers.ahead``)."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from compactor.lake import Lake
from compactor.producing.files import FILE_SCHEMA, file_writer_kwargs
from compactor.producing.producer import produce_arrow
from compactor.workers import ahead

T0 = 1_800_000_000_000


def test_data_files_encode_the_small_columns_cheaply_and_keep_rows_and_bounds(lake: Lake) -> None:
    topic = lake.create_topic("f.files", partitions=3)
    count = 5000
    plain = pa.table({"key": [f"k{i % 97}".encode() for i in range(count)],
                      "value": [b"v%d" % i for i in range(count)]})
    stamped = pa.table({"key": [f"k{i % 13}".encode() for i in range(50)], "value": [b"s"] * 50,
                        "timestamp_ms": pa.array([T0 - 1000 + i if i % 3 else None for i in range(50)], pa.int64()),
                        "headers": [[{"key": "h", "value": b"x"}] if i % 2 else None for i in range(50)]})
    produce_arrow(topic, plain, now_ms=T0)
    produce_arrow(topic, stamped, now_ms=T0 + 5)
    files = topic.refresh().raw_files()
    assert sum(f.record_count for f in files) == count + 50
    for raw in files:
        path = raw.path.replace("file://", "")
        meta = pq.ParquetFile(path).metadata
        chunks = {meta.row_group(0).column(i).path_in_schema: meta.row_group(0).column(i)
                  for i in range(meta.num_columns)}
        assert "DELTA_BINARY_PACKED" in chunks["offset"].encodings
        assert "RLE_DICTIONARY" in chunks["partition"].encodings
        assert "RLE_DICTIONARY" in chunks["timestamp"].encodings
        assert {chunks[c].compression for c in ("partition", "offset", "timestamp")} == {"UNCOMPRESSED"}
        assert {chunks[c].compression for c in ("key", "value")} == {"ZSTD"}  # the topic's codec
        assert "RLE_DICTIONARY" not in chunks["value"].encodings
        data = pq.read_table(path)
        offsets, stamps = data["offset"], data["timestamp"].cast(pa.int64())
        assert (raw.first_offset, raw.last_offset) == (pc.min(offsets).as_py(), pc.max(offsets).as_py())
        assert (raw.min_timestamp_us, raw.max_timestamp_us) == (pc.min(stamps).as_py(), pc.max(stamps).as_py())
        assert set(data["partition"].to_pylist()) == {raw.partition}
    stored = topic.table.scan().to_arrow().sort_by([("partition", "ascending"), ("offset", "ascending")])
    from_stamped = stored.filter(pc.equal(stored["value"], b"s"))
    assert sorted(from_stamped["timestamp"].cast(pa.int64()).to_pylist()) == sorted(
        (T0 + 5 if i % 3 == 0 else T0 - 1000 + i) * 1000 for i in range(50))
    assert sorted(len(h) for h in from_stamped["headers"].to_pylist()) == sorted(i % 2 for i in range(50))
    assert pc.all(pc.equal(stored.filter(pc.not_equal(stored["value"], b"s"))["timestamp"].cast(pa.int64()),
                           T0 * 1000)).as_py()


@pytest.mark.parametrize(("properties", "codec"), [
    ({"write.parquet.compression-codec": "uncompressed"}, "UNCOMPRESSED"),
    ({"write.parquet.compression-codec": "zstd", "write.parquet.compression-level": "3"}, "ZSTD"),
    ({"write.parquet.compression-codec": "snappy"}, "SNAPPY"),
])
def test_writer_settings_follow_the_tables_codec_for_the_records_bytes(properties: dict[str, str],
                                                                       codec: str) -> None:
    rows = pa.table({"partition": pa.array([1, 1], pa.int32()), "offset": pa.array([7, 8], pa.int64()),
                     "timestamp": pa.array([T0 * 1000] * 2, pa.timestamp("us", tz="UTC")),
                     "key": pa.array([b"k", None], pa.large_binary()),
                     "value": pa.array([b"v", b"w"], pa.large_binary()),
                     "headers": pa.array([[], [{"key": "h", "value": b"x"}]], FILE_SCHEMA.field("headers").type)},
                    schema=FILE_SCHEMA)
    sink = io.BytesIO()
    with pq.ParquetWriter(sink, schema=FILE_SCHEMA, **file_writer_kwargs(properties)) as writer:
        writer.write_table(rows)
    sink.seek(0)
    read = pq.ParquetFile(sink)
    columns = read.metadata.row_group(0)
    compressions = {columns.column(i).path_in_schema: columns.column(i).compression for i in range(columns.num_columns)}
    assert compressions["value"] == compressions["key"] == compressions["headers.list.element.value"] == codec
    assert compressions["offset"] == "UNCOMPRESSED"
    assert read.read().equals(rows)


def test_ahead_keeps_order_runs_ahead_a_bounded_number_of_items_and_raises_in_place() -> None:
    taken: list[int] = []
    threads: set[str] = set()

    def items() -> Iterator[int]:
        for i in range(10):
            taken.append(i)
            yield i

    def prepare(i: int) -> int:
        threads.add(threading.current_thread().name)
        if i == 7:
            raise ValueError("item 7")
        return i * i

    seen = []
    with pytest.raises(ValueError, match="item 7"):
        for result in ahead(items(), prepare, depth=2):
            seen.append(result)
            assert len(taken) <= len(seen) + 2  # never more than ``depth`` items beyond the one consumed
    assert seen == [i * i for i in range(7)]
    assert threading.current_thread().name not in threads
    assert list(ahead(iter([]), prepare)) == []
