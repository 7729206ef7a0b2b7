"""The rules of a group (docs/guarantees.md#consumers-and-groups), as changes to its document at one reading of the
store's clock.

Each function takes the group's ``GroupState`` and ``now_ms`` (the store's clock, never a member's) and changes
the state in place or raises; the store writes the result back only if nobody changed the group meanwhile
(``groups.store``), so each call is atomic.

* **Leases.** A member is live while ``now < lease_expires_ms``. Every call first removes the members whose
  lease lapsed and frees their partitions (each with a new epoch): a lapsed member lost them.
* **Ownership.** A partition has at most one owner, under an epoch that changes with every change of owner and
  with ``group reset --force``. A commit or a pending range is accepted only from the owner, under the epoch
  its positions were read under, while its lease is live: one judged stale changes nothing.
* **Processes.** A member entry belongs to one process (its ``incarnation``). A process joining under the id of
  a live entry (a ``group.instance.id`` restarted within ``session.timeout.ms``) takes the entry's place and
  keeps its partitions under new epochs; the process it replaced is fenced (``FencedInstanceIdError`` at its
  next call), and never takes them back.
* **Assignment** is sticky (``groups.assignment``): a member claims a partition only when nobody live holds it,
  and releases one only when told to and after its rebalance listener ran (``release``).
* **Expiry** (KIP-211): ``offsets.retention.ms`` after the group last had a live member, or after its last commit
  if it never had one (the later of the two).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from compactor.errors import FencedInstanceIdError, GroupBusyError, NotOwnerError
from compactor.groups.assignment import sticky_targets
from compactor.groups.model import PendingRange, Reset, TopicPartition
from compactor.groups.state import GroupState, Member

JOIN, SETTLE, RENEW = "join", "settle", "renew"


@dataclass(frozen=True)
class MemberSpec:
    """Who is beating: the member id, the process, what it subscribes to (topic -> partition count)."""

    member_id: str
    incarnation: str
    topics: Mapping[str, int]
    client: str
    session_timeout_ms: int
    static: bool = False


@dataclass(frozen=True)
class Beat:
    """What a heartbeat left the member with.

    ``owned``: partition -> owner epoch; ``claimed``: owned under an epoch the member did not hold before (read
    them from the committed position); ``revoke``: owned, but another member should have them (release after
    the listener ran); ``lost``: held before, no longer owned under the same epoch; ``rejoined``: the member's
    lease had lapsed, so it joined again and lost all it held."""

    owned: dict[TopicPartition, int]
    lease_expires_ms: int
    now_ms: int
    claimed: list[TopicPartition] = field(default_factory=list)
    revoke: list[TopicPartition] = field(default_factory=list)
    lost: list[TopicPartition] = field(default_factory=list)
    rejoined: bool = False


def prune(state: GroupState, now_ms: int) -> None:
    """Remove lapsed members and free what they (or owners no longer members) held, each with a new epoch."""
    for member_id, entry in list(state.members.items()):
        if entry.lease_expires_ms <= now_ms:
            del state.members[member_id]
            state.last_member_ms = max(state.last_member_ms or 0, entry.lease_expires_ms)
    for slot in state.slots.values():
        if slot.owner is not None and slot.owner not in state.members:
            slot.owner, slot.epoch = None, slot.epoch + 1


def _fenced(group: str, member_id: str) -> FencedInstanceIdError:
    return FencedInstanceIdError(
        f"not the owner: another process joined group '{group}' as member {member_id} (the same "
        "group.instance.id) and took its place; this one is fenced and must stop")


def _entry(state: GroupState, group: str, member_id: str, incarnation: str) -> Member | None:
    entry = state.members.get(member_id)
    if entry is not None and entry.incarnation != incarnation:
        raise _fenced(group, member_id)
    return entry


def heartbeat(state: GroupState, now_ms: int, group: str, spec: MemberSpec, held: Mapping[TopicPartition, int],
              mode: str) -> Beat:
    """Renew ``spec``'s lease; with ``mode`` ``join`` or ``settle``, also take its share (see the module
    docstring). ``held``: what the member believes it owns (partition -> epoch)."""
    prune(state, now_ms)
    me = spec.member_id
    entry = state.members.get(me)
    rejoined = False
    if entry is not None and entry.incarnation != spec.incarnation:
        if mode != JOIN:
            raise _fenced(group, me)
        for slot in state.slots.values():  # the replaced process can no longer commit what it read
            if slot.owner == me:
                slot.epoch += 1
        entry.incarnation, entry.joined_ms = spec.incarnation, now_ms
    elif entry is None:
        rejoined = mode != JOIN
        entry = Member(spec.incarnation, [], spec.client, now_ms, 0, spec.static)
        state.members[me] = entry
    entry.lease_expires_ms = now_ms + spec.session_timeout_ms
    entry.topics, entry.client, entry.static = sorted(spec.topics), spec.client, spec.static
    lease = entry.lease_expires_ms
    if mode == RENEW:
        owned = {tp: s.epoch for tp, s in state.slots.items() if s.owner == me}
        return Beat(owned, lease, now_ms, lost=sorted(tp for tp, e in held.items() if owned.get(tp) != e),
                    rejoined=rejoined)
    live = state.live(now_ms)
    owned, claimed, revoke = {}, [], []
    for topic, count in sorted(spec.topics.items()):
        subscribers = [m for m, e in live.items() if topic in e.topics]
        slots = {p: state.slot(TopicPartition(topic, p)) for p in range(count)}
        holders = {p: s.owner for p, s in slots.items() if s.owner in subscribers}
        target = sticky_targets(count, subscribers, holders).get(me, set())
        for p, slot in slots.items():
            tp = TopicPartition(topic, p)
            if slot.owner == me:
                owned[tp] = slot.epoch
                if p not in target:
                    revoke.append(tp)
            elif p in target and slot.owner is None:
                slot.owner, slot.epoch = me, slot.epoch + 1
                owned[tp] = slot.epoch
    for tp, slot in state.slots.items():
        if slot.owner == me and tp.topic not in spec.topics:  # no longer subscribed
            owned[tp] = slot.epoch
            revoke.append(tp)
    claimed = sorted(tp for tp, e in owned.items() if held.get(tp) != e)
    lost = sorted(tp for tp, e in held.items() if owned.get(tp) != e)
    return Beat(owned, lease, now_ms, claimed, sorted(revoke), lost, rejoined)


def release(state: GroupState, now_ms: int, group: str, member_id: str, incarnation: str,
            partitions: list[TopicPartition]) -> None:
    """Give up ``partitions`` (after the listener's ``on_partitions_revoked``): each gets a new epoch."""
    prune(state, now_ms)
    if _entry(state, group, member_id, incarnation) is None:
        return  # lapsed: pruning freed them already
    for tp in partitions:
        slot = state.slots.get(tp)
        if slot is not None and slot.owner == member_id:
            slot.owner, slot.epoch = None, slot.epoch + 1


def leave(state: GroupState, now_ms: int, group: str, member_id: str, incarnation: str) -> None:
    """A clean close: free every partition at once and remove the member (not another process's entry)."""
    prune(state, now_ms)
    entry = state.members.get(member_id)
    if entry is None or entry.incarnation != incarnation:
        return
    del state.members[member_id]
    state.last_member_ms = max(state.last_member_ms or 0, now_ms)
    for slot in state.slots.values():
        if slot.owner == member_id:
            slot.owner, slot.epoch = None, slot.epoch + 1


def _check_owner(state: GroupState, group: str, member_id: str | None, incarnation: str,
                 fenced: Mapping[TopicPartition, int], what: str) -> None:
    if member_id is None:  # a static assignment: only where no live member owns the partition
        busy = sorted(tp for tp in fenced if (s := state.slots.get(tp)) is not None and s.owner is not None)
        if busy:
            raise NotOwnerError(f"not the owner: a static assignment cannot {what} {', '.join(map(str, busy))} of "
                                f"group '{group}': a live member owns them; nothing was changed")
        return
    if _entry(state, group, member_id, incarnation) is None:
        raise NotOwnerError(f"not the owner: member {member_id} of group '{group}' has no live lease (it did not "
                            f"heartbeat within session.timeout.ms, or it left); nothing was changed")
    stale = sorted(tp for tp, epoch in fenced.items()
                   if (s := state.slots.get(tp)) is None or s.owner != member_id or s.epoch != epoch)
    if stale:
        raise NotOwnerError(f"not the owner: member {member_id} of group '{group}' does not own "
                            f"{', '.join(map(str, stale))} under the epoch its positions were read under (the "
                            "partition was reassigned, its lease lapsed, or the group was reset with --force); "
                            "nothing was changed")


def commit(state: GroupState, now_ms: int, group: str, member_id: str | None, incarnation: str,
           offsets: Mapping[TopicPartition, tuple[int, int]]) -> None:
    """Commit ``offsets`` (partition -> (position, the epoch it was read under)) all or nothing; a pending
    range no longer starting at the new position is done (or stale) and goes."""
    prune(state, now_ms)
    _check_owner(state, group, member_id, incarnation, {tp: e for tp, (_, e) in offsets.items()}, "commit")
    for tp, (position, _) in offsets.items():
        slot = state.slot(tp)
        slot.committed, slot.committed_ms = position, now_ms
        if slot.pending is not None and slot.pending.start != position:
            slot.pending = None
    state.last_commit_ms = now_ms


def set_pending(state: GroupState, now_ms: int, group: str, member_id: str | None, incarnation: str,
                tp: TopicPartition, pending: PendingRange) -> None:
    """Record the range the owner took of ``tp`` (fenced like a commit, under ``pending.epoch``)."""
    prune(state, now_ms)
    _check_owner(state, group, member_id, incarnation, {tp: pending.epoch}, "take a range of")
    state.slot(tp).pending = replace(pending, created_ms=now_ms)


def reset(state: GroupState, now_ms: int, group: str, targets: Mapping[TopicPartition, int], *, force: bool,
          reason: str) -> dict[TopicPartition, int | None]:
    """``group reset``: move committed positions (refused while members are live unless ``force``, which
    fences their owners: a new epoch). Returns each partition's position before."""
    prune(state, now_ms)
    live = state.live(now_ms)
    if live and not force:
        raise GroupBusyError(f"group '{group}' has live members ({', '.join(sorted(live))}): stop them first, "
                             "or use --force")
    before = {}
    for tp, offset in sorted(targets.items()):
        slot = state.slot(tp)
        before[tp] = slot.committed
        slot.committed, slot.committed_ms = offset, now_ms
        slot.last_reset, slot.reset_count = Reset(now_ms, before[tp], offset, reason), slot.reset_count + 1
        if slot.owner is not None:
            slot.epoch += 1
    state.last_commit_ms = now_ms
    return before


def record_reset(state: GroupState, now_ms: int, tp: TopicPartition, from_offset: int | None, to_offset: int,
                 reason: str) -> None:
    """Remember that a consumer reset ``tp``'s position (counted; ``group describe`` shows the last one)."""
    slot = state.slot(tp)
    slot.last_reset, slot.reset_count = Reset(now_ms, from_offset, to_offset, reason), slot.reset_count + 1


def expirable(state: GroupState, now_ms: int, cutoff_ms: int) -> bool:
    """Whether the group has no live member and last had one (or, never having had one, last committed) before
    ``cutoff_ms`` (now minus ``offsets.retention.ms``)."""
    prune(state, now_ms)
    if state.live(now_ms):
        return False
    marks = [t for t in (state.last_member_ms, state.last_commit_ms) if t is not None]
    return (max(marks) if marks else state.created_ms) < cutoff_ms


def check_deletable(state: GroupState, now_ms: int, group: str) -> None:
    prune(state, now_ms)
    live = state.live(now_ms)
    if live:  # Kafka refuses to delete a group that is not empty, too
        raise GroupBusyError(f"group '{group}' has live members ({', '.join(sorted(live))}): stop them first")
