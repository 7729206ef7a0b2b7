"""Consuming a topic with Spark, one unit at a time, exactly once through batch ids
(docs/guarantees.md#consumers-and-groups).

``read_increment(lake, topic, group=...)`` joins the group (or reuses a ``Consumer``) and returns the next unit
of replay (``consumer.units``: one partition's range, a pending one first) as an ``Increment``: a DataFrame of
its records (the reader's Spark path: compacted rows then the raw tail under ``read_compacted``, as
``read_topic_dataframe``), its range, the unit's batch id, and ``commit()``, which commits the end.

**Exactly once.** A step that produces its output with ``batch_id=increment.batch_id`` and then commits appends
each input range once, whatever happens between the two: whichever member owns the partition next (after a
crash, a rebalance, beside a zombie, after retention under the range) takes the same range again, reads the
same records (from the snapshots it was first read from, while the topic retains them:
``compaction.cursor.retain-ms``) and derives the same batch id, and its produce replays (appends nothing)
instead of appending twice. Batch ids are remembered for the output topic's ``producer.id.expiration.ms``
(24 h by default): a crashed pipeline must be restarted within that.

``consume_dataframes(lake, topic, group, fn)`` is the loop: take an increment, ``fn(df, increment)``, commit;
the consumer's background heartbeat keeps its lease while ``fn`` runs (up to ``max_poll_interval_ms``). And
``topic_sink(lake, topic, query_id=...)`` is a ``foreachBatch`` function for Spark Structured Streaming whose
batch id is the query's and the epoch's, so a restarted query appends each epoch once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from compactor import failpoints
from compactor.consumer.consumer import Consumer
from compactor.consumer.starts import OffsetReset
from compactor.consumer.units import batch_id_of, take_unit
from compactor.errors import InputError
from compactor.groups import TopicPartition
from compactor.results import JsonResult
from compactor.topics.naming import TopicName
from readers.spark import RAW_FILE_SCHEMA, dataframe_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from compactor.lake import Lake

log = logging.getLogger(__name__)


@dataclass
class Increment:
    """One unit of a topic for a group: its records as a DataFrame, and how to commit past them."""

    topic: str
    group: str
    ranges: dict[TopicPartition, tuple[int, int]]  # [start, end) of raw offsets: one partition, or none
    dataframe: DataFrame
    batch_id: str
    consumer: Consumer
    replayed: bool = False  # the range was taken before and not committed, and is being processed again
    committed: bool = field(default=False, init=False)

    @property
    def empty(self) -> bool:
        """No offsets in the range (compacted ranges may hold fewer records than offsets, never more)."""
        return all(end <= start for start, end in self.ranges.values())

    @property
    def offsets(self) -> int:
        return sum(end - start for start, end in self.ranges.values())

    def end_positions(self) -> dict[TopicPartition, int]:
        return {tp: end for tp, (_, end) in self.ranges.items()}

    def commit(self) -> dict[TopicPartition, int]:
        """Commit the range's end for the group (fenced by the epoch it was taken under: ``NotOwnerError`` if
        the partition moved since); this also retires the pending range."""
        committed = self.consumer.commit(self.end_positions()) if self.ranges else {}
        self.committed = True
        return committed


def read_increment(lake: Lake, topic: str, group: str | None = None, *, consumer: Consumer | None = None,
                   read_compacted: bool = False, auto_offset_reset: OffsetReset = "earliest") -> Increment:
    """The next unit of ``topic`` for ``group`` (see the module docstring), or an empty increment when nothing is
    new. Pass ``consumer`` to keep one membership across calls (``consume_dataframes`` does); else a member joins
    the group for this call and stays until ``increment.consumer.close()``. Commit each increment before taking
    the next."""
    if consumer is None:
        if group is None:
            raise InputError("read_increment needs a group (or a consumer of one)")
        consumer = Consumer(lake, topic, group, read_compacted=read_compacted, auto_offset_reset=auto_offset_reset)
    if consumer.store is None or consumer.group is None:
        raise InputError("read_increment needs a consumer with a group: a range is committed there")
    name = str(TopicName.parse(topic))
    unit = take_unit(consumer, name)
    if unit is None:
        nothing = lake.spark().createDataFrame([], RAW_FILE_SCHEMA)  # the topic's columns, no rows
        return Increment(name, consumer.group, {}, nothing, "", consumer)
    return Increment(name, consumer.group, {unit.tp: (unit.start, unit.end)}, dataframe_of(lake, unit.reader),
                     unit.batch_id, consumer, unit.replayed)


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
    """Run ``fn(df, increment)`` on each new unit of ``topic`` for ``group`` and commit after it, until
    ``max_increments`` units were processed or nothing new came for ``idle_timeout_ms``. ``fn`` produces
    exactly once by passing ``batch_id=increment.batch_id`` to ``produce_dataframe``. ``consumer_options`` go to
    the group member (``session_timeout_ms``, ``max_poll_interval_ms``, ...); a member shares the topic's
    partitions with the group's others, and takes over a dead member's once its lease lapsed."""
    summary = ConsumeSummary()
    with Consumer(lake, topic, group, read_compacted=read_compacted, auto_offset_reset=auto_offset_reset,
                  **consumer_options) as member:
        idle_since = time.monotonic()
        while max_increments is None or summary.increments < max_increments:
            increment = read_increment(lake, topic, consumer=member)
            if increment.empty:
                if (time.monotonic() - idle_since) * 1000 >= idle_timeout_ms:
                    break
                time.sleep(poll_interval_ms / 1000)
                continue
            fn(increment.dataframe, increment)
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
