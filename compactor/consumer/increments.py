"""Consuming a topic with Spark, one range at a time, exactly once through batch ids (issue 20, point 7).

``read_increment(lake, topic, group=...)`` joins the group (or reuses a ``Consumer``), takes per owned
partition the range ``[position, end)`` and returns it as an ``Increment``: a DataFrame of its records (the
reader's Spark path: compacted rows then the raw tail under ``read_compacted``, as ``read_topic_dataframe``),
its ranges, a batch id derived from the group and the range, and ``commit()``, which commits the ends.

**Exactly once.** A step that produces its output with ``batch_id=increment.batch_id`` and then commits appends
each input range once, whatever crashes between the two: the range is written to the group's pending ranges
(``groups.pending``) before it is returned, so a run restarted after a crash takes exactly the same range again,
derives the same batch id, and its produce replays (appends nothing, returns the original offsets) instead of
appending twice. Batch ids are remembered for the output topic's ``producer.id.expiration.ms`` (24 h by
default): a crashed pipeline must be restarted within that.

``consume_dataframes(lake, topic, group, fn)`` is the loop: take an increment, ``fn(df, increment)``, commit;
and ``topic_sink(lake, topic, query_id=...)`` is a ``foreachBatch`` function for Spark Structured Streaming
whose batch id is the query's and the epoch's, so a restarted query appends each epoch once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from compactor import failpoints
from compactor.consumer.consumer import Consumer
from compactor.consumer.fetch import range_reader
from compactor.consumer.starts import OffsetReset
from compactor.errors import InputError
from compactor.groups import TopicPartition
from compactor.groups.pending import clear_pending, pending_ranges, replayable, set_pending
from compactor.results import JsonResult
from compactor.topics.naming import TopicName
from readers.spark import dataframe_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from compactor.lake import Lake

log = logging.getLogger(__name__)

BATCH_ID_PREFIX = "increment"


@dataclass
class Increment:
    """One range of a topic for a group: its records as a DataFrame, and how to commit past them."""

    topic: str
    group: str
    ranges: dict[TopicPartition, tuple[int, int]]  # [start, end) of raw offsets per owned partition
    dataframe: DataFrame
    batch_id: str
    consumer: Consumer
    replayed: bool = False  # the range was taken before a crash and is being processed again
    committed: bool = field(default=False, init=False)

    @property
    def empty(self) -> bool:
        """No offsets in any range (compacted ranges may hold fewer records than offsets, never more)."""
        return all(end <= start for start, end in self.ranges.values())

    @property
    def offsets(self) -> int:
        return sum(end - start for start, end in self.ranges.values())

    def end_positions(self) -> dict[TopicPartition, int]:
        return {tp: end for tp, (_, end) in self.ranges.items()}

    def commit(self) -> dict[TopicPartition, int]:
        """Commit every range's end for the group (fenced: ``NotOwnerError`` if a partition moved), then drop
        the pending range."""
        ends: dict[TopicPartition | int, int] = {tp: end for tp, (_, end) in self.ranges.items()}
        committed = self.consumer.commit(ends)
        store = self.consumer.store
        assert store is not None
        clear_pending(store, self.group, self.topic, {tp.partition: se for tp, se in self.ranges.items()})
        self.committed = True
        return committed


def batch_id_of(group: str, topic: str, ranges: Mapping[TopicPartition, tuple[int, int]]) -> str:
    """A batch id that names the input: the group, the topic and every partition's range (hashed to fit)."""
    text = json.dumps([group, topic, sorted((tp.partition, s, e) for tp, (s, e) in ranges.items())])
    return f"{BATCH_ID_PREFIX}:{hashlib.sha256(text.encode()).hexdigest()[:40]}"


def read_increment(lake: Lake, topic: str, group: str | None = None, *, consumer: Consumer | None = None,
                   read_compacted: bool = False, auto_offset_reset: OffsetReset = "earliest") -> Increment:
    """The next range of ``topic`` for ``group`` (see the module docstring). Pass ``consumer`` to keep one
    membership across calls (``consume_dataframes`` does); else a member joins the group for this call and
    stays until ``increment.consumer.close()``. The consumer's positions move past the range, as a poll's do;
    commit each increment before taking the next, or a crash between them loses the exactly-once property."""
    if consumer is None:
        if group is None:
            raise InputError("read_increment needs a group (or a consumer of one)")
        consumer = Consumer(lake, topic, group, read_compacted=read_compacted, auto_offset_reset=auto_offset_reset)
    if consumer.store is None or consumer.group is None:
        raise InputError("read_increment needs a consumer with a group: a range is committed there")
    name = str(TopicName.parse(topic))
    if name not in consumer.names:
        raise InputError(f"the consumer does not follow {name} (it follows {', '.join(sorted(consumer.names))})")
    current = {tp: r for tp, r in consumer.ranges().items() if tp.topic == name}
    # a position below the view's start (retention moved past a commit) resets by the policy, recorded
    starts = consumer._starts(name, sorted(current)) if current else {}
    current = {tp: (starts[tp.partition], max(starts[tp.partition], end)) for tp, (_, end) in current.items()}
    positions = {tp: start for tp, (start, _) in current.items()}
    owned = [tp.partition for tp in current]
    pending = replayable(pending_ranges(consumer.store, consumer.group, name, owned), name, positions)
    replayed = pending is not None
    ranges = {TopicPartition(name, p): se for p, se in pending.items()} if pending is not None else current
    by_partition = {tp.partition: se for tp, se in ranges.items()}
    reader = range_reader(lake, consumer.names[name], by_partition, read_compacted=consumer.read_compacted)
    if not replayed and any(end > start for start, end in by_partition.values()):  # empty: nothing to replay
        set_pending(consumer.store, consumer.group, name, by_partition, consumer.clock())
    for tp, (_, end) in ranges.items():  # taken, as a poll takes its records: the next range starts past it
        consumer._move(tp, end)
    return Increment(name, consumer.group, ranges, dataframe_of(lake, reader),
                     batch_id_of(consumer.group, name, ranges), consumer, replayed)


