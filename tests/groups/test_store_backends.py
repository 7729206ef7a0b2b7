"""The group store on each back-end it supports (``--group-store``): the lake's SQLite catalog database (the
default), PostgreSQL, S3 with conditional writes (moto's server) and a local directory. Every back-end keeps
one document per group changed by compare-and-set on its own clock; racing writers never lose an update."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from compactor.errors import GroupBusyError, GroupNotFoundError, InputError
from compactor.groups import GroupStore, Membership, TopicPartition
from compactor.groups.backend import UNCHANGED, Outcome
from compactor.lake import Lake
from tests.conftest import new_lake_config

_databases = itertools.count()
T = "s.t"
TP0 = TopicPartition(T, 0)


@pytest.fixture(params=["sqlite", "postgres", "s3", "directory"])
def store_lake(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Lake]:
    """A lake whose groups live on one back-end (its catalog: a local SQLite file, whatever the groups use)."""
    env: dict[str, str] = {}
    group_store: str | None = None
    if request.param == "postgres":
        group_store = request.getfixturevalue("postgres_server").create_database(f"groups_{next(_databases)}")
    elif request.param == "s3":
        server = request.getfixturevalue("s3_server")
        server.create_bucket("groups-bucket")
        env = server.env
        group_store = f"s3://groups-bucket/{tmp_path.name}"
    elif request.param == "directory":
        group_store = str(tmp_path / "groups")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    config = new_lake_config(tmp_path / "warehouse", **env)
    lake = Lake(config, group_store=group_store)
    lake.open(create=True)
    yield lake
    lake.close()


def test_a_group_lives_and_goes_on_each_back_end(store_lake: Lake) -> None:
    store = GroupStore(store_lake)
    assert abs(store.now_ms() - time.time() * 1000) < 60_000  # the store's own clock
    member = Membership(store, "g", {T: 2}, session_timeout_ms=30_000, member_id="m")
    beat = member.heartbeat()
    assert sorted(beat.owned) == [TP0, TopicPartition(T, 1)]
    member.commit({TP0: 5}, member.owned)
    assert store.committed("g", [TP0]) == {TP0: 5}
    assert [g.group for g in store.list_groups()] == ["g"] and store.groups_on_topic(T) == {"g": {0: 5}}
    assert [m.member_id for m in store.members("g")] == ["m"]
    with pytest.raises(GroupBusyError, match="live members"):
        store.delete("g")
    member.leave()
    assert store.members("g") == [] and {s.owner for s in store.partitions("g")} == {None}
    store.delete("g")
    assert store.list_groups() == []
    with pytest.raises(GroupNotFoundError):
        store.require("g")


def test_racing_writers_never_lose_an_update(store_lake: Lake) -> None:
    backend = GroupStore(store_lake).backend
    errors: list[BaseException] = []

    def add(document: str | None, now: int) -> tuple[Outcome, None]:
        count = json.loads(document)["n"] if document else 0
        return json.dumps({"n": count + 1}), None

    def writer() -> None:
        try:
            for _ in range(15):
                backend.transact("counter", add)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors
    document, _ = backend.read("counter")
    assert document is not None and json.loads(document) == {"n": 60}
    assert backend.transact("counter", lambda d, now: (UNCHANGED, now)) > 0


def test_group_names_of_any_text_are_kept_apart(store_lake: Lake) -> None:
    store = GroupStore(store_lake)
    names = ["a/b", "a%2Fb", "ünïcode group", "x" * 255]
    for i, name in enumerate(names):
        store.commit(name, None, "", {TP0: (i, -1)})
    assert [g.group for g in store.list_groups()] == sorted(names)
    assert [store.committed(n, [TP0])[TP0] for n in names] == [0, 1, 2, 3]


def test_an_unknown_group_store_is_a_clear_error(tmp_path: Path) -> None:
    lake = Lake(new_lake_config(tmp_path / "w"), group_store="ftp://somewhere/groups")
    lake.open(create=True)
    with pytest.raises(InputError, match="unsupported group store"):
        GroupStore(lake)


def test_groups_of_the_earlier_tables_move_into_the_store_once(lake: Lake) -> None:
    from sqlalchemy import create_engine, text

    lake.create_topic(T)  # a lake of the earlier version, with a topic
    engine = create_engine(lake.config.catalog.sqlalchemy_url)
    name = lake.config.catalog_name
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE compactor_groups (catalog_name TEXT, group_id TEXT, created_ms BIGINT, "
                          "last_commit_ms BIGINT)"))
        conn.execute(text("CREATE TABLE compactor_group_partitions (catalog_name TEXT, group_id TEXT, topic TEXT, "
                          "partition INT, committed_offset BIGINT, committed_ms BIGINT, owner TEXT, "
                          "owner_epoch BIGINT, last_reset TEXT, reset_count BIGINT)"))
        conn.execute(text("INSERT INTO compactor_groups VALUES (:c, 'old', 1, 2)"), {"c": name})
        conn.execute(text("INSERT INTO compactor_group_partitions VALUES (:c, 'old', 's.t', 0, 17, 2, NULL, 3, "
                          "'{\"at_ms\": 1, \"from\": 9, \"to\": 10, \"reason\": \"r\"}', 1)"), {"c": name})
    engine.dispose()
    store = GroupStore(lake)
    assert store.committed("old", [TP0]) == {TP0: 17}
    assert store.partitions("old")[0].reset_count == 1
    store.delete("old")
    again = GroupStore(Lake(lake.config))
    assert not again.exists("old")  # moved once: a deleted group does not come back
