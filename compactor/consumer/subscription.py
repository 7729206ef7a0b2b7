"""The subscription side of ``Consumer``: topics (or a pattern that picks up topics created later), the group
membership and its rebalances (told to the rebalance listener), and static assignment."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence

from compactor.consumer.base import ConsumerBase
from compactor.consumer.member import GroupMember, Rebalance
from compactor.consumer.rebalance import RebalanceListener, notify
from compactor.errors import InputError, NotOwnerError
from compactor.groups import Membership, PendingRange, TopicPartition
from compactor.topics.naming import TopicName
from readers.attached import open_log

log = logging.getLogger("compactor.consumer")


class SubscriptionMixin(ConsumerBase):
    """Topics, the group, and the assignment."""

    # --- subscription --------------------------------------------------------------------------------

    @property
    def member_id(self) -> str | None:
        return self.member.member_id if self.member else None

    def _set_topics(self, names: Sequence[str]) -> None:
        parsed = {str(n): n for n in (TopicName.parse(t) for t in names)}
        counts = {t: self.partition_counts.get(t) or open_log(self.lake, n).partitions for t, n in parsed.items()}
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
        self._order = None
        for topic in changed:
            self._drop_fetch(topic)

    def _rebalance(self) -> None:
        """Settle the group if due, with the listener told before partitions go and after they come."""
        if self.member is None:
            return
        change: Rebalance | None = self.member.poll_rebalance()
        if change is None:
            return
        owned = self.member.membership.owned
        lost = [tp for tp in change.lost if tp in self.epochs and owned.get(tp) != self.epochs[tp]]
        if lost:
            notify(self.listener, "lost", lost)
        revoke = [tp for tp in change.revoke if tp not in lost]
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

