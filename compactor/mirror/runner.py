"""``Mirror``: copy Kafka topics into lake topics, record for record, exactly once (SEMANTICS section 8).

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
from compactor.errors import KafkaSourceError, KafkaTopicNotFoundError, SourceGapError, UsageError
from compactor.lake import Lake
from compactor.mirror.gaps import find_gap
from compactor.mirror.names import DEFAULT_NAMESPACE, Selection, parse_renames
from compactor.mirror.result import MirrorSummary, PartitionProgress
from compactor.mirror.settings import ClientSettings, resolve_settings
from compactor.mirror.source import KAFKA_LOG, Source, TopicInfo, describe_error
from compactor.mirror.target import Target, open_lake_topic
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
                 timeout_s: float = 30.0, listener: Listener | None = None, env: Mapping[str, str] | None = None,
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
        self.timeout_s = timeout_s
        self.clock = clock
        self.progress = Progress("mirror", ",".join(topics) or f"/{pattern}/", listener=listener)
        self.targets: dict[str, Target] = {}
        self.summary = MirrorSummary(stopped="signal")
        self._stop = threading.Event()
        self._errors: list[Any] = []
        self._ends: dict[tuple[str, int], int] = {}  # once: the source's end per partition as of the start
        self._last_progress = 0.0
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
        try:
            self._discover(self.source.topic_names())
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
                    self._discover(self.source.topic_names())
                    last_refresh = now
            self.summary.stopped = "once" if self.once and not self._stop.is_set() else "signal"
            self._commit(final=True)
        except SourceGapError:
            self._commit(final=True)  # the other partitions' progress is kept; the gap's partition did not move
            raise
        finally:
            self._close()
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
            info = self.source.describe([target.source]).get(target.source)
            if info is None:
                log.warning("event=source-missing topic=%s: the Kafka topic no longer exists; the mirror waits for "
                            "it", target.source)
                return
            partition = int(message.partition() or 0)
            self._check_partitions(target, [partition], assign=[partition], topic_id=info.topic_id)
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
            refused = describe_error(error, self.servers)
            if error.fatal() or "refused the credentials" in str(refused) or (
                    self.once and error.name() == "_ALL_BROKERS_DOWN"):
                raise refused
            log.warning("event=kafka-error error=%r", error.str())

    def _done(self) -> bool:
        return all(int(t.positions[p]) >= end or p in t.waiting
                   for t in self.targets.values() for p in range(t.partitions)
                   if (end := self._ends.get((t.source, p))) is not None)

    def _pending(self) -> int:
        return sum(len(t.pending) for t in self.targets.values())

    def _full(self) -> bool:
        return (self._pending() >= self.batch_records
                or sum(t.pending.bytes for t in self.targets.values()) >= MAX_PENDING_BYTES)

    # --- discovery and source gaps ------------------------------------------------------------------------

    def _discover(self, available: Sequence[str]) -> None:
        """Open the topics to mirror (new ones under a pattern), follow added partitions and recreated topics."""
        wanted = self.selection.chosen(available)
        missing = [t for t in self.selection.topics if t not in available]
        if missing and not self.targets:
            raise KafkaTopicNotFoundError(f"Kafka at {self.servers} has no topic {', '.join(map(repr, missing))}")
        infos = self.source.describe(wanted)
        for name in wanted:
            if name not in infos:
                continue
            info = infos[name]
            target = self.targets.get(name)
            if target is None:
                self._open(info)
                continue
            before = target.partitions
            if info.partitions > before:
                target.grow(info.partitions)
                log.info("event=partitions-added topic=%s partitions=%d", name, info.partitions)
            # every partition against the source: new ones start, gaps are found before a fetch fails on them,
            # waiting ones may go on, and the lag to the source's end is fresh
            self._check_partitions(target, range(target.partitions), topic_id=info.topic_id,
                                   assign=range(before, target.partitions))
        for name, target in self.targets.items():
            if name not in infos:
                log.warning("event=source-missing topic=%s: the Kafka topic no longer exists; the mirror waits for "
                            "it (a topic created again under the name is a source gap)", target.source)

    def _open(self, info: TopicInfo) -> None:
        name = self.selection.lake_name(info.name)
        taken = [t.source for t in self.targets.values() if t.name == name]
        if taken:
            raise UsageError(f"Kafka topics '{taken[0]}' and '{info.name}' would both be mirrored into {name}: "
                             "--rename one of them")
        settings = {**self.source.settings_of(info.name), **self.topic_config}
        target = Target(info, open_lake_topic(self.lake, name, info, settings))
        self.targets[info.name] = target
        log.info("event=mirroring source=%s topic=%s partitions=%d", info.name, name, info.partitions)
        self._check_partitions(target, range(target.partitions), topic_id=info.topic_id,
                               assign=range(target.partitions))

    def _check_partitions(self, target: Target, partitions: Sequence[int] | range, *, topic_id: str | None,
                          assign: Sequence[int] | range = ()) -> None:
        """Judge each partition's position against the source (``mirror.gaps``): start the ones the lake never
        held, skip or refuse gaps, hold back the ones whose (recreated) source has not reached their position,
        and have the consumer read from its position every partition in ``assign``, skipped past a gap, or no
        longer held back."""
        from confluent_kafka import TopicPartition

        offsets = self.source.offsets([(target.source, p) for p in partitions])
        recorded_id = target.topic_id
        id_change = (recorded_id, topic_id) if topic_id and recorded_id and topic_id != recorded_id else None
        if topic_id:
            target.topic_id = topic_id
        moved, held = set(assign), set()
        for p in partitions:
            start, end = offsets[(target.source, p)]
            if int(target.positions[p]) == 0:  # a partition the lake never held starts where the source does
                target.positions[p] = start if self.settings.start == "earliest" else end
            target.source_end[p] = end if id_change is not None else max(int(target.source_end[p]), end)
            gap = find_gap(target.source, p, int(target.positions[p]), start, end,
                           waiting=target.was_waiting(p), id_change=id_change)
            if gap is not None:
                if not self.skip_gaps:
                    raise SourceGapError(gap.message())
                log.warning("event=source-gap-skipped topic=%s partition=%d position=%d resume=%d skipped=%d "
                            "reason=%r", target.source, p, gap.position, gap.resume, gap.skipped, gap.reason)
                target.skip(gap)
                self.summary.offsets_skipped += gap.skipped
                moved.add(p)
            if int(target.positions[p]) > end:
                if p not in target.waiting:
                    log.info("event=waiting topic=%s partition=%d position=%d source_end=%d", target.source, p,
                             int(target.positions[p]), end)
                target.waiting.add(p)
                held.add(p)
            elif p in target.waiting:
                target.waiting.discard(p)
                moved.add(p)
        assigned = {tp.partition for tp in self.consumer.assignment() if tp.topic == target.source}
        stale = sorted(p for p in (moved | held) & assigned)
        if stale:
            self.consumer.incremental_unassign([TopicPartition(target.source, p) for p in stale])
        fresh = sorted(moved - held)
        if fresh:
            self.consumer.incremental_assign([TopicPartition(target.source, p, int(target.positions[p]))
                                              for p in fresh])

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
        if final or self.clock() - self._last_progress >= PROGRESS_EVERY_S:
            self._last_progress = self.clock()
            self.progress.phase("committed" if not final else "stopping", records=self.summary.records_copied,
                                commits=self.summary.commits, skipped=self.summary.offsets_skipped,
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


__all__ = [
    "DEFAULT_BATCH_RECORDS",
    "DEFAULT_COMMIT_INTERVAL_MS",
    "GAP_POLICIES",
    "KafkaSourceError",
    "Mirror",
    "mirror_topics",
]
