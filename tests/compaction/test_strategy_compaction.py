"""compaction.strategy through the real job: which row survives the first and incremental runs, in both layouts,
the rewrite forced by a change of strategy, the delete,compact trim, the run's statistics, the dirty bytes, and
the table view's merge of the compacted view with the raw tail (docs/guarantees.md#compaction, "Strategies")."""

from __future__ import annotations

import struct

import pytest
from pyspark.sql import SparkSession

from compactor.compaction.job import compact_topic
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.retention.run import run_retention
from compactor.status import topic_status
from compactor.topics.describe import describe_topic
from compactor.topics.records import ProducerRecord
from readers.table_view import TableView
from tests.helpers import compacted_rows, current_cursor

pytestmark = pytest.mark.spark
HOUR = 3_600_000
T0 = 30 * 24 * HOUR


def version(number: int, *, text: bool = False) -> tuple[tuple[str, bytes | None], ...]:
    return (("v", str(number).encode() if text else struct.pack(">q", number)),)


def kept(lake: Lake, name: str) -> list[tuple[bytes | None, bytes | None]]:
    return [(r.key, r.value) for r, _ in compacted_rows(lake, name)]


@pytest.mark.parametrize("layout", ["partitioned", pytest.param("sliced", marks=pytest.mark.slow)])
def test_timestamp_strategy_keeps_the_newest_event_and_a_late_record_loses(spark: SparkSession, lake: Lake,
                                                                           layout: str) -> None:
    lake.create_topic("s.ts", config={"cleanup.policy": "compact", "compaction.strategy": "timestamp"})
    topic = lake.topic("s.ts")
    produce(topic, [ProducerRecord(b"a", b"a-new", partition=0, timestamp_ms=T0 + 50),
                    ProducerRecord(b"a", b"a-old", partition=0, timestamp_ms=T0 + 10),   # out of order
                    ProducerRecord(b"b", b"b-1", partition=0, timestamp_ms=T0 + 5),
                    ProducerRecord(b"b", b"b-2", partition=0, timestamp_ms=T0 + 5)],     # equal: offset decides
            now_ms=T0 + 100)
    first = compact_topic(lake, "s.ts", now_ms=T0 + 200, layout=layout)
    assert first.committed and first.strategy == "timestamp"
    assert kept(lake, "s.ts") == [(b"a", b"a-new"), (b"b", b"b-2")]
    # late records: an older 'a' (loses to the view's row), an older tombstone of 'b' (loses: tombstones
    # compete like any record), and a newer 'b' that wins
    produce(topic, [ProducerRecord(b"a", b"a-late", partition=0, timestamp_ms=T0 + 20),
                    ProducerRecord(b"b", None, partition=0, timestamp_ms=T0 + 1)], now_ms=T0 + 300)
    assert TableView(lake, "s.ts").get("a") == b"a-new"  # the view's row outranks the raw tail's
    assert TableView(lake, "s.ts").to_dict() == {b"a": b"a-new", b"b": b"b-2"}
    status = topic_status(lake, "s.ts", now_ms=T0 + 400)
    assert status.dirty_bytes > 0 and status.cleanable_records == 2  # losers are dirty: removable
    second = compact_topic(lake, "s.ts", now_ms=T0 + 400, layout=layout)
    assert second.committed and second.stats.mode == "incremental"
    assert kept(lake, "s.ts") == [(b"a", b"a-new"), (b"b", b"b-2")]
    assert second.stats.records_read == 2 and second.stats.rows_appended == 0
    assert second.stats.records_removed == 2 and second.stats.rows_deleted_from_view == 0
    assert topic_status(lake, "s.ts", now_ms=T0 + 500).dirty_bytes == 0
    produce(topic, [ProducerRecord(b"b", None, partition=0, timestamp_ms=T0 + 90)], now_ms=T0 + 600)
    third = compact_topic(lake, "s.ts", now_ms=T0 + 700, layout=layout)
    assert third.stats.rows_deleted_from_view == 1 and third.stats.tombstones_kept == 1
    assert kept(lake, "s.ts") == [(b"a", b"a-new"), (b"b", None)]
    assert TableView(lake, "s.ts").to_dict() == {b"a": b"a-new"}


