"""The ``backend`` fixture: one fresh lake on each back-end, without a JVM.

Parametrised over ``local`` (a local warehouse with a SQLite catalog), ``s3`` (moto's S3 server, a SQLite
catalog), ``postgres`` (a local warehouse with a PostgreSQL catalog) and ``rest`` (a warehouse of its own on the
REST catalog server, ``tests/servers.py``, which places the tables; OAuth2 client credentials).
``tests/conftest.py`` marks each case ``s3``, ``postgres`` or ``rest`` by its parameter (``rest`` is a JVM server,
so those cases are ``spark`` too). A test that needs Spark attaches the session itself (``attach_spark``), so the
back-ends serve JVM-free tests too. ``BACKENDS`` names them, for a test that parametrises ``backend`` itself.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from compactor.lake import Lake
from tests.conftest import new_lake_config

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tests.pg_server import PostgresServer
    from tests.s3_server import S3Server
    from tests.servers import RestCatalog

_names = itertools.count()
BACKENDS = ("local", "s3", "postgres", "rest")


@dataclasses.dataclass
class Backend:
    name: str
    lake: Lake
    env: dict[str, str]
    warehouse: str
    catalog_uri: str


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Backend]:
    env: dict[str, str] = {}
    if request.param == "rest":
        rest: RestCatalog = request.getfixturevalue("rest_catalog")
        env = rest.lake_env(rest.create_warehouse())
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        lake = Lake(new_lake_config("", rest.uri, **env))
        yield Backend(request.param, lake, env, "", rest.uri)
        lake.close()
        return
    if request.param == "s3":
        server: S3Server = request.getfixturevalue("s3_server")
        bucket = f"e2e-{next(_names)}"
        server.create_bucket(bucket)
        env = server.env
        warehouse = f"s3://{bucket}/lake"
    else:
        warehouse = str(tmp_path / "warehouse")
    catalog_uri = str(tmp_path / "catalog.db")
    if request.param == "postgres":  # a local warehouse with the shared-catalog database
        postgres: PostgresServer = request.getfixturevalue("postgres_server")
        catalog_uri = postgres.create_database(f"e2e_{next(_names)}")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    lake = Lake(new_lake_config(warehouse, catalog_uri, **env))
    yield Backend(request.param, lake, env, warehouse, catalog_uri)
    lake.close()


def attach_spark(lake: Lake, spark_session: SparkSession) -> Lake:
    """Point the shared SparkSession at ``lake``'s catalog and let the lake use it."""
    from compactor.spark.catalog import register_catalog

    register_catalog(spark_session, lake.config)
    lake.attach_spark(spark_session)
    return lake
