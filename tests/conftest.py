"""Shared fixtures: isolated configuration, a fresh lake per test, and ONE SparkSession per test session.

Each test's lake gets its own warehouse directory and its own catalog name, registered at runtime on the
shared SparkSession (Iceberg caches catalogs by name, so a new name gives a fresh catalog on a new database).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from compactor.config import LakeConfig
from compactor.lake import Lake

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_catalog_numbers = itertools.count()
ISOLATED_PREFIXES = ("COMPACTOR_", "AWS_", "PYICEBERG_")


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Keep the developer's own configuration out of every test."""
    for key in list(os.environ):
        if key.startswith(ISOLATED_PREFIXES) and key not in ("COMPACTOR_JARS_DIR",):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path / "pyiceberg-home"))


def new_lake_config(warehouse: str | Path, catalog_uri: str | None = None, **env: str) -> LakeConfig:
    """A lake configuration with a catalog name unique within this test session."""
    config = LakeConfig.resolve(warehouse=str(warehouse), catalog_uri=catalog_uri, env=env or {})
    return dataclasses.replace(config, catalog_name=f"lake{next(_catalog_numbers)}")


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[Lake]:
    """A fresh local lake (pyiceberg only; no Spark)."""
    instance = Lake(new_lake_config(tmp_path / "warehouse"))
    yield instance
    instance.close()


@pytest.fixture(scope="session")
def spark_session() -> Iterator[SparkSession]:
    """The one SparkSession of the test run (small, local, quiet)."""
    from compactor.spark.jars import S3A_JARS, jars_dir
    from compactor.spark.session import get_or_create_session

    extra = {
        "spark.master": "local[2]",
        "spark.driver.memory": "1g",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
    }
    have_s3 = all((jars_dir() / name).exists() for name in S3A_JARS)
    bootstrap = new_lake_config(Path(os.environ.get("TMPDIR", "/tmp")) / "compactor-test-bootstrap")
    if have_s3:
        # Load the S3A jars at start so S3 tests can share this session.
        from compactor.spark.jars import required_jars

        extra["spark.jars"] = ",".join([*required_jars(s3=True, postgres=False), "/usr/share/java/postgresql.jar"])
    session = get_or_create_session(bootstrap, extra=extra)
    yield session
    session.stop()


@pytest.fixture
def spark(spark_session: SparkSession, lake: Lake) -> SparkSession:
    """The shared SparkSession, pointed at this test's lake."""
    from compactor.spark.session import register_catalog

    register_catalog(spark_session, lake.config)
    lake.attach_spark(spark_session)
    return spark_session


def records_of(rows: list[dict[str, Any]]) -> list[Any]:
    from compactor.topics.records import ProducerRecord

    return [ProducerRecord(**row) for row in rows]
