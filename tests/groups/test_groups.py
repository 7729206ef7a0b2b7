"""Consumer groups (SEMANTICS section 7): one live owner per partition under leases, rebalancing, fenced
commits, clean close, expiry; on SQLite and PostgreSQL catalogs. In-process members with a test clock."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest

from compactor import Consumer, TopicPartition
from compactor.cleaner import Cleaner
from compactor.errors import NotOwnerError
from compactor.groups import GroupStore, Membership
from compactor.lake import Lake
from tests.backends import Backend
from tests.consumers import FakeClock, produce_keys

T = "shop.orders"
TP0, TP1 = TopicPartition(T, 0), TopicPartition(T, 1)


def member(lake: Lake, clock: FakeClock, member_id: str, **kwargs: Any) -> Consumer:
    return Consumer(lake, T, group="g", clock=clock, member_id=member_id, session_timeout_ms=10_000,
                    heartbeat_interval_ms=1_000, **kwargs)


def test_members_share_partitions_and_rebalance_when_one_joins_or_leaves(lake: Lake) -> None:
    lake.create_topic(T, partitions=2)
    clock = FakeClock()
    a = member(lake, clock, "a")
    assert a.assignment() == [TP0, TP1]
    b = member(lake, clock, "b")
    assert b.assignment() == []  # a still owns both until it hears of b
    clock.advance(1_000)
    a.poll()
    b.poll()
    assert (a.assignment(), b.assignment()) == ([TP0], [TP1])
    b.close()  # a clean close releases at once: no need to wait for the lease
    clock.advance(1_000)
    a.poll()
    assert a.assignment() == [TP0, TP1]
    a.close()


def test_a_member_whose_lease_expired_is_fenced_and_its_uncommitted_records_come_again(lake: Lake) -> None:
    lake.create_topic(T, partitions=1)
    produce_keys(lake, T, ["a", "b", "c"])
    clock = FakeClock()
    slow = member(lake, clock, "a")
    assert [r.offset for r in slow.poll(max_records=1)] == [0]
    slow.commit()
    assert [r.offset for r in slow.poll(max_records=1)] == [1]  # not committed
    clock.advance(10_001)  # slow stops polling past session.timeout.ms
    other = member(lake, clock, "b")
    assert other.assignment() == [TP0]
    with pytest.raises(NotOwnerError, match="not the owner"):
        slow.commit()
    assert [r.offset for r in other.poll()] == [1, 2]
    assert other.committed() == {TP0: 1}  # the fenced commit changed nothing
    other.commit()
    clock.advance(1_000)
    assert slow.poll() == []  # re-joined, owns nothing: other holds the only partition
    assert slow.assignment() == []
    other.close()
    slow.close()


class Observed(Membership):
    """A member whose belief (what it would read from, and until when its lease is live) changes under a
    lock the checker also takes, so the checker sees consistent instants: a release drops the belief before
    the database changes, a claim adds it only after its transaction committed."""

    def __init__(self, lock: threading.Lock, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lock = lock
        self.belief: set[TopicPartition] = set()
        self.lease_ms = 0

    def _swap(self, conn: object, tp: TopicPartition, epoch: int, owner: str | None) -> bool:
        if owner is None:
            with self.lock:
                self.belief.discard(tp)
        return super()._swap(conn, tp, epoch, owner)

    def beat(self, now_ms: int) -> None:
        beat = self.heartbeat(now_ms)
        with self.lock:
            self.belief = set(beat.owned)
            self.lease_ms = now_ms + self.session_timeout_ms

    def leave(self) -> None:
        with self.lock:
            self.belief.clear()
        super().leave()


def test_two_members_racing_never_own_a_partition_together(lake: Lake) -> None:
    lake.create_topic(T, partitions=4)
    store = GroupStore(lake)
    lock = threading.Lock()
    members = [Observed(lock, store, "g", {T: 4}, session_timeout_ms=50, member_id=f"m{i}") for i in range(3)]
    clock_ms = [1_000_000]
    overlaps: list[tuple[object, ...]] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def run(m: Observed, seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(40):
                with lock:
                    clock_ms[0] += rng.choice([0, 1, 10, 60])  # sometimes past the 50 ms lease
                    now = clock_ms[0]
                m.beat(now)
                if rng.random() < 0.1:
                    m.leave()
        except BaseException as exc:
            errors.append(exc)

    def check() -> None:
        while not done.is_set():
            with lock:  # one instant: beliefs and the clock together
                now = clock_ms[0]
                for p in range(4):
                    holders = [m.member_id for m in members if TopicPartition(T, p) in m.belief and m.lease_ms > now]
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


# groups live in a SQL catalog's database until the group store of their own (issue 29): not on a REST catalog yet
@pytest.mark.parametrize("backend", ["local", "s3", "postgres"], indirect=True)
def test_commit_and_fencing_on_each_catalog_backend(backend: Backend) -> None:
    lake = backend.lake
    lake.create_topic(T, partitions=2)
    produce_keys(lake, T, ["a", "b"], partition=0)
    clock = FakeClock()
    a = member(lake, clock, "a")
    a.poll()
    a.commit()
    assert a.committed() == {TP0: 2, TP1: 0}
    clock.advance(10_001)
    b = member(lake, clock, "b")
    with pytest.raises(NotOwnerError):
        a.commit({TP0: 1})
    assert b.committed() == {TP0: 2, TP1: 0}
    b.commit({TP0: 1})
    assert b.committed()[TP0] == 1
    b.close()
    a.close()


def test_the_cleaner_removes_groups_without_a_commit_for_offsets_retention_ms(lake: Lake) -> None:
    lake.create_topic(T, partitions=1)
    clock = FakeClock()
    with member(lake, clock, "a") as old:
        old.commit()
    clock.advance(1_000)
    GroupStore(lake).commit("h", None, {TP0: (0, -1)}, clock())  # another group, committed later
    noop = Cleaner(lake, compact=lambda *a: pytest.fail("nothing is due"), retain=lambda *a: None)  # type: ignore[arg-type]
    result = noop.run_once(now_ms=clock() - 1_000 + 604_800_000 + 1)
    assert result.expired_groups == ["g"]
    assert [g.group for g in GroupStore(lake).list_groups()] == ["h"]


def test_a_catalog_outage_during_a_heartbeat_keeps_the_partitions_until_the_lease_ends(
        lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    from compactor.errors import StorageUnavailableError

    lake.create_topic(T, partitions=1)
    produce_keys(lake, T, ["a"])
    clock = FakeClock()
    consumer = member(lake, clock, "a")
    assert consumer.membership is not None

    def down(now_ms: int) -> object:
        raise StorageUnavailableError("catalog database down")

    monkeypatch.setattr(consumer.membership, "heartbeat", down)
    clock.advance(1_000)
    assert [r.offset for r in consumer.poll()] == [0]  # still within its lease
    clock.advance(10_000)
    assert consumer.poll() == [] and consumer.assignment() == []  # lease over: it reads nothing it may not own
