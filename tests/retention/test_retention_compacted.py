"""docs/guarantees.md#retention under ``compact`` and ``delete,compact``, with cursors made by the Spark job: the cap at
retained cursors' horizons, the compacted trim, the compacted start, compacted expiry, pinned compacted readers
and dropping the view when the policy loses ``compact``. (Retention without cursors is in test_retention.py;
its planning rules as properties in test_retention_plan.py.)"""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from compactor.compaction.job import compact_topic
from compactor.errors import OffsetOutOfRangeError
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.retention import run_retention
from compactor.topics.records import ProducerRecord
from readers.reader import TopicReader
from tests.helpers import compacted_rows, current_cursor, raw, view
from tests.retention.test_retention import DAY, HOUR, T0, batch, offsets

pytestmark = pytest.mark.spark


def test_compact_never_removes_at_or_above_a_retained_cursors_horizon(spark: SparkSession, lake: Lake) -> None:
    lake.create_topic("c.t", config={"cleanup.policy": "compact", "retention.ms": str(HOUR),
                                     "compaction.cursor.retain-ms": str(DAY)})
    topic = lake.topic("c.t")
    produce(topic, batch("ab", T0), now_ms=T0)
    # no cursor yet: nothing is compacted, so nothing may go
    assert run_retention(lake, "c.t", now_ms=T0 + DAY).as_json()["removed_records"] == 0
    compact_topic(lake, "c.t", now_ms=T0 + 1)                  # C1: horizon 2
    produce(topic, batch("ac", T0 + 2), now_ms=T0 + 2)           # offsets 2, 3
    compact_topic(lake, "c.t", now_ms=T0 + 3)                  # C2: horizon 4, C1 retained for a day
    produce(topic, batch("d", T0 + 4), now_ms=T0 + 4)            # offset 4, above every horizon
    result = run_retention(lake, "c.t", now_ms=T0 + 10 * HOUR).as_json()
    assert result["log_start_offsets"] == {"0": 2}, "capped at the retained earlier cursor's horizon (2)"
    result = run_retention(lake, "c.t", now_ms=T0 + 3 + DAY).as_json()  # C1 no longer retained
    assert result["log_start_offsets"] == {"0": 4}, "capped at the current cursor's horizon (4)"
    assert offsets(raw(lake, "c.t")) == [4]
    # the compacted reader still returns every key: compacted rows below the horizon, the raw tail above it
    assert [(r.key, r.offset) for r in view(lake, "c.t")] == [(b"b", 1), (b"a", 2), (b"c", 3), (b"d", 4)]


def test_delete_compact_trims_the_compacted_view_with_a_new_cursor(spark: SparkSession, lake: Lake) -> None:
    lake.create_topic("c.dc", config={"cleanup.policy": "delete,compact", "retention.ms": str(DAY),
                                      "delete.retention.ms": str(10 * DAY)})
    topic = lake.topic("c.dc")
    produce(topic, [*batch("ab", T0), ProducerRecord(b"t", None, partition=0, timestamp_ms=T0)], now_ms=T0)
    produce(topic, batch("c", T0 + 2 * DAY), now_ms=T0 + 2 * DAY)
    compact_topic(lake, "c.dc", now_ms=T0 + 2 * DAY)
    first = current_cursor(lake, "c.dc")
    assert first is not None and first.horizons == (4,)
    result = run_retention(lake, "c.dc", now_ms=T0 + 2 * DAY + 1).as_json()
    trim = result["compacted_trim"]
    assert trim["committed"] is True and trim["rows_removed"] == 3  # a, b and the tombstone t
    second = current_cursor(lake, "c.dc")
    assert second is not None and second.snapshot_id != first.snapshot_id
    assert second.horizons == first.horizons and second.previous == first.snapshot_id
    # the trim removed offsets 0-2: the compacted start advances to the lowest offset the view keeps
    assert first.compacted_start == (0,) and second.compacted_start == (3,)
    assert [r.key for r, _ in compacted_rows(lake, "c.dc")] == [b"c"]
    assert [r.key for r in view(lake, "c.dc")] == [b"c"]
    # the raw side keeps its delete rule, capped at the horizon: the old file is gone, offset 3 stays
    assert result["log_start_offsets"] == {"0": 3}
    # a second pass finds nothing to trim and commits nothing
    again = run_retention(lake, "c.dc", now_ms=T0 + 2 * DAY + 2).as_json()
    assert again["compacted_trim"]["committed"] is False
    assert current_cursor(lake, "c.dc").snapshot_id == second.snapshot_id  # type: ignore[union-attr]


