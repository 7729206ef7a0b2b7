"""Raw retention's planning rules (docs/guarantees.md#retention) as properties of the pure core, without a catalog:
``retention.raw.plan_partition`` (what one pass removes from one partition) and ``retention_caps`` (the
offsets a pass must stay below under ``compact``).

The files of a partition are generated as contiguous offset ranges from its log start, with random sizes and
timestamp bounds, handed to the planner in random order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from compactor.retention.raw import PartitionPlan, plan_partition, retention_caps
from compactor.topics.settings import TopicSettings
from compactor.topics.topic import RawFile

HOUR = 3_600_000
NOW = 1_000 * HOUR
DEFAULTS = TopicSettings.defaults()


@dataclasses.dataclass(frozen=True)
class Partition:
    """One partition's raw files (in offset order), log start and next offset."""

    files: tuple[RawFile, ...]
    log_start: int
    next_offset: int

    @property
    def size(self) -> int:
        return sum(f.size_bytes for f in self.files)


@st.composite
def partitions(draw: st.DrawFn, max_files: int = 8) -> Partition:
    log_start = draw(st.integers(0, 1_000))
    offset = log_start
    files = []
    for i in range(draw(st.integers(0, max_files))):
        count = draw(st.integers(1, 50))
        newest = draw(st.one_of(st.none(), st.integers(NOW - 10 * HOUR, NOW + HOUR)))
        files.append(RawFile(f"f{i}", 0, count, draw(st.integers(1, 10_000)), offset, offset + count - 1,
                             None if newest is None else (newest - HOUR) * 1000,
                             None if newest is None else newest * 1000))
        offset += count
    return Partition(tuple(files), log_start, offset)


def settings(retention_ms: int = -1, retention_bytes: int = -1) -> TopicSettings:
    return dataclasses.replace(DEFAULTS, retention_ms=retention_ms, retention_bytes=retention_bytes)


# Each setting is drawn at random or exactly on a boundary the partition has (a file's newest timestamp, the
# size left after a prefix, a file's first or last offset), where an off-by-one would show.


