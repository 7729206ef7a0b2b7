"""End to end on every back-end: the same scenarios on the local warehouse (SQLite catalog), on S3 (moto's
server) and with a PostgreSQL catalog, parametrised; plus object-store faults on S3 (endpoint gone mid-run,
missing bucket, wrong credentials)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from compactor import failpoints
from compactor.compaction.job import compact_topic
from compactor.errors import (
    BucketNotFoundError,
    CompactorError,
    StorageAccessDeniedError,
    StorageUnavailableError,
)
from compactor.lake import Lake
from compactor.retention import run_retention
from compactor.spark.session import register_catalog
from compactor.status import topic_status
from compactor.topics.producer import produce
from compactor.topics.records import ProducerRecord
from readers.reader import TopicReader
from readers.spark import read_topic_dataframe
from readers.table_view import TableView
from tests.conftest import new_lake_config
from tests.pg_server import PostgresServer, postgres_server  # noqa: F401 - the session fixture
from tests.s3_server import S3Server, s3_server  # noqa: F401 - the session fixture

pytestmark = pytest.mark.spark
HOUR = 3_600_000
T0 = 200 * 24 * HOUR
_buckets = itertools.count()


@dataclasses.dataclass
class Backend:
    name: str
    lake: Lake
    env: dict[str, str]
    warehouse: str
    catalog_uri: str


@pytest.fixture(params=["local", "s3", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path, spark_session: SparkSession,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[Backend]:
    env: dict[str, str] = {}
    if request.param == "s3":
        server: S3Server = request.getfixturevalue("s3_server")
        bucket = f"e2e-{next(_buckets)}"
        server.create_bucket(bucket)
        env = server.env
        warehouse = f"s3://{bucket}/lake"
    else:
        warehouse = str(tmp_path / "warehouse")
    catalog_uri = str(tmp_path / "catalog.db")
    if request.param == "postgres":  # a local warehouse with the shared-catalog database
        postgres: PostgresServer = request.getfixturevalue("postgres_server")
        catalog_uri = postgres.create_database(f"e2e_{next(_buckets)}")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    config = new_lake_config(warehouse, catalog_uri, **env)
    lake = Lake(config)
    register_catalog(spark_session, config)
    lake.attach_spark(spark_session)
    yield Backend(request.param, lake, env, warehouse, catalog_uri)
    lake.close()


def latest_per_key(records: list[ProducerRecord], stored: list[tuple[int, int]]) -> dict[bytes, bytes | None]:
    out: dict[bytes, bytes | None] = {}
    for record, _ in sorted(zip(records, stored, strict=True), key=lambda pair: pair[1]):
        assert record.key is not None
        out[record.key] = record.value
    return out


def test_produce_compact_read_retain_and_status(backend: Backend) -> None:
    lake = backend.lake
    lake.create_topic("e2e.orders", partitions=2, config={"cleanup.policy": "compact", "retention.ms": str(HOUR),
                                                         "history.expire.max-snapshot-age-ms": "0",
                                                         "compaction.cursor.retain-ms": "0"})
    sent: list[ProducerRecord] = []
    where: list[tuple[int, int]] = []
    for round_number in range(3):
        batch = [ProducerRecord(f"k{(round_number * 7 + i) % 9}".encode(),
                                None if i == 4 else f"v{round_number}.{i}".encode(), timestamp_ms=T0 + round_number)
                 for i in range(8)]
        result = produce(lake.topic("e2e.orders"), batch, now_ms=T0 + round_number)
        sent += batch
        where += result.offsets
        if round_number < 2:
            assert compact_topic(lake, "e2e.orders", now_ms=T0 + round_number).committed
    expected = latest_per_key(sent, where)
    live = {k: v for k, v in expected.items() if v is not None}
    reader = TopicReader(lake, "e2e.orders", read_compacted=True)
    compacted = list(reader.records())
    last = {r.key: r.value for r in compacted}
    assert {k: v for k, v in last.items() if v is not None} == live
    assert len(list(TopicReader(lake, "e2e.orders").records())) == 24
    frame = read_topic_dataframe(lake, "e2e.orders", read_compacted=True)
    assert frame.count() == len(compacted)
    assert TableView(lake, "e2e.orders").to_dict() == live
    status = topic_status(lake, "e2e.orders", now_ms=T0 + 3)
    assert status["cursor"]["horizons"] == {"0": sum(1 for p, _ in where[:16] if p == 0),
                                            "1": sum(1 for p, _ in where[:16] if p == 1)}
    assert status["dirty_bytes"] > 0
    # compact the tail, then retention removes the raw files below the horizon and expires old snapshots
    assert compact_topic(lake, "e2e.orders", now_ms=T0 + 4).committed
    removed = run_retention(lake, "e2e.orders", now_ms=T0 + 2 * HOUR).as_json()
    assert removed["removed_records"] == 24 and removed["log_start_offsets"] == topic_status(
        lake, "e2e.orders", now_ms=T0 + 2 * HOUR)["next_offsets"]
    assert removed["expired_snapshots"] > 0 and removed["deleted_files"] > 0
    assert list(TopicReader(lake, "e2e.orders").records()) == []
    after = {r.key: r.value for r in TopicReader(lake, "e2e.orders", read_compacted=True).records()}
    assert {k: v for k, v in after.items() if v is not None} == live


def test_the_command_line_on_each_backend(backend: Backend) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTOR_", "PYSPARK", "AWS_"))}
    env.update(backend.env)
    env["COMPACTOR_CATALOG_NAME"] = backend.lake.config.catalog_name
    base = [sys.executable, "-m", "compactor.cli.submit", "--warehouse", backend.warehouse,
            "--catalog-uri", backend.catalog_uri]

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*base, *args], input=stdin, capture_output=True, text=True, env=env, timeout=120,
                              check=False)

    assert run("topic", "create", "cli.t", "--partitions", "2").returncode == 0
    produced = run("produce", "cli.t", stdin='{"key": "a", "value": "1"}\n{"key": "b", "value": "2"}\n')
    assert produced.returncode == 0, produced.stderr
    read = run("read", "cli.t", "--raw")
    assert read.returncode == 0, read.stderr
    assert sorted(json.loads(line)["key"] for line in read.stdout.splitlines()) == ["a", "b"]
    status = run("status", "cli.t", "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["next_offsets"]


# --- faults on S3 ------------------------------------------------------------------------------------------


@pytest.fixture
def s3_lake(s3_server: S3Server, tmp_path: Path, spark_session: SparkSession,  # noqa: F811
            monkeypatch: pytest.MonkeyPatch) -> Iterator[Lake]:
    bucket = f"fault-{next(_buckets)}"
    s3_server.create_bucket(bucket)
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    config = new_lake_config(f"s3://{bucket}/lake", str(tmp_path / "catalog.db"), **s3_server.env)
    lake = Lake(config)
    register_catalog(spark_session, config)
    lake.attach_spark(spark_session)
    yield lake
    lake.close()


def test_endpoint_gone_mid_run_fails_cleanly_and_the_cursor_stays(s3_server: S3Server, s3_lake: Lake) -> None:  # noqa: F811
    s3_lake.create_topic("f.t", config={"cleanup.policy": "compact"})
    produce(s3_lake.topic("f.t"), [ProducerRecord(b"a", b"1"), ProducerRecord(b"a", b"2")], now_ms=T0)
    first = compact_topic(s3_lake, "f.t", now_ms=T0)
    produce(s3_lake.topic("f.t"), [ProducerRecord(b"b", b"3")], now_ms=T0)
    try:
        with failpoints.enabled({"before-commit": s3_server.stop}), pytest.raises(CompactorError) as caught:
            compact_topic(s3_lake, "f.t", now_ms=T0 + 1)
        assert isinstance(caught.value, StorageUnavailableError), caught.value
        assert "127.0.0.1" in str(caught.value) or "connect" in str(caught.value).lower()
        with pytest.raises(StorageUnavailableError):  # producing while it is down: a clear error too
            produce(s3_lake.topic("f.t"), [ProducerRecord(b"c", b"4")], now_ms=T0)
    finally:
        if s3_server.server is None:
            s3_server.start()
    reader = TopicReader(s3_lake, "f.t", read_compacted=True)
    assert reader.cursor is not None and reader.cursor.snapshot_id == first.compacted_snapshot_id
    assert [(r.key, r.value) for r in reader.records()] == [(b"a", b"2"), (b"b", b"3")]
    assert compact_topic(s3_lake, "f.t", now_ms=T0 + 2).committed


def test_missing_bucket_is_a_clear_error(s3_server: S3Server, tmp_path: Path) -> None:  # noqa: F811
    config = new_lake_config("s3://no-such-bucket/lake", str(tmp_path / "catalog.db"), **s3_server.env)
    lake = Lake(config)
    with pytest.raises(BucketNotFoundError, match="no-such-bucket"):
        lake.create_topic("m.t")
    assert lake.list_topics() == [], "nothing half-created"


def test_wrong_credentials_are_a_clear_error(tmp_path: Path) -> None:
    from tests.s3_server import free_port

    port = free_port()
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"}  # this moto server checks credentials
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import time
        import urllib.request

        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        bad = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "wrong",
               "AWS_SECRET_ACCESS_KEY": "wrong", "AWS_REGION": "us-east-1"}
        lake = Lake(new_lake_config("s3://any-bucket/lake", str(tmp_path / "catalog.db"), **bad))
        with pytest.raises(StorageAccessDeniedError, match="access denied"):
            lake.create_topic("w.t")
        assert lake.list_topics() == []
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_an_unreachable_catalog_is_a_clear_error(tmp_path: Path) -> None:
    from tests.s3_server import free_port

    port = free_port()  # nothing listens there
    lake = Lake(new_lake_config(str(tmp_path / "wh"), f"postgresql://compactor@127.0.0.1:{port}/catalog"))
    with pytest.raises(StorageUnavailableError, match="cannot open the catalog database") as caught:
        lake.create_topic("c.t")
    assert f"{port}" in str(caught.value) or "connect" in str(caught.value).lower()
    with pytest.raises(StorageUnavailableError):
        lake.list_topics()