def test_delete_compact_advances_the_compacted_start_above_the_raw_log_start(spark: SparkSession,
                                                                             lake: Lake) -> None:
    lake.create_topic("c.cs", partitions=3, config={"cleanup.policy": "delete,compact", "retention.ms": str(DAY)})
    topic = lake.topic("c.cs")
    # partition 0: old a and young c in ONE raw file, so file-granular raw retention keeps offset 0;
    # partition 1: young records only, with x superseded (a compaction gap at offset 0, nothing to trim);
    # partition 2: one old record, so the trim empties its compacted rows
    produce(topic, [*batch("a", T0), *batch("c", T0 + 2 * DAY), *batch("xxy", T0 + 2 * DAY, 1), *batch("z", T0, 2)],
            now_ms=T0 + 2 * DAY)
    compact_topic(lake, "c.cs", now_ms=T0 + 2 * DAY)
    assert current_cursor(lake, "c.cs").compacted_start == (0, 0, 0)  # type: ignore[union-attr]
    result = run_retention(lake, "c.cs", now_ms=T0 + 2 * DAY + 1).as_json()
    assert result["compacted_trim"]["committed"] is True and result["compacted_trim"]["rows_removed"] == 2
    assert result["log_start_offsets"] == {"0": 0, "1": 0, "2": 1}, "raw retention keeps the mixed file"
    cursor = current_cursor(lake, "c.cs")
    assert cursor is not None and cursor.compacted_start == (1, 0, 1), \
        "trimmed partitions advance (an emptied one to its horizon); the untrimmed one stays"
    # compacted reads: offset 0 is below the compacted start now; raw reads still hold it
    with pytest.raises(OffsetOutOfRangeError, match=r"compacted view holds \[1, 2\)"):
        view(lake, "c.cs", start={0: 0})
    expected = [(0, 1), (1, 1), (1, 2)]  # p0: c; p1: x, y
    assert [(r.partition, r.offset) for r in view(lake, "c.cs", start={0: 0}, reset="earliest")] == expected
    assert [(r.partition, r.offset) for r in view(lake, "c.cs", start={0: 1})] == expected
    assert [r.offset for r in raw(lake, "c.cs", start={0: 0}) if r.partition == 0] == [0, 1]
    # partition 1 kept its start: offset 0 there is a compaction gap, so reading continues at the next offset
    assert [(r.partition, r.offset) for r in view(lake, "c.cs", start={1: 0})] == expected


def test_compacted_expiry_keeps_retained_cursors_and_drops_stale_tags(spark: SparkSession, lake: Lake) -> None:
    lake.create_topic("c.x", config={"cleanup.policy": "compact", "compaction.cursor.retain-ms": str(HOUR),
                                     "history.expire.max-snapshot-age-ms": "0", "retention.ms": "-1"})
    topic = lake.topic("c.x")
    cursors = []
    for i in range(3):
        produce(topic, batch("ab", T0 + i * HOUR), now_ms=T0 + i * HOUR)
        compact_topic(lake, "c.x", now_ms=T0 + i * HOUR)
        cursors.append(current_cursor(lake, "c.x").snapshot_id)  # type: ignore[union-attr]
    pinned = TopicReader(lake, "c.x", read_compacted=True, now_ms=T0 + 2 * HOUR)
    expected = list(pinned.records())
    # at T0 + 2h + 1: cursor 2 was replaced at T0 + 2h (retained), cursor 1 at T0 + 1h (not retained)
    result = run_retention(lake, "c.x", now_ms=T0 + 2 * HOUR + 1).as_json()
    table = lake.catalog.load_table("c.x__compacted")
    refs = set(table.metadata.refs)
    assert f"cursor-{cursors[1]}" in refs and f"cursor-{cursors[0]}" not in refs
    assert table.metadata.snapshot_by_id(cursors[1]) is not None and table.metadata.snapshot_by_id(cursors[2])
    assert table.metadata.snapshot_by_id(cursors[0]) is None
    assert f"cursor-{cursors[0]}" in result["expiry"]["compacted"]["removed_refs"]
    assert not [r for r in refs if r.startswith("compactor-run-")]
    assert list(pinned.records()) == expected
    assert view(lake, "c.x", as_of_cursor=cursors[1], now_ms=T0 + 2 * HOUR + 1)


def test_a_compacted_reader_pinned_before_retention_reads_its_snapshot(spark: SparkSession, lake: Lake) -> None:
    lake.create_topic("c.r", config={"cleanup.policy": "delete,compact", "retention.ms": str(DAY),
                                     "history.expire.max-snapshot-age-ms": "0"})
    produce(lake.topic("c.r"), batch("abc", T0), now_ms=T0)
    compact_topic(lake, "c.r", now_ms=T0)
    produce(lake.topic("c.r"), batch("d", T0 + 2 * DAY), now_ms=T0 + 2 * DAY)
    reader = TopicReader(lake, "c.r", read_compacted=True, now_ms=T0 + 2 * DAY)
    expected = list(reader.records())
    assert [r.key for r in expected] == [b"a", b"b", b"c", b"d"]
    run_retention(lake, "c.r", now_ms=T0 + 2 * DAY)  # trims a, b, c from the view; expires what it may
    assert [r.key for r in view(lake, "c.r")] == [b"d"]
    assert list(reader.records()) == expected


def test_policy_without_compact_drops_the_compacted_view_after_the_lease(spark: SparkSession, lake: Lake) -> None:
    lake.create_topic("c.off", config={"cleanup.policy": "compact", "compaction.cursor.retain-ms": str(HOUR),
                                       "retention.ms": "-1"})
    produce(lake.topic("c.off"), batch("aab", T0), now_ms=T0)
    compact_topic(lake, "c.off", now_ms=T0)
    lake.topic("c.off").set_config({"cleanup.policy": "delete"})
    assert offsets(view(lake, "c.off")) == [0, 1, 2], "without compact, compacted reads are the raw view"
    first = run_retention(lake, "c.off", now_ms=T0 + 1).as_json()
    assert first["policy_off"]["dropped"] is False
    assert lake.catalog.table_exists("c.off__compacted")
    second = run_retention(lake, "c.off", now_ms=T0 + 1 + HOUR).as_json()
    assert second["policy_off"]["dropped"] is True
    assert not lake.catalog.table_exists("c.off__compacted")
    # turning compact back on starts the first run at the log start
    lake.topic("c.off").set_config({"cleanup.policy": "compact"})
    compact_topic(lake, "c.off", now_ms=T0 + 2 * HOUR)
    assert offsets(view(lake, "c.off")) == [1, 2]
