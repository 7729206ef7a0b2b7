"""Opening a lake never creates one by accident: verbs that only read, on a warehouse or catalog
that does not exist, fail with an error naming the warehouse and catalog they tried and create nothing; only
``topic create`` makes a new lake, and says so on standard error; an unknown topic's error names the catalog and
warehouse searched. For every catalog kind: a local warehouse (SQLite), an explicit SQLite file, a catalog name
the database does not hold, PostgreSQL, S3, and a REST catalog's warehouse (tests/iceberg/test_rest_catalog.py)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from compactor.cli.main import main
from compactor.errors import LakeNotFoundError, TopicNotFoundError
from compactor.lake import Lake
from tests.conftest import new_lake_config
from tests.pg_server import PostgresServer
from tests.s3_server import S3Server

# every verb that only reads (and those that need an existing topic), as a new user would type them
READ_VERBS = [["topic", "list"], ["topic", "describe", "a.t"], ["read", "a.t", "--raw"], ["status", "a.t"],
              ["consume", "a.t", "--group", "g", "--raw"], ["group", "list"], ["group", "describe", "g"],
              ["retention", "a.t", "--dry-run"], ["compact", "a.t"], ["topic", "config", "a.t"],
              ["produce", "a.t"], ["clean", "--once"]]


def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"key": "k", "value": "v"}\n'))
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("verb", READ_VERBS, ids=lambda verb: " ".join(verb[:2]))
def test_a_mistyped_warehouse_is_an_error_that_creates_nothing(tmp_path: Path, verb: list[str],
                                                               capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "mistyped" / "path"
    code, out, err = run(capsys, monkeypatch, "--warehouse", str(missing), *verb)
    assert code == 1 and out == ""
    assert f"no lake at catalog 'lake' in sqlite:///{missing}/catalog.db, warehouse file://{missing}" in err
    assert "does not exist" in err and "topic create" in err
    assert not (tmp_path / "mistyped").exists()


def test_only_topic_create_makes_a_lake_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    warehouse = tmp_path / "new"
    code, out, err = run(capsys, monkeypatch, "--warehouse", str(warehouse), "topic", "create", "a.t")
    assert code == 0 and json.loads(out)["created"] is True
    assert f"creating a new lake: catalog 'lake' in sqlite:///{warehouse}/catalog.db" in err
    code, out, err = run(capsys, monkeypatch, "--warehouse", str(warehouse), "topic", "create", "a.u")
    assert code == 0 and "creating a new lake" not in err  # it exists now
    code, out, _ = run(capsys, monkeypatch, "--warehouse", str(warehouse), "topic", "list")
    assert code == 0 and "a.t" in out and "a.u" in out
    code, _, err = run(capsys, monkeypatch, "--warehouse", str(warehouse), "read", "a.nope", "--raw")
    assert code == 1 and f"unknown topic 'a.nope' (searched catalog 'lake' in sqlite:///{warehouse}/catalog.db, " \
                          f"warehouse file://{warehouse})" in err


def test_the_python_api_opens_without_creating(tmp_path: Path) -> None:
    lake = Lake(warehouse=str(tmp_path / "wh"))
    with pytest.raises(LakeNotFoundError, match=r"the warehouse directory .* does not exist"):
        lake.list_topics()
    with pytest.raises(LakeNotFoundError):
        lake.topic("a.t")
    assert not (tmp_path / "wh").exists()
    lake.create_topic("a.t")  # the one way to make a lake
    assert Lake(warehouse=str(tmp_path / "wh")).list_topics() == ["a.t"]


def test_a_missing_catalog_file_or_catalog_name(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    warehouse = tmp_path / "wh"
    assert run(capsys, monkeypatch, "--warehouse", str(warehouse), "topic", "create", "a.t")[0] == 0
    elsewhere = tmp_path / "other" / "catalog.db"
    code, _, err = run(capsys, monkeypatch, "--warehouse", str(warehouse), "--catalog-uri", str(elsewhere),
                       "topic", "list")
    assert code == 1 and f"the catalog file {elsewhere} does not exist" in err
    assert not elsewhere.parent.exists()
    monkeypatch.setenv("COMPACTOR_CATALOG_NAME", "lakee")  # a typo: the database holds no such catalog
    code, _, err = run(capsys, monkeypatch, "--warehouse", str(warehouse), "status", "a.t")
    assert code == 1 and "the database holds no catalog named 'lakee'" in err and str(warehouse) in err


@pytest.mark.postgres
def test_an_empty_postgresql_database_is_no_lake_and_stays_empty(postgres_server: PostgresServer,
                                                                 tmp_path: Path) -> None:
    from sqlalchemy import create_engine, inspect

    from compactor.config import CatalogUri

    uri = postgres_server.create_database("opening_empty")
    lake = Lake(new_lake_config(tmp_path / "wh", uri))
    (tmp_path / "wh").mkdir()
    with pytest.raises(LakeNotFoundError, match="the database has no Iceberg catalog tables") as caught:
        lake.list_topics()
    assert "opening_empty" in str(caught.value)
    engine = create_engine(CatalogUri.parse(uri).sqlalchemy_url)
    try:
        assert inspect(engine).get_table_names() == [], "opening created catalog tables"
    finally:
        engine.dispose()
    lake.create_topic("p.t")
    with pytest.raises(TopicNotFoundError, match=r"unknown topic 'p\.nope' \(searched catalog 'lake\d+' in "
                                                 r"postgresql://.*/opening_empty, warehouse file://"):
        lake.topic("p.nope")


@pytest.mark.s3
def test_an_s3_warehouse_without_its_catalog_file(s3_server: S3Server, tmp_path: Path) -> None:
    s3_server.create_bucket("opening")
    lake = Lake(new_lake_config("s3://opening/lake", str(tmp_path / "catalog.db"), **s3_server.env))
    with pytest.raises(LakeNotFoundError, match="s3://opening/lake") as caught:
        lake.list_topics()
    assert f"the catalog file {tmp_path / 'catalog.db'} does not exist" in str(caught.value)
    assert not (tmp_path / "catalog.db").exists()
