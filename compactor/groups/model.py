"""What the group store holds and returns: topic partitions, positions with their owners, members."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple

from compactor.results import JsonResult

DEFAULT_OFFSETS_RETENTION_MS = 604_800_000  # Kafka's offsets.retention.ms (7 days)
DEFAULT_SESSION_TIMEOUT_MS = 45_000  # Kafka's session.timeout.ms
DEFAULT_HEARTBEAT_INTERVAL_MS = 3_000  # Kafka's heartbeat.interval.ms
DEFAULT_MAX_POLL_INTERVAL_MS = 300_000  # Kafka's max.poll.interval.ms


class TopicPartition(NamedTuple):
    """One partition of one topic (Kafka's ``TopicPartition``); ``topic`` is ``namespace.topic``."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}:{self.partition}"


@dataclass(frozen=True)
class Reset:
    """A position moved because it was out of range (or by ``group reset``): never silent."""

    at_ms: int
    from_offset: int | None
    to_offset: int
    reason: str

    def to_json(self) -> str:
        return json.dumps(self.as_json())

    @classmethod
    def from_json(cls, text: str | None) -> Reset | None:
        if not text:
            return None
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Reset | None:
        if not data:
            return None
        return cls(int(data["at_ms"]), data["from"], int(data["to"]), str(data["reason"]))

    def as_json(self) -> dict[str, Any]:
        return {"at_ms": self.at_ms, "from": self.from_offset, "to": self.to_offset, "reason": self.reason}


@dataclass(frozen=True)
class PendingRange:
    """The input range ``[start, end)`` of one partition that a consume-transform-produce step took and has not
    committed yet (docs/guarantees.md#consumers-and-groups, "exactly once"), with the snapshots it was read from, so
    a replay reads the very same records while those snapshots are retained."""

    start: int
    end: int
    epoch: int  # the owner epoch it was taken under
    created_ms: int
    read_compacted: bool = False
    raw_snapshot_id: int | None = None
    cursor_id: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "epoch": self.epoch, "created_ms": self.created_ms,
                "read_compacted": self.read_compacted, "raw_snapshot_id": self.raw_snapshot_id,
                "cursor_id": self.cursor_id}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> PendingRange | None:
        if not data:
            return None
        return cls(int(data["start"]), int(data["end"]), int(data["epoch"]), int(data["created_ms"]),
                   bool(data.get("read_compacted", False)), data.get("raw_snapshot_id"), data.get("cursor_id"))


@dataclass(frozen=True)
class PartitionState:
    """One (group, topic, partition): committed position, owner under its epoch, last reset, pending range."""

    topic: str
    partition: int
    committed_offset: int | None
    committed_ms: int | None
    owner: str | None
    owner_epoch: int
    last_reset: Reset | None
    reset_count: int
    pending: PendingRange | None = None

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True)
class MemberState(JsonResult):
    """A live member of a group and its lease (times on the group store's clock)."""

    member_id: str
    topics: list[str]
    client: str
    joined_ms: int
    lease_expires_ms: int
    static: bool = False  # joined with a group.instance.id


@dataclass(frozen=True)
class GroupSummary(JsonResult):
    """``group list --json``: a group and the topics it has positions on."""

    group: str
    topics: list[str]
