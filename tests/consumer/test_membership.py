"""Group membership as a production consumer needs it (issue 29; docs/guarantees.md#consumers-and-groups, "Ownership"
and "Fencing"): commits judged under the epochs held, the rebalance listener, sticky assignment, one clock for
leases, the background heartbeat and ``max.poll.interval.ms``, static membership, forced resets, KIP-211
expiry. Every clock is a test clock: the store's (``store_clock``) and each member's own."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import pytest

from compactor import Consumer, TopicPartition
from compactor.cleaner import Cleaner
from compactor.cli.main import main
from compactor.errors import FencedInstanceIdError, NotOwnerError
from compactor.groups import GroupStore
from compactor.lake import Lake
from tests.consumers import FakeClock, SkewedClock, produce_keys, store_clock

T = "shop.orders"
TP0, TP1 = TopicPartition(T, 0), TopicPartition(T, 1)
SESSION = 10_000


def member(lake: Lake, clock: Any, name: str | None = None, **kwargs: Any) -> Consumer:
    settings = {"session_timeout_ms": SESSION, "heartbeat_interval_ms": 1_000, **kwargs}
    return Consumer(lake, T, group="g", clock=clock, member_id=name, **settings)


@pytest.fixture
def world(lake: Lake) -> FakeClock:
    """The group store's clock (and the members' own unless a test gives one another), starting at the wall
    clock's time, so a command run in the test (with the store's own clock) agrees with it."""
    clock = FakeClock(time.time_ns() // 1_000_000)
    store_clock(lake, clock)
    return clock


class Recorder:
    """A rebalance listener that records what it heard, and commits before partitions go."""

    def __init__(self) -> None:
        self.consumer: Consumer | None = None
        self.events: list[tuple[str, list[TopicPartition]]] = []

    def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
        self.events.append(("revoked", partitions))
        assert self.consumer is not None
        self.consumer.commit({tp: p for tp, p in self.consumer.position().items() if tp in partitions})

    def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
        self.events.append(("assigned", partitions))


def test_a_commit_lands_on_the_partitions_still_owned_when_a_member_joins(lake: Lake, world: FakeClock) -> None:
    """Issue 29, defect 2: ``commit()`` heartbeated first, and a heartbeat that released a partition failed the
    whole commit, partitions still owned included."""
    lake.create_topic(T, partitions=2)
    produce_keys(lake, T, ["a", "b"], partition=0)
    produce_keys(lake, T, ["c", "d"], partition=1)
    a = member(lake, world, "a")
    assert len(a.poll(max_records=4)) == 4
    b = member(lake, world, "b")
    world.advance(1_000)
    a.commit()  # judged under the epochs a read these positions under: it owns both still
    assert a.committed() == {TP0: 2, TP1: 2}
    a.close()
    b.close()


def test_the_listener_commits_before_a_partition_moves_and_the_newcomer_resumes_there(
        lake: Lake, world: FakeClock) -> None:
    lake.create_topic(T, partitions=2)
    produce_keys(lake, T, ["a", "b"], partition=0)
    produce_keys(lake, T, ["c", "d", "e"], partition=1)
    heard = Recorder()
    a = member(lake, world, "a", listener=heard)
    heard.consumer = a
    assert heard.events == [("assigned", [TP0, TP1])]
    assert len(a.poll(max_records=4)) == 4  # two of each partition; e at offset 2 of partition 1 not yet
    b = member(lake, world, "b")
    world.advance(1_000)
    assert a.poll() == []  # its turn: partition 1 goes, after the listener committed it
    assert heard.events[1] == ("revoked", [TP1]) and a.assignment() == [TP0]
    assert a.committed([TP1]) == {TP1: 2}
    assert [(r.partition, r.offset) for r in b.poll()] == [(1, 2)]  # nothing of partition 1 comes twice
    a.close()
    b.close()


def test_a_join_moves_only_the_partitions_the_newcomer_needs(lake: Lake, world: FakeClock) -> None:
    """Issue 29, defect 9 (churn): a round-robin over sorted random ids moved most partitions at every join."""
    lake.create_topic(T, partitions=6)
    members = [member(lake, world, "m2")]
    before: dict[TopicPartition, str | None] = dict.fromkeys(members[0].assignment(), "m2")
    for name in ("m0", "m1"):  # ids that sort before the first member's
        members.append(member(lake, world, name))
        for _ in range(3):
            world.advance(1_000)
            for m in members:
                m.poll()
        after: dict[TopicPartition, str | None] = {tp: m.member_id for m in members for tp in m.assignment()}
        assert len(after) == 6 and sorted(len(m.assignment()) for m in members) == [6 // len(members)] * len(members)
        moved = [tp for tp in after if before[tp] != after[tp]]
        assert len(moved) == 6 // len(members)  # only the newcomer's share moves, and only to it
        assert all(after[tp] == members[-1].member_id for tp in moved)
        before = after
    for m in members:
        m.close()


def test_leases_are_judged_on_the_store_clock_whatever_the_members_clocks_say(lake: Lake, world: FakeClock) -> None:
    """Issue 29, defect 6: with one host 11 s ahead and a 10 s session, a joining member took a live member's
    partitions at once, and both believed they owned them."""
    lake.create_topic(T, partitions=2)
    produce_keys(lake, T, ["a"], partition=0)
    behind = member(lake, SkewedClock(world, -5_000), "behind")
    ahead = member(lake, SkewedClock(world, 11_000), "ahead")  # more than the session timeout ahead
    assert (behind.assignment(), ahead.assignment()) == ([TP0, TP1], [])
    for _ in range(4):
        world.advance(1_000)
        behind.poll()
        ahead.poll()
        owned = [tp for m in (behind, ahead) for tp in m.assignment()]
        assert sorted(owned) == sorted(set(owned))  # never two owners of a partition
    assert (behind.assignment(), ahead.assignment()) == ([TP0], [TP1])
    behind.commit({TP0: 1})
    static = Consumer(lake, T, group="g", subscribe=False, clock=SkewedClock(world, 60_000))
    static.assign([TP0])
    with pytest.raises(NotOwnerError):  # a static assignment's commit never overwrites a live owner's
        static.commit({TP0: 0})
    assert behind.committed([TP0]) == {TP0: 1}
    behind.close()
    ahead.close()


def test_a_slow_batch_keeps_its_lease_and_its_commit_lands(lake: Lake, world: FakeClock) -> None:
    """Issue 29, defect 7: only poll and commit renewed the lease, so processing for longer than
    ``session.timeout.ms`` made every commit fail, even for a sole member."""
    lake.create_topic(T, partitions=1)
    produce_keys(lake, T, ["a", "b"])
    consumer = member(lake, world, "a")
    assert len(consumer.poll()) == 2
    world.advance(60_000)  # six session timeouts of processing; the background heartbeat runs meanwhile
    consumer.commit()
    assert consumer.committed() == {TP0: 2}
    other = member(lake, world, "b")
    assert other.assignment() == []  # the sole member is alive: nothing to take
    consumer.close()
    other.close()


def test_a_member_that_stops_polling_leaves_the_group_and_says_so(lake: Lake, world: FakeClock) -> None:
    lake.create_topic(T, partitions=1)
    produce_keys(lake, T, ["a", "b", "c"])
    stuck = member(lake, world, "stuck", max_poll_interval_ms=30_000)
    assert len(stuck.poll(max_records=2)) == 2
    world.advance(31_000)  # processing for longer than max.poll.interval.ms
    other = member(lake, world, "other")
    assert other.assignment() == [TP0]  # stuck left from its background heartbeat: no need to wait for its lease
    with pytest.raises(NotOwnerError, match=r"max\.poll\.interval\.ms"):
        stuck.commit()
    assert [r.offset for r in other.poll()] == [0, 1, 2]  # stuck committed nothing
    other.close()
    assert [r.offset for r in stuck.poll()] == [0, 1, 2]  # its next poll joins again
    stuck.close()


@pytest.mark.parametrize("identity", ["member_id", "group_instance_id"])
def test_a_second_process_with_the_member_id_fences_the_first_which_never_takes_them_back(
        lake: Lake, world: FakeClock, identity: str) -> None:
    """Issue 29, defect 8: two processes with one member id took a partition from each other at every
    heartbeat, each re-reading from the committed position. The one that joined last takes the member's place
    (Kafka's ``group.instance.id`` fencing); the other is fenced."""
    lake.create_topic(T, partitions=2)
    produce_keys(lake, T, ["a", "b", "c"], partition=0)
    same = {identity: "app-1"} if identity == "group_instance_id" else {"name": "app-1"}
    first = member(lake, world, **same)
    assert [r.offset for r in first.poll(max_records=1)] == [0]
    first.commit()
    second = member(lake, world, **same)  # a restart within the session: the same partitions
    assert second.assignment() == [TP0, TP1]
    for _ in range(3):
        world.advance(1_000)
        with pytest.raises(FencedInstanceIdError, match="took its place"):
            first.poll()
        assert second.assignment() == [TP0, TP1]
    with pytest.raises(FencedInstanceIdError):
        first.commit({TP0: 3})
    assert [r.offset for r in second.poll()] == [1, 2]
    second.commit()
    assert second.committed() == {TP0: 3, TP1: 0}
    described = GroupStore(lake).members("g")
    assert [(m.member_id, m.static) for m in described] == [("app-1", identity == "group_instance_id")]
    first.close()
    second.close()


def test_group_reset_force_fences_live_members_and_they_resume_at_the_reset(
        lake: Lake, world: FakeClock, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29, defect 5: ``group reset --force`` did not fence the owner, whose next commit overwrote it."""
    monkeypatch.setenv("COMPACTOR_CATALOG_NAME", lake.config.catalog_name)
    lake.create_topic(T, partitions=1)
    produce_keys(lake, T, ["a", "b", "c", "d"])
    owner = member(lake, world, "owner")
    assert len(owner.poll(max_records=3)) == 3
    owner.commit()
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTOR_")}
    env.update(COMPACTOR_CATALOG_NAME=lake.config.catalog_name, PYTHONPATH=os.getcwd())
    done = subprocess.run([sys.executable, "-m", "compactor.cli.main", "--warehouse", lake.config.warehouse, "group",
                           "reset", "g", "--topic", T, "--to", "earliest", "--force"], env=env, capture_output=True,
                          text=True, timeout=120, check=False)  # as users run it: a process of its own
    assert done.returncode == 0 and '"from": 3' in done.stdout, done.stderr
    assert [r.offset for r in owner.poll()] in ([3], [])  # its fetch was pinned before the reset
    with pytest.raises(NotOwnerError, match="not the owner"):
        owner.commit()
    assert owner.committed() == {TP0: 0}
    assert [r.offset for r in owner.poll()] == [0, 1, 2, 3]  # resumed at the reset position
    assert main(["--warehouse", lake.config.warehouse, "group", "describe", "g", "--json"]) == 0
    assert '"reason": "group reset --to earliest"' in capsys.readouterr().out
    owner.close()


def test_a_group_expires_only_after_it_was_empty_for_offsets_retention_ms(lake: Lake, world: FakeClock) -> None:
    """Issue 29, defect 4: groups expired counting from their last commit, so a group live for longer than
    ``offsets.retention.ms`` on a quiet topic went at the first cleaner pass after its last member left."""
    lake.create_topic(T, partitions=1)
    produce_keys(lake, T, ["a"])
    hour = 3_600_000  # a heartbeat an hour (and a three-hour session) keeps the test's clock cheap to move
    consumer = member(lake, world, "a", session_timeout_ms=3 * hour, heartbeat_interval_ms=hour)
    consumer.poll()
    consumer.commit()
    for _ in range(8):  # a day between polls: it leaves the group after max.poll.interval.ms, joins again
        world.advance(86_400_000)
        consumer.poll()
    consumer.close()
    world.advance(1_000)
    cleaner = Cleaner(lake, compact=lambda *a: pytest.fail("nothing is due"), retain=lambda *a: None)  # type: ignore[arg-type]
    assert cleaner.run_once(now_ms=world.now).expired_groups == []
    world.advance(7 * 86_400_000)
    assert cleaner.run_once(now_ms=world.now).expired_groups == ["g"]