@st.composite
def retention_ms(draw: st.DrawFn, partition: Partition) -> int:
    edges = [NOW - f.max_timestamp_us // 1000 for f in partition.files
             if f.max_timestamp_us is not None and f.max_timestamp_us // 1000 <= NOW]
    value: int = draw(st.one_of(st.integers(0, 12 * HOUR), *([st.sampled_from(edges)] if edges else [])))
    return value


@st.composite
def retention_bytes(draw: st.DrawFn, partition: Partition) -> int:
    left = [partition.size - sum(f.size_bytes for f in partition.files[:i]) for i in range(len(partition.files))]
    value: int = draw(st.one_of(st.integers(0, partition.size + 10), *([st.sampled_from(left)] if left else [])))
    return value


@st.composite
def caps(draw: st.DrawFn, partition: Partition) -> int:
    edges = [o for f in partition.files for o in (f.first_offset, f.last_offset, f.last_offset + 1)]
    value: int = draw(st.one_of(st.integers(partition.log_start, partition.next_offset + 5),
                                *([st.sampled_from(edges)] if edges else [])))
    return value


def plan(partition: Partition, config: TopicSettings, cap: int | None, order: Sequence[int] | None = None,
         now_ms: int = NOW) -> PartitionPlan:
    files = list(partition.files) if order is None else [partition.files[i] for i in order]
    return plan_partition(0, files, partition.log_start, partition.next_offset, config, now_ms, cap)


def check_prefix_and_log_start(partition: Partition, result: PartitionPlan) -> None:
    """Only a prefix goes, the log start never decreases, and the partition stays ``[LSO, N)`` without gaps."""
    removed = len(result.files)
    assert list(result.files) == list(partition.files[:removed]), "not a prefix of the files in offset order"
    assert result.log_start == partition.log_start
    assert result.new_log_start >= partition.log_start, "the log start decreased"
    if removed == 0:
        assert result.new_log_start == partition.log_start
    elif removed < len(partition.files):
        assert result.new_log_start == partition.files[removed].first_offset
    else:
        assert result.new_log_start == partition.next_offset, "an emptied partition starts at its next offset"
    assert result.records == result.new_log_start - partition.log_start


@st.composite
def cases(draw: st.DrawFn) -> tuple[Partition, TopicSettings, int | None, list[int]]:
    partition = draw(partitions())
    config = settings(draw(st.one_of(st.just(-1), retention_ms(partition))),
                      draw(st.one_of(st.just(-1), retention_bytes(partition))))
    cap = draw(st.one_of(st.none(), caps(partition)))
    order = draw(st.permutations(range(len(partition.files))))
    return partition, config, cap, list(order)


@given(cases())
def test_only_a_prefix_goes_and_the_log_start_never_decreases(case: tuple[Partition, TopicSettings, int | None,
                                                                           list[int]]) -> None:
    partition, config, cap, order = case
    result = plan(partition, config, cap, order)
    check_prefix_and_log_start(partition, result)
    assert result == plan(partition, config, cap), "the plan depends on the order files were listed in"


@given(cases())
def test_nothing_at_or_above_the_cap_goes(case: tuple[Partition, TopicSettings, int | None, list[int]]) -> None:
    partition, config, cap, _ = case
    result = plan(partition, config, cap)
    if cap is not None:
        assert all(f.last_offset < cap for f in result.files)
        assert not result.files or result.new_log_start <= cap
        # the cap only shortens the plan: it removes the longest prefix the uncapped plan allows below the cap
        free = plan(partition, config, None)
        assert len(result.files) == sum(1 for f in free.files if f.last_offset < cap)


@st.composite
def time_cases(draw: st.DrawFn) -> tuple[Partition, int]:
    partition = draw(partitions())
    return partition, draw(retention_ms(partition))


@given(time_cases())
def test_by_time_every_removed_record_is_older_than_the_limit_and_the_next_file_is_not(
        case: tuple[Partition, int]) -> None:
    partition, retention = case
    result = plan(partition, settings(retention_ms=retention), None)
    limit_us = (NOW - retention) * 1000
    for f in result.files:
        assert f.max_timestamp_us is not None and f.max_timestamp_us < limit_us, "a record newer than the limit"
    following = partition.files[len(result.files):]
    if following:
        newest = following[0].max_timestamp_us
        assert newest is None or newest >= limit_us, "stopped before a file whose records are all eligible"


@st.composite
def size_cases(draw: st.DrawFn) -> tuple[Partition, int]:
    partition = draw(partitions())
    return partition, draw(retention_bytes(partition))


@given(size_cases())
def test_by_size_files_go_while_what_is_left_stays_at_or_above_the_limit(case: tuple[Partition, int]) -> None:
    partition, limit = case
    result = plan(partition, settings(retention_bytes=limit), None)
    left = partition.size - result.size_bytes
    if result.files:
        assert left >= limit, "removed below retention.bytes"
    following = partition.files[len(result.files):]
    if following:
        assert left - following[0].size_bytes < limit, "stopped while the next file could still go"


@given(cases())
def test_time_and_size_together_remove_the_longer_prefix(case: tuple[Partition, TopicSettings, int | None,
                                                                      list[int]]) -> None:
    partition, config, cap, _ = case
    by_time = plan(partition, settings(retention_ms=config.retention_ms), cap)
    by_size = plan(partition, settings(retention_bytes=config.retention_bytes), cap)
    both = plan(partition, config, cap)
    assert len(both.files) == max(len(by_time.files), len(by_size.files))
    if config.retention_ms < 0 and config.retention_bytes < 0:
        assert not both.files, "-1 means unlimited for both"


@given(partitions(max_files=12), st.lists(st.tuples(st.integers(0, 3 * HOUR), st.integers(0, 20)), min_size=1,
                                           max_size=6), st.integers(0, 6 * HOUR))
def test_passes_over_time_keep_the_log_start_monotonic(partition: Partition, steps: list[tuple[int, int]],
                                                       retention: int) -> None:
    """Pass after pass at a later clock, on what the previous pass left, under a moving cap: the log start
    never decreases and each partition stays gap-free."""
    now = NOW - 12 * HOUR
    cap = partition.log_start
    for advance, cap_step in steps:
        now += advance
        cap += cap_step  # a retained cursor's horizon only moves up
        result = plan(partition, settings(retention_ms=retention), cap, now_ms=now)
        check_prefix_and_log_start(partition, result)
        partition = Partition(partition.files[len(result.files):], result.new_log_start, partition.next_offset)


@given(st.integers(1, 4).flatmap(lambda n: st.tuples(
    st.lists(st.integers(0, 100), min_size=n, max_size=n),
    st.lists(st.lists(st.integers(0, 200), min_size=n, max_size=n), max_size=4),
    st.lists(st.lists(st.integers(0, 200), min_size=1, max_size=5), max_size=2))))
def test_caps_are_the_lowest_retained_horizon_and_no_cursor_removes_nothing(
        case: tuple[list[int], list[list[int]], list[list[int]]]) -> None:
    log_starts, horizons, foreign = case
    assert retention_caps(False, horizons, log_starts) == [None] * len(log_starts), "delete alone has no cap"
    count = len(log_starts)
    longer = [h for h in foreign if len(h) > count]  # written for more partitions: does not apply
    # written before a mirrored topic grew: applies, with horizon 0 in the partitions added since
    shorter = [h for h in foreign if len(h) < count]
    applicable = horizons + [h + [0] * (count - len(h)) for h in shorter]
    caps = retention_caps(True, horizons + longer + shorter, log_starts)
    for p, cap in enumerate(caps):
        assert cap is not None
        assert all(cap <= h[p] for h in applicable), "a cap above a retained cursor's horizon"
        assert cap == (min(h[p] for h in applicable) if applicable else log_starts[p])
