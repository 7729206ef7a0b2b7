"""``Consumer``: follow topics for a group (or a static assignment), from committed positions (Kafka's consumer,
with Pulsar's readCompacted).

Positions are raw offsets per partition (SEMANTICS section 7). A poll:

1. auto-commits the positions of what earlier polls returned, when ``enable_auto_commit`` and its interval is up;
2. settles the group when a heartbeat is due (``consumer.member``: revocations go through the rebalance listener
   before the partitions are released), and picks up topics created since, for a pattern subscription;
3. serves the assigned, unpaused partitions in turn, a slice of each (at most ``max_partition_fetch_bytes`` and
   a fair share of ``max_records``), starting one partition further at each poll, so no partition or topic
   starves another;
4. with nothing to return, watches the topics whose fetches are read out and re-opens one only when an owned
   partition grew (``consumer.fetch``); then waits with back-off (``poll_backoff_ms``) until ``timeout_ms``.

A data file that cannot be read is retried once on a freshly loaded table, then ends the poll with
``DataFileMissingError`` naming the file and the partition.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from compactor.consumer.clocks import LocalClock, as_clock
from compactor.consumer.fetch import Fetcher, TopicFetch
from compactor.consumer.member import GroupMember, Rebalance
from compactor.consumer.positions import PositionsMixin
from compactor.consumer.rebalance import RebalanceListener, notify
from compactor.consumer.starts import OffsetReset, check_policy, resolve_start
from compactor.errors import DataFileMissingError, InputError, NotOwnerError
from compactor.groups import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_MAX_POLL_INTERVAL_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
    GroupStore,
    Membership,
    PendingRange,
    TopicPartition,
    check_group_name,
)
from compactor.iceberg.catalog import first_line, is_storage_failure, storage_error
from compactor.lake import Lake
from compactor.topics.naming import TopicName
from compactor.topics.records import Record
from compactor.topics.state import read_offsets
from readers.batches import batch_to_records
from readers.reader import TopicReader
from readers.streams import FileReadError, PartitionStream

log = logging.getLogger("compactor.consumer")

DEFAULT_MAX_RECORDS = 500  # Kafka's max.poll.records
DEFAULT_MAX_PARTITION_FETCH_BYTES = 1_048_576  # Kafka's max.partition.fetch.bytes
DEFAULT_AUTO_COMMIT_INTERVAL_MS = 5_000  # Kafka's auto.commit.interval.ms
DEFAULT_METADATA_MAX_AGE_MS = 300_000  # Kafka's metadata.max.age.ms: how often a pattern looks for new topics
DEFAULT_BACKOFF_MS = (20, 250)  # first and longest sleep of an idle poll


class Consumer(PositionsMixin):
    """A consumer of ``topics`` for ``group``; see the module docstring and docs/consuming.md."""

    def __init__(self, lake: Lake, topics: str | Sequence[str] = (), group: str | None = None, *,
                 read_compacted: bool = False, auto_offset_reset: OffsetReset = "earliest",
                 session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                 heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
                 max_poll_interval_ms: int = DEFAULT_MAX_POLL_INTERVAL_MS,
                 max_poll_records: int = DEFAULT_MAX_RECORDS,
                 max_partition_fetch_bytes: int = DEFAULT_MAX_PARTITION_FETCH_BYTES,
                 group_instance_id: str | None = None, enable_auto_commit: bool = False,
                 auto_commit_interval_ms: int = DEFAULT_AUTO_COMMIT_INTERVAL_MS,
                 pattern: str | re.Pattern[str] | None = None, listener: RebalanceListener | None = None,
                 metadata_max_age_ms: int = DEFAULT_METADATA_MAX_AGE_MS,
                 poll_backoff_ms: tuple[int, int] = DEFAULT_BACKOFF_MS, member_id: str | None = None,
                 subscribe: bool = True, clock: LocalClock | Callable[[], int] | None = None) -> None:
        positive = {"session_timeout_ms": session_timeout_ms, "heartbeat_interval_ms": heartbeat_interval_ms,
                    "max_poll_interval_ms": max_poll_interval_ms, "max_poll_records": max_poll_records,
                    "max_partition_fetch_bytes": max_partition_fetch_bytes,
                    "auto_commit_interval_ms": auto_commit_interval_ms, "metadata_max_age_ms": metadata_max_age_ms}
        bad = [f"{k}={v!r}" for k, v in positive.items() if isinstance(v, bool) or not isinstance(v, int) or v < 1]
        if bad:
            raise InputError(f"these settings must be positive integers: {', '.join(bad)}")
        if group_instance_id is not None and group is None:
            raise InputError("group_instance_id (group.instance.id) needs a group")
        self.lake = lake
        self.read_compacted = read_compacted
        self.auto_offset_reset: OffsetReset = check_policy(auto_offset_reset)
        self.group = check_group_name(group) if group is not None else None
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = min(heartbeat_interval_ms, max(1, session_timeout_ms // 3))
        self.max_poll_interval_ms = max_poll_interval_ms
        self.max_poll_records = max_poll_records
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.group_instance_id = group_instance_id
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.backoff_ms = poll_backoff_ms
        self.clock = as_clock(clock)
        self.store = GroupStore(lake) if self.group is not None else None
        self.fetcher = Fetcher(lake, read_compacted)
        self.names: dict[str, TopicName] = {}
        self.partition_counts: dict[str, int] = {}
        self.pattern: re.Pattern[str] | None = None
        self.listener: RebalanceListener | None = None
        self.member: GroupMember | None = None
        self.epochs: dict[TopicPartition, int] = {}  # assigned partitions -> owner epoch (-1: static)
        self.positions: dict[TopicPartition, int | None] = {}
        self.ends: dict[TopicPartition, int] = {}
        self.fetches: dict[str, TopicFetch] = {}
        self.paused_partitions: set[TopicPartition] = set()
        self.resets = 0
        self.closed = False
        self._member_id = member_id
        self._static = False
        self._wake = threading.Event()
        self._idle_ms = poll_backoff_ms[0]
        self._turn = 0
        self.unit_turn = 0
        self._patterns_checked_ms: int | None = None
        self._last_auto_commit_ms = self.clock.now_ms()
        names = [topics] if isinstance(topics, str) else list(topics)
        if subscribe and (names or pattern is not None):
            self.subscribe(names, pattern=pattern, listener=listener)
        elif not subscribe:
            self._set_topics(names)
            self.listener = listener

    # --- subscription --------------------------------------------------------------------------------

    @property
    def member_id(self) -> str | None:
        return self.member.member_id if self.member else None

    def _set_topics(self, names: Sequence[str]) -> None:
        parsed = {str(n): n for n in (TopicName.parse(t) for t in names)}
        counts = {t: self.partition_counts.get(t) or self.lake.topic(n).partitions for t, n in parsed.items()}
        self.names, self.partition_counts = parsed, counts  # an unknown topic raised above: nothing changed

    def subscribe(self, topics: str | Sequence[str] = (), pattern: str | re.Pattern[str] | None = None,
                  listener: RebalanceListener | None = None) -> None:
        """Follow ``topics``, or every topic whose ``namespace.topic`` name matches ``pattern`` in full (topics
        created later are picked up within ``metadata_max_age_ms``), for the group (or, without a group, all
        their partitions statically). ``listener`` hears of rebalances (Kafka's ``ConsumerRebalanceListener``)."""
        self._check_open()
        names = [topics] if isinstance(topics, str) else list(topics)
        if bool(names) == (pattern is not None):
            raise InputError("subscribe to topics or to a pattern (one of them)")
        self.pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
        self.listener = listener
        if self.pattern is not None:
            names = [t for t in self.lake.list_topics() if self.pattern.fullmatch(t)]
            self._patterns_checked_ms = self.clock.now_ms()
        self._set_topics(names)
        self._subscribed()

    def _subscribed(self) -> None:
        """Join (or update) the group with the current topics; without a group, assign all their partitions."""
        if self.store is not None and self.group is not None:
            if self.member is None:
                membership = Membership(self.store, self.group, self.partition_counts,
                                        session_timeout_ms=self.session_timeout_ms, member_id=self._member_id,
                                        instance_id=self.group_instance_id)
                self.member = GroupMember(membership, self.clock, heartbeat_interval_ms=self.heartbeat_interval_ms,
                                          max_poll_interval_ms=self.max_poll_interval_ms)
                self._rebalance()
                self.member.start()
            else:
                self.member.membership.subscriptions = dict(self.partition_counts)
                self.member.request_settle()
        else:
            self._set_assignment({TopicPartition(t, p): -1 for t, n in self.partition_counts.items()
                                  for p in range(n)})

    def subscription(self) -> list[str]:
        return sorted(self.names)

    def unsubscribe(self) -> None:
        """Leave the group (or drop the static assignment) and follow nothing."""
        self._leave()
        self.names, self.partition_counts, self.pattern = {}, {}, None
        self._set_assignment({})

    def _refresh_pattern(self) -> None:
        """For a pattern subscription, look for topics created (or dropped) since, every metadata_max_age_ms."""
        now = self.clock.now_ms()
        if self.pattern is None or (self._patterns_checked_ms is not None
                                    and now - self._patterns_checked_ms < self.metadata_max_age_ms):
            return
        self._patterns_checked_ms = now
        found = sorted(t for t in self.lake.list_topics() if self.pattern.fullmatch(t))
        if found != sorted(self.names):
            log.info("event=subscription-changed topics=%s", ",".join(found))
            self._set_topics(found)
            self._subscribed()

    # --- assignment ------------------------------------------------------------------------------------

    def _set_assignment(self, owned: Mapping[TopicPartition, int]) -> None:
        """Adopt an assignment: lost partitions drop their positions; new ones start from the committed."""
        changed = {tp.topic for tp in set(owned) ^ set(self.epochs)}
        changed |= {tp.topic for tp, e in owned.items() if self.epochs.get(tp, e) != e}
        gained = [tp for tp, e in owned.items() if self.epochs.get(tp) != e]
        for tp in set(self.epochs) - set(owned):
            self.positions.pop(tp, None)
            self.paused_partitions.discard(tp)
        committed = self.store.committed(self.group, gained) if self.store and self.group and gained else {}
        for tp in gained:
            self.positions[tp] = committed.get(tp)
        self.epochs = dict(owned)
        for topic in changed:
            self._drop_fetch(topic)

    def _rebalance(self) -> None:
        """Settle the group if due, with the listener told before partitions go and after they come."""
        if self.member is None:
            return
        change: Rebalance | None = self.member.poll_rebalance()
        if change is None:
            return
        lost = [tp for tp in change.lost if tp in self.epochs]
        if lost:
            notify(self.listener, "lost", lost)
        revoke = [tp for tp in change.revoke if tp not in change.lost]
        if revoke:
            if self.enable_auto_commit:
                self._auto_commit([tp for tp in revoke if tp in self.epochs])
            notify(self.listener, "revoked", revoke)  # the caller may still commit them here
            self.member.membership.release(revoke)
        self._set_assignment(self.member.membership.owned)
        assigned = [tp for tp in change.assigned if tp in self.epochs]
        if assigned:
            notify(self.listener, "assigned", assigned)

    def settle(self) -> None:
        """Settle the group now if a heartbeat is due (what a poll does first), for callers that take ranges
        instead of polling (``ranges``, ``consumer.units``)."""
        self._check_open()
        self._rebalance()

    def turns(self, topic: str) -> list[TopicPartition]:
        """The owned, unpaused partitions of ``topic``, starting one further at each call (units are taken in
        turn, so no partition starves another)."""
        order = [tp for tp in sorted(self.epochs) if tp.topic == topic and tp not in self.paused_partitions]
        if not order:
            return []
        start = self.unit_turn % len(order)
        self.unit_turn += 1
        return order[start:] + order[:start]

    def take_range(self, tp: TopicPartition, pending: PendingRange) -> None:
        """Record ``pending`` as the unit this consumer took of ``tp``, fenced like a commit (``NotOwnerError``
        if it lost the partition; ``consumer.units``)."""
        if self.store is None or self.group is None:
            raise InputError("this consumer has no group: there is nowhere to record a range")
        if self.member is not None:
            self.member.check_usable()
            try:
                self.member.membership.set_pending(tp, pending)
            except NotOwnerError:
                self.member.request_settle()
                raise
        else:
            self.store.set_pending(self.group, None, "", tp, pending)

    def assign(self, partitions: Sequence[TopicPartition | int]) -> None:
        """Static assignment (no group lease): read exactly ``partitions``; commits, if a group is given, land
        only on partitions no live group member owns."""
        tps = [self._tp(p) for p in partitions]
        self._leave()
        self.pattern = None
        self._set_assignment(dict.fromkeys(tps, -1))

    def assignment(self) -> list[TopicPartition]:
        return sorted(self.epochs)

    def _leave(self) -> None:
        if self.member is not None:
            member, self.member = self.member, None
            member.stop()

    # --- polling --------------------------------------------------------------------------------------

    def poll_batches(self, timeout_ms: int = 0, max_records: int | None = None) -> list[pa.RecordBatch]:
        """Arrow batches (topic schema, each of one partition) of at most ``max_records`` rows in all, waiting
        up to ``timeout_ms`` for something new. Positions move past what is returned."""
        return [batch for _, batch in self._poll(timeout_ms, max_records)]

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

    def wakeup(self) -> None:
        """Make a poll that is waiting return now (with nothing), from another thread or a signal handler."""
        self._wake.set()

    def _poll(self, timeout_ms: int, max_records: int | None) -> list[tuple[str, pa.RecordBatch]]:
        self._check_open()
        if not self.names and not self.epochs:
            raise InputError("this consumer is not subscribed to any topic nor assigned any partition")
        limit = max_records or self.max_poll_records
        deadline = time.monotonic() + max(0, timeout_ms) / 1000
        sleep_ms = self._idle_ms  # an idle consumer keeps backing off across polls
        retried: set[str] = set()
        while not self.closed:
            if self.enable_auto_commit:
                self._auto_commit()
            self._refresh_pattern()
            self._rebalance()
            try:
                out = self._drain(limit) or (self._watch() and self._drain(limit))
            except FileReadError as failure:
                self._recover(failure, retried)
                continue
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

    def _turns(self) -> list[TopicPartition]:
        """The assigned, unpaused partitions, starting one further after each poll that returned records."""
        order = [tp for tp in sorted(self.epochs) if tp not in self.paused_partitions]
        if not order:
            return []
        start = self._turn % len(order)
        return order[start:] + order[:start]

    def _stream(self, tp: TopicPartition) -> PartitionStream | None:
        fetch = self.fetches.get(tp.topic)
        if fetch is None:
            return None
        stream = fetch.streams.get(tp.partition)
        if stream is None:
            position = self.positions.get(tp)
            if position is None:
                return None
            stream = self.fetcher.stream(fetch, tp.partition, position)
        return stream

    def _drain(self, limit: int) -> list[tuple[str, pa.RecordBatch]]:
        """Serve the partitions in turn (see the module docstring, point 3)."""
        out: list[tuple[str, pa.RecordBatch]] = []
        active = [tp for tp in self._turns() if (s := self._stream(tp)) is not None and not s.exhausted]
        while limit > 0 and active:
            share = max(1, -(-limit // len(active)))
            still = []
            for tp in active:
                if limit <= 0:
                    break
                stream = self._stream(tp)
                assert stream is not None
                taken = stream.take(min(share, limit), self.max_partition_fetch_bytes)
                if taken is None:
                    position = self.positions.get(tp)
                    if position is not None and position < stream.end:
                        self.positions[tp] = stream.end  # read to its end: past any trailing gap
                    continue
                self.positions[tp] = taken.next_offset
                out.append((tp.topic, taken.batch))
                limit -= taken.batch.num_rows
                still.append(tp)
            active = still
        if out:
            self._turn += 1
        return out

    def _read_out(self, topic: str) -> bool:
        """Whether every owned, unpaused partition of ``topic`` was read to its fetch's pinned end."""
        fetch = self.fetches.get(topic)
        if fetch is None:
            return True
        for tp in self.epochs:
            if tp.topic == topic and tp not in self.paused_partitions:
                position = self.positions.get(tp)
                stream = fetch.streams.get(tp.partition)
                if position is None or (stream is not None and not stream.exhausted) or position < fetch.end(
                        tp.partition):
                    return False
        return True

    def _watch(self) -> bool:
        """Re-open the fetches of topics that have new records for us (see the module docstring, point 4)."""
        opened = False
        for topic in sorted({tp.topic for tp in self.epochs if tp not in self.paused_partitions}):
            if not self._read_out(topic):
                continue
            table = self.fetcher.load(self.names[topic])
            fetch = self.fetches.get(topic)
            if fetch is not None and table.metadata_location == fetch.location:
                continue
            offsets = read_offsets(table.metadata.properties)
            mine = [tp for tp in self.epochs if tp.topic == topic and tp not in self.paused_partitions]
            grew = fetch is None or any(
                (position := self.positions.get(tp)) is None or offsets.next_offsets[tp.partition] > position
                or offsets.log_start_offsets[tp.partition] > position for tp in mine)
            if not grew:
                assert fetch is not None
                fetch.location = table.metadata_location  # another partition changed: nothing to read
                continue
            owned = sorted(tp.partition for tp in self.epochs if tp.topic == topic)  # paused ones too
            self._open(topic, self.fetcher.open(self.names[topic], table, owned), table.metadata_location)
            opened = True
        return opened

    def _open(self, topic: str, reader: TopicReader, location: str) -> None:
        tps = [tp for tp in self.epochs if tp.topic == topic]
        self._drop_fetch(topic)
        self.start_positions(topic, tps, reader)
        self.fetches[topic] = TopicFetch(reader, location)
        for tp in tps:
            self.ends[tp] = reader.pinned.end[tp.partition]

    def _drop_fetch(self, topic: str) -> None:
        fetch = self.fetches.pop(topic, None)
        if fetch is not None:
            for stream in fetch.streams.values():
                stream.cancel()

    def _recover(self, failure: FileReadError, retried: set[str]) -> None:
        """A data file could not be read: once per file and poll, load the table again and re-open the topic
        from the positions (the file may belong to a snapshot that retention replaced); else report it."""
        if failure.path in retried:
            if is_storage_failure(failure.cause):  # an outage, not a missing file
                raise storage_error(f"reading {failure.path}", failure.cause) from failure.cause
            raise DataFileMissingError(
                f"data file {failure.path} of {failure.topic} partition {failure.partition} cannot be read, even "
                f"after loading the table again: {first_line(failure.cause)}") from failure.cause
        retried.add(failure.path)
        log.warning("event=data-file-unreadable topic=%s partition=%d file=%s error=%r; loading the table again",
                    failure.topic, failure.partition, failure.path, first_line(failure.cause))
        self._drop_fetch(failure.topic)

    def start_positions(self, topic: str, tps: Sequence[TopicPartition], reader: Any = None) -> dict[int, int]:
        """Where each of ``tps`` starts in ``reader``'s pinned view (default: one opened now): its position, or
        the reset policy's choice when it has none or it is out of range (a reset is logged, counted and
        recorded for ``group describe``). The positions move there."""
        reader = reader or TopicReader(self.lake, self.names[topic], read_compacted=self.read_compacted)
        starts: dict[int, int] = {}
        for tp in tps:
            start = resolve_start(reader, tp, self.positions.get(tp), self.auto_offset_reset)
            if start.reset is not None:
                self.resets += 1
                if self.store is not None and self.group is not None:
                    from_offset, to_offset, reason = start.reset
                    self.store.record_reset(self.group, tp, from_offset, to_offset, reason)
            self.positions[tp] = start.offset
            starts[tp.partition] = start.offset
        return starts

    # --- committing and life --------------------------------------------------------------------------

    def _auto_commit(self, only: Sequence[TopicPartition] | None = None) -> None:
        """Commit the positions of what earlier polls returned (``enable_auto_commit``), every
        ``auto_commit_interval_ms`` and before partitions are revoked; a refusal is logged, as Kafka's is."""
        now = self.clock.now_ms()
        if only is None and now - self._last_auto_commit_ms < self.auto_commit_interval_ms:
            return
        self._last_auto_commit_ms = now
        tps: Sequence[TopicPartition] = only if only is not None else sorted(self.epochs)
        chosen = {tp: p for tp in tps if (p := self.positions.get(tp)) is not None}
        if not chosen or self.store is None:
            return
        try:
            self.commit(chosen)
        except NotOwnerError as exc:
            log.warning("event=auto-commit-refused group=%s error=%r", self.group, str(exc))

    def _check_open(self) -> None:
        if self.closed:
            raise InputError("this consumer is closed")

    def close(self) -> None:
        """Stop following; a group member releases its partitions at once (with ``enable_auto_commit``, after
        committing its positions; otherwise commit first)."""
        if self.closed:
            return
        try:
            if self.enable_auto_commit and self.member is not None:
                self._auto_commit(sorted(self.epochs))
        finally:
            self.closed = True
            self._wake.set()
            self._leave()
            for topic in list(self.fetches):
                self._drop_fetch(topic)
            self.fetcher.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
