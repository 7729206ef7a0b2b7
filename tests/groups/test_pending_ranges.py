"""Pending ranges (``compactor.groups.pending``): members of one group never overwrite or clear each other's,
and only a whole range whose starts are still the positions is replayed."""

from __future__ import annotations

from compactor.groups import GroupStore, TopicPartition
from compactor.groups.pending import clear_pending, pending_ranges, replayable, set_pending
from compactor.lake import Lake

T = "s.t"


def test_two_members_keep_their_own_ranges(lake: Lake) -> None:
    store = GroupStore(lake)
    set_pending(store, "g", T, {0: (0, 10)}, 1)   # member A, partition 0
    set_pending(store, "g", T, {1: (0, 7)}, 2)    # member B, partition 1
    assert pending_ranges(store, "g", T, [0]) == [{0: (0, 10)}]
    clear_pending(store, "g", T, {1: (0, 7)})     # B commits
    assert pending_ranges(store, "g", T, [0, 1]) == [{0: (0, 10)}], "B's commit cleared A's range"
    clear_pending(store, "g", T, {0: (0, 5)})     # not the range stored: nothing happens
    assert pending_ranges(store, "g", T, [0]) == [{0: (0, 10)}]
    assert pending_ranges(store, "other", T, [0]) == []


def test_a_new_range_replaces_only_its_partitions_rows(lake: Lake) -> None:
    store = GroupStore(lake)
    set_pending(store, "g", T, {0: (0, 10), 1: (0, 8)}, 1)
    set_pending(store, "g", T, {0: (0, 12)}, 2)   # after a rebalance, partition 0 alone
    assert pending_ranges(store, "g", T, [0, 1]) == [{0: (0, 10), 1: (0, 8)}, {0: (0, 12)}]
    assert pending_ranges(store, "g", T, [0]) == [{0: (0, 12)}]


def test_only_a_whole_owned_range_at_the_positions_replays() -> None:
    ranges = [{0: (0, 10), 1: (0, 8)}]
    both = {TopicPartition(T, 0): 0, TopicPartition(T, 1): 0}
    assert replayable(ranges, T, both) == ranges[0]
    assert replayable(ranges, T, {TopicPartition(T, 0): 0}) is None          # split by a rebalance
    assert replayable(ranges, T, {**both, TopicPartition(T, 1): 8}) is None  # committed meanwhile: stale
    assert replayable([{0: (5, 5)}], T, {TopicPartition(T, 0): 5}) is None   # nothing in it