@pytest.mark.parametrize("layout", ["partitioned", pytest.param("sliced", marks=pytest.mark.slow)])
def test_header_strategy_orders_by_the_last_version_header(spark: SparkSession, lake: Lake, layout: str) -> None:
    lake.create_topic("s.h", config={"cleanup.policy": "compact", "compaction.strategy": "header",
                                     "compaction.strategy.header": "v"})
    topic = lake.topic("s.h")
    produce(topic, [
        ProducerRecord(b"a", b"a5", version(5), partition=0),
        ProducerRecord(b"a", b"a3", version(3, text=True), partition=0),       # lower: loses
        ProducerRecord(b"b", b"b-none", (), partition=0),                      # no header
        ProducerRecord(b"b", b"b-1", version(-1), partition=0),               # a value beats none
        ProducerRecord(b"b", b"b-bad", (("v", b"x"),), partition=0),           # unparsable: counts as none
        ProducerRecord(b"c", b"c-dup", (("v", b"9"), ("v", b"2")), partition=0),  # the last occurrence: 2
        ProducerRecord(b"c", b"c-4", version(4, text=True), partition=0),
        ProducerRecord(b"d", b"d-null", (("v", None),), partition=0),          # unparsable (null)
        ProducerRecord(b"d", b"d-none", (), partition=0),                      # neither: offset decides
    ], now_ms=T0)
    first = compact_topic(lake, "s.h", now_ms=T0 + 1, layout=layout)
    assert first.stats.unparsable_strategy_values == 2 and first.strategy == "header:v"
    assert kept(lake, "s.h") == [(b"a", b"a5"), (b"b", b"b-1"), (b"c", b"c-4"), (b"d", b"d-none")]
    produce(topic, [
        ProducerRecord(b"a", None, version(4), partition=0),                   # an older tombstone: loses
        ProducerRecord(b"b", b"b-1-again", version(-1), partition=0),          # equal: the higher offset wins
        ProducerRecord(b"c", None, version(7), partition=0),                   # a newer tombstone: deletes
        ProducerRecord(b"d", b"d-bad", (("v", b"1.5"),), partition=0),        # none vs none: offset
    ], now_ms=T0 + 2)
    assert TableView(lake, "s.h").to_dict() == {b"a": b"a5", b"b": b"b-1-again", b"d": b"d-bad"}
    assert TableView(lake, "s.h").get("c") is None
    second = compact_topic(lake, "s.h", now_ms=T0 + 3, layout=layout)
    assert second.stats.unparsable_strategy_values == 1
    assert kept(lake, "s.h") == [(b"a", b"a5"), (b"b", b"b-1-again"), (b"c", None), (b"d", b"d-bad")]
    assert TableView(lake, "s.h").to_dict() == {b"a": b"a5", b"b": b"b-1-again", b"d": b"d-bad"}
    assert TableView(lake, "s.h").get("a") == b"a5"


@pytest.mark.slow  # the forced rewrite stays in the loop (below)
def test_a_change_of_strategy_forces_a_rewrite_and_shows(spark: SparkSession, lake: Lake) -> None:
    lake.create_topic("s.c", config={"cleanup.policy": "compact"})
    topic = lake.topic("s.c")
    produce(topic, [ProducerRecord(b"a", b"late", partition=0, timestamp_ms=T0 + 9),
                    ProducerRecord(b"a", b"early", partition=0, timestamp_ms=T0 + 1)], now_ms=T0)
    first = compact_topic(lake, "s.c", now_ms=T0 + 10)
    assert first.strategy == "offset" and kept(lake, "s.c") == [(b"a", b"early")]
    assert current_cursor(lake, "s.c").as_json()["strategy"] == "offset"  # type: ignore[union-attr]
    topic.refresh().set_config({"compaction.strategy": "timestamp"})
    # before the rewrite, readers still merge under the cursor's strategy (offset: the tail's 'oldest' wins),
    # never under the new one (by timestamp the view's 'early' would)
    produce(topic, [ProducerRecord(b"a", b"oldest", partition=0, timestamp_ms=T0),
                    ProducerRecord(b"b", b"b", partition=0, timestamp_ms=T0)], now_ms=T0 + 20)
    assert TableView(lake, "s.c").get("a") == b"oldest"
    assert describe_topic(lake.topic("s.c")).settings["compaction.strategy"] == "timestamp"
    result = compact_topic(lake, "s.c", now_ms=T0 + 30)
    assert result.committed and result.stats.mode == "rewrite" and result.strategy == "timestamp"
    assert result.stats.rewrite_reason == "compaction.strategy changed from offset to timestamp"
    assert "compaction.strategy changed from offset to timestamp" in result.reason
    # the view's row competes under the new strategy: 'oldest' (T0) loses to 'early' (T0 + 1)
    assert kept(lake, "s.c") == [(b"a", b"early"), (b"b", b"b")]
    assert TableView(lake, "s.c").get("a") == b"early"
    status = topic_status(lake, "s.c", now_ms=T0 + 40)
    assert status.cursor is not None and status.cursor["strategy"] == "timestamp"
    assert status.settings["compaction.strategy"] == "timestamp"
    produce(topic, [ProducerRecord(b"a", b"newer", partition=0, timestamp_ms=T0 + 5)], now_ms=T0 + 50)
    assert compact_topic(lake, "s.c", now_ms=T0 + 60).stats.mode == "incremental"
    assert kept(lake, "s.c") == [(b"b", b"b"), (b"a", b"newer")]


