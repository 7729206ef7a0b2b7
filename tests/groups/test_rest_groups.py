"""Consumers and groups on an Iceberg REST catalog (issue 29, defect 11; issue 32), against the REST catalog server
of the tests, as users run them: ``compactor consume`` and ``compactor group`` in fresh processes configured by
their environment. The server places its tables itself (no warehouse location), so groups have no default
place: a consumer or ``group`` verb says to give ``--group-store`` / ``COMPACTOR_GROUP_STORE``, while ``status``
and the cleaner (which only show or expire groups) go on without any; with a group store named, everything works.
With a warehouse location given, the default store is ``<warehouse>/_groups``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compactor import Consumer, TopicPartition
from compactor.cleaner import Cleaner
from compactor.errors import InputError
from compactor.groups import GroupStore
from compactor.lake import Lake
from compactor.status import topic_status
from tests.conftest import new_lake_config
from tests.consumers import produce_keys
from tests.servers import RestCatalog

ROOT = Path(__file__).resolve().parents[2]
T = "shop.orders"


def compactor(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "compactor.cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_consume_and_groups_on_a_rest_catalog_in_fresh_processes(rest_catalog: RestCatalog, tmp_path: Path) -> None:
    lake_env = rest_catalog.lake_env(rest_catalog.create_warehouse())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTOR_", "AWS_"))}
    env.update(lake_env, PYTHONPATH=str(ROOT))
    lake = Lake(new_lake_config("", rest_catalog.uri, **lake_env))
    env["COMPACTOR_CATALOG_NAME"] = lake.config.catalog_name  # (groups are kept apart by the catalog's name)
    lake.create_topic(T, partitions=2)
    produce_keys(lake, T, ["a", "b", "c"], partition=0)

    for verb in (["consume", T, "--group", "g", "--raw", "--max-records", "2"], ["group", "list"]):
        done = compactor(env, *verb)  # no place for groups: a clear error naming what to set, nothing else
        assert done.returncode == 1 and done.stdout == "", done.stderr
        assert "COMPACTOR_GROUP_STORE" in done.stderr and "--group-store" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    assert topic_status(lake, T).groups == []  # status and the cleaner have no group to show or expire
    cleaner = Cleaner(lake, compact=lambda *a: pytest.fail("nothing is due"), retain=lambda *a: None)  # type: ignore[arg-type]
    assert cleaner.run_once().expired_groups == []

    done = compactor(env, "--group-store", str(tmp_path / "groups"), "consume", T, "--group", "g", "--raw",
                     "--max-records", "2")
    assert done.returncode == 0, done.stderr
    assert [(r["partition"], r["offset"], r["key"]) for r in map(json.loads, done.stdout.splitlines())] == [
        (0, 0, "a"), (0, 1, "b")]
    env["COMPACTOR_GROUP_STORE"] = str(tmp_path / "groups")
    done = compactor(env, "group", "describe", "g", "--json")
    assert done.returncode == 0, done.stderr
    described = json.loads(done.stdout)
    assert [(p["partition"], p["committed_offset"], p["lag"]) for p in described["partitions"]] == [
        (0, 2, 1), (1, 0, 0)]  # partition 1 had nothing: its position, the log end, was committed
    done = compactor(env, "consume", T, "--group", "g", "--raw")  # from the committed position
    assert done.returncode == 0 and [json.loads(x)["offset"] for x in done.stdout.splitlines()] == [2], done.stderr
    named = Lake(lake.config, group_store=str(tmp_path / "groups"))
    assert topic_status(named, T).groups == [{"group": "g", "total_lag": 0, "committed": {"0": 3, "1": 0}}]
    with Consumer(named, T, group="g") as consumer:  # in-process, the same store
        assert consumer.committed() == {TopicPartition(T, 0): 3, TopicPartition(T, 1): 0}
    with pytest.raises(InputError, match="COMPACTOR_GROUP_STORE"):
        GroupStore(lake)


def test_a_rest_lake_with_a_warehouse_location_keeps_groups_there_by_default(rest_catalog: RestCatalog,
                                                                            tmp_path: Path) -> None:
    lake_env = rest_catalog.lake_env(rest_catalog.create_warehouse())
    lake = Lake(new_lake_config("", rest_catalog.uri, **lake_env))
    lake.create_topic(T)
    produce_keys(lake, T, ["a", "b"])
    located = Lake(new_lake_config(str(tmp_path / "w"), rest_catalog.uri, **lake_env))
    assert located.config.is_rest and located.config.warehouse
    with Consumer(located, T, group="g") as consumer:
        assert [r.offset for r in consumer.poll()] == [0, 1]
        consumer.commit()
    store = GroupStore(located)
    assert str(tmp_path / "w" / "_groups") in store.description
    assert [g.group for g in store.list_groups()] == ["g"]
    assert topic_status(located, T).groups[0]["committed"] == {"0": 2}


def test_the_group_store_is_kept_whatever_the_catalog(tmp_path: Path) -> None:
    """``--group-store`` and ``COMPACTOR_GROUP_STORE`` were dropped for a REST catalog (no server needed here)."""
    from compactor.config import LakeConfig

    rest = "http://127.0.0.1:1/catalog"
    for kwargs, env in (({"group_store": "s3://b/g"}, {}), ({}, {"COMPACTOR_GROUP_STORE": "s3://b/g"})):
        for catalog in (rest, str(tmp_path / "catalog.db")):
            config = LakeConfig.resolve(str(tmp_path / "w") if catalog != rest else None, catalog, env=env, **kwargs)
            assert config.group_store == "s3://b/g", (catalog, kwargs, env)
