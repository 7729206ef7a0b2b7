"""Randomised runs of two groups on one topic, checked against docs/guarantees.md#consumers-and-groups
(``tests.model.ConsumerModel``; raw mode, no Spark). Time is the test's: the group store's clock and each member's own,
moved in lockstep, each member's running ahead of or behind the store's by more than the session timeout.

Group ``g`` polls and commits (at-least-once) while members join, leave, stall past their lease and come back,
processes with a member's ``group.instance.id`` start beside it, retention removes old records and ``group reset
--force`` moves positions under live members:

* every delivered record is the raw log's, and a member's deliveries of a partition within one ownership
  session start at the committed position when it began and go on with every next offset once, in order (a
  jump only to a recorded reset);
* a commit either lands, on partitions the member owns in the store, or fails with "not the owner" and changes
  nothing; a process replaced by another with its instance id is fenced, and never commits again;
* at the end a fresh member reads exactly ``[committed, N_p)``.

Group ``etl`` consumes exactly once (``consumer.units``): members take units, produce them under their batch ids
into another topic and commit, and stall (crash) between any two of those steps while the group rebalances and
retention runs under their pending ranges; at the end the output holds every input record once.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

import pytest

from compactor import Consumer, TopicPartition
from compactor.consumer.admin import reset_group
from compactor.consumer.units import Unit, take_unit
from compactor.errors import FencedInstanceIdError, GroupNotFoundError, NotOwnerError
from compactor.groups import GroupStore
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.retention import run_retention
from compactor.topics.records import ProducerRecord, Record
from readers.reader import TopicReader
from tests.consumers import FakeClock, store_clock
from tests.model import ConsumerModel

T, OUT = "r.orders", "r.out"
PARTITIONS = 3
SESSION_MS, HEARTBEAT_MS, MAX_POLL_MS = 1_000, 300, 6_000
RETENTION_MS = 10_000
SEEDS = [int(s) for s in os.environ.get("CONSUMER_SEEDS", "3,1,5").split(",")]


@dataclass
class Member:
    """One member process: its own clock (``skew`` from the store's), and what the checks expect of it."""

    consumer: Consumer
    clock: FakeClock
    stalled: bool = False
    stalled_at: int = 0  # the store's time when it stalled
    fenced: bool = False
    unit: Unit | None = None  # etl: the unit taken and not committed yet
    produced: bool = False
    epochs: dict[TopicPartition, int] = field(default_factory=dict)
    expected: dict[TopicPartition, int | tuple[int]] = field(default_factory=dict)  # (log start,): not read yet


class World:
    def __init__(self, lake: Lake, rng: random.Random) -> None:
        self.lake, self.rng = lake, rng
        self.clock = FakeClock(1_000_000_000)
        store_clock(lake, self.clock)
        self.store = GroupStore(lake)
        self.model = ConsumerModel(PARTITIONS)
        self.members: dict[str, list[Member]] = {"g": [], "etl": []}
        self.numbers = iter(range(10_000))
        self.etl_first: dict[int, int] = {}  # per partition, where the etl group's first unit started
        self.seen = {"delivered": 0, "refused": 0, "fenced": 0, "replayed": 0, "resets": 0, "removed": 0}

    def join(self, group: str, instance: str | None = None) -> Member:
        skew = self.rng.choice([-30_000, -3_000, 0, 2_500, 45_000])  # well beyond the session timeout
        clock = FakeClock(self.clock.now + skew)
        consumer = Consumer(self.lake, T, group=group, clock=clock, group_instance_id=instance,
                            member_id=None if instance else f"{group}-{next(self.numbers):03d}",
                            session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                            max_poll_interval_ms=MAX_POLL_MS, poll_backoff_ms=(1, 1))
        member = Member(consumer, clock)
        self.members[group].append(member)
        if group == "g":
            self.sessions(member, self.store.committed("g", [TopicPartition(T, p) for p in range(PARTITIONS)]),
                          self.log_start())
        return member

    @staticmethod
    def sessions(member: Member, committed: dict[TopicPartition, int | None], starts: tuple[int, ...]) -> None:
        """Note the ownership sessions that began since the member was last looked at: each from the committed
        position when it began (none: from the log start then, or later if retention moved it)."""
        for tp, epoch in member.consumer.epochs.items():
            if member.epochs.get(tp) != epoch:
                position = committed[tp]
                member.expected[tp] = position if position is not None else (starts[tp.partition],)
        member.expected = {tp: e for tp, e in member.expected.items() if tp in member.consumer.epochs}
        member.epochs = dict(member.consumer.epochs)

    def tick(self, ms: int) -> None:
        """Move every clock that runs (a stalled process's does not) by ``ms``, in small steps together."""
        while ms > 0:
            step = min(ms, 100)
            ms -= step
            self.clock.advance(step)
            for member in (m for ms_ in self.members.values() for m in ms_ if not m.stalled):
                member.clock.advance(step)

    def produce(self) -> None:
        old = self.rng.random() < 0.3  # old records become eligible for retention
        stamp = self.clock.now - 2 * RETENTION_MS if old else self.clock.now
        batch = [ProducerRecord(f"k{self.rng.randrange(5)}".encode(), self.rng.randbytes(3),
                                partition=self.rng.randrange(PARTITIONS), timestamp_ms=stamp)
                 for _ in range(self.rng.randrange(1, 5))]
        result = produce(self.lake.topic(T), batch)
        stored = [Record(p, o, stamp, r.key, r.value, ()) for r, (p, o) in zip(batch, result.offsets, strict=True)]
        self.model.append(sorted(stored, key=lambda r: (r.partition, r.offset)))

    def log_start(self) -> tuple[int, ...]:
        return self.lake.topic(T).offsets().log_start_offsets

    def poll(self, member: Member, step: str) -> None:
        consumer = member.consumer
        tps = [TopicPartition(T, p) for p in range(PARTITIONS)]
        committed = self.store.committed("g", tps)
        starts = self.log_start()
        try:
            records = consumer.poll(max_records=self.rng.randrange(1, 6))
        except FencedInstanceIdError:
            member.fenced = True
            self.seen["fenced"] += 1
            return
        self.sessions(member, committed, starts)
        slots = {s.topic_partition: s for s in self.store.partitions("g")}
        for record in records:
            tp = TopicPartition(T, record.partition)
            assert tp in consumer.epochs, f"{step}: delivered {tp}, which it does not own"
            reset = slots[tp].last_reset if tp in slots else None
            expected = member.expected[tp]
            if isinstance(expected, tuple):  # the first read of a session without a position: the log start
                assert expected[0] <= record.offset <= starts[tp.partition], f"{step}: {tp} began at {record.offset}"
                expected = record.offset
            member.expected[tp] = self.model.check_delivery(record, expected, reset.to_offset if reset else None,
                                                            step)
        self.seen["delivered"] += len(records)

    def commit(self, member: Member, step: str) -> None:
        before = self.store.partitions("g")
        try:
            landed = member.consumer.commit()
        except NotOwnerError as exc:
            assert self.store.partitions("g") == before, f"{step}: a refused commit changed something"
            self.seen["refused"] += 1
            member.fenced |= isinstance(exc, FencedInstanceIdError)
            return
        assert not member.fenced, f"{step}: a fenced process committed"
        owners = {s.topic_partition: s.owner for s in self.store.partitions("g")}
        assert all(owners[tp] == member.consumer.member_id for tp in landed), f"{step}: committed without owning"

    def etl_step(self, member: Member, step: str) -> None:
        """The next step of an exactly-once member: take a unit, produce it, or commit it."""
        consumer = member.consumer
        try:
            if member.unit is None:
                never = {tp.partition for tp, c in self.store.committed(
                    "etl", [TopicPartition(T, p) for p in range(PARTITIONS)]).items() if c is None}
                member.unit = unit = take_unit(consumer, T)
                member.produced = False
                if unit is not None and unit.tp.partition not in self.etl_first:
                    first = self.log_start()[unit.tp.partition]  # nothing committed yet: from the earliest
                    assert unit.replayed or unit.tp.partition not in never or unit.start == first, step
                    self.etl_first[unit.tp.partition] = unit.start
                self.seen["replayed"] += bool(unit and unit.replayed)
            elif not member.produced:
                unit = member.unit
                records = [ProducerRecord(r.key, f"{r.partition}:{r.offset}".encode(), partition=0)
                           for r in unit.reader.records()]
                offsets = [r.offset for r in unit.reader.records()]
                assert offsets == sorted(set(offsets)) and all(unit.start <= o < unit.end for o in offsets), step
                produce(self.lake.topic(OUT), records, batch_id=unit.batch_id)
                member.produced = True
            else:
                unit, member.unit = member.unit, None
                consumer.commit({unit.tp: unit.end})
        except NotOwnerError:
            member.unit = None
            self.seen["refused"] += 1


@pytest.mark.parametrize("seed", [SEEDS[0], *(pytest.param(s, marks=pytest.mark.slow) for s in SEEDS[1:])])
def test_random_runs_keep_the_rules_of_section_7(lake: Lake, seed: int) -> None:
    rng = random.Random(seed)
    lake.create_topic(T, partitions=PARTITIONS, config={"retention.ms": str(RETENTION_MS)})
    lake.create_topic(OUT)
    world = World(lake, rng)
    world.join("g", instance="app-0")
    world.join("etl")
    for step_number in range(160):
        step = f"seed {seed} step {step_number}"
        group = rng.choice(["g", "etl"])
        live = [m for m in world.members[group] if not m.fenced]
        member = rng.choice(live) if live else world.join(group)
        action = rng.choices(["produce", "act", "commit", "tick", "stall", "resume", "join", "twin", "close",
                              "reset", "retention"], [5, 10, 3, 3, 2, 2, 1, 1, 1, 1, 2])[0]
        if action == "produce":
            world.produce()
        elif action == "act" and not member.stalled:
            world.poll(member, step) if group == "g" else world.etl_step(member, step)
        elif action == "commit" and not member.stalled and group == "g":
            world.commit(member, step)
        elif action == "tick":
            world.tick(rng.choice([100, 400, 1_500]))
        elif action == "stall" and not member.stalled:  # the process stops (a pause): its heartbeat with it
            member.stalled, member.stalled_at = True, world.clock.now
        elif action == "resume" and member.stalled:  # it goes on: its clock catches up, its timers fire
            member.stalled = False
            member.clock.advance(world.clock.now - member.stalled_at)
        elif action == "join" and len(live) < 3:
            world.join(group)
        elif action == "twin" and group == "g":  # a second process with a live member's instance id
            instances = [m.consumer.group_instance_id for m in live if m.consumer.group_instance_id]
            world.join("g", instance=rng.choice(instances) if instances else "app-1")
        elif action == "close" and len(live) > 1 and not member.stalled:
            member.consumer.close()
            world.members[group].remove(member)
        elif action == "reset":
            try:
                reset_group(lake, "g", T, [rng.choice(["earliest", "latest"])], force=True)
                world.seen["resets"] += 1
            except GroupNotFoundError as exc:  # the group may not exist yet
                assert "unknown consumer group" in str(exc), step
        elif action == "retention":
            run_retention(lake, T, now_ms=world.clock.now)
            world.seen["removed"] = sum(world.log_start())
    # the end: every process stops; once their leases lapsed, fresh members drain both groups
    for members in world.members.values():
        for member in members:
            member.stalled = True
    world.tick(SESSION_MS + 100)
    final = world.join("g")
    committed = world.store.committed("g", [TopicPartition(T, p) for p in range(PARTITIONS)])
    got: list[Record] = []
    while polled := final.consumer.poll(max_records=7):
        got += polled
    starts = world.log_start()
    for p in range(PARTITIONS):
        start = max(committed[TopicPartition(T, p)] or 0, starts[p])
        assert [r for r in got if r.partition == p] == world.model.log[p][start:], f"seed {seed}: final drain of {p}"
    final.consumer.commit()
    assert final.consumer.caught_up()
    closer = world.join("etl")
    while True:  # take, produce, commit, until nothing is left
        world.etl_step(closer, "final")
        if closer.unit is None:
            break
        world.etl_step(closer, "final")
        world.etl_step(closer, "final")
    produced = [tuple(int(x) for x in (r.value or b"").split(b":")) for r in TopicReader(lake, OUT).records()]
    resets = {s.partition: s.last_reset.to_offset for s in world.store.partitions("etl") if s.last_reset}
    begun = {p: max(world.etl_first.get(p, 0), resets.get(p, 0)) for p in range(PARTITIONS)}
    world.model.check_exactly_once([(p, o) for p, o in produced], begun, f"seed {seed}: the etl output")
    if "CONSUMER_SEEDS" not in os.environ:  # the fixed seeds must exercise what they are here for
        seen = world.seen
        assert seen["delivered"] > 20 and seen["refused"] and seen["fenced"] and seen["replayed"] and \
            seen["resets"] and seen["removed"], f"seed {seed} tested too little: {seen}"
