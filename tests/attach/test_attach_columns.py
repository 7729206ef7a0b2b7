"""Attached logs in the sink's flat layout and in named columns, built with pyiceberg: a composite key, a
Debezium-style delete predicate, a source schema change, the owner's maintenance between incremental runs
(rewritten files, expired snapshots, deleted old rows), retention, and the CLI in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import IntegerType, LongType, NestedField, StringType, StructType

from compactor import attach_table, compact_attached, read_attached
from compactor.attach.registry import load_attached
from compactor.attach.status import attached_retention, attached_status
from compactor.iceberg.expressions import below
from compactor.lake import Lake
from readers import TopicReader
from tests.attach.sources import BASE_MS, connect_rows, connect_table, location_path, tree_digest

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]


def row(id_: str | None, region: str | None, amount: int | None, p: int, o: int) -> dict[str, Any]:
    return {"id": id_, "region": region, "amount": amount, "_kafka_metadata_partition": p,
            "_kafka_metadata_offset": o, "_kafka_metadata_timestamp": BASE_MS + o}


def latest(lake: Lake, name: str) -> list[tuple[int, int, Any, Any]]:
    return [(r["partition"], r["offset"], r["key"], r["value"])
            for r in read_attached(lake, name, read_compacted=True)]


def test_a_composite_key_the_owners_maintenance_and_a_schema_change(lake: Lake, spark: object) -> None:
    source = connect_table(lake.catalog, "sink.orders")
    source.append(connect_rows(source, [row("1", "eu", 10, 0, 0), row("1", "us", 20, 0, 1), row("1", "eu", 11, 0, 2),
                                        row(None, None, 5, 0, 3), row("2", "eu", 30, 1, 7)]))
    attach_table(lake, "lake.orders", table="sink.orders", layout="kafka-connect", key_columns=["id", "region"])
    first = compact_attached(lake, "lake.orders", now_ms=BASE_MS + 100)
    assert first.horizons == {"0": 4, "1": 8}
    assert latest(lake, "lake.orders") == [
        (0, 1, {"id": "1", "region": "us"}, {"amount": 20}), (0, 2, {"id": "1", "region": "eu"}, {"amount": 11}),
        (1, 7, {"id": "2", "region": "eu"}, {"amount": 30})]  # the keyless row is dropped (compaction.null-key)

    # the owner appends, then rewrites every file, expires all older snapshots and deletes old rows
    source.append(connect_rows(source, [row("1", "us", 21, 0, 5), row("3", "eu", 40, 1, 9)]))
    source = lake.catalog.load_table("sink.orders")
    everything = source.scan().to_arrow()
    source.overwrite(everything)  # new files with the same rows
    source = lake.catalog.load_table("sink.orders")
    current = source.current_snapshot()
    assert current is not None
    source.maintenance.expire_snapshots().by_ids(
        [s.snapshot_id for s in source.snapshots() if s.snapshot_id != current.snapshot_id]).commit()
    source = lake.catalog.load_table("sink.orders")
    source.delete(below("_kafka_metadata_offset", 2))
    second = compact_attached(lake, "lake.orders", now_ms=BASE_MS + 200)
    assert second.committed and second.stats["records_read"] == 2 and second.horizons == {"0": 6, "1": 10}
    assert latest(lake, "lake.orders") == [
        (0, 2, {"id": "1", "region": "eu"}, {"amount": 11}), (0, 5, {"id": "1", "region": "us"}, {"amount": 21}),
        (1, 7, {"id": "2", "region": "eu"}, {"amount": 30}), (1, 9, {"id": "3", "region": "eu"}, {"amount": 40})]

    # a column added to the source appears in the view; a type change it cannot follow is an error naming it
    source = lake.catalog.load_table("sink.orders")
    with source.update_schema() as update:
        update.add_column("note", StringType())
    source = lake.catalog.load_table("sink.orders")
    source.append(connect_rows(source, [{**row("2", "eu", 31, 1, 12), "note": "n"}]))
    third = compact_attached(lake, "lake.orders", now_ms=BASE_MS + 300)
    assert third.committed
    view = load_attached(lake.catalog, "lake.orders")
    assert view is not None and "note" in [f.name for f in view.view.schema().fields]
    assert latest(lake, "lake.orders")[-1] == (1, 12, {"id": "2", "region": "eu"}, {"amount": 31, "note": "n"})
    status = attached_status(view, BASE_MS + 300)
    assert status.next_offsets == {"0": 6, "1": 13} and not status.due

    with source.update_schema(allow_incompatible_changes=True) as update:
        update.delete_column("note")
    with lake.catalog.load_table("sink.orders").update_schema() as update:
        update.add_column("note", IntegerType())
    before = view.refresh().view.current_snapshot()
    with pytest.raises(Exception, match="note"):
        compact_attached(lake, "lake.orders", now_ms=BASE_MS + 400)
    assert view.refresh().view.current_snapshot() == before


def test_a_debezium_delete_predicate_on_named_columns(lake: Lake, spark: object) -> None:
    schema = Schema(NestedField(1, "pk", LongType()), NestedField(2, "name", StringType()),
                    NestedField(3, "_cdc", StructType(NestedField(5, "op", StringType()))),
                    NestedField(4, "meta", StructType(NestedField(6, "p", IntegerType()),
                                                      NestedField(7, "o", LongType()),
                                                      NestedField(8, "ts", LongType()))))
    source = connect_table(lake.catalog, "cdc.users", schema)

    def cdc(pk: int, name: str | None, op: str, o: int) -> dict[str, Any]:
        return {"pk": pk, "name": name, "_cdc": {"op": op}, "meta": {"p": 0, "o": o, "ts": BASE_MS + o}}

    source.append(pa.Table.from_pylist([cdc(1, "a", "C", 0), cdc(2, "b", "C", 1), cdc(1, "a2", "U", 2),
                                        cdc(2, "b", "D", 3)], schema=source.schema().as_arrow()))
    attach_table(lake, "lake.users", table="cdc.users", layout="columns", partition_column="meta.p",
                 offset_column="meta.o", timestamp_column="meta.ts", key_columns=["pk"],
                 tombstone_when="_cdc.op = 'D'", config={"delete.retention.ms": "1000"})
    compact_attached(lake, "lake.users", now_ms=BASE_MS)
    assert [(o, v) for _, o, _, v in latest(lake, "lake.users")] == [
        (2, {"name": "a2", "_cdc": {"op": "U"}}), (3, None)]
    # the readers evaluate the rule on the source's rows without Spark (the view's rows carry Spark's flags)
    assert [(r.offset, r.value) for r in TopicReader(lake, "lake.users")] == [
        (0, b'{"name":"a","_cdc":{"op":"C"}}'), (1, b'{"name":"b","_cdc":{"op":"C"}}'),
        (2, b'{"name":"a2","_cdc":{"op":"U"}}'), (3, None)]
    # the tombstone goes once its delete horizon passed; retention removes only the view's own old snapshots
    late = compact_attached(lake, "lake.users", now_ms=BASE_MS + 1000)
    assert late.committed and [o for _, o, _, _ in latest(lake, "lake.users")] == [2]
    attached = load_attached(lake.catalog, "lake.users")
    assert attached is not None
    source_files = tree_digest(location_path(source))
    result = attached_retention(attached, lake.config, now_ms=BASE_MS + 1000 + 3_600_000)
    # run 1's snapshot; its data file stays (run 2 only position-deleted the tombstone in it)
    assert result.expired_snapshots == 1 and result.removed_files == 0
    assert tree_digest(location_path(source)) == source_files
    assert [o for _, o, _, _ in latest(lake, "lake.users")] == [2]


def cli(lake: Lake, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COMPACTOR_WAREHOUSE": str(lake.config.warehouse),
           "COMPACTOR_CATALOG_NAME": lake.config.catalog_name}
    return subprocess.run([sys.executable, "-m", "compactor.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=300, check=False)


@pytest.mark.slow
def test_the_command_line_attaches_compacts_reads_and_detaches_in_a_fresh_process(lake: Lake, tmp_path: Path) -> None:
    source = connect_table(lake.catalog, "sink.cli")
    source.append(connect_rows(source, [row("1", "eu", 1, 0, 0), row("1", "eu", 2, 0, 1)]))
    digest = tree_digest(location_path(source))
    bad = cli(lake, "topic", "attach", "lake.cli", "--table", "sink.cli", "--layout", "kafka-connect",
              "--key-columns", "nope")
    assert bad.returncode == 1 and "no key column 'nope'" in bad.stderr
    done = cli(lake, "topic", "attach", "lake.cli", "--table", "sink.cli", "--layout", "kafka-connect",
               "--key-columns", "id")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["mapping"]["keys"] == ["id"]
    assert "lake.cli" in cli(lake, "topic", "list").stdout
    compacted = cli(lake, "compact", "lake.cli", "--now-ms", str(BASE_MS))
    assert compacted.returncode == 0, compacted.stderr
    assert json.loads(compacted.stdout)["horizons"] == {"0": 2}
    read = cli(lake, "read", "lake.cli", "--compacted")
    assert [json.loads(line)["offset"] for line in read.stdout.splitlines()] == [1], read.stderr
    status = json.loads(cli(lake, "status", "lake.cli", "--json").stdout)
    assert status["next_offsets"] == {"0": 2} and status["due"] is False
    refused = cli(lake, "produce", "lake.cli")
    assert refused.returncode == 1 and "never writes to its source" in refused.stderr
    assert cli(lake, "topic", "detach", "lake.cli").returncode == 0
    assert tree_digest(location_path(source)) == digest
    assert lake.catalog.table_exists("sink.cli") and not lake.catalog.table_exists("lake.cli")


def test_the_cleaner_compacts_an_attached_log_and_retains_only_its_own_snapshots(lake: Lake, spark: object) -> None:
    from compactor.cleaner import Cleaner

    source = connect_table(lake.catalog, "sink.clean")
    source.append(connect_rows(source, [row("1", "eu", 1, 0, 0), row("1", "eu", 2, 0, 1)]))
    digest = tree_digest(location_path(source))
    attach_table(lake, "lake.clean", table="sink.clean", layout="kafka-connect", key_columns=["id"])
    assert lake.list_topics() == [] and lake.list_topics(attached=True) == ["lake.clean"]
    first = Cleaner(lake).run_once(BASE_MS).topics["lake.clean"]
    assert first.due and first.compaction is not None and first.compaction.committed and not first.errors
    assert latest(lake, "lake.clean") == [(0, 1, {"id": "1"}, {"region": "eu", "amount": 2})]
    second = Cleaner(lake).run_once(BASE_MS + 1).topics["lake.clean"]
    assert second.due is False and second.compaction is None and second.retention is not None
    assert tree_digest(location_path(source)) == digest


def test_describe_config_and_retention_route_to_the_attached_log(lake: Lake, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``topic describe``, ``topic config`` and ``retention`` on an attached log take its own handlers (in process;
    the fresh-process test above covers attach, compact, read, status, produce and detach)."""
    from compactor.cli.main import main

    source = connect_table(lake.catalog, "sink.routes")
    source.append(connect_rows(source, [row("1", "eu", 1, 0, 0)]))
    attach_table(lake, "lake.routes", table="sink.routes", layout="kafka-connect", key_columns=["id"])
    monkeypatch.setenv("COMPACTOR_CATALOG_NAME", lake.config.catalog_name)
    lake_args = ["--warehouse", str(lake.config.warehouse)]

    def run(*args: str) -> tuple[int, str, str]:
        code = main([*lake_args, *args])
        out, err = capsys.readouterr()
        return code, out, err

    code, out, err = run("topic", "describe", "lake.routes")
    assert code == 0, err
    described = json.loads(out)
    assert described["mapping"]["keys"] == ["id"] and described["source"] == "sink.routes"
    code, out, err = run("topic", "config", "lake.routes")
    assert code == 0 and json.loads(out)["mapping"]["keys"] == ["id"], err
    code, _, err = run("topic", "config", "lake.routes", "--set", "delete.retention.ms=1")
    assert code == 1 and "settings are given at 'topic attach --config'" in err
    code, out, err = run("retention", "lake.routes", "--dry-run", "--now-ms", str(BASE_MS))
    assert code == 0, err
    assert json.loads(out)["dry_run"] is True and json.loads(out)["source_untouched"] is True
