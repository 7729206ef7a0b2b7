"""Other engines read the compacted view (README, "Reading from other engines"): ``topic describe`` names the
compacted table and its metadata file; DuckDB (offline extensions loaded from file), pyiceberg and Spark SQL
read it with the position deletes of an incremental run applied, and agree with the product's reader below the
horizons; the view plus the raw rows at or above each horizon is the full compacted image."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from compactor.compaction.job import compact_topic
from compactor.lake import Lake
from compactor.status import topic_status
from compactor.topics.describe import describe_topic
from compactor.topics.producer import produce
from compactor.topics.records import ProducerRecord, Record
from readers.reader import TopicReader

T0 = 1_767_225_600_000
Row = tuple[int, int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def duckdb_connection() -> Any:
    """DuckDB with its Iceberg support loaded from the extension files the PyPI packages ship (no download)."""
    import duckdb
    import duckdb_extension_avro
    import duckdb_extension_iceberg

    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    for package, name in ((duckdb_extension_avro, "avro"), (duckdb_extension_iceberg, "iceberg")):
        path = Path(package.__file__).parent / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
        con.load_extension(str(path))
    return con


def as_rows(records: list[Record]) -> list[Row]:
    return sorted((r.partition, r.offset, r.timestamp_ms, r.key, r.value, tuple(r.headers)) for r in records)


def duckdb_rows(con: Any, sql: str) -> list[Row]:
    out = []
    for partition, offset, timestamp, key, value, headers in con.sql(sql).fetchall():
        stamp = int(timestamp.astimezone(dt.UTC).timestamp() * 1000)
        out.append((partition, offset, stamp, key, value,
                    tuple((h["key"], h["value"]) for h in headers)))
    return sorted(out)


def seeded(lake: Lake) -> None:
    """Two partitions; compacted once, then superseded keys and a tombstone compacted incrementally (position
    deletes), then a raw tail that no run has compacted yet."""
    lake.create_topic("eng.t", partitions=2, config={"cleanup.policy": "compact"})
    first = [ProducerRecord(f"k{i}".encode(), f"v{i}".encode(), partition=i % 2, timestamp_ms=T0 + i,
                            headers=(("n", str(i).encode()),) if i % 5 == 0 else ()) for i in range(40)]
    produce(lake.topic("eng.t"), first, now_ms=T0)
    compact_topic(lake, "eng.t", now_ms=T0 + 100)
    # 4 of 40 keys superseded (below the 30% that makes a run rewrite the view), one of them by a tombstone
    again = [ProducerRecord(b"k1", b"v1'", partition=1, timestamp_ms=T0 + 200),
             ProducerRecord(b"k2", b"v2'", partition=0, timestamp_ms=T0 + 201),
             ProducerRecord(b"k3", None, partition=1, timestamp_ms=T0 + 202),
             ProducerRecord(b"k4", b"v4'", partition=0, timestamp_ms=T0 + 203)]
    produce(lake.topic("eng.t"), again, now_ms=T0 + 200)
    compact_topic(lake, "eng.t", now_ms=T0 + 300)
    tail = [ProducerRecord(b"k5", b"v5''", partition=1, timestamp_ms=T0 + 400),
            ProducerRecord(b"k6", None, partition=0, timestamp_ms=T0 + 401)]
    produce(lake.topic("eng.t"), tail, now_ms=T0 + 400)


@pytest.mark.spark
def test_other_engines_read_the_view_as_the_reader_does(spark: SparkSession, lake: Lake) -> None:
    seeded(lake)
    info = describe_topic(lake.topic("eng.t"))
    assert info.compacted_table == "eng.t__compacted"
    view_table = lake.catalog.load_table("eng.t__compacted")
    assert info.compacted_metadata_location == view_table.metadata_location
    assert info.metadata_location == lake.topic("eng.t").table.metadata_location
    snapshot = view_table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    assert int(snapshot.summary["total-position-deletes"] or 0) > 0, "the last run must write position deletes"

    status = topic_status(lake, "eng.t", now_ms=T0 + 500)  # what `compactor status eng.t --json` prints
    horizons = {int(p): h for p, h in status["horizons"].items()}
    assert horizons == {int(p): h for p, h in status["cursor"]["horizons"].items()} == {0: 22, 1: 22}
    full = as_rows(list(TopicReader(lake, "eng.t", read_compacted=True, now_ms=T0 + 500).records()))
    below = [r for r in full if r[1] < horizons[r[0]]]
    assert len(below) == 40 and len(full) == 42  # 36 first records, 3 new values and 1 tombstone; 2 tail records

    con = duckdb_connection()
    columns = '"partition", "offset", "timestamp", "key", "value", "headers"'
    view_sql = f"SELECT {columns} FROM iceberg_scan('{info.compacted_metadata_location}')"
    assert duckdb_rows(con, view_sql) == below
    tombstones = con.sql(f"SELECT key FROM iceberg_scan('{info.compacted_metadata_location}') "
                         "WHERE delete_horizon_ms IS NOT NULL").fetchall()
    assert tombstones == [(b"k3",)]

    # the full compacted image: the view, then the raw rows at or above each partition's horizon
    values = ", ".join(f"({p}, {h})" for p, h in horizons.items())
    full_sql = (f"WITH horizons(partition, horizon) AS (VALUES {values}) "
                f"{view_sql} UNION ALL SELECT {', '.join('r.' + c for c in columns.split(', '))} "
                f"FROM iceberg_scan('{info.metadata_location}') r JOIN horizons h ON r.partition = h.partition "
                "WHERE r.offset >= h.horizon")
    assert duckdb_rows(con, full_sql) == full

    arrow = view_table.scan().to_arrow()  # pyiceberg, deletes applied
    assert sorted(zip(arrow["partition"].to_pylist(), arrow["offset"].to_pylist(), strict=True)) == [
        (r[0], r[1]) for r in below]
    catalog = lake.config.catalog_name
    spark_rows = spark.sql(f"SELECT partition, offset FROM {catalog}.eng.t__compacted").collect()
    assert sorted((r["partition"], r["offset"]) for r in spark_rows) == [(r[0], r[1]) for r in below]


def test_describe_has_no_compacted_table_before_the_first_compaction(lake: Lake) -> None:
    lake.create_topic("eng.n")
    info = describe_topic(lake.topic("eng.n"))
    assert info.compacted_table is None and info.compacted_metadata_location is None
    assert info.metadata_location is not None and info.metadata_location.endswith(".metadata.json")
    out = info.as_json()
    assert "compacted_table" in out and out["compacted_metadata_location"] is None
