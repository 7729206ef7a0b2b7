"""``GroupStore``: a lake's consumer groups, their committed positions, members and leases, and the group admin.

The store is its own component with its own location (``groups.location``: a database or an object store,
whatever the Iceberg catalog is). Each group is one document changed atomically (``groups.backend``) under the
rules of ``groups.rules``, on the store's clock. ``GroupStore(lake)`` is cheap: every ``GroupStore`` of one
``Lake`` object shares one back-end (one connection pool, one clock).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, TypeVar

from compactor.errors import GroupNotFoundError, InputError
from compactor.groups import rules
from compactor.groups.backend import UNCHANGED, Backend, Clock, Outcome
from compactor.groups.location import has_group_store, open_backend
from compactor.groups.model import (
    DEFAULT_OFFSETS_RETENTION_MS,
    GroupSummary,
    MemberState,
    PartitionState,
    PendingRange,
    TopicPartition,
)
from compactor.groups.state import GroupState

if TYPE_CHECKING:
    from compactor.lake import Lake

T = TypeVar("T")
OFFSETS_RETENTION_ENV = "COMPACTOR_OFFSETS_RETENTION_MS"
_backends: weakref.WeakKeyDictionary[Lake, Backend] = weakref.WeakKeyDictionary()


def offsets_retention_ms(env: Mapping[str, str] | None = None) -> int:
    """The lake-wide ``offsets.retention.ms`` (env ``COMPACTOR_OFFSETS_RETENTION_MS``, default 7 days)."""
    text = (os.environ if env is None else env).get(OFFSETS_RETENTION_ENV)
    if not text:
        return DEFAULT_OFFSETS_RETENTION_MS
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"{OFFSETS_RETENTION_ENV} must be milliseconds, got {text!r}") from None
    if value < 1:
        raise InputError(f"{OFFSETS_RETENTION_ENV} must be positive, got {value}")
    return value


def check_group_name(group: str) -> str:
    if not isinstance(group, str) or not group.strip() or len(group) > 255:
        raise InputError(f"a group name must be non-empty text of at most 255 characters, got {group!r}")
    return group


def _unknown(group: str) -> GroupNotFoundError:
    return GroupNotFoundError(f"unknown consumer group '{group}' (see `compactor group list`)")


def backend_of(lake: Lake) -> Backend:
    """The back-end every ``GroupStore`` of ``lake`` shares (opened on first use, once the lake is known to
    exist: a group store is never made for a lake that is not there)."""
    backend = _backends.get(lake)
    if backend is None:
        lake.open()  # LakeNotFoundError naming the warehouse and catalog, before anything is created
        backend = _backends[lake] = open_backend(lake.config)
        weakref.finalize(lake, backend.close)
    return backend


class GroupStore:
    """The groups of one lake (see the module docstring). ``clock`` replaces the store's clock (tests), for
    every store of the lake."""

    def __init__(self, lake: Lake, *, clock: Clock | None = None) -> None:
        self.backend = backend_of(lake)
        if clock is not None:
            self.backend.clock = clock

    @classmethod
    def if_any(cls, lake: Lake) -> GroupStore | None:
        """The lake's store, or None where it has no place for groups (``groups.location.has_group_store``):
        for readers of groups that have nothing to show there (``status``, the cleaner)."""
        return cls(lake) if has_group_store(lake.config) else None

    @property
    def description(self) -> str:
        return self.backend.description

    @property
    def fences_across_hosts(self) -> bool:
        return self.backend.fences_across_hosts

    def now_ms(self) -> int:
        """The store's clock: the one every lease of the lake is judged by."""
        return self.backend.now_ms()

    def _change(self, group: str, fn: Callable[[GroupState, int], T], *, create: bool) -> T:
        def change(document: str | None, now: int) -> tuple[Outcome, T]:
            if document is None and not create:
                raise _unknown(group)
            state = GroupState.from_json(document) if document is not None else GroupState(created_ms=now)
            result = fn(state, now)
            after = state.to_json()
            return (UNCHANGED if after == document else after), result

        return self.backend.transact(group, change)

    def _read(self, group: str) -> tuple[GroupState | None, int]:
        document, now = self.backend.read(group)
        return (GroupState.from_json(document) if document is not None else None), now

    # --- members ------------------------------------------------------------------------------------

    def heartbeat(self, group: str, spec: rules.MemberSpec, held: Mapping[TopicPartition, int],
                  mode: str) -> rules.Beat:
        """Renew ``spec``'s lease (creating the group on a join); ``mode`` ``join``/``settle`` also settles its
        share, ``renew`` (the background heartbeat) only renews. ``FencedInstanceIdError`` if another process
        took the member's place."""
        return self._change(group, lambda s, now: rules.heartbeat(s, now, group, spec, held, mode),
                            create=True)

    def release(self, group: str, member_id: str, incarnation: str, partitions: Iterable[TopicPartition]) -> None:
        chosen = sorted(partitions)
        if chosen:
            self._change(group, lambda s, now: rules.release(s, now, group, member_id, incarnation, chosen),
                         create=True)

    def leave(self, group: str, member_id: str, incarnation: str) -> None:
        self._change(group, lambda s, now: rules.leave(s, now, group, member_id, incarnation), create=True)

    # --- positions -----------------------------------------------------------------------------------

    def commit(self, group: str, member_id: str | None, incarnation: str,
               offsets: Mapping[TopicPartition, tuple[int, int]]) -> None:
        """Commit ``offsets`` (partition -> (position, the owner epoch it was read under)) all or nothing.
        ``member_id`` set: only partitions it owns under those epochs, while its lease is live (else
        ``NotOwnerError``). ``member_id`` None (a static assignment): only partitions no live member owns."""
        if not offsets:
            return
        try:
            self._change(group, lambda s, now: rules.commit(s, now, group, member_id, incarnation, offsets),
                         create=member_id is None)
        except GroupNotFoundError:
            raise GroupNotFoundError(f"consumer group '{group}' was deleted; nothing was committed") from None

    def set_pending(self, group: str, member_id: str | None, incarnation: str, tp: TopicPartition,
                    pending: PendingRange) -> None:
        """Record the range the owner of ``tp`` took (fenced like a commit)."""
        self._change(group, lambda s, now: rules.set_pending(s, now, group, member_id, incarnation, tp, pending),
                     create=member_id is None)

    def exists(self, group: str) -> bool:
        return self._read(group)[0] is not None

    def require(self, group: str) -> None:
        if not self.exists(group):
            raise _unknown(group)

    def snapshot(self, group: str) -> tuple[GroupState, int]:
        """The group's whole state and the store's time (``GroupNotFoundError`` if unknown)."""
        state, now = self._read(group)
        if state is None:
            raise _unknown(group)
        return state, now

    def partitions(self, group: str, topic: str | None = None) -> list[PartitionState]:
        """Every (topic, partition) of ``group`` (of ``topic`` only, if given), in topic, partition order."""
        state, _ = self._read(group)
        return state.partition_states(topic) if state is not None else []

    def committed(self, group: str, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The committed positions of ``tps`` (``None`` where the group never committed)."""
        state, _ = self._read(group)
        slots = state.slots if state is not None else {}
        return {tp: (slots[tp].committed if tp in slots else None) for tp in sorted(set(tps))}

    def members(self, group: str) -> list[MemberState]:
        """The members of ``group`` whose lease is live now (on the store's clock)."""
        state, now = self._read(group)
        return state.member_states(now) if state is not None else []

    def list_groups(self) -> list[GroupSummary]:
        documents, _ = self.backend.documents()
        return [GroupSummary(name, GroupState.from_json(doc).committed_topics()) for name, doc in documents]

    def groups_on_topic(self, topic: str) -> dict[str, dict[int, int]]:
        """group -> partition -> committed offset, for every group with a committed position on ``topic``."""
        out: dict[str, dict[int, int]] = {}
        for name, document in self.backend.documents()[0]:
            for tp, slot in GroupState.from_json(document).slots.items():
                if tp.topic == topic and slot.committed is not None:
                    out.setdefault(name, {})[tp.partition] = slot.committed
        return out

    # --- admin ----------------------------------------------------------------------------------------

    def reset(self, group: str, targets: Mapping[TopicPartition, int], *, force: bool,
              reason: str) -> dict[TopicPartition, int | None]:
        """``group reset``: see ``rules.reset``; returns each partition's committed position before."""
        return self._change(group, lambda s, now: rules.reset(s, now, group, targets, force=force, reason=reason),
                            create=False)

    def record_reset(self, group: str, tp: TopicPartition, from_offset: int | None, to_offset: int,
                     reason: str) -> None:
        self._change(group, lambda s, now: rules.record_reset(s, now, tp, from_offset, to_offset, reason),
                     create=True)

    def delete(self, group: str) -> None:
        """Remove ``group`` and its positions (refused while members are live; ``GroupNotFoundError`` if
        unknown)."""
        def change(document: str | None, now: int) -> tuple[Outcome, None]:
            if document is None:
                raise _unknown(group)
            rules.check_deletable(GroupState.from_json(document), now, group)
            return None, None

        self.backend.transact(group, change)

    def expire(self, retention_ms: int, now_ms: int | None = None) -> list[str]:
        """Remove the groups that have been without a live member for ``retention_ms`` (KIP-211; see
        ``rules.expirable``); ``now_ms`` (a command's ``--now-ms``) moves the cutoff, never the leases."""
        expired = []
        for name, _ in self.backend.documents()[0]:
            def change(document: str | None, now: int) -> tuple[Outcome, bool]:
                if document is None:
                    return UNCHANGED, False
                cutoff = (now_ms if now_ms is not None else now) - retention_ms
                return (None, True) if rules.expirable(GroupState.from_json(document), now, cutoff) else \
                    (UNCHANGED, False)

            if self.backend.transact(name, change):
                expired.append(name)
        return expired
