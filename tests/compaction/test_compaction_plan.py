"""The compaction plan and the layout choice: pure decisions, tested without a JVM (docs/guarantees.md#compaction)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compactor.compaction import execution
from compactor.compaction.execution import PARTITIONED, SLICED, choose_layout, estimate_work, makespan, split_bytes
from compactor.compaction.plan import (
    CompactionPlan,
    make_plan,
    previous_horizons,
    rewrite_reason,
)
from compactor.cursor import CompactionStats, Cursor, ViewStats
from compactor.cursor.stats import REWRITE_DELETED_RATIO
from compactor.errors import InputError
from compactor.topics.settings import TopicSettings
from compactor.topics.state import PartitionOffsets

SETTINGS = TopicSettings.from_properties({"compactor.cleanup.policy": "compact"})


def cursor(horizons: tuple[int, ...], view: ViewStats | None = None, stats: CompactionStats | None = None) -> Cursor:
    return Cursor(snapshot_id=7, horizons=horizons, compacted_start=tuple(0 for _ in horizons),
                  raw_snapshot_id=1, raw_next_offsets=horizons, now_ms=1, settings={},
                  stats=stats or CompactionStats(), view=view or ViewStats(), previous=None, run_id="r")


def offsets(next_offsets: tuple[int, ...], log_starts: tuple[int, ...] | None = None) -> PartitionOffsets:
    return PartitionOffsets(next_offsets, log_starts or tuple(0 for _ in next_offsets), tuple(0 for _ in next_offsets))


def plan(c: Cursor | None, o: PartitionOffsets, horizons: tuple[int, ...], now_ms: int = 100,
         settings: TopicSettings = SETTINGS, force_rewrite: bool = False,
         trim_before_ms: int | None = None) -> CompactionPlan:
    return make_plan(raw_snapshot_id=3, cursor=c, offsets=o, horizons=horizons, settings=settings, now_ms=now_ms,
                     force_rewrite=force_rewrite, trim_before_ms=trim_before_ms)


def test_the_first_run_starts_at_the_log_start_and_only_appends() -> None:
    p = plan(None, offsets((10, 5), (2, 0)), (10, 5))
    assert p.previous == (2, 0) and p.ranges == {0: (2, 10), 1: (0, 5)}
    assert p.mode == "first" and p.records_in_range == 13 and not p.removes_view_rows


def test_retention_past_the_horizon_moves_the_range_start_up() -> None:
    assert previous_horizons(cursor((4, 9)), (6, 1)) == (6, 9)


def test_nothing_to_do_without_an_advance_or_a_row_to_remove() -> None:
    c = cursor((10,), ViewStats(rows=3))
    assert not plan(c, offsets((10,)), (10,)).has_work


def test_expired_tombstones_and_keyless_rows_make_work_without_an_advance() -> None:
    expired = cursor((10,), ViewStats(rows=3, tombstones=1, min_tombstone_delete_horizon=100))
    p = plan(expired, offsets((10,)), (10,), now_ms=100)
    assert p.has_work and p.purge_expired and p.mode == "incremental"
    assert not plan(expired, offsets((10,)), (10,), now_ms=99).has_work
    keyless = cursor((10,), ViewStats(rows=3, null_key_rows=1))
    assert plan(keyless, offsets((10,)), (10,)).purge_keyless
    retain = dataclasses.replace(SETTINGS, compaction_null_key="retain")
    assert not plan(keyless, offsets((10,)), (10,), settings=retain).has_work


def test_a_trim_applies_only_when_some_compacted_row_may_be_older() -> None:
    c = cursor((10,), ViewStats(rows=3, min_timestamp_ms=50))
    assert plan(c, offsets((10,)), (10,), trim_before_ms=51).mode == "trim"
    assert plan(c, offsets((10,)), (10,), trim_before_ms=50).trim_before_ms is None


def test_the_view_is_rewritten_when_deletes_pile_up_or_on_request() -> None:
    rows = 100
    deleted = int(REWRITE_DELETED_RATIO * rows)
    piled = cursor((10,), ViewStats(rows=rows), CompactionStats(view_position_deletes=deleted))
    assert rewrite_reason(piled, 1, requested=False) is not None
    fresh = cursor((10,), ViewStats(rows=rows), CompactionStats(view_position_deletes=1))
    assert rewrite_reason(fresh, 1, requested=False) is None
    assert rewrite_reason(fresh, 1, requested=True) == "requested"
    assert rewrite_reason(None, 1, requested=True) is None  # a first run writes everything anyway
    assert plan(fresh, offsets((12,)), (12,), force_rewrite=True).mode == "rewrite"


@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=12), st.integers(1, 16))
def test_makespan_is_between_the_average_and_the_largest_plus_average(work: list[int], slots: int) -> None:
    span = makespan(work, slots)
    assert max(work) <= span + 1e-9 and sum(work) / slots <= span + 1e-9
    assert span <= max(work) + sum(work) / slots + 1e-9  # LPT is never worse than this


def test_few_partitions_on_many_slots_are_sliced_and_many_stay_partitioned() -> None:
    big = 1_000_000
    assert choose_layout([big], 2, raw_bytes=10**9, view_bytes=0).kind == SLICED
    assert choose_layout([big] * 4, 2, raw_bytes=10**9, view_bytes=0).kind == PARTITIONED
    assert choose_layout([big] * 4, 8, raw_bytes=10**9, view_bytes=0).kind == SLICED
    # one large partition among small ones leaves slots idle too
    assert choose_layout([big * 4, 1000, 1000, 1000], 4, raw_bytes=10**9, view_bytes=0).kind == SLICED
    assert choose_layout([10], 8, raw_bytes=10, view_bytes=0).kind == PARTITIONED  # too little to slice


def test_a_run_with_little_work_reads_each_pass_in_one_task_unless_it_rewrites_or_a_layout_is_forced() -> None:
    """Issue 34: below ``ONE_TASK_WORK`` a run reads each scan in one task (``Layout.one_task``), partitioned; a
    rewrite (it writes the whole view through Spark's writer) and a forced layout keep a task per partition."""
    little = execution.ONE_TASK_WORK - 1
    chosen = choose_layout([little / 4] * 4, 8, raw_bytes=10, view_bytes=0)
    assert chosen.kind == PARTITIONED and chosen.one_task and "one task per pass" in chosen.reason
    assert not choose_layout([execution.ONE_TASK_WORK / 4] * 4, 8, raw_bytes=10, view_bytes=0).one_task
    assert not choose_layout([little], 8, raw_bytes=10, view_bytes=0, rewrite=True).one_task
    assert not choose_layout([little], 8, raw_bytes=10, view_bytes=0, force=PARTITIONED).one_task
    assert not choose_layout([little], 8, raw_bytes=10, view_bytes=0, force=SLICED).one_task


def test_a_layout_can_be_forced_and_a_wrong_name_is_refused() -> None:
    assert choose_layout([10], 8, raw_bytes=10, view_bytes=0, force=SLICED).kind == SLICED
    assert choose_layout([10**7], 8, raw_bytes=10, view_bytes=0, force=PARTITIONED).kind == PARTITIONED
    with pytest.raises(InputError, match="unknown layout"):
        choose_layout([1], 1, raw_bytes=1, view_bytes=0, force="diagonal")


def test_slices_never_pack_the_range_into_fewer_tasks_than_slots() -> None:
    gigabyte = 2**30
    size = split_bytes(gigabyte, 4)
    assert gigabyte / size >= 4 * execution.TASKS_PER_SLOT - 1
    assert split_bytes(1000, 4) == execution.MIN_SPLIT_BYTES  # small ranges are not split into crumbs


def test_work_counts_narrow_view_rows_at_their_cost() -> None:
    assert estimate_work({0: 100}, {0: 400, 1: 40}, 3, rewrite=False) == [
        100 + execution.NARROW_VIEW_ROW * 400, execution.NARROW_VIEW_ROW * 40, 0]
    assert estimate_work({0: 100}, {0: 400}, 1, rewrite=True) == [500]


def test_small_ranges_under_offset_and_first_runs_hand_their_winners_inline() -> None:
    """Issue 34: phase 2 computes the winners itself (no scratch table) for a range of at most
    ``INLINE_WINNERS_LIMIT`` records under ``offset``, and for a first run of any size (its append is the one pass
    that needs them); under another strategy phase 1 contests the view, so the winners go through the table."""
    from compactor.compaction.plan import INLINE_WINNERS_LIMIT

    big = INLINE_WINNERS_LIMIT + 1
    assert plan(cursor((0,)), offsets((INLINE_WINNERS_LIMIT,)), (INLINE_WINNERS_LIMIT,)).small_range
    assert not plan(cursor((0,)), offsets((big,)), (big,)).small_range
    assert plan(None, offsets((big,)), (big,)).small_range
    assert not plan(cursor((5,)), offsets((5,)), (5,)).small_range  # no new range: no phase 1
    by_time = TopicSettings.from_properties({"compactor.cleanup.policy": "compact",
                                             "compactor.compaction.strategy": "timestamp"})
    assert not plan(None, offsets((10,)), (10,), settings=by_time).small_range


def test_inline_ranges_past_the_windows_limits_find_their_winners_in_a_key_table_while_it_fits_a_task() -> None:
    """Issue 34: an inline run's append pass finds the winners in a window over the rows it reads while the range is
    small (an incremental run's up to ``WINDOW_WINNERS_LIMIT`` records, a first run's up to
    ``FIRST_RUN_WINDOW_LIMIT`` in each partition); past that it finds them in a hash table of the range's keys per
    task (``compactor.udf.RangeWinners``) while each partition's range stays within ``HASH_KEYS_LIMIT`` records (the
    table lives in a task's heap); larger ranges join Spark's masks, which spill."""
    from compactor.compaction.plan import FIRST_RUN_WINDOW_LIMIT, HASH_KEYS_LIMIT, WINDOW_WINNERS_LIMIT

    def way(found: CompactionPlan) -> str:
        assert not (found.winners_in_window and found.winners_in_key_table), found
        return "window" if found.winners_in_window else "table" if found.winners_in_key_table else "masks"

    within, over = WINDOW_WINNERS_LIMIT, WINDOW_WINNERS_LIMIT + 1
    assert way(plan(cursor((0,)), offsets((within,)), (within,))) == "window"
    assert way(plan(cursor((0,)), offsets((over,)), (over,))) == "table"
    first, first_over = FIRST_RUN_WINDOW_LIMIT, FIRST_RUN_WINDOW_LIMIT + 1
    assert way(plan(None, offsets((first, first)), (first, first))) == "window"  # by each partition's range
    assert way(plan(None, offsets((first, first_over)), (first, first_over))) == "table"
    assert way(plan(None, offsets((HASH_KEYS_LIMIT, 5)), (HASH_KEYS_LIMIT, 5))) == "table"
    assert way(plan(None, offsets((HASH_KEYS_LIMIT + 1,)), (HASH_KEYS_LIMIT + 1,))) == "masks"
    by_time = TopicSettings.from_properties({"compactor.cleanup.policy": "compact",
                                             "compactor.compaction.strategy": "timestamp"})
    assert not plan(None, offsets((over,)), (over,), settings=by_time).winners_in_key_table


def test_the_key_table_is_taken_only_while_a_tasks_records_fit_its_memory() -> None:
    """``RunContext.key_table_fits``: the records one task reads (a partition's range, or every partition's in a
    one-task layout) at ``KEY_TABLE_RECORD_BYTES`` each, against the memory a task may count on; none known, no
    table."""
    from typing import Any, cast

    from compactor.compaction.context import KEY_TABLE, MASKS, RunContext
    from compactor.compaction.execution import KEY_TABLE_RECORD_BYTES, PARTITIONED, Layout
    from compactor.compaction.plan import WINDOW_WINNERS_LIMIT

    ranges = (WINDOW_WINNERS_LIMIT, WINDOW_WINNERS_LIMIT // 2)
    first = plan(None, offsets(ranges), ranges)
    assert first.winners_in_key_table

    def run(memory: int | None, *, one_task: bool = False) -> RunContext:
        none = cast(Any, None)
        return RunContext(none, first, none, Layout(PARTITIONED, 2, one_task=one_task), "c", "r", "s", "x", none,
                          none, None, memory)

    partition, whole = ranges[0] * KEY_TABLE_RECORD_BYTES, sum(ranges) * KEY_TABLE_RECORD_BYTES
    assert run(partition).append_winners == KEY_TABLE and run(partition - 1).append_winners == MASKS
    assert run(whole, one_task=True).append_winners == KEY_TABLE
    assert run(whole - 1, one_task=True).append_winners == MASKS
    assert run(None).append_winners == MASKS


def test_a_run_that_can_go_inline_stays_partitioned_unless_slicing_saves_more_than_the_scratch_table() -> None:
    """Issue 34: sliced, a run needs a scratch table that a partitioned one does without (``SCRATCH_WORK``): the
    standard workload's incremental run on 1 partition (50,000 records, 1.84M view rows at a quarter each) stays
    partitioned when it can go inline, and a first run of 5M records on 1 partition is still sliced."""
    incremental = estimate_work({0: 50_000}, {0: 1_840_000}, 1, rewrite=False)
    assert choose_layout(incremental, 2, raw_bytes=10**7, view_bytes=10**8).kind == SLICED
    assert choose_layout(incremental, 2, raw_bytes=10**7, view_bytes=10**8, scratch_if_sliced=True).kind == PARTITIONED
    assert choose_layout([5_000_000], 2, raw_bytes=10**9, view_bytes=0, scratch_if_sliced=True).kind == SLICED


class _Unplannable:
    """A topic and a compacted table whose files must not be planned."""

    name = "t.t"

    def raw_files(self, *args: object) -> list[object]:
        raise AssertionError("planned the range's files")

    def scan(self, *args: object, **kwargs: object) -> object:
        raise AssertionError("planned the view's files")


def _small_plan(view_rows: int, strategy: str = "offset") -> object:
    from types import SimpleNamespace

    from compactor.topics.strategy import Strategy
    return SimpleNamespace(settings=SimpleNamespace(strategy=Strategy(kind=strategy)), cursor=object(),
                           removes_view_rows=True, view=ViewStats(rows=view_rows), range_records={0: 1000, 1: 1000},
                           partitions=2, rewrite_reason=None, small_range=True, scratch_only_if_sliced=True,
                           ranges={0: (0, 1000), 1: (0, 1000)},
                           raw_snapshot_id=1)


def test_a_run_too_small_to_slice_chooses_its_layout_without_planning_files() -> None:
    """Files are planned (pyiceberg reads the manifests) only for what needs them: the split sizes of a sliced run,
    whose work with every view row counted reaches ``SLICED_MIN_WORK``, and the range's timestamp bounds under the
    ``timestamp`` strategy."""
    from compactor.compaction import start

    small = int((execution.SLICED_MIN_WORK - 2000) / execution.NARROW_VIEW_ROW) - 1
    layout, stamps = start._layout(_small_plan(small), _Unplannable(), _Unplannable(), 2, None)  # type: ignore[arg-type]
    assert layout.kind == PARTITIONED and stamps is None and "too little work" in layout.reason
    assert layout.one_task  # ONE_TASK_WORK: no less than SLICED_MIN_WORK
    with pytest.raises(AssertionError, match="planned"):
        start._layout(_small_plan(small + 1), _Unplannable(), _Unplannable(), 2, None)  # type: ignore[arg-type]
    with pytest.raises(AssertionError, match="planned"):
        start._layout(_small_plan(10, "timestamp"), _Unplannable(), _Unplannable(), 2, None)  # type: ignore[arg-type]
    with pytest.raises(AssertionError, match="planned"):
        start._layout(_small_plan(10), _Unplannable(), _Unplannable(), 2, SLICED)  # type: ignore[arg-type]


def test_a_sliced_first_run_shares_key_tables_while_a_tasks_share_fits_and_needs_no_scratch_table() -> None:
    """``RunContext.shared_key_tables``: a sliced first run under ``offset`` shares each partition's keys among
    enough tasks to fill the slots while a task's share fits the memory a task may count on; a sliced incremental run,
    or another strategy, keeps the scratch table. So slicing costs a first run no scratch table
    (``CompactionPlan.scratch_only_if_sliced``): one partition of 500,000 records is sliced on 2 slots, where an
    incremental run of as many stays partitioned."""
    from typing import Any, cast

    from compactor.compaction.context import KEY_TABLE, MASKS, SHARED_KEY_TABLES, RunContext
    from compactor.compaction.execution import KEY_TABLE_RECORD_BYTES, PARTITIONED, SLICED, Layout, choose_layout

    records = 500_000
    first = plan(None, offsets((records,)), (records,))
    incremental = plan(cursor((0,)), offsets((records,)), (records,))
    assert not first.scratch_only_if_sliced and incremental.scratch_only_if_sliced
    assert choose_layout([records], 2, raw_bytes=10**8, view_bytes=0,
                         scratch_if_sliced=first.scratch_only_if_sliced).sliced
    assert not choose_layout([records], 2, raw_bytes=10**8, view_bytes=0,
                             scratch_if_sliced=incremental.scratch_only_if_sliced).sliced

    def run(found: CompactionPlan, memory: int | None, *, slots: int = 2, kind: str = SLICED) -> RunContext:
        none = cast(Any, None)
        return RunContext(none, found, none, Layout(kind, slots, 1 << 23, 1 << 23), "c", "r", "s", "x", none, none,
                          None, memory)

    share = -(-records // 2) * KEY_TABLE_RECORD_BYTES
    assert run(first, share).key_table_buckets == 2 and run(first, share).append_winners == SHARED_KEY_TABLES
    assert run(first, share - 1).append_winners == MASKS and run(first, None).append_winners == MASKS
    assert run(first, records * KEY_TABLE_RECORD_BYTES, slots=1).key_table_buckets == 1
    assert run(first, 10**12, kind=PARTITIONED).append_winners == KEY_TABLE
    assert run(incremental, 10**12).append_winners == MASKS
    by_time = TopicSettings.from_properties({"compactor.cleanup.policy": "compact",
                                             "compactor.compaction.strategy": "timestamp"})
    assert run(plan(None, offsets((records,)), (records,), settings=by_time), 10**12).append_winners == MASKS
    two = plan(None, offsets((records, 10)), (records, 10))
    assert run(two, 10**12, slots=3).key_table_buckets == 2  # 3 slots, 2 partitions with work
