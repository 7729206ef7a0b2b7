"""``Mirror``: copy Kafka topics into lake topics, record for record, exactly once (docs/guarantees.md#mirrors).

The loop, like a sink connector's:

1. **discover** the source topics (named, or matching the pattern), open or create each lake topic
   (``mirror.target``) and check every partition's position against the source (``mirror.gaps``): a gap is an
   error, or skipped and counted under ``on_source_gap="skip"``; a partition the lake never held starts at the
   source's start (or end, with ``auto.offset.reset=latest``);
2. **consume** with librdkafka from the lake's positions (``read_committed`` by default: aborted records never
   arrive, and markers leave gaps), keeping the records of each topic until its next commit; the end of a
   partition moves its position past trailing markers;
3. **commit** every ``commit_interval_ms`` or ``batch_records`` records, whichever comes first: per lake topic,
   the records and positions in one Iceberg commit; then Kafka's committed offsets, only for Kafka's tools;
4. every ``metadata_refresh_ms``, pick up topics created since (a pattern), partitions added at the source,
   and topics deleted and created again;
5. stop after a last commit when asked (``request_stop``: SIGTERM or SIGINT under the command line), or with
   ``once`` when every partition reached the source's end as of the start.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from compactor.clock import wall_clock_ms
from compactor.errors import KafkaAccessDeniedError, KafkaSourceError, SourceGapError, UsageError
from compactor.lake import Lake
from compactor.mirror.follow import Follower
from compactor.mirror.names import DEFAULT_NAMESPACE, Selection, parse_renames
from compactor.mirror.result import MirrorSummary, PartitionProgress
from compactor.mirror.settings import ClientSettings, resolve_settings
from compactor.mirror.source import KAFKA_LOG, Source, describe_error
from compactor.mirror.target import Target
from compactor.progress import Listener, Progress

log = logging.getLogger("compactor.mirror")

GAP_POLICIES = ("error", "skip")
DEFAULT_COMMIT_INTERVAL_MS = 5_000
DEFAULT_BATCH_RECORDS = 100_000
DEFAULT_METADATA_REFRESH_MS = 30_000
MAX_PENDING_BYTES = 64 << 20  # a commit also comes once the records kept reach this many key and value bytes
CONSUME_BATCH = 10_000
POLL_TIMEOUT_S = 0.1
PROGRESS_EVERY_S = 5.0


class Mirror:
    """Copies Kafka topics into the lake (see the module docstring); ``run`` returns its summary."""

    def __init__(self, lake: Lake, bootstrap_servers: str, topics: Sequence[str] = (), pattern: str | None = None, *,
                 namespace: str = DEFAULT_NAMESPACE, renames: Mapping[str, str] | Sequence[str] | None = None,
                 kafka_config: Mapping[str, str] | list[str] | None = None,
                 topic_config: Mapping[str, str] | None = None, on_source_gap: str = "error",
                 commit_interval_ms: int = DEFAULT_COMMIT_INTERVAL_MS, batch_records: int = DEFAULT_BATCH_RECORDS,
                 once: bool = False, metadata_refresh_ms: int = DEFAULT_METADATA_REFRESH_MS,
                 timeout_s: float | None = None, listener: Listener | None = None, env: Mapping[str, str] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not bootstrap_servers or not bootstrap_servers.strip():
            raise UsageError("--bootstrap-servers is empty")
        if on_source_gap not in GAP_POLICIES:
            raise UsageError(f"--on-source-gap must be one of {', '.join(GAP_POLICIES)}, got {on_source_gap!r}")
        for flag, value in (("--commit-interval-ms", commit_interval_ms), ("--batch-records", batch_records),
                            ("metadata_refresh_ms", metadata_refresh_ms)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UsageError(f"{flag} must be a positive integer, got {value!r}")
        self.lake = lake
        self.servers = bootstrap_servers.strip()
        self.selection = Selection(tuple(topics), pattern, namespace, parse_renames(renames or {}))
        self.settings: ClientSettings = resolve_settings(kafka_config, env)
        self.topic_config = dict(topic_config or {})
        self.skip_gaps = on_source_gap == "skip"
        self.commit_interval_s = commit_interval_ms / 1000
        self.batch_records = batch_records
        self.once = once
        self.refresh_s = metadata_refresh_ms / 1000
        self.timeout_s = timeout_s if timeout_s is not None else self.settings.timeout_s
        self.clock = clock
        self.progress = Progress("mirror", ",".join(topics) or f"/{pattern}/", listener=listener)
        self.targets: dict[str, Target] = {}
        self.summary = MirrorSummary(stopped="signal")
        self._stop = threading.Event()
        self._errors: list[Any] = []
        self._ends: dict[tuple[str, int], int] = {}  # once: the source's end per partition as of the start
        self._last_progress = 0.0
        self._reported = 0  # commits when progress was last reported
        self._reached: set[tuple[str, int]] = set()

    def request_stop(self) -> None:
        """Ask the loop to stop after a last commit (thread- and signal-safe)."""
        self._stop.set()

    # --- the loop ----------------------------------------------------------------------------------------

    def run(self) -> MirrorSummary:
        from confluent_kafka import Consumer

        started = self.clock()
        self.source = Source(self.servers, self.settings, timeout_s=self.timeout_s)
        group = self.settings.values.get("group.id", f"compactor-mirror-{self.selection.namespace}")
        self.consumer = Consumer({**self.settings.consumer(group), "bootstrap.servers": self.servers,
                                  "error_cb": self._errors.append}, logger=KAFKA_LOG)
        self.follower = Follower(self.lake, self.source, self.consumer, self.selection, self.settings,
                                 self.topic_config, skip_gaps=self.skip_gaps)
        self.targets = self.follower.targets
        try:
            self.follower.discover(self.source.topic_names())
            if self.once:
                self._ends = {(t.source, p): int(t.source_end[p]) for t in self.targets.values()
                              for p in range(t.partitions)}
            last_commit = last_refresh = self.clock()
            while not self._stop.is_set() and not (self.once and self._done()):
                self._consume()
                now = self.clock()
                if self._full() or (now - last_commit >= self.commit_interval_s):
                    self._commit()
                    last_commit = now
                if now - last_refresh >= self.refresh_s:
                    self._refresh()
                    last_refresh = now
            self.summary.stopped = "once" if self.once and not self._stop.is_set() else "signal"
            self._commit(final=True)
        except SourceGapError:
            self._commit(final=True)  # the other partitions' progress is kept; the gap's partition did not move
            raise
        finally:
            self._close()
        self.summary.offsets_skipped = self.follower.skipped
        self.summary.duration_ms = int((self.clock() - started) * 1000)
        self.summary.partitions = [self._progress_of(t, p) for t in self.targets.values() for p in range(t.partitions)]
        return self.summary

    def _consume(self) -> None:
        room = max(1, min(CONSUME_BATCH, self.batch_records - self._pending()))
        messages = self.consumer.consume(num_messages=room, timeout=POLL_TIMEOUT_S)
        self._check_errors()
        if not messages:
            return
        data = [m for m in messages if m.error() is None]
        if len(data) < len(messages):
            for message in messages:
                if message.error() is not None:
                    self._on_event(message)
        if not data:
            return
        if len(self.targets) == 1:
            next(iter(self.targets.values())).add(data)
            return
        by_topic: dict[str, list[Any]] = {}
        for message in data:
            by_topic.setdefault(str(message.topic()), []).append(message)
        for topic, group in by_topic.items():
            self.targets[topic].add(group)

    def _on_event(self, message: Any) -> None:
        """A per-partition event from the consumer: the end of a partition, an offset out of range, an error."""
        from confluent_kafka import KafkaError

        error = message.error()
        target = self.targets.get(message.topic())
        if error.code() == KafkaError._PARTITION_EOF and target is not None:
            partition = int(message.partition() or 0)
            target.reached(partition, message.offset())
            if (target.source, partition) not in self._reached:  # once per partition and run, for people
                self._reached.add((target.source, partition))
                log.info("event=reached-end topic=%s partition=%d position=%d", target.source, partition,
                         message.offset())
        elif error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE) and target is not None:
            log.info("event=out-of-range topic=%s partition=%d offset=%d", target.source, message.partition(),
                     message.offset())
            self.follower.out_of_range(target, int(message.partition() or 0))
        elif error.fatal():
            raise describe_error(error, self.servers)
        else:
            log.warning("event=kafka-error topic=%s partition=%s error=%r", message.topic(), message.partition(),
                        error.str())

    def _check_errors(self) -> None:
        """Errors librdkafka reported for the client as a whole: refused credentials and fatal errors stop the
        mirror; others (a broker restarting) are logged while librdkafka retries, except under ``once``, which
        must not wait for ever on a source that is down."""
        while self._errors:
            error = self._errors.pop(0)
            described = describe_error(error, self.servers)
            if error.fatal() or isinstance(described, KafkaAccessDeniedError) or (
                    self.once and error.name() == "_ALL_BROKERS_DOWN"):
                raise described
            log.warning("event=kafka-error error=%r", error.str())

    def _refresh(self) -> None:
        """Follow the source (``Follower.discover``). A source that cannot be reached is waited for, as librdkafka waits
        for its brokers: the positions are in the lake, and nothing is lost meanwhile; refused credentials, a
        gap, and under ``once`` anything else stop the mirror."""
        try:
            self.follower.discover(self.source.topic_names())
        except (KafkaAccessDeniedError, SourceGapError):
            raise
        except KafkaSourceError as exc:
            if self.once:
                raise
            log.warning("event=source-unavailable error=%r: trying again in %.0f s", str(exc), self.refresh_s)

    def _done(self) -> bool:
        return all(int(t.positions[p]) >= end or p in t.waiting
                   for t in self.targets.values() for p in range(t.partitions)
                   if (end := self._ends.get((t.source, p))) is not None)

    def _pending(self) -> int:
        return sum(len(t.pending) for t in self.targets.values())

    def _full(self) -> bool:
        return (self._pending() >= self.batch_records
                or sum(t.pending.bytes for t in self.targets.values()) >= MAX_PENDING_BYTES)

    # --- commits ---------------------------------------------------------------------------------------------

    def _commit(self, final: bool = False) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        now_ms = wall_clock_ms()
        for target in self.targets.values():
            if not target.dirty:
                continue
            size = target.pending.bytes
            records = target.commit(now_ms)
            self.summary.commits += 1
            self.summary.records_copied += records
            self.summary.bytes_copied += size
            offsets = [TopicPartition(target.source, p, int(target.committed[p])) for p in range(target.partitions)
                       if target.committed[p] > 0]
            try:  # for Kafka's tools only: the mirror never reads them back
                if final:
                    self.consumer.commit(offsets=offsets, asynchronous=False)
                else:
                    self.consumer.commit(offsets=offsets, asynchronous=True)
            except KafkaException as exc:
                log.debug("could not commit offsets to Kafka (only its tools read them): %s", exc)
        if final or (self.summary.commits > self._reported and self.clock() - self._last_progress >= PROGRESS_EVERY_S):
            self._reported = self.summary.commits
            self._last_progress = self.clock()
            self.progress.phase("committed" if not final else "stopping", records=self.summary.records_copied,
                                commits=self.summary.commits, skipped=self.follower.skipped,
                                lag={t.source: int((t.source_end - t.positions).clip(min=0).sum())
                                     for t in self.targets.values()})

    def _close(self) -> None:
        consumer = getattr(self, "consumer", None)
        if consumer is not None:
            try:
                consumer.close()
            except Exception:  # closing is best effort; the lake holds the positions
                log.debug("closing the Kafka consumer failed", exc_info=True)

    def _progress_of(self, target: Target, partition: int) -> PartitionProgress:
        position, end = int(target.committed[partition]), int(target.source_end[partition])
        return PartitionProgress(str(target.name), target.source, partition, position, int(target.copied[partition]),
                                 int(target.skipped[partition]), end, max(end - position, 0),
                                 partition in target.waiting)


def mirror_topics(lake: Lake, bootstrap_servers: str, topics: Sequence[str] = (), pattern: str | None = None,
                  **kwargs: Any) -> MirrorSummary:
    """Run one ``Mirror`` (see its keyword arguments) until it stops; its summary."""
    return Mirror(lake, bootstrap_servers, topics, pattern, **kwargs).run()


__all__ = ["DEFAULT_BATCH_RECORDS", "DEFAULT_COMMIT_INTERVAL_MS", "GAP_POLICIES", "Mirror", "mirror_topics"]
