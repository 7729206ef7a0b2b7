"""What the group store holds and returns: topic partitions, positions with their owners, members."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple

from compactor.results import JsonResult

DEFAULT_OFFSETS_RETENTION_MS = 604_800_000  # Kafka's offsets.retention.ms (7 days)
DEFAULT_SESSION_TIMEOUT_MS = 45_000  # Kafka's session.timeout.ms
DEFAULT_HEARTBEAT_INTERVAL_MS = 3_000  # Kafka's heartbeat.interval.ms


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
        return json.dumps({"at_ms": self.at_ms, "from": self.from_offset, "to": self.to_offset,
                           "reason": self.reason})

    @classmethod
    def from_json(cls, text: str | None) -> Reset | None:
        if not text:
            return None
        data = json.loads(text)
        return cls(int(data["at_ms"]), data["from"], int(data["to"]), str(data["reason"]))

    def as_json(self) -> dict[str, Any]:
        return {"at_ms": self.at_ms, "from": self.from_offset, "to": self.to_offset, "reason": self.reason}


@dataclass(frozen=True)
class PartitionState:
    """One (group, topic, partition) row: committed position, owner under its epoch, last reset."""

    topic: str
    partition: int
    committed_offset: int | None
    committed_ms: int | None
    owner: str | None
    owner_epoch: int
    last_reset: Reset | None
    reset_count: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True)
class MemberState(JsonResult):
    """A member of a group and its lease."""

    member_id: str
    topics: list[str]
    client: str
    joined_ms: int
    lease_expires_ms: int


@dataclass(frozen=True)
class GroupSummary(JsonResult):
    """``group list --json``: a group and the topics it has positions on."""

    group: str
    topics: list[str]