@pytest.mark.slow  # the trim stays in the loop (test_retention_compacted.py)
def test_delete_compact_trim_under_the_timestamp_strategy(spark: SparkSession, lake: Lake) -> None:
    """The trim removes compacted rows by record timestamp whatever the strategy; a key whose row it removed
    takes the next record of the range, however it ranks."""
    day = 24 * HOUR
    lake.create_topic("s.t", config={"cleanup.policy": "delete,compact", "retention.ms": str(day),
                                     "compaction.strategy": "timestamp"})
    topic = lake.topic("s.t")
    produce(topic, [ProducerRecord(b"old", b"o", partition=0, timestamp_ms=T0),
                    ProducerRecord(b"new", b"n", partition=0, timestamp_ms=T0 + 2 * day)], now_ms=T0 + 2 * day)
    compact_topic(lake, "s.t", now_ms=T0 + 2 * day)
    trim = run_retention(lake, "s.t", now_ms=T0 + 2 * day + 1).as_json()["compacted_trim"]
    assert trim["committed"] is True and trim["rows_removed"] == 1
    assert kept(lake, "s.t") == [(b"new", b"n")]
    produce(topic, [ProducerRecord(b"old", b"o2", partition=0, timestamp_ms=T0 + 3 * day),
                    ProducerRecord(b"new", b"n-late", partition=0, timestamp_ms=T0 + day + 1)],
            now_ms=T0 + 3 * day)
    compact_topic(lake, "s.t", now_ms=T0 + 3 * day)
    assert kept(lake, "s.t") == [(b"new", b"n"), (b"old", b"o2")]
    assert TableView(lake, "s.t").to_dict() == {b"new": b"n", b"old": b"o2"}



def test_a_change_of_strategy_alone_forces_a_rewrite(spark: SparkSession, lake: Lake) -> None:
    """With no new records, a change of strategy still rewrites the view (and publishes a cursor that records
    the new strategy): the view's rows are kept, and ranked from now on by the new one."""
    lake.create_topic("s.a", config={"cleanup.policy": "compact"})
    topic = lake.topic("s.a")
    produce(topic, [ProducerRecord(b"a", b"1", partition=0, timestamp_ms=T0)], now_ms=T0)
    compact_topic(lake, "s.a", now_ms=T0 + 1)
    topic.refresh().set_config({"compaction.strategy": "header", "compaction.strategy.header": "v"})
    result = compact_topic(lake, "s.a", now_ms=T0 + 2)
    assert result.committed and result.stats.mode == "rewrite" and result.stats.records_read == 0
    assert result.stats.rewrite_reason == "compaction.strategy changed from offset to header:v"
    assert current_cursor(lake, "s.a").strategy.label == "header:v"  # type: ignore[union-attr]
    assert kept(lake, "s.a") == [(b"a", b"1")]
    assert not compact_topic(lake, "s.a", now_ms=T0 + 3).committed  # nothing changed since


def test_a_failing_append_pass_under_a_strategy_fails_the_run_and_leaves_the_view(spark: SparkSession,
                                                                                  lake: Lake) -> None:
    """Under a strategy the delete pass waits for the append pass to build its query: when the append pass fails
    first, the run fails with its error (the delete pass does not wait for ever) and the cursor stays."""
    lake.create_topic("s.fail", config={"cleanup.policy": "compact", "compaction.strategy": "timestamp"})
    topic = lake.topic("s.fail")
    produce(topic, [ProducerRecord(b"a", b"a-1", partition=0, timestamp_ms=T0 + 50)], now_ms=T0 + 100)
    assert compact_topic(lake, "s.fail", now_ms=T0 + 200).committed
    before = current_cursor(lake, "s.fail")
    produce(topic, [ProducerRecord(b"a", b"a-2", partition=0, timestamp_ms=T0 + 60)], now_ms=T0 + 300)

    def listener(phase: str, _: dict[str, object]) -> None:
        if phase == "phase 2 appends":
            raise RuntimeError("append pass broke")

    with pytest.raises(RuntimeError, match="append pass broke"):
        compact_topic(lake, "s.fail", now_ms=T0 + 400, listener=listener)
    after = current_cursor(lake, "s.fail")
    assert before is not None and after is not None and after.snapshot_id == before.snapshot_id
    assert kept(lake, "s.fail") == [(b"a", b"a-1")]
