"""The rules of a group (``compactor.groups.rules``) as functions of its document and the store's clock: sticky
assignment, two-step moves, fencing by epoch and by process, forced resets, pending ranges, KIP-211 expiry.
No store, no lake: these are the rules every store applies."""

from __future__ import annotations

import random

import pytest

from compactor.errors import FencedInstanceIdError, GroupBusyError, NotOwnerError
from compactor.groups import PendingRange, TopicPartition, rules
from compactor.groups.assignment import sticky_targets
from compactor.groups.state import GroupState

T = "s.t"
G = "g"


def spec(member: str, incarnation: str = "", partitions: int = 4, session: int = 100,
         static: bool = False) -> rules.MemberSpec:
    return rules.MemberSpec(member, incarnation or f"{member}-process", {T: partitions}, "host:1", session, static)


def tp(p: int) -> TopicPartition:
    return TopicPartition(T, p)


def beat(state: GroupState, now: int, member: str, held: dict[TopicPartition, int] | None = None,
         mode: str = rules.SETTLE, **kwargs: object) -> rules.Beat:
    return rules.heartbeat(state, now, G, spec(member, **kwargs), held or {}, mode)  # type: ignore[arg-type]


def owners(state: GroupState) -> dict[int, str | None]:
    return {t.partition: s.owner for t, s in sorted(state.slots.items())}


