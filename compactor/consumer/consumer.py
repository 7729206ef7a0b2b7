"""``Consumer``: follow one or more topics for a group (or a static assignment), from committed positions.

Positions are raw offsets per partition (SEMANTICS section 7). Each poll renews the member's lease when a
heartbeat is due (``groups.membership``), then serves records from the current ``Fetch`` of each topic
(``consumer.fetch``: a pinned ``TopicReader`` from the positions to the pinned log end). When a fetch is used
up, the next one is opened only if the topic's metadata changed (one catalog query, ``MetadataWatch``); while
nothing changes a poll sleeps with exponential back-off (``poll_backoff_ms``), never busy-waiting.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from compactor.clock import wall_clock_ms
from compactor.consumer.fetch import Fetch, MetadataWatch, open_fetch
from compactor.consumer.positions import PositionsMixin
from compactor.consumer.starts import OffsetReset, check_policy, resolve_start
from compactor.errors import InputError, SnapshotExpiredError, TransientError
from compactor.groups import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
    GroupStore,
    Membership,
    TopicPartition,
    check_group_name,
)
from compactor.lake import Lake
from compactor.topics.naming import TopicName
from compactor.topics.records import Record
from readers.batches import batch_to_records
from readers.reader import TopicReader

log = logging.getLogger("compactor.consumer")

DEFAULT_MAX_RECORDS = 500  # Kafka's max.poll.records
DEFAULT_BACKOFF_MS = (20, 250)  # first and longest sleep of an idle poll


class Consumer(PositionsMixin):
    """A consumer of ``topics`` for ``group``; see the module docstring and docs/consuming.md."""

    def __init__(self, lake: Lake, topics: str | Sequence[str], group: str | None = None, *,
                 read_compacted: bool = False, auto_offset_reset: OffsetReset = "earliest",
                 session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                 heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
                 max_poll_records: int = DEFAULT_MAX_RECORDS, poll_backoff_ms: tuple[int, int] = DEFAULT_BACKOFF_MS,
                 member_id: str | None = None, subscribe: bool = True,
                 clock: Callable[[], int] | None = None) -> None:
        names = [topics] if isinstance(topics, str) else list(topics)
        if not names:
            raise InputError("a consumer needs at least one topic")
        if session_timeout_ms < 1 or heartbeat_interval_ms < 1 or max_poll_records < 1:
            raise InputError("session_timeout_ms, heartbeat_interval_ms and max_poll_records must be positive")
        self.lake = lake
        self.read_compacted = read_compacted
        self.auto_offset_reset: OffsetReset = check_policy(auto_offset_reset)
        self.group = check_group_name(group) if group is not None else None
        self.max_poll_records = max_poll_records
        self.heartbeat_interval_ms = min(heartbeat_interval_ms, max(1, session_timeout_ms // 3))
        self.backoff_ms = poll_backoff_ms
        self.clock = clock or wall_clock_ms
        self.names = {str(n): n for n in (TopicName.parse(t) for t in names)}
        self.topic_order = sorted(self.names)
        self.partition_counts = {t: lake.topic(n).partitions for t, n in self.names.items()}  # unknown: an error
        self.watch = MetadataWatch(lake, list(self.names.values()))
        self.store = GroupStore(lake) if self.group is not None else None
        self.membership: Membership | None = None
        self.epochs: dict[TopicPartition, int] = {}  # assigned partitions -> owner epoch (-1: static)
        self.positions: dict[TopicPartition, int | None] = {}
        self.ends: dict[TopicPartition, int] = {}
        self.fetches: dict[str, Fetch] = {}
        self.resets = 0
        self.closed = False
        self._wake = threading.Event()
        self._next_heartbeat_ms = 0
        self._lease_until_ms = 0
        self._idle_ms = poll_backoff_ms[0]
        if subscribe and self.store is not None and self.group is not None:
            self.membership = Membership(self.store, self.group, self.partition_counts,
                                         session_timeout_ms=session_timeout_ms, member_id=member_id)
            self._heartbeat()
        elif subscribe:  # no group: every partition, statically (positions start by auto_offset_reset)
            self._set_assignment({TopicPartition(t, p): -1 for t, n in self.partition_counts.items() for p in range(n)})

    # --- membership -----------------------------------------------------------------------------------

    @property
    def member_id(self) -> str | None:
        return self.membership.member_id if self.membership else None

    def _heartbeat(self, force: bool = False) -> None:
        if self.membership is None:
            return
        now = self.clock()
        if not force and now < self._next_heartbeat_ms:
            return
        try:
            beat = self.membership.heartbeat(now)
        except TransientError as exc:  # an outage of the catalog database: keep what we own until the lease ends
            log.warning("event=heartbeat-failed group=%s member=%s error=%r", self.group, self.member_id, str(exc))
            self._next_heartbeat_ms = now + min(self.heartbeat_interval_ms, 1000)
            if now >= self._lease_until_ms:
                self._set_assignment({})  # the lease ran out: others may own them now
            return
        self._next_heartbeat_ms = now + self.heartbeat_interval_ms
        self._lease_until_ms = now + self.membership.session_timeout_ms
        self._set_assignment(beat.owned)

    def _set_assignment(self, owned: Mapping[TopicPartition, int]) -> None:
        """Adopt a new assignment: lost partitions drop their positions; new ones start from the committed."""
        changed = {tp.topic for tp in set(owned) ^ set(self.epochs)}
        changed |= {tp.topic for tp, e in owned.items() if self.epochs.get(tp, e) != e}
        gained = [tp for tp, e in owned.items() if self.epochs.get(tp) != e]
        for tp in set(self.epochs) - set(owned):
            self.positions.pop(tp, None)
        committed = self.store.committed(self.group, gained) if self.store and self.group and gained else {}
        for tp in gained:
            self.positions[tp] = committed.get(tp)
        self.epochs = dict(owned)
        for topic in changed:
            self.fetches.pop(topic, None)

    def assign(self, partitions: Sequence[TopicPartition | int]) -> None:
        """Static assignment (no group lease): read exactly ``partitions``; commits, if a group is given, land
        only on partitions no live group member owns."""
        if self.membership is not None:
            self.membership.leave()
            self.membership = None
        tps = [self._tp(p) for p in partitions]
        self._set_assignment(dict.fromkeys(tps, -1))

    def assignment(self) -> list[TopicPartition]:
        return sorted(self.epochs)

    # --- polling --------------------------------------------------------------------------------------

    def poll_batches(self, timeout_ms: int = 0, max_records: int | None = None) -> list[pa.RecordBatch]:
        """Arrow batches (topic schema, each of one partition) of at most ``max_records`` rows in all, waiting
        up to ``timeout_ms`` for something new. Positions move past what is returned."""
        return [batch for _, batch in self._poll(timeout_ms, max_records)]

    def _poll(self, timeout_ms: int, max_records: int | None) -> list[tuple[str, pa.RecordBatch]]:
        limit = max_records or self.max_poll_records
        deadline = time.monotonic() + max(0, timeout_ms) / 1000
        sleep_ms = self._idle_ms  # an idle consumer keeps backing off across polls
        while not self.closed:
            self._heartbeat()
            out = self._drain(limit)
            if out:
                self._idle_ms = self.backoff_ms[0]
                return out
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            if self._wake.wait(min(sleep_ms / 1000, remaining)):
                self._wake.clear()
                return []  # woken (``wakeup`` or ``close``)
            sleep_ms = self._idle_ms = min(sleep_ms * 2, self.backoff_ms[1])
        return []

    def wakeup(self) -> None:
        """Make a poll that is waiting return now (with nothing), from another thread or a signal handler."""
        self._wake.set()

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> list[Record]:
        """Records (as ``TopicReader`` returns them), like ``poll_batches``."""
        return [r for b in self.poll_batches(timeout_ms, max_records) for r in batch_to_records(b)]

    def poll_with_topics(self, timeout_ms: int = 0, max_records: int | None = None) -> list[tuple[str, Record]]:
        """Like ``poll``, with each record's topic (for a consumer of several topics)."""
        return [(topic, r) for topic, batch in self._poll(timeout_ms, max_records) for r in batch_to_records(batch)]

    def __iter__(self) -> Iterator[Record]:
        """Follow the topics until ``close()``: records as they are appended."""
        while not self.closed:
            yield from self.poll(timeout_ms=self.backoff_ms[1])

    def _drain(self, limit: int) -> list[tuple[str, pa.RecordBatch]]:
        out: list[tuple[str, pa.RecordBatch]] = []
        marks: dict[str, tuple[str | None, str | None]] | None = None
        for topic in self.topic_order:
            while limit > 0:
                fetch = self.fetches.get(topic)
                if fetch is None or fetch.exhausted:
                    marks = marks if marks is not None else self.watch.marks()
                    if fetch is not None and fetch.marks == marks[topic]:
                        break  # used up, and nothing changed since it was pinned
                    fetch = self._open(topic, marks[topic])
                    if fetch is None:
                        break
                try:
                    taken = fetch.take(limit)
                except SnapshotExpiredError:  # pinned longer than the reader lease: re-open from the positions
                    self.fetches.pop(topic, None)
                    continue
                if fetch.done:
                    self._advance(topic, fetch)
                if taken is None:
                    break
                self.positions[TopicPartition(topic, taken.partition)] = taken.next_offset
                out.append((topic, taken.batch))
                limit -= taken.batch.num_rows
        return out

    def _open(self, topic: str, marks: tuple[str | None, str | None]) -> Fetch | None:
        tps = [tp for tp in self.epochs if tp.topic == topic]
        if not tps:
            return None
        reader = TopicReader(self.lake, self.names[topic], read_compacted=self.read_compacted)
        fetch = open_fetch(self.lake, self.names[topic], self._starts(topic, tps, reader),
                           read_compacted=self.read_compacted, marks=marks, reader=reader)
        self.fetches[topic] = fetch
        for p, end in fetch.ends.items():
            self.ends[TopicPartition(topic, p)] = end
        return fetch

    def _starts(self, topic: str, tps: list[TopicPartition], reader: Any = None) -> dict[int, int]:
        reader = reader or TopicReader(self.lake, self.names[topic], read_compacted=self.read_compacted)
        starts: dict[int, int] = {}
        for tp in tps:
            start = resolve_start(reader, tp, self.positions.get(tp), self.auto_offset_reset, self.clock())
            if start.reset is not None:
                self.resets += 1
                if self.store is not None and self.group is not None:
                    self.store.record_reset(self.group, tp, start.reset)
            self.positions[tp] = start.offset
            starts[tp.partition] = start.offset
        return starts

    def _advance(self, topic: str, fetch: Fetch) -> None:
        """Partitions the fetch has fully read move to its end (past trailing rows the view no longer has)."""
        for p in fetch.done:
            tp = TopicPartition(topic, p)
            position = self.positions.get(tp)
            if tp in self.epochs and position is not None and position < fetch.ends[p]:
                self.positions[tp] = fetch.ends[p]
        fetch.done.clear()

    # --- life -----------------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop following; a group member releases its partitions at once (no commit: call ``commit`` first)."""
        if self.closed:
            return
        self.closed = True
        self._wake.set()
        if self.membership is not None:
            self.membership.leave()
        self.fetches.clear()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
