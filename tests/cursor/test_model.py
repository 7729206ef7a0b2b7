"""A cursor and its encoding in a snapshot summary (``cursor.model``): the round trip, the errors for a snapshot
that is not a well-formed cursor, and the tags that keep replaced cursors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyiceberg.table.snapshots import Operation, Snapshot, Summary

from compactor import properties as props
from compactor.cursor import (
    TAG_PREFIX,
    CompactionStats,
    Cursor,
    ViewStats,
    cursor_properties,
    cursor_tag,
    parse_cursor,
    tagged_cursor,
)
from compactor.errors import CursorCorruptError
from compactor.topics.settings import TopicSettings
from compactor.topics.strategy import Strategy

CURSOR = Cursor(snapshot_id=0, horizons=(5, 9), compacted_start=(0, 2), raw_snapshot_id=41, raw_next_offsets=(7, 9),
                now_ms=1234, settings={"cleanup.policy": "compact"},
                stats=CompactionStats(records_read=14, records_kept=6, mode="first", durations_ms={"phase1_ms": 3}),
                view=ViewStats(rows=6, tombstones=1, clean_bytes=60, min_tombstone_delete_horizon=99,
                               min_timestamp_ms=10),
                previous=None, run_id="abc", bytes_at_horizon=(50, 90))


def snapshot(summary: dict[str, str], snapshot_id: int = 77, timestamp_ms: int = 5000) -> Snapshot:
    return Snapshot(snapshot_id=snapshot_id, parent_snapshot_id=None, sequence_number=1, timestamp_ms=timestamp_ms,
                    manifest_list="memory://list.avro", summary=Summary(Operation.APPEND, **summary), schema_id=0)


def test_a_cursor_round_trips_through_its_snapshot_summary() -> None:
    parsed = parse_cursor(snapshot({**cursor_properties(CURSOR), "other-engine": "kept"}))
    assert parsed == Cursor(**{**CURSOR.__dict__, "snapshot_id": 77, "timestamp_ms": 5000,
                               "extra": {"other-engine": "kept"}})
    assert parsed.as_json()["horizons"] == {"0": 5, "1": 9} and parsed.as_json()["compacted_start"] == {"0": 0, "1": 2}


@pytest.mark.parametrize("change, message", [
    ({props.CURSOR_MARKER: None}, "is not a cursor"),
    ({props.CURSOR_HORIZONS: None}, "lacks a valid 'compactor.horizons'"),
    ({props.CURSOR_HORIZONS: "[5, -1]"}, "is not a list of offsets"),
    ({props.CURSOR_HORIZONS: "[5]"}, "horizons, starts and raw offsets disagree"),
    ({props.CURSOR_COMPACTED_START: "[6, 2]"}, "horizons, starts and raw offsets disagree"),
    ({props.CURSOR_NOW: "soon"}, "malformed metadata"),
    ({props.CURSOR_STATS: "{not json"}, "malformed metadata"),
])
def test_a_snapshot_that_is_not_a_well_formed_cursor_is_an_error(change: dict[str, Any], message: str) -> None:
    summary = {k: v for k, v in {**cursor_properties(CURSOR), **change}.items() if v is not None}
    with pytest.raises(CursorCorruptError, match=message):
        parse_cursor(snapshot(summary))


def test_a_cursor_without_bytes_at_horizon_still_reads() -> None:
    """Cursors written before ``bytes_at_horizon`` existed carry none: read as empty."""
    summary = {k: v for k, v in cursor_properties(CURSOR).items() if k != props.CURSOR_BYTES_AT_HORIZON}
    assert parse_cursor(snapshot(summary)).bytes_at_horizon == ()
    assert json.loads(cursor_properties(CURSOR)[props.CURSOR_BYTES_AT_HORIZON]) == [50, 90]


def test_replaced_cursors_are_tagged_by_snapshot_id() -> None:
    assert cursor_tag(77) == f"{TAG_PREFIX}77" == "cursor-77"
    assert tagged_cursor("cursor-77") == 77
    assert tagged_cursor("cursor-x") is None and tagged_cursor("main") is None
    assert tagged_cursor("compactor-run-4000-abc") is None


def test_a_cursor_without_a_strategy_was_built_by_offset() -> None:
    """A cursor written before strategies existed carries no strategy setting: it was built by offset."""
    old = Cursor(1, (0,), (0,), None, (0,), 0, {"cleanup.policy": "compact"}, CompactionStats(), ViewStats(), None, "")
    assert old.strategy == Strategy() and old.as_json()["strategy"] == "offset"
    new = Cursor(1, (0,), (0,), None, (0,), 0, TopicSettings.from_properties({
        "compactor.compaction.strategy": "header", "compactor.compaction.strategy.header": "ver"}).as_kafka_dict(),
        CompactionStats(), ViewStats(), None, "")
    assert new.strategy == Strategy("header", "ver") and new.as_json()["strategy"] == "header:ver"
