"""Bad inputs to attaching and compacting an attached log: each a clear error that writes nothing."""

from __future__ import annotations

import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from compactor import attach_table, compact_attached
from compactor.attach.mapping import AttachError
from compactor.errors import NotATopicError, TopicCorruptError, TopicExistsError, TopicNotFoundError, UsageError
from compactor.lake import Lake
from tests.attach.sources import BASE_MS, connect_rows, connect_table, location_path, tree_digest


def tables(lake: Lake) -> list[tuple[str, ...]]:
    return sorted(t for ns in lake.catalog.list_namespaces() for t in lake.catalog.list_tables(ns))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"table": "sink.missing", "layout": "kafka-connect", "key_columns": ["id"]}, "no such table"),
    ({"table": "sink.t", "layout": "kafka-connect"}, "needs --key-columns"),
    ({"table": "sink.t", "layout": "kafka-connect", "key_columns": ["nope"]}, "no key column 'nope'"),
    ({"table": "sink.t", "layout": "redpanda"}, "no partition column 'redpanda.partition'"),
    ({"table": "sink.t", "layout": "columns", "partition_column": "id", "offset_column": "_kafka_metadata_offset",
      "timestamp_column": "_kafka_metadata_timestamp", "key_columns": ["id"]}, "partition column 'id' is string"),
    ({"table": "sink.t", "layout": "columns", "key_columns": ["id"]}, "needs --partition-column"),
    ({"table": "sink.t", "layout": "kafka-connect", "key_columns": ["id"], "partition_column": "x"},
     "applies to layout columns only"),
    ({"table": "sink.t", "layout": "avro", "key_columns": ["id"]}, "unknown layout"),
    ({"table": "sink.t", "layout": "kafka-connect", "key_columns": ["id"], "tombstone_when": "(op = 'D'"},
     "not one SQL condition"),
    ({"table": "sink.t", "layout": "kafka-connect", "key_columns": ["id"], "config": {"retention.ms": "x"}},
     "retention.ms"),
])
def test_a_table_that_cannot_be_attached_is_refused_and_nothing_is_written(lake: Lake, kwargs: dict[str, object],
                                                                          message: str) -> None:
    source = connect_table(lake.catalog, "sink.t")
    before, digest = tables(lake), tree_digest(location_path(source))
    with pytest.raises((AttachError, TopicNotFoundError, UsageError, ValueError), match=message):
        attach_table(lake, "lake.t", **kwargs)  # type: ignore[arg-type]
    assert tables(lake) == before and tree_digest(location_path(source)) == digest


def test_a_name_taken_and_the_products_own_tables_are_refused(lake: Lake) -> None:
    connect_table(lake.catalog, "sink.t")
    lake.create_topic("lake.native")
    with pytest.raises(NotATopicError, match="product's own"):
        attach_table(lake, "lake.x", table="lake.native", layout="columns", partition_column="partition",
                     offset_column="offset", timestamp_column="timestamp", key_columns=["key"])
    attach_table(lake, "lake.t", table="sink.t", layout="kafka-connect", key_columns=["id"])
    with pytest.raises(TopicExistsError):
        attach_table(lake, "lake.t", table="sink.t", layout="kafka-connect", key_columns=["id"])
    with pytest.raises(AttachError, match="_compactor_"):
        schema = Schema(NestedField(1, "_compactor_offset", LongType()), NestedField(2, "id", StringType()))
        attach_table(lake, "lake.u", table=".".join(connect_table(lake.catalog, "sink.u", schema).name()),
                     layout="columns", partition_column="id", offset_column="id", timestamp_column="id",
                     key_columns=["id"])


@pytest.mark.spark
def test_duplicate_offsets_and_a_replaced_source_are_errors_that_publish_nothing(lake: Lake, spark: object) -> None:
    source = connect_table(lake.catalog, "sink.dup")
    row = {"id": "a", "region": None, "amount": 1, "_kafka_metadata_partition": 0, "_kafka_metadata_offset": 3,
           "_kafka_metadata_timestamp": BASE_MS}
    source.append(connect_rows(source, [row, {**row, "id": "b"}]))
    attached = attach_table(lake, "lake.dup", table="sink.dup", layout="kafka-connect", key_columns=["id"])
    with pytest.raises(TopicCorruptError, match="duplicate offsets in partition 0"):
        compact_attached(lake, "lake.dup", now_ms=BASE_MS)
    assert attached.refresh().view.current_snapshot() is None

    lake.catalog.drop_table("sink.dup")
    connect_table(lake.catalog, "sink.dup")
    with pytest.raises(AttachError, match="was replaced by another table"):
        compact_attached(lake, "lake.dup", now_ms=BASE_MS)
    lake.catalog.drop_table("sink.dup")
    with pytest.raises(TopicNotFoundError, match="no longer exists"):
        compact_attached(lake, "lake.dup", now_ms=BASE_MS)
    assert attached.refresh().view.current_snapshot() is None


