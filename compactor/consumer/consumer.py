"""``Consumer``: follow topics for a group (or a static assignment), from committed positions (Kafka's consumer,
with Pulsar's readCompacted).

Positions are raw offsets per partition (docs/guarantees.md#consumers-and-groups). A poll:

1. auto-commits the positions of what earlier polls returned, when ``enable_auto_commit`` and its interval is up;
2. settles the group when a heartbeat is due (``consumer.member``: revocations go through the rebalance listener
   before the partitions are released), and picks up topics created since, for a pattern subscription;
3. serves the assigned, unpaused partitions with records in turn, at most ``max_partition_fetch_bytes`` of each
   per turn (Kafka's ``max.partition.fetch.bytes``) until ``max_records``, starting one partition further at each
   poll: every partition with records is served within as many polls as the consumer has partitions, whatever
   the others hold, and a large poll takes from each of them;
4. with nothing to return, watches the topics whose fetches are read out and re-opens one only when an owned
   partition grew (``consumer.fetch``); then waits with back-off (``poll_backoff_ms``) until ``timeout_ms``.

A data file that cannot be read is retried once on a freshly loaded table, then ends the poll with
``DataFileMissingError`` naming the file and the partition.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Sequence

from compactor.consumer.clocks import LocalClock, as_clock
from compactor.consumer.fetch import Fetcher, TopicFetch
from compactor.consumer.member import GroupMember
from compactor.consumer.polling import PollingMixin
from compactor.consumer.positions import PositionsMixin
from compactor.consumer.rebalance import RebalanceListener
from compactor.consumer.starts import OffsetReset, check_policy
from compactor.consumer.subscription import SubscriptionMixin
from compactor.errors import InputError
from compactor.groups import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_MAX_POLL_INTERVAL_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
    GroupStore,
    TopicPartition,
    check_group_name,
)
from compactor.lake import Lake
from compactor.topics.naming import TopicName

log = logging.getLogger("compactor.consumer")

DEFAULT_MAX_RECORDS = 500  # Kafka's max.poll.records
DEFAULT_MAX_PARTITION_FETCH_BYTES = 1_048_576  # Kafka's max.partition.fetch.bytes
DEFAULT_AUTO_COMMIT_INTERVAL_MS = 5_000  # Kafka's auto.commit.interval.ms
DEFAULT_METADATA_MAX_AGE_MS = 300_000  # Kafka's metadata.max.age.ms: how often a pattern looks for new topics
DEFAULT_BACKOFF_MS = (20, 250)  # first and longest sleep of an idle poll


class Consumer(SubscriptionMixin, PollingMixin, PositionsMixin):
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
        self._wake = threading.Event()
        self._idle_ms = poll_backoff_ms[0]
        self._turn = 0
        self._order: list[TopicPartition] | None = None
        self.unit_turn = 0
        self._patterns_checked_ms: int | None = None
        self._last_auto_commit_ms = self.clock.now_ms()
        names = [topics] if isinstance(topics, str) else list(topics)
        if subscribe and (names or pattern is not None):
            self.subscribe(names, pattern=pattern, listener=listener)
        elif not subscribe:
            self._set_topics(names)
            self.listener = listener

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

