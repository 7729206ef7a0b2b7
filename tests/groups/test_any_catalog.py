"""Groups whatever the Iceberg catalog is (issue 29, defect 11): the group store is its own component with its
own location, and consumers watch topics through the catalog's public API only, so a catalog that is not a SQL
database (a REST, Glue or Hive catalog) hosts groups as well. Here the lake's catalog is hidden behind an object
that offers only pyiceberg's ``Catalog`` methods (no database engine, no tables of pyiceberg's own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from compactor import Consumer, TopicPartition
from compactor.config import LakeConfig
from compactor.consumer.admin import describe_group
from compactor.groups import GroupStore
from compactor.lake import Lake
from tests.conftest import new_lake_config
from tests.consumers import FakeClock, produce_keys, store_clock
from tests.s3_server import S3Server

T = "shop.orders"
PUBLIC = {"name", "properties", "load_table", "list_tables", "list_namespaces", "table_exists", "namespace_exists",
          "load_namespace_properties"}


class CatalogOnly:
    """pyiceberg's public ``Catalog`` methods of another catalog, and nothing else."""

    def __init__(self, catalog: Any) -> None:
        self.wrapped = catalog
        self.asked: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.asked.append(name)
        if name not in PUBLIC:
            raise AttributeError(f"a catalog without {name!r} (not pyiceberg's public Catalog API)")
        return getattr(self.wrapped, name)


class OtherCatalogLake(Lake):
    """A lake whose catalog is not a SQL database, as far as the product can tell."""

    def __init__(self, lake: Lake, group_store: str) -> None:
        super().__init__(lake.config, group_store=group_store)
        self.other = CatalogOnly(lake.catalog)

    @property
    def catalog(self) -> Any:
        return self.other


def test_consumers_and_groups_need_nothing_of_the_catalog_but_its_public_api(lake: Lake, tmp_path: Path) -> None:
    lake.create_topic(T, partitions=2)
    produce_keys(lake, T, ["a", "b"], partition=0)
    other = OtherCatalogLake(lake, str(tmp_path / "groups"))
    clock = FakeClock()
    store_clock(other, clock)
    a = Consumer(other, T, group="g", clock=clock, member_id="a", session_timeout_ms=10_000,
                 heartbeat_interval_ms=1_000)
    b = Consumer(other, T, group="g", clock=clock, member_id="b", session_timeout_ms=10_000,
                 heartbeat_interval_ms=1_000)
    assert [r.offset for r in a.poll()] == [0, 1]
    a.commit()
    produce_keys(lake, T, ["c"], partition=1)
    clock.advance(1_000)
    a.poll()
    assert [(r.partition, r.offset) for r in b.poll()] == [(1, 0)]  # b took partition 1 from a, sticky
    b.commit()
    described = describe_group(other, "g")
    assert [(p.partition, p.committed_offset, p.lag) for p in described.partitions] == [(0, 2, 0), (1, 1, 0)]
    assert described.group_store == f"the directory {tmp_path / 'groups' / lake.config.catalog_name}"
    assert set(other.other.asked) <= PUBLIC
    assert GroupStore(lake).list_groups() == []  # nothing in the catalog's database
    a.close()
    b.close()


def test_consume_with_groups_on_s3_in_a_fresh_process(lake: Lake, s3_server: S3Server) -> None:
    lake.create_topic(T)
    produce_keys(lake, T, ["a", "b", "c"])
    s3_server.create_bucket("groups")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTOR_", "AWS_"))}
    env.update(s3_server.env, COMPACTOR_CATALOG_NAME=lake.config.catalog_name,
               COMPACTOR_WAREHOUSE=lake.config.warehouse, COMPACTOR_GROUP_STORE="s3://groups/lake-groups",
               PYTHONPATH=os.getcwd())

    def compactor(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "compactor.cli.main", *args], env=env, capture_output=True,
                              text=True, timeout=120, check=False)

    done = compactor("consume", T, "--group", "billing", "--raw", "--max-records", "2")
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["offset"] for line in done.stdout.splitlines()] == [0, 1]
    described = json.loads(compactor("group", "describe", "billing", "--json").stdout)
    assert described["group_store"] == f"s3://groups/lake-groups/{lake.config.catalog_name}"
    assert described["partitions"][0]["committed_offset"] == 2
    assert any(k.startswith("lake-groups/") for k in s3_server.keys("groups"))
    assert GroupStore(lake).list_groups() == []  # not in the catalog's database


@pytest.mark.parametrize("uri", ["sqlite", "directory"])
def test_the_group_store_option_names_where_groups_live(tmp_path: Path, uri: str) -> None:
    location = f"sqlite:///{tmp_path / 'groups.db'}" if uri == "sqlite" else str(tmp_path / "groups")
    lake = Lake(new_lake_config(tmp_path / "warehouse"), group_store=location)
    lake.open(create=True)
    lake.create_topic(T)
    produce_keys(lake, T, ["a"])
    with Consumer(lake, T, group="g") as consumer:
        consumer.poll()
        consumer.commit()
    again = Lake(LakeConfig.resolve(str(tmp_path / "warehouse"), env={
        "COMPACTOR_GROUP_STORE": location, "COMPACTOR_CATALOG_NAME": lake.config.catalog_name}))
    assert again.config.group_store == location
    assert GroupStore(again).committed("g", [TopicPartition(T, 0)]) == {TopicPartition(T, 0): 1}
    assert (tmp_path / ("groups.db" if uri == "sqlite" else "groups")).exists()