@pytest.mark.spark
def test_rows_appended_below_the_horizon_are_refused(lake: Lake, spark: object) -> None:
    source = connect_table(lake.catalog, "sink.late")
    row = {"id": "a", "region": None, "amount": 1, "_kafka_metadata_partition": 0, "_kafka_metadata_offset": 5,
           "_kafka_metadata_timestamp": BASE_MS}
    source.append(connect_rows(source, [row]))
    attached = attach_table(lake, "lake.late", table="sink.late", layout="kafka-connect", key_columns=["id"])
    assert compact_attached(lake, "lake.late", now_ms=BASE_MS).horizons == {"0": 6}
    cursor = attached.refresh().view.current_snapshot()
    source.append(connect_rows(source, [{**row, "id": "b", "_kafka_metadata_offset": 2}]))
    with pytest.raises(AttachError, match="offset 2 of partition"):
        compact_attached(lake, "lake.late", now_ms=BASE_MS)
    assert attached.refresh().view.current_snapshot() == cursor


@pytest.mark.parametrize("rule", ["no_such_column = 'D'", "amount = 'x'"])
def test_a_tombstone_rule_that_does_not_apply_to_the_source_is_refused_at_attach(lake: Lake, rule: str) -> None:
    connect_table(lake.catalog, "sink.rule")
    before = tables(lake)
    with pytest.raises(AttachError, match=r"tombstone rule .* does not apply to the source"):
        attach_table(lake, "lake.rule", table="sink.rule", layout="kafka-connect", key_columns=["id"],
                     tombstone_when=rule)
    assert tables(lake) == before


@pytest.mark.spark
def test_a_spark_only_tombstone_rule_compacts_and_reads_on_spark_and_the_readers_name_it(
        lake: Lake, spark: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Any Spark SQL condition is a tombstone rule: compaction and ``compactor read`` evaluate it with Spark; the
    readers (no Spark) refuse it naming the forms they take; one Spark cannot resolve fails the first run."""
    import json

    from compactor.cli.main import main
    from readers.reader import TopicReader

    source = connect_table(lake.catalog, "sink.rule")
    source.append(connect_rows(source, [
        {"id": i, "region": region, "amount": 1, "_kafka_metadata_partition": 0, "_kafka_metadata_offset": o,
         "_kafka_metadata_timestamp": BASE_MS} for o, (i, region) in enumerate([("a", "EU"), ("b", "D"), ("a", "d")])]))
    attach_table(lake, "lake.rule", table="sink.rule", layout="kafka-connect", key_columns=["id"],
                 tombstone_when="lower(region) = 'd'")
    assert compact_attached(lake, "lake.rule", now_ms=BASE_MS).committed
    with pytest.raises(AttachError, match="cannot be evaluated by the readers, TableView and consumers"):
        list(TopicReader(lake, "lake.rule", read_compacted=True).records())
    monkeypatch.setenv("COMPACTOR_CATALOG_NAME", lake.config.catalog_name)
    assert main(["--warehouse", str(lake.config.warehouse), "read", "lake.rule", "--compacted"]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    # b and a are tombstones (region D, d) kept until their delete horizon: the latest record of each key
    assert [(r["offset"], r["key"], r["value"]) for r in printed] == [(1, {"id": "b"}, None), (2, {"id": "a"}, None)]
    assert main(["--warehouse", str(lake.config.warehouse), "read", "lake.rule", "--raw", "--from-timestamp",
                 "0:0"]) == 2
    assert "--from-timestamp: not with the tombstone rule" in capsys.readouterr().err
    attached = attach_table(lake, "lake.bad", table="sink.rule", layout="kafka-connect", key_columns=["id"],
                            tombstone_when="amount +")
    with pytest.raises(AttachError, match="tombstone rule"):
        compact_attached(lake, "lake.bad", now_ms=BASE_MS)
    assert attached.refresh().view.current_snapshot() is None
