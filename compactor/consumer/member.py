"""A consumer's membership of its group: the background heartbeat, ``max.poll.interval.ms``, and rebalances.

Kafka separates liveness from progress, and so does this:

* **Liveness.** A background heartbeat (``clock.every``, each ``heartbeat.interval.ms``) renews the lease while
  the caller processes, however long that takes; it changes no ownership. A member whose process stops (or
  whose store is unreachable) stops renewing, and its lease lapses after ``session.timeout.ms`` on the store's
  clock.
* **Progress.** A member that does not poll within ``max.poll.interval.ms`` leaves the group from its background
  heartbeat (its partitions go to others at once), and says so at its next call: ``commit`` raises
  ``NotOwnerError`` naming the setting, ``poll`` logs it and joins again.
* **Rebalances** happen at ``poll`` only, in the caller's thread (``poll_rebalance``): partitions to give up are
  handed to the listener's ``on_partitions_revoked`` (the caller may commit them: it still owns them) and only
  then released; partitions lost without that chance (a lapsed lease, ``group reset --force``) go to
  ``on_partitions_lost``; new ones to ``on_partitions_assigned``.

Its own estimate of its lease is a duration on this host's clock from the moment a heartbeat was sent, never a
comparison of this host's clock with the store's.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from compactor.consumer.clocks import LocalClock, Ticker
from compactor.errors import FencedInstanceIdError, NotOwnerError, TransientError
from compactor.groups import Membership, TopicPartition
from compactor.groups.rules import RENEW, SETTLE, Beat

log = logging.getLogger("compactor.consumer")


@dataclass
class Rebalance:
    """What changed at a poll: ``revoke`` (release after the listener), ``lost``, ``assigned``."""

    revoke: list[TopicPartition] = field(default_factory=list)
    lost: list[TopicPartition] = field(default_factory=list)
    assigned: list[TopicPartition] = field(default_factory=list)


class GroupMember:
    """One consumer's membership (see the module docstring)."""

    def __init__(self, membership: Membership, clock: LocalClock, *, heartbeat_interval_ms: int,
                 max_poll_interval_ms: int) -> None:
        self.membership = membership
        self.clock = clock
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self._lock = threading.Lock()
        self._last_poll_ms = clock.now_ms()
        self._last_beat_ms: int | None = None  # the last heartbeat of any kind (the background's: renewals)
        self._last_settle_ms: int | None = None  # the last one that settled ownership (at a poll)
        self._lease_until_ms = 0
        self._lost: set[TopicPartition] = set()
        self._left: str | None = None  # why the member left the group on its own (max.poll.interval.ms)
        self._fenced: FencedInstanceIdError | None = None
        self._settle = True
        self._ticker: Ticker | None = None
        self.beats = 0  # heartbeats sent (what waiting costs)

    @property
    def member_id(self) -> str:
        return self.membership.member_id

    def start(self) -> None:
        self._ticker = self.clock.every(self.heartbeat_interval_ms, self._background,
                                        f"heartbeat-{self.membership.member_id}")

    def stop(self) -> None:
        """Stop the heartbeat and leave the group (releasing every partition at once)."""
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        if self._fenced is None and self._left is None:
            try:
                self.membership.leave()
            except TransientError as exc:  # its lease lapses anyway: others get its partitions then
                log.warning("event=leave-failed group=%s member=%s error=%r", self.membership.group, self.member_id,
                            str(exc))

    def request_settle(self) -> None:
        """Settle ownership at the next poll (a commit was refused: something changed)."""
        self._settle = True

    def check_usable(self) -> None:
        """Raise what the member learned in the background: fenced by another process, or left the group."""
        if self._fenced is not None:
            raise self._fenced
        if self._left is not None:
            raise NotOwnerError(f"not the owner: member {self.member_id} of group '{self.membership.group}' "
                                f"{self._left}; nothing was committed (its next poll joins the group again)")

    # --- the background heartbeat -------------------------------------------------------------------------

    def _background(self) -> None:
        now = self.clock.now_ms()
        with self._lock:
            if self._fenced is not None or self._left is not None:
                return
            stalled = now - self._last_poll_ms > self.max_poll_interval_ms
            recent = self._last_beat_ms is not None and now - self._last_beat_ms < self.heartbeat_interval_ms
            if stalled:
                self._left = (f"left the group: it did not poll within max.poll.interval.ms "
                              f"({self.max_poll_interval_ms} ms)")
        if stalled:
            log.warning("event=left-group group=%s member=%s reason=max.poll.interval.ms interval_ms=%d",
                        self.membership.group, self.member_id, self.max_poll_interval_ms)
            try:
                self.membership.leave()
            except Exception as exc:  # its lease lapses anyway
                log.warning("event=leave-failed group=%s member=%s error=%r", self.membership.group,
                            self.member_id, str(exc))
            return
        if not recent:
            self._beat(RENEW)

    def _beat(self, mode: str) -> Beat | None:
        started = self.clock.now_ms()
        try:
            beat = self.membership.heartbeat(mode)
        except FencedInstanceIdError as exc:
            self._fenced = exc
            log.error("event=fenced group=%s member=%s", self.membership.group, self.member_id)
            return None
        except TransientError as exc:  # the store is unreachable: keep what we own until our lease ends
            log.warning("event=heartbeat-failed group=%s member=%s error=%r", self.membership.group,
                        self.member_id, str(exc))
            if self.clock.now_ms() >= self._lease_until_ms:
                lost = self.membership.forget()  # others may own them now: read nothing more of them
                with self._lock:
                    self._lost |= set(lost)
            return None
        self.beats += 1
        with self._lock:
            self._last_beat_ms = started
            self._lease_until_ms = started + self.membership.session_timeout_ms
            self._lost |= set(beat.lost)
        return beat

    # --- at each poll --------------------------------------------------------------------------------------

    def poll_rebalance(self) -> Rebalance | None:
        """Called at the start of each poll: note the poll, join again if the member had left, and settle
        ownership when a heartbeat is due (``None`` when nothing was settled)."""
        if self._fenced is not None:
            raise self._fenced
        now = self.clock.now_ms()
        with self._lock:
            self._last_poll_ms = now
            left, self._left = self._left, None
            due = (self._settle or left is not None or bool(self._lost) or self._last_settle_ms is None
                   or now - self._last_settle_ms >= self.heartbeat_interval_ms)
        if left is not None:
            log.warning("event=rejoin group=%s member=%s reason=%r", self.membership.group, self.member_id, left)
            self.membership.joined = False
        if not due:
            return None
        held = set(self.membership.owned)
        beat = self._beat(SETTLE)
        if self._fenced is not None:
            raise self._fenced
        with self._lock:
            lost, self._lost = self._lost, set()
            self._settle = beat is None
            if beat is not None:
                self._last_settle_ms = now
        if beat is None:  # the store is unreachable: lose only what the lease no longer covers
            return Rebalance(lost=sorted(lost & held)) if lost else None
        lost |= set(beat.lost)
        if left is not None:
            lost |= held
        return Rebalance(revoke=list(beat.revoke), lost=sorted(lost), assigned=list(beat.claimed))