def test_sticky_targets_move_only_what_the_newcomer_needs() -> None:
    assert sticky_targets(4, ["a"], {}) == {"a": {0, 1, 2, 3}}
    assert sticky_targets(4, ["a", "b"], dict.fromkeys(range(4), "a")) == {"a": {0, 1}, "b": {2, 3}}
    third = sticky_targets(4, ["a", "b", "c"], {0: "a", 1: "a", 2: "b", 3: "b"})
    assert third == {"a": {0, 1}, "b": {2}, "c": {3}}  # one partition moves, from a member with two
    assert sticky_targets(4, ["b", "c"], {2: "b", 3: "c"}) == {"b": {2, 0}, "c": {3, 1}}  # a left: its two move
    rng = random.Random(5)
    for _ in range(200):  # every partition has exactly one target, and shares differ by at most one
        n, members = rng.randrange(1, 12), [f"m{i}" for i in range(rng.randrange(1, 6))]
        holders = {p: rng.choice(members) for p in range(n) if rng.random() < 0.6}
        targets = sticky_targets(n, members, holders)
        assert sorted(p for ps in targets.values() for p in ps) == list(range(n))
        sizes = [len(ps) for ps in targets.values()]
        assert max(sizes) - min(sizes) <= 1
        kept = sum(1 for p, m in holders.items() if p in targets[m])
        assert kept >= sum(min(n // len(members), sum(1 for o in holders.values() if o == m)) for m in members)


def test_a_partition_moves_in_two_steps_and_never_has_two_owners() -> None:
    state = GroupState(created_ms=0)
    a = beat(state, 1000, "a")
    assert sorted(a.owned) == [tp(0), tp(1), tp(2), tp(3)] and a.claimed == sorted(a.owned)
    b = beat(state, 1001, "b")
    assert b.owned == {}  # a still owns them all: b waits
    a = beat(state, 1002, "a", a.owned)
    assert a.revoke == [tp(2), tp(3)] and len(a.owned) == 4  # told to give them up; still owns them
    rules.commit(state, 1003, G, "a", "a-process", {tp(3): (7, a.owned[tp(3)])})  # it may commit them still
    rules.release(state, 1004, G, "a", "a-process", a.revoke)
    b = beat(state, 1005, "b", b.owned)
    assert sorted(b.owned) == [tp(2), tp(3)] and b.owned[tp(3)] == a.owned[tp(3)] + 2  # released, then claimed
    assert owners(state) == {0: "a", 1: "a", 2: "b", 3: "b"}
    with pytest.raises(NotOwnerError, match="not the owner"):  # a's epoch of partition 3 is stale now
        rules.commit(state, 1006, G, "a", "a-process", {tp(3): (9, a.owned[tp(3)])})
    assert state.slots[tp(3)].committed == 7


def test_a_lapsed_lease_frees_the_partitions_and_its_commits_are_refused() -> None:
    state = GroupState(created_ms=0)
    a = beat(state, 1000, "a")
    with pytest.raises(NotOwnerError, match="no live lease"):
        rules.commit(state, 1100, G, "a", "a-process", {tp(0): (1, a.owned[tp(0)])})  # session 100: lapsed at 1100
    assert owners(state) == dict.fromkeys(range(4))
    again = beat(state, 1101, "a", a.owned)
    assert again.rejoined and again.lost == sorted(a.owned) and again.claimed == sorted(again.owned)


def test_a_second_process_with_the_instance_id_takes_its_place_and_fences_the_first() -> None:
    state = GroupState(created_ms=0)
    first = beat(state, 1000, "app-1", incarnation="p1", static=True)
    rules.commit(state, 1001, G, "app-1", "p1", {tp(0): (5, first.owned[tp(0)])})
    second = beat(state, 1050, "app-1", mode=rules.JOIN, incarnation="p2", static=True)  # a restart within 100 ms
    assert sorted(second.owned) == sorted(first.owned) and second.claimed == sorted(second.owned)
    assert all(second.owned[t] == first.owned[t] + 1 for t in first.owned)  # kept, under new epochs
    with pytest.raises(FencedInstanceIdError, match="took its place"):
        rules.commit(state, 1051, G, "app-1", "p1", {tp(0): (9, first.owned[tp(0)])})
    with pytest.raises(FencedInstanceIdError):
        beat(state, 1052, "app-1", first.owned, incarnation="p1", static=True)  # never takes them back
    assert state.slots[tp(0)].committed == 5 and owners(state) == dict.fromkeys(range(4), "app-1")


def test_a_forced_reset_fences_the_owner_and_a_plain_one_waits_for_no_members() -> None:
    state = GroupState(created_ms=0)
    a = beat(state, 1000, "a")
    rules.commit(state, 1001, G, "a", "a-process", {tp(0): (3, a.owned[tp(0)])})
    with pytest.raises(GroupBusyError, match="live members"):
        rules.reset(state, 1002, G, {tp(0): 0}, force=False, reason="r")
    assert rules.reset(state, 1003, G, {tp(0): 0}, force=True, reason="group reset --to earliest") == {tp(0): 3}
    with pytest.raises(NotOwnerError):
        rules.commit(state, 1004, G, "a", "a-process", {tp(0): (4, a.owned[tp(0)])})
    again = beat(state, 1005, "a", a.owned)
    assert tp(0) in again.lost and tp(0) in again.claimed  # from the reset position, as a new ownership
    slot = state.slots[tp(0)]
    assert (slot.committed, slot.reset_count, slot.last_reset and slot.last_reset.reason) == \
        (0, 1, "group reset --to earliest")


def test_pending_ranges_are_fenced_like_commits_and_retired_by_the_commit_past_them() -> None:
    state = GroupState(created_ms=0)
    a = beat(state, 1000, "a")
    rules.set_pending(state, 1001, G, "a", "a-process", tp(1), PendingRange(0, 10, a.owned[tp(1)], 0))
    assert state.slots[tp(1)].pending == PendingRange(0, 10, a.owned[tp(1)], 1001)
    b = beat(state, 2000, "b")  # a lapsed: b takes everything
    with pytest.raises(NotOwnerError):  # a zombie cannot overwrite the new owner's unit
        rules.set_pending(state, 2001, G, "a", "a-process", tp(1), PendingRange(0, 12, a.owned[tp(1)], 0))
    pending = state.slots[tp(1)].pending
    assert pending is not None and pending.end == 10
    rules.commit(state, 2002, G, "b", "b-process", {tp(1): (0, b.owned[tp(1)])})
    assert state.slots[tp(1)].pending is not None  # committed at its start: still to do
    rules.commit(state, 2003, G, "b", "b-process", {tp(1): (10, b.owned[tp(1)])})
    assert state.slots[tp(1)].pending is None


def test_expiry_counts_from_when_the_group_became_empty() -> None:
    day = 86_400_000
    state = GroupState(created_ms=0)
    a = beat(state, 1000, "a", session=10_000)
    rules.commit(state, 1001, G, "a", "a-process", {tp(0): (1, a.owned[tp(0)])})
    for d in range(1, 9):  # a member polls once a day, for eight days: its lease lapses in between
        beat(state, d * day, "a", session=10_000)
    rules.leave(state, 8 * day + 5, G, "a", "a-process")
    week = 7 * day
    assert not rules.expirable(state, 8 * day + 1006, 8 * day + 1006 - week)  # a second after: kept
    assert not rules.expirable(state, 15 * day, 15 * day - week)
    assert rules.expirable(state, 15 * day + 6, 15 * day + 6 - week)
    lapsed = GroupState(created_ms=0)
    beat(lapsed, 1000, "a", session=100)  # never left: its lease ended at 1100
    assert not rules.expirable(lapsed, 1099 + week, 1099)
    assert rules.expirable(lapsed, 1101 + week, 1101)
    static_only = GroupState(created_ms=0)
    rules.commit(static_only, 500, G, None, "", {tp(0): (1, -1)})  # never had members: from the last commit
    assert not rules.expirable(static_only, 500 + week, 500) and rules.expirable(static_only, 501 + week, 501)