@contextlib.contextmanager
def _lease_kept(consumer: Consumer) -> Iterator[None]:
    """Renew ``consumer``'s lease from a daemon thread while the block runs, without rebalancing (Kafka's
    background heartbeat): its partitions stay its own until its next heartbeat, after the commit."""
    membership = consumer.membership
    if membership is None:
        yield
        return
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(consumer.heartbeat_interval_ms / 1000):
            try:
                if not membership.renew(consumer.clock()):
                    log.warning("the lease of member %s lapsed while it processed a range; its commit will be "
                                "refused", membership.member_id)
                    return
            except Exception as exc:  # the commit will tell whether the lease held
                log.warning("could not renew the lease of member %s: %s", membership.member_id, exc)

    thread = threading.Thread(target=renew, name=f"lease-{membership.member_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)


@dataclass
class ConsumeSummary(JsonResult):
    """What ``consume_dataframes`` did: increments processed, offsets committed past, increments replayed."""

    increments: int = 0
    offsets: int = 0
    replayed: int = 0
    positions: dict[str, int] = field(default_factory=dict)


def consume_dataframes(lake: Lake, topic: str, group: str, fn: Callable[[DataFrame, Increment], Any], *,
                       read_compacted: bool = False, auto_offset_reset: OffsetReset = "earliest",
                       max_increments: int | None = None, idle_timeout_ms: int = 1000,
                       poll_interval_ms: int = 200, **consumer_options: Any) -> ConsumeSummary:
    """Run ``fn(df, increment)`` on each new range of ``topic`` for ``group`` and commit after it, until
    ``max_increments`` ranges were processed or nothing new came for ``idle_timeout_ms``. ``fn`` produces
    exactly once by passing ``batch_id=increment.batch_id`` to ``produce_dataframe``. ``consumer_options`` go to
    the group member (``session_timeout_ms``, ...); a member shares the topic's partitions with the group's
    others, and takes over a dead member's once its lease lapsed."""
    summary = ConsumeSummary()
    with Consumer(lake, topic, group, read_compacted=read_compacted, auto_offset_reset=auto_offset_reset,
                  **consumer_options) as member:
        idle_since = time.monotonic()
        while max_increments is None or summary.increments < max_increments:
            with _lease_kept(member):  # taking a range and fn may run for longer than session.timeout.ms
                increment = read_increment(lake, topic, consumer=member)
                if not increment.empty:
                    fn(increment.dataframe, increment)
            if increment.empty:
                if (time.monotonic() - idle_since) * 1000 >= idle_timeout_ms:
                    break
                time.sleep(poll_interval_ms / 1000)
                continue
            failpoints.hit("consume-before-commit")
            increment.commit()
            summary.increments += 1
            summary.offsets += increment.offsets
            summary.replayed += increment.replayed
            summary.positions.update({str(tp.partition): end for tp, end in increment.end_positions().items()})
            idle_since = time.monotonic()
    return summary


def topic_sink(lake: Lake, topic: str, *, query_id: str) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function that appends each micro-batch to ``topic`` as one atomic batch with batch id
    ``stream:<query_id>:<epoch>``: a query restarted from its checkpoint re-runs its last epoch, and the replay
    appends nothing. ``query_id`` must stay the same across restarts (the checkpoint's query id,
    ``query.id``, or a name of your own for the query)."""
    from compactor.producing.dataframe import produce_dataframe

    if not query_id:
        raise InputError("topic_sink needs a query_id that stays the same across restarts of the query")

    def write(frame: DataFrame, epoch_id: int) -> None:
        produce_dataframe(lake, topic, frame, batch_id=f"stream:{query_id}:{epoch_id}")

    return write


__all__ = ["ConsumeSummary", "Increment", "batch_id_of", "consume_dataframes", "read_increment", "topic_sink"]
