"""Other engines read the compacted view (docs/other-engines.md): ``topic describe`` names the
compacted table and its metadata file; DuckDB (offline extensions loaded from file), pyiceberg and Spark SQL
read it with the position deletes of an incremental run applied, and agree with the product's reader below the
horizons; the view plus the raw rows at or above each horizon is the full compacted image. On an Iceberg REST
catalog the engines find the view through the catalog itself (DuckDB's ``ATTACH``, Spark SQL, pyiceberg)."""

from __future__ import annotations

import datetime as dt
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from compactor.compaction.job import compact_topic
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.status import topic_status
from compactor.topics.describe import describe_topic
from compactor.topics.records import ProducerRecord, Record
from readers.reader import TopicReader
from tests.backends import Backend, attach_spark
from tests.readme_blocks import extract
from tests.servers import RestCatalog

T0 = 1_767_225_600_000
NAME = "shop.orders"  # the docs' examples name this topic
ROOT = Path(__file__).resolve().parents[2]
Row = tuple[int, int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def duckdb_connection() -> Any:
    """DuckDB with its Iceberg support loaded from the extension files the PyPI packages ship (no download; HTTP
    for REST catalogs)."""
    import duckdb
    import duckdb_extension_avro
    import duckdb_extension_httpfs
    import duckdb_extension_iceberg

    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    for package, name in ((duckdb_extension_httpfs, "httpfs"), (duckdb_extension_avro, "avro"),
                          (duckdb_extension_iceberg, "iceberg")):
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
    lake.create_topic(NAME, partitions=2, config={"cleanup.policy": "compact"})
    first = [ProducerRecord(f"k{i}".encode(), f"v{i}".encode(), partition=i % 2, timestamp_ms=T0 + i,
                            headers=(("n", str(i).encode()),) if i % 5 == 0 else ()) for i in range(40)]
    produce(lake.topic(NAME), first, now_ms=T0)
    compact_topic(lake, NAME, now_ms=T0 + 100)
    # 4 of 40 keys superseded (below the 30% that makes a run rewrite the view), one of them by a tombstone
    again = [ProducerRecord(b"k1", b"v1'", partition=1, timestamp_ms=T0 + 200),
             ProducerRecord(b"k2", b"v2'", partition=0, timestamp_ms=T0 + 201),
             ProducerRecord(b"k3", None, partition=1, timestamp_ms=T0 + 202),
             ProducerRecord(b"k4", b"v4'", partition=0, timestamp_ms=T0 + 203)]
    produce(lake.topic(NAME), again, now_ms=T0 + 200)
    compact_topic(lake, NAME, now_ms=T0 + 300)
    tail = [ProducerRecord(b"k5", b"v5''", partition=1, timestamp_ms=T0 + 400),
            ProducerRecord(b"k6", None, partition=0, timestamp_ms=T0 + 401)]
    produce(lake.topic(NAME), tail, now_ms=T0 + 400)


@pytest.mark.spark
def test_other_engines_read_the_view_as_the_reader_does(spark: SparkSession, lake: Lake) -> None:
    seeded(lake)
    info = describe_topic(lake.topic(NAME))
    assert info.compacted_table == NAME + "__compacted"
    view_table = lake.catalog.load_table(NAME + "__compacted")
    assert info.compacted_metadata_location == view_table.metadata_location
    assert info.metadata_location == lake.topic(NAME).table.metadata_location
    snapshot = view_table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    assert int(snapshot.summary["total-position-deletes"] or 0) > 0, "the last run must write position deletes"

    status = topic_status(lake, NAME, now_ms=T0 + 500)  # what `compactor status NAME --json` prints
    horizons = {int(p): h for p, h in status.horizons.items()}
    assert status.cursor is not None
    assert horizons == {int(p): h for p, h in status.cursor["horizons"].items()} == {0: 22, 1: 22}
    full = as_rows(list(TopicReader(lake, NAME, read_compacted=True, now_ms=T0 + 500).records()))
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
    spark_rows = spark.sql(f"SELECT partition, offset FROM {catalog}.{NAME}__compacted").collect()
    assert sorted((r["partition"], r["offset"]) for r in spark_rows) == [(r[0], r[1]) for r in below]


@pytest.mark.slow  # the engines read the view in the loop (above); the REST catalog's routes are in the loop
@pytest.mark.spark
@pytest.mark.parametrize("backend", ["rest"], indirect=True)
def test_other_engines_find_the_view_through_a_rest_catalog(spark_session: SparkSession, backend: Backend,
                                                            rest_catalog: RestCatalog) -> None:
    from pyiceberg.catalog.rest import RestCatalog as Client

    lake = attach_spark(backend.lake, spark_session)
    seeded(lake)
    horizons = {int(p): h for p, h in topic_status(lake, NAME, now_ms=T0 + 500).horizons.items()}
    full = as_rows(list(TopicReader(lake, NAME, read_compacted=True, now_ms=T0 + 500).records()))
    below = [r for r in full if r[1] < horizons[r[0]]]
    assert len(below) == 40
    warehouse = backend.env["COMPACTOR_REST_WAREHOUSE"]
    name, value = rest_catalog.header

    con = duckdb_connection()  # DuckDB: the catalog's warehouse attached, OAuth2 client credentials, the header
    con.sql(f"CREATE SECRET headers (TYPE http, EXTRA_HTTP_HEADERS MAP {{'{name}': '{value}'}})")
    con.sql(f"CREATE SECRET catalog (TYPE iceberg, CLIENT_ID '{rest_catalog.client_id}', CLIENT_SECRET "
            f"'{rest_catalog.client_secret}', OAUTH2_SERVER_URI '{rest_catalog.uri}v1/oauth/tokens')")
    con.sql(f"ATTACH '{warehouse}' AS lake (TYPE iceberg, SECRET catalog, ENDPOINT '{rest_catalog.uri.rstrip('/')}')")
    columns = '"partition", "offset", "timestamp", "key", "value", "headers"'
    assert duckdb_rows(con, f"SELECT {columns} FROM lake.shop.orders__compacted") == below

    catalog = lake.config.catalog_name  # Spark SQL, through the session's REST catalog
    spark_rows = spark_session.sql(f"SELECT partition, offset FROM {catalog}.{NAME}__compacted").collect()
    assert sorted((r["partition"], r["offset"]) for r in spark_rows) == [(r[0], r[1]) for r in below]

    client = Client("reader", uri=rest_catalog.uri, warehouse=warehouse, token=rest_catalog.read_token,
                    **rest_catalog.client_properties)  # pyiceberg, with a token that may only read
    arrow = client.load_table(f"{NAME}__compacted").scan().to_arrow()
    assert sorted(zip(arrow["partition"].to_pylist(), arrow["offset"].to_pylist(), strict=True)) == [
        (r[0], r[1]) for r in below]


def readme_duckdb_block() -> str:
    page = ROOT / "docs" / "other-engines.md"
    [block] = [b for b in extract(page.read_text()) if "duckdb" in b.code and "WITH horizons" in b.code]
    return block.code


@pytest.mark.slow  # DuckDB reads the view in the loop (above)
@pytest.mark.spark
def test_the_readme_duckdb_example_returns_what_the_compacted_reader_returns(
        spark: SparkSession, lake: Lake, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The docs' DuckDB block (docs/other-engines.md), run as written on a lake with position deletes and a raw
    tail: its full compacted image (``image``) is exactly what ``compactor read --compacted`` returns, in the same
    order."""
    seeded(lake)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.setenv("COMPACTOR_WAREHOUSE", lake.config.warehouse)
    monkeypatch.setenv("COMPACTOR_CATALOG_NAME", lake.config.catalog_name)
    namespace: dict[str, Any] = {}
    exec(compile(readme_duckdb_block(), "docs/other-engines.md (DuckDB)", "exec"), namespace)
    image = [(p, o, int(t.astimezone(dt.UTC).timestamp() * 1000), k, v, tuple((h["key"], h["value"]) for h in hs))
             for p, o, t, k, v, hs in namespace["image"].fetchall()]
    expected = [(r.partition, r.offset, r.timestamp_ms, r.key, r.value, tuple(r.headers))
                for r in TopicReader(lake, NAME, read_compacted=True).records()]
    assert image == expected and len(expected) == 42


def test_describe_has_no_compacted_table_before_the_first_compaction(lake: Lake) -> None:
    lake.create_topic("eng.n")
    info = describe_topic(lake.topic("eng.n"))
    assert info.compacted_table is None and info.compacted_metadata_location is None
    assert info.metadata_location is not None and info.metadata_location.endswith(".metadata.json")
    out = info.as_json()
    assert "compacted_table" in out and out["compacted_metadata_location"] is None
