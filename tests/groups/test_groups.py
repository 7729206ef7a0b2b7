"""Consumer groups (docs/guarantees.md#consumers-and-groups) through consumers: one live owner per partition under
leases, rebalancing, fenced commits, clean close, expiry, outages; on the catalog back-ends. In-process members; the
store's clock and the members' clocks are test clocks (``tests.consumers``)."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import pytest

from compactor import Consumer, TopicPartition
from compactor.cleaner import Cleaner
from compactor.errors import NotOwnerError
from compactor.groups import GroupStore, Membership
from compactor.lake import Lake
from tests.backends import Backend
from tests.consumers import FakeClock, produce_keys, store_clock

T = "shop.orders"
TP0, TP1 = TopicPartition(T, 0), TopicPartition(T, 1)


def member(lake: Lake, clock: Any, member_id: str, **kwargs: Any) -> Consumer:
    return Consumer(lake, T, group="g", clock=clock, member_id=member_id, session_timeout_ms=10_000,
                    heartbeat_interval_ms=1_000, **kwargs)


def test_members_share_partitions_and_rebalance_when_one_joins_or_leaves(lake: Lake) -> None:
    lake.create_topic(T, partitions=2)
    clock = FakeClock()
    store_clock(lake, clock)
    a = member(lake, clock, "a")
    assert a.assignment() == [TP0, TP1]
    b = member(lake, clock, "b")
    assert b.assignment() == []  # a still owns both until it hears of b
    clock.advance(1_000)
    a.poll()  # a gives up partition 1 at its poll (after its listener ran)
    b.poll()
    assert (a.assignment(), b.assignment()) == ([TP0], [TP1])
    b.close()  # a clean close releases at once: no need to wait for the lease
    clock.advance(1_000)
    a.poll()
    assert a.assignment() == [TP0, TP1]
    a.close()


def test_a_crashed_member_is_fenced_and_its_uncommitted_records_come_again(lake: Lake) -> None:
    lake.create_topic(T, partitions=1)
    produce_keys(lake, T, ["a", "b", "c"])
    world = FakeClock()
    store_clock(lake, world)
    frozen = FakeClock(world.now)  # the crashed process's own clock (and heartbeat) stopped with it
    slow = member(lake, frozen, "a")
    assert [r.offset for r in slow.poll(max_records=1)] == [0]
    slow.commit()
    assert [r.offset for r in slow.poll(max_records=1)] == [1]  # not committed
    world.advance(10_001)  # no heartbeat for longer than session.timeout.ms, on the store's clock
    other = member(lake, world, "b")
    assert other.assignment() == [TP0]
    with pytest.raises(NotOwnerError, match="not the owner"):
        slow.commit()
    assert [r.offset for r in other.poll()] == [1, 2]
    assert other.committed() == {TP0: 1}  # the fenced commit changed nothing
    other.commit()
    frozen.advance(2_000)  # the process resumes: it joins again and owns nothing, other holds the only partition
    assert slow.poll() == [] and slow.assignment() == []
    other.close()
    slow.close()


def test_two_members_racing_never_own_a_partition_together(lake: Lake) -> None:
    lake.create_topic(T, partitions=4)
    clock_ms = [1_000_000]
    lock = threading.Lock()
    store = GroupStore(lake, clock=lambda: clock_ms[0])
    members = [Membership(store, "g", {T: 4}, session_timeout_ms=50, member_id=f"m{i}") for i in range(3)]
    beliefs: dict[str, tuple[set[TopicPartition], int]] = {m.member_id: (set(), 0) for m in members}
    overlaps: list[tuple[object, ...]] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def run(m: Membership, seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(40):
                with lock:
                    clock_ms[0] += rng.choice([0, 1, 10, 60])  # sometimes past the 50 ms lease
                    now = clock_ms[0]
                beat = m.heartbeat()
                if beat.revoke:  # the listener had its turn: let them go
                    with lock:
                        beliefs[m.member_id] = (beliefs[m.member_id][0] - set(beat.revoke), beliefs[m.member_id][1])
                    m.release(beat.revoke)
                with lock:  # a claim is believed only once its transaction committed
                    beliefs[m.member_id] = (set(m.owned), now + m.session_timeout_ms)
                if rng.random() < 0.1:
                    with lock:
                        beliefs[m.member_id] = (set(), 0)
                    m.leave()
        except BaseException as exc:
            errors.append(exc)

    def check() -> None:
        while not done.is_set():
            with lock:  # one instant: beliefs and the clock together
                now = clock_ms[0]
                for p in range(4):
                    holders = [m for m, (owned, lease) in beliefs.items() if TopicPartition(T, p) in owned
                               and lease > now]
                    if len(holders) > 1:
                        overlaps.append((p, *holders))

    threads = [threading.Thread(target=run, args=(m, i)) for i, m in enumerate(members)]
    checker = threading.Thread(target=check)
    checker.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    done.set()
    checker.join()
    assert not errors
    assert not overlaps  # at no instant did two live members both hold a partition
    rows = store.partitions("g")
    assert len(rows) == 4 and all(r.owner in (None, "m0", "m1", "m2") for r in rows)


def test_commit_and_fencing_on_each_catalog_backend(backend: Backend, tmp_path: Path) -> None:
    """On a REST catalog (which places its tables itself here: no warehouse location, so no default place for
    groups) the groups live in a directory named by ``group_store``; on the others in the default store."""
    lake = backend.lake if backend.name != "rest" else Lake(backend.lake.config, group_store=str(tmp_path / "g"))
    lake.create_topic(T, partitions=2)
    produce_keys(lake, T, ["a", "b"], partition=0)
    world = FakeClock()
    store_clock(lake, world)
    a = member(lake, FakeClock(world.now), "a")  # a's process stalls (its heartbeat with it)
    a.poll()
    a.commit()
    assert a.committed() == {TP0: 2, TP1: 0}
    world.advance(10_001)
    b = member(lake, world, "b")
    with pytest.raises(NotOwnerError):
        a.commit({TP0: 1})
    assert b.committed() == {TP0: 2, TP1: 0}
    b.commit({TP0: 1})
    assert b.committed()[TP0] == 1
    b.close()
    a.close()


def test_the_cleaner_removes_groups_empty_for_offsets_retention_ms(lake: Lake) -> None:
    lake.create_topic(T, partitions=1)
    clock = FakeClock()
    store_clock(lake, clock)
    with member(lake, clock, "a") as old:
        old.commit()
    clock.advance(1_000)
    GroupStore(lake).commit("h", None, "", {TP0: (0, -1)})  # another group, without members, committed later
    noop = Cleaner(lake, compact=lambda *a: pytest.fail("nothing is due"), retain=lambda *a: None)  # type: ignore[arg-type]
    clock.advance(604_800_000 - 1_000)
    assert noop.run_once().expired_groups == []  # "g" has been empty for exactly a week: kept
    clock.advance(1)
    assert noop.run_once().expired_groups == ["g"]
    assert [g.group for g in GroupStore(lake).list_groups()] == ["h"]
    clock.advance(1_000)
    assert noop.run_once().expired_groups == ["h"]


def test_a_group_store_outage_keeps_the_partitions_until_the_lease_ends(
        lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    from compactor.errors import StorageUnavailableError

    lake.create_topic(T, partitions=1)
    produce_keys(lake, T, ["a"])
    clock = FakeClock()
    store_clock(lake, clock)
    consumer = member(lake, clock, "a")
    assert consumer.member is not None

    def down(mode: str = "") -> object:
        raise StorageUnavailableError("group store down")

    monkeypatch.setattr(consumer.member.membership, "heartbeat", down)
    clock.advance(1_000)
    assert [r.offset for r in consumer.poll()] == [0]  # still within its lease
    clock.advance(10_000)
    assert consumer.poll() == [] and consumer.assignment() == []  # lease over: it reads nothing it may not own
