"""``Membership``: one process's membership of one group, as the group store sees it.

It names the member (a ``group.instance.id``, or a fresh id that says where the member runs) and the process
(``incarnation``: a new one per ``Membership``, so a restarted static member replaces the old process instead
of being mistaken for it), remembers what the member owns under which epochs, and sends the calls of
``groups.rules`` to the store. Heartbeats, listeners and ``max.poll.interval.ms`` are the consumer's
(``consumer.member``). Thread-safe: the consumer's background heartbeat and its caller share it.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Iterable, Mapping

from compactor.groups import rules
from compactor.groups.model import PendingRange, TopicPartition
from compactor.groups.store import GroupStore


def new_member_id() -> str:
    """A member id that says where the member runs (like Kafka's ``client.id-uuid``)."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class Membership:
    """One member of one group in the group store (see the module docstring)."""

    def __init__(self, store: GroupStore, group: str, subscriptions: Mapping[str, int], *,
                 session_timeout_ms: int, member_id: str | None = None, instance_id: str | None = None) -> None:
        self.store = store
        self.group = group
        self.subscriptions = dict(subscriptions)  # topic -> partition count
        self.session_timeout_ms = session_timeout_ms
        self.static = instance_id is not None
        self.member_id = instance_id or member_id or new_member_id()
        self.incarnation = uuid.uuid4().hex
        self.client = f"{socket.gethostname()}:{os.getpid()}"
        self.owned: dict[TopicPartition, int] = {}
        self.joined = False
        self.lock = threading.Lock()

    def _spec(self) -> rules.MemberSpec:
        return rules.MemberSpec(self.member_id, self.incarnation, dict(self.subscriptions), self.client,
                                self.session_timeout_ms, self.static)

    def heartbeat(self, mode: str = rules.SETTLE) -> rules.Beat:
        """Renew the lease; ``settle`` (or the first call, a join) also takes the member's share. The beat's
        ``owned`` becomes what the member owns (``revoke`` stays owned until ``release``)."""
        with self.lock:
            held = dict(self.owned)
        beat = self.store.heartbeat(self.group, self._spec(), held, rules.JOIN if not self.joined else mode)
        with self.lock:
            self.joined = True
            if mode == rules.RENEW:  # a background renewal changes no ownership; it only learns of losses
                gone = {tp: held[tp] for tp in beat.lost}  # (not a partition a settle claimed meanwhile)
                self.owned = {tp: e for tp, e in self.owned.items() if gone.get(tp) != e}
            else:
                self.owned = dict(beat.owned)
        return beat

    def release(self, partitions: Iterable[TopicPartition]) -> None:
        """Give up ``partitions`` (after the rebalance listener ran)."""
        chosen = list(partitions)
        self.store.release(self.group, self.member_id, self.incarnation, chosen)
        with self.lock:
            for tp in chosen:
                self.owned.pop(tp, None)

    def forget(self) -> list[TopicPartition]:
        """Stop believing it owns anything (its lease ran out while the store was unreachable): what it held."""
        with self.lock:
            held, self.owned = list(self.owned), {}
        return held

    def leave(self) -> None:
        """Release every partition at once and remove the member (a clean close)."""
        self.store.leave(self.group, self.member_id, self.incarnation)
        with self.lock:
            self.owned = {}
            self.joined = False

    def commit(self, offsets: Mapping[TopicPartition, int], epochs: Mapping[TopicPartition, int]) -> None:
        """Commit positions under the epochs they were read under (``NotOwnerError`` if any is stale)."""
        self.store.commit(self.group, self.member_id, self.incarnation,
                          {tp: (offset, epochs.get(tp, -1)) for tp, offset in offsets.items()})

    def set_pending(self, tp: TopicPartition, pending: PendingRange) -> None:
        self.store.set_pending(self.group, self.member_id, self.incarnation, tp, pending)
