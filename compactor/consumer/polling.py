"""The polling side of ``Consumer``: fetching (``consumer.fetch``), serving the partitions in turn, watching for
new records, recovering from an unreadable file, start positions and resets, auto-commit (see
``consumer.consumer`` for the order of a poll)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from compactor.consumer.base import ConsumerBase
from compactor.consumer.fetch import TopicFetch
from compactor.consumer.starts import resolve_start
from compactor.errors import DataFileMissingError, InputError, NotOwnerError
from compactor.groups import TopicPartition
from compactor.iceberg.catalog import first_line, is_storage_failure, storage_error
from compactor.topics.records import Record
from readers.batches import batch_to_records
from readers.reader import TopicReader
from readers.streams import FileReadError, PartitionStream

log = logging.getLogger("compactor.consumer")


class PollingMixin(ConsumerBase):
    """Polls."""

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
                out = self._drain(limit)
                if not out and self._watch():  # read out: re-open what has new records, and serve them
                    out = self._drain(limit)
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
        order = self._order
        if order is None:
            order = self._order = [tp for tp in sorted(self.epochs) if tp not in self.paused_partitions]
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
            stream = self.fetcher.stream(fetch, tp.partition, position, len(self.epochs))
        return stream

    def _drain(self, limit: int) -> list[tuple[str, pa.RecordBatch]]:
        """Serve the partitions in turn, at most ``max_partition_fetch_bytes`` of each per turn, from the one after
        where the last poll began (``consumer.consumer``'s module docstring, point 3)."""
        out: list[tuple[str, pa.RecordBatch]] = []
        active = [(tp, s) for tp in self._turns() if (s := self._stream(tp)) is not None and not s.exhausted]
        cap = self.max_partition_fetch_bytes
        positions = self.positions
        while limit > 0 and active:
            still = []
            for tp, stream in active:
                if limit <= 0:
                    break
                taken = stream.take(limit, cap)
                if taken is None:
                    position = positions.get(tp)
                    if position is not None and position < stream.end:
                        positions[tp] = stream.end  # read to its end: past any trailing gap
                    continue
                positions[tp] = taken.next_offset
                out.append((tp.topic, taken.batch))
                limit -= taken.batch.num_rows
                still.append((tp, stream))
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
        """Re-open the fetches of topics that have new records for us (``consumer.consumer``, point 4)."""
        opened = False
        for topic in sorted({tp.topic for tp in self.epochs if tp not in self.paused_partitions}):
            if not self._read_out(topic):
                continue
            table = self.fetcher.load(self.names[topic])
            fetch = self.fetches.get(topic)
            if fetch is not None and table.metadata_location == fetch.location:
                continue
            offsets = self.fetcher.offsets(self.names[topic], table)
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
