"""What the parts of ``Consumer`` share: its state, and the methods one part calls on another.

``Consumer`` is assembled from parts by concern (``consumer.subscription``: topics, the group and its
rebalances; ``consumer.polling``: fetching and serving records; ``consumer.positions``: positions, seeks and
commits). Each part derives from ``ConsumerBase``, which declares the state they all read (set up by
``Consumer.__init__``) and the methods one part offers the others, so each part type-checks on its own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from compactor.groups import GroupStore, TopicPartition
from compactor.topics.naming import TopicName

if TYPE_CHECKING:
    import threading

    from compactor.consumer.clocks import LocalClock
    from compactor.consumer.fetch import Fetcher, TopicFetch
    from compactor.consumer.member import GroupMember
    from compactor.consumer.rebalance import RebalanceListener
    from compactor.consumer.starts import OffsetReset
    from compactor.lake import Lake


class ConsumerBase:
    """The state of a consumer (see the module docstring)."""

    lake: Lake
    read_compacted: bool
    auto_offset_reset: OffsetReset
    group: str | None
    session_timeout_ms: int
    heartbeat_interval_ms: int
    max_poll_interval_ms: int
    max_poll_records: int
    max_partition_fetch_bytes: int
    group_instance_id: str | None
    enable_auto_commit: bool
    auto_commit_interval_ms: int
    metadata_max_age_ms: int
    backoff_ms: tuple[int, int]
    clock: LocalClock
    store: GroupStore | None
    fetcher: Fetcher
    names: dict[str, TopicName]  # the topics followed
    partition_counts: dict[str, int]
    pattern: re.Pattern[str] | None
    listener: RebalanceListener | None
    member: GroupMember | None
    epochs: dict[TopicPartition, int]  # assigned partitions -> owner epoch (-1: static)
    positions: dict[TopicPartition, int | None]
    ends: dict[TopicPartition, int]
    fetches: dict[str, TopicFetch]
    paused_partitions: set[TopicPartition]
    resets: int
    closed: bool
    unit_turn: int
    _member_id: str | None
    _wake: threading.Event
    _idle_ms: int
    _turn: int
    _order: list[TopicPartition] | None  # the assigned, unpaused partitions in order (None: to compute again)
    _patterns_checked_ms: int | None
    _last_auto_commit_ms: int

    # --- offered by one part to the others ----------------------------------------------------------------

    def commit(self, offsets: Mapping[TopicPartition, int] | Mapping[int, int] | None = None
               ) -> dict[TopicPartition, int]:
        raise NotImplementedError

    def start_positions(self, topic: str, tps: Sequence[TopicPartition], reader: Any = None) -> dict[int, int]:
        raise NotImplementedError

    def _rebalance(self) -> None:
        raise NotImplementedError

    def _refresh_pattern(self) -> None:
        raise NotImplementedError

    def _auto_commit(self, only: Sequence[TopicPartition] | None = None) -> None:
        raise NotImplementedError

    def _drop_fetch(self, topic: str) -> None:
        raise NotImplementedError

    def _tp(self, partition: TopicPartition | int, topic: str | None = None) -> TopicPartition:
        raise NotImplementedError

    def _check_open(self) -> None:
        if self.closed:
            from compactor.errors import InputError

            raise InputError("this consumer is closed")
