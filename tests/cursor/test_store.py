"""Which cursors a compacted table holds (``cursor.store``): the chain through ``previous``, and which cursors
are still retained at a given clock (replaced less than ``compaction.cursor.retain-ms`` before it, by the
recorded clock of the run that replaced them)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, cast

from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation, Snapshot, Summary

from compactor.cursor import CompactedState, CompactionStats, Cursor, ViewStats, cursor_chain, cursor_properties
from compactor.cursor import retained_cursors as retained

BASE = Cursor(snapshot_id=0, horizons=(1,), compacted_start=(0,), raw_snapshot_id=None, raw_next_offsets=(1,),
              now_ms=0, settings={}, stats=CompactionStats(), view=ViewStats(), previous=None, run_id="r")


@dataclass
class Metadata:
    """The part of a table's metadata the store reads: snapshots by id."""

    snapshots: dict[int, Snapshot]

    def snapshot_by_id(self, snapshot_id: int) -> Snapshot | None:
        return self.snapshots.get(snapshot_id)


@dataclass
class StandInTable:
    metadata: Metadata


def state(*chain: tuple[int, int, int | None], extra: dict[int, dict[str, str]] | None = None) -> CompactedState:
    """A compacted table whose cursors are ``(snapshot id, run clock, previous)``, the first one current."""
    snapshots = {}
    for snapshot_id, now_ms, previous in chain:
        summary: dict[str, Any] = {**cursor_properties(replace(BASE, now_ms=now_ms, previous=previous)),
                                   **(extra or {}).get(snapshot_id, {})}
        snapshots[snapshot_id] = Snapshot(snapshot_id=snapshot_id, parent_snapshot_id=None, sequence_number=1,
                                          timestamp_ms=now_ms, manifest_list="memory://l.avro",
                                          summary=Summary(Operation.APPEND, **summary), schema_id=0)
    table = cast(Table, StandInTable(Metadata(snapshots)))
    current = replace(BASE, snapshot_id=chain[0][0], now_ms=chain[0][1], previous=chain[0][2])
    return CompactedState(table, current)


def test_the_chain_runs_through_previous_cursors_newest_first() -> None:
    chained = state((3, 3000, 2), (2, 2000, 1), (1, 1000, None))
    assert [c.snapshot_id for c in cursor_chain(chained)] == [3, 2, 1]
    assert [c.snapshot_id for c in cursor_chain(state((3, 3000, 2)))] == [3]  # an expired predecessor ends it
    corrupt = state((3, 3000, 2), (2, 2000, 1), (1, 1000, None), extra={2: {"compactor.cursor": "not one"}})
    assert [c.snapshot_id for c in cursor_chain(corrupt)] == [3]  # as does one that is not a cursor
    assert cursor_chain(CompactedState(chained.table, None)) == []


def test_a_replaced_cursor_is_retained_for_retain_ms_after_the_run_that_replaced_it() -> None:
    chained = state((3, 3000, 2), (2, 2000, 1), (1, 1000, None))
    assert [c.snapshot_id for c in retained(chained, now_ms=2999, retain_ms=1000)] == [3, 2, 1]
    assert [c.snapshot_id for c in retained(chained, now_ms=3000, retain_ms=1000)] == [3, 2]  # 1 replaced at 2000
    assert [c.snapshot_id for c in retained(chained, now_ms=4000, retain_ms=1000)] == [3]  # the current one always
