"""Lake configuration: arguments over environment over defaults; one catalog for both engines."""

from __future__ import annotations

from pathlib import Path

import pytest

from compactor.config import CatalogUri, LakeConfig, normalise_warehouse
from compactor.errors import InputError


def test_defaults_to_local_warehouse_with_sqlite_inside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = LakeConfig.resolve(env={})
    assert config.warehouse == f"file://{tmp_path}/warehouse"
    assert config.catalog.sqlalchemy_url == f"sqlite:///{tmp_path}/warehouse/catalog.db"
    assert config.catalog.jdbc_url == f"jdbc:sqlite:{tmp_path}/warehouse/catalog.db"
    assert config.catalog_name == "lake"


def test_environment_is_used_and_arguments_win(tmp_path: Path) -> None:
    env = {"COMPACTOR_WAREHOUSE": str(tmp_path / "a"), "COMPACTOR_CATALOG_URI": str(tmp_path / "cat.db")}
    from_env = LakeConfig.resolve(env=env)
    assert from_env.warehouse == f"file://{tmp_path}/a"
    assert from_env.catalog.jdbc_url == f"jdbc:sqlite:{tmp_path}/cat.db"
    explicit = LakeConfig.resolve(warehouse=str(tmp_path / "b"), env=env)
    assert explicit.warehouse == f"file://{tmp_path}/b"


def test_s3_warehouse_requires_catalog_uri() -> None:
    with pytest.raises(InputError, match="catalog-uri"):
        LakeConfig.resolve(warehouse="s3://bucket/prefix", env={})
    config = LakeConfig.resolve(warehouse="s3a://bucket/prefix/", catalog_uri="/tmp/c.db",
                                env={"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ACCESS_KEY_ID": "k",
                                     "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "eu-west-1"})
    assert config.warehouse == "s3://bucket/prefix"
    assert config.is_s3
    assert config.s3.endpoint == "http://127.0.0.1:9000"
    assert config.s3.region == "eu-west-1"


def test_postgres_uri_is_translated_for_both_engines() -> None:
    uri = CatalogUri.parse("postgresql://alice:s%40cret@db.example:5433/lakecat")
    assert uri.sqlalchemy_url == "postgresql+psycopg2://alice:s%40cret@db.example:5433/lakecat"
    assert uri.jdbc_url == "jdbc:postgresql://db.example:5433/lakecat"
    assert uri.jdbc_user == "alice"
    assert uri.jdbc_password == "s@cret"


@pytest.mark.parametrize("uri", ["mysql://x/y", "", "postgresql://onlyhost", "http://x"])
def test_bad_catalog_uris_are_rejected(uri: str) -> None:
    with pytest.raises(InputError):
        CatalogUri.parse(uri)


@pytest.mark.parametrize("location", ["", "s3://", "gs://bucket/x", "hdfs://nn/x"])
def test_bad_warehouses_are_rejected(location: str) -> None:
    with pytest.raises(InputError):
        normalise_warehouse(location)


def test_sqlite_uri_forms_are_equivalent(tmp_path: Path) -> None:
    forms = [str(tmp_path / "c.db"), f"sqlite:///{tmp_path}/c.db", f"jdbc:sqlite:{tmp_path}/c.db"]
    assert len({CatalogUri.parse(f) for f in forms}) == 1
