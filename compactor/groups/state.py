"""One group's whole state as one document: members and their leases, and per partition the committed
position, the owner under its epoch, the last reset and the pending range.

Every change to a group is a read-modify-write of this document under the store's compare-and-set (a
conditional ``UPDATE`` of a versioned row, or an object write with ``If-Match``), so the rules of
``groups.rules`` are written once, as functions of a document and the store's clock, and hold on every store.
The document's size grows with the group's partitions and members, never with its commits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from compactor.groups.model import MemberState, PartitionState, PendingRange, Reset, TopicPartition

FORMAT = 1


@dataclass
class Member:
    """A member's entry: the process it is (``incarnation``), what it subscribes to, and its lease."""

    incarnation: str
    topics: list[str]
    client: str
    joined_ms: int
    lease_expires_ms: int
    static: bool = False

    def as_json(self) -> dict[str, Any]:
        return {"incarnation": self.incarnation, "topics": self.topics, "client": self.client,
                "joined_ms": self.joined_ms, "lease_expires_ms": self.lease_expires_ms, "static": self.static}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Member:
        return cls(str(data["incarnation"]), [str(t) for t in data["topics"]], str(data["client"]),
                   int(data["joined_ms"]), int(data["lease_expires_ms"]), bool(data.get("static", False)))


@dataclass
class Slot:
    """One partition of the group: position, ownership (``epoch`` bumps at every change of owner and at a
    forced reset: the fence of commits and pending ranges), last reset, pending range."""

    committed: int | None = None
    committed_ms: int | None = None
    owner: str | None = None
    epoch: int = 0
    last_reset: Reset | None = None
    reset_count: int = 0
    pending: PendingRange | None = None

    def as_json(self) -> dict[str, Any]:
        return {"committed": self.committed, "committed_ms": self.committed_ms, "owner": self.owner,
                "epoch": self.epoch, "last_reset": self.last_reset.as_json() if self.last_reset else None,
                "reset_count": self.reset_count, "pending": self.pending.as_json() if self.pending else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Slot:
        return cls(data.get("committed"), data.get("committed_ms"), data.get("owner"), int(data.get("epoch", 0)),
                   Reset.from_dict(data.get("last_reset")), int(data.get("reset_count", 0)),
                   PendingRange.from_dict(data.get("pending")))


@dataclass
class GroupState:
    """A group. ``last_member_ms``: when it last had a live member (a clean leave, or the end of a lease that
    lapsed), from which ``offsets.retention.ms`` counts (KIP-211); ``last_commit_ms`` for a group that never had
    members."""

    created_ms: int
    last_commit_ms: int | None = None
    last_member_ms: int | None = None
    members: dict[str, Member] = field(default_factory=dict)
    slots: dict[TopicPartition, Slot] = field(default_factory=dict)

    # --- documents ------------------------------------------------------------------------------------

    def to_json(self) -> str:
        return json.dumps({
            "format": FORMAT, "created_ms": self.created_ms, "last_commit_ms": self.last_commit_ms,
            "last_member_ms": self.last_member_ms,
            "members": {m: e.as_json() for m, e in sorted(self.members.items())},
            "partitions": [{"topic": tp.topic, "partition": tp.partition, **s.as_json()}
                           for tp, s in sorted(self.slots.items())],
        }, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> GroupState:
        data = json.loads(text)
        if data.get("format", FORMAT) > FORMAT:
            from compactor.errors import InputError

            raise InputError("the group store holds groups written by a newer version of the compactor")
        return cls(int(data["created_ms"]), data.get("last_commit_ms"), data.get("last_member_ms"),
                   {m: Member.from_dict(e) for m, e in data.get("members", {}).items()},
                   {TopicPartition(str(p["topic"]), int(p["partition"])): Slot.from_dict(p)
                    for p in data.get("partitions", [])})

    def copy(self) -> GroupState:
        return GroupState.from_json(self.to_json())

    # --- reading ----------------------------------------------------------------------------------------

    def live(self, now_ms: int) -> dict[str, Member]:
        """The members whose lease is live at ``now_ms`` (on the store's clock)."""
        return {m: e for m, e in self.members.items() if e.lease_expires_ms > now_ms}

    def slot(self, tp: TopicPartition) -> Slot:
        """The slot of ``tp``, created empty if the group has none yet."""
        return self.slots.setdefault(tp, Slot())

    def partition_states(self, topic: str | None = None) -> list[PartitionState]:
        return [PartitionState(tp.topic, tp.partition, s.committed, s.committed_ms, s.owner, s.epoch, s.last_reset,
                               s.reset_count, s.pending)
                for tp, s in sorted(self.slots.items()) if topic is None or tp.topic == topic]

    def member_states(self, now_ms: int) -> list[MemberState]:
        return [MemberState(m, list(e.topics), e.client, e.joined_ms, e.lease_expires_ms, e.static)
                for m, e in sorted(self.live(now_ms).items())]

    def committed_topics(self) -> list[str]:
        return sorted({tp.topic for tp, s in self.slots.items() if s.committed is not None})

    def with_slot(self, tp: TopicPartition, **changes: Any) -> None:
        self.slots[tp] = replace(self.slot(tp), **changes)
