"""Randomised interleavings of produce, retention, polls, commits, crashes, clean closes, members joining and
leaving and clocks moving past leases, checked against SEMANTICS section 7 (raw mode; no Spark):

* every delivered record is the raw log's record at that (partition, offset);
* an owner's deliveries of a partition start at the group's committed position when it acquired the
  partition and continue with every next offset, once each, in order (a jump only by a recorded reset past
  offsets that retention removed);
* a commit either lands or fails with "not the owner" and changes nothing;
* at the end a fresh member reads exactly ``[committed, N_p)``.

The compacted rule, with real compactions between polls, is in ``test_consumer_compacted.py`` (Spark).
"""

from __future__ import annotations

import os
import random

import pytest

from compactor import Consumer, TopicPartition
from compactor.errors import NotOwnerError
from compactor.groups import GroupStore
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.retention import run_retention
from compactor.topics.records import ProducerRecord, Record
from tests.consumers import FakeClock

T = "r.orders"
SESSION_MS = 1_000
RETENTION_MS = 10_000
SEEDS = [int(s) for s in os.environ.get("CONSUMER_SEEDS", "3,17,1").split(",")]


class Tracked:
    """One in-process member and what the checks expect of it next."""

    def __init__(self, lake: Lake, clock: FakeClock, number: int) -> None:
        self.consumer = Consumer(lake, T, group="g", clock=clock, member_id=f"m{number:03d}",
                                 session_timeout_ms=SESSION_MS, heartbeat_interval_ms=200, poll_backoff_ms=(1, 1))
        self.epochs: dict[TopicPartition, int] = {}
        self.expected: dict[TopicPartition, int] = {}


def check_poll(member: Tracked, store: GroupStore, log: dict[int, list[Record]], log_start: list[int],
               max_records: int, step: str) -> int:
    consumer = member.consumer
    committed_before = store.committed("g", [TopicPartition(T, p) for p in log])
    records = consumer.poll(max_records=max_records)
    for tp, epoch in consumer.epochs.items():
        if member.epochs.get(tp) != epoch:  # a new ownership session: from the committed position
            committed = committed_before[tp]  # none yet: auto_offset_reset=earliest, the log start (not a reset)
            member.expected[tp] = committed if committed is not None else log_start[tp.partition]
    for tp in set(member.expected) - set(consumer.epochs):
        del member.expected[tp]
    member.epochs = dict(consumer.epochs)
    assert len(records) <= max_records, step
    for record in records:
        tp = TopicPartition(T, record.partition)
        assert tp in consumer.epochs, f"{step}: delivered {tp} it does not own"
        assert record == log[record.partition][record.offset], f"{step}: {tp}@{record.offset} differs from the log"
        expected = member.expected[tp]
        if record.offset != expected:  # only a recorded reset past offsets that retention removed
            reset = next(s.last_reset for s in store.partitions("g") if s.topic_partition == tp)
            assert reset is not None and reset.to_offset == record.offset, \
                f"{step}: {tp} jumped from {expected} to {record.offset} without a reset"
            assert expected < record.offset <= log_start[record.partition], \
                f"{step}: {tp} delivered {record.offset}, expected {expected}"
        member.expected[tp] = record.offset + 1
    return len(records)


@pytest.mark.parametrize("seed", [SEEDS[0], *(pytest.param(s, marks=pytest.mark.slow) for s in SEEDS[1:])])
def test_random_interleavings_keep_the_raw_rules(lake: Lake, seed: int) -> None:
    rng = random.Random(seed)
    partitions = 2
    lake.create_topic(T, partitions=partitions, config={"retention.ms": str(RETENTION_MS)})
    store = GroupStore(lake)
    clock = FakeClock(1_000_000_000)
    log: dict[int, list[Record]] = {p: [] for p in range(partitions)}
    log_start = [0] * partitions
    numbers = iter(range(1000))
    seen = {"delivered": 0, "refused": 0, "sessions": 0, "removed": 0}
    members = [Tracked(lake, clock, next(numbers))]
    for step_number in range(100):
        step = f"seed {seed} step {step_number}"
        action = rng.choices(["produce", "poll", "commit", "tick", "expire", "crash", "close", "join", "retention"],
                             [4, 8, 3, 2, 1, 1, 1, 1, 1])[0]
        member = rng.choice(members)
        if action == "produce":
            old = rng.random() < 0.4  # old records become eligible for retention
            stamp = clock() - 2 * RETENTION_MS if old else clock()
            batch = [ProducerRecord(f"k{rng.randrange(5)}".encode(), rng.randbytes(3), partition=rng.randrange(2),
                                    timestamp_ms=stamp) for _ in range(rng.randrange(1, 5))]
            result = produce(lake.topic(T), batch)
            for record, (p, o) in zip(batch, result.offsets, strict=True):
                log[p].append(Record(p, o, stamp, record.key, record.value, ()))
        elif action == "poll":
            sessions = len(member.epochs)
            seen["delivered"] += check_poll(member, store, log, log_start, rng.randrange(1, 6), step)
            seen["sessions"] += max(0, len(member.epochs) - sessions)
        elif action == "commit":
            before = store.committed("g", [TopicPartition(T, p) for p in range(partitions)])
            try:
                member.consumer.commit()
            except NotOwnerError:
                seen["refused"] += 1
                assert store.committed("g", list(before)) == before, f"{step}: a refused commit changed something"
        elif action == "tick":
            clock.advance(rng.choice([50, 300]))
        elif action == "expire":
            clock.advance(SESSION_MS + 1)  # every lease runs out unless renewed
        elif action in ("crash", "close") and len(members) > 1:
            members.remove(member)
            if action == "close":
                member.consumer.close()  # a crash just stops polling: its lease runs out
        elif action == "join" and len(members) < 3:
            members.append(Tracked(lake, clock, next(numbers)))
        elif action == "retention":
            run_retention(lake, T, now_ms=clock())
            log_start = list(lake.topic(T).offsets().log_start_offsets)
            seen["removed"] = sum(log_start)
    for member in members:
        member.consumer.close()
    clock.advance(SESSION_MS + 1)  # crashed members' leases run out
    final = Tracked(lake, clock, next(numbers))
    committed = store.committed("g", [TopicPartition(T, p) for p in range(partitions)])
    got: list[Record] = []
    while polled := final.consumer.poll(max_records=7):
        got += polled
    lso = lake.topic(T).offsets().log_start_offsets
    for p in range(partitions):
        start = max(committed[TopicPartition(T, p)] or 0, lso[p])
        assert [r for r in got if r.partition == p] == log[p][start:], f"seed {seed}: final drain of {p}"
    final.consumer.commit()
    assert final.consumer.caught_up()
    if "CONSUMER_SEEDS" not in os.environ:  # the fixed seeds must exercise fencing and retention
        assert seen["delivered"] > 20 and seen["refused"] and seen["removed"], f"seed {seed} tested too little: {seen}"
