"""What ``compactor group ...`` shows and does: describe a group's lag, reset its positions, list, delete.

Lag is in records (``N_p - committed``) and as time: the age, at ``now``, of the first record not yet
consumed (its record timestamp), Kafka's "consumer lag in time". ``in_compacted_range`` says whether the
committed position lies below the current cursor's horizon (a compacted consumer resumes in the view).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from compactor import schema as ts
from compactor.clock import resolve_now_ms
from compactor.cursor import load_compacted
from compactor.errors import InputError, OffsetOutOfRangeError, TopicNotFoundError
from compactor.groups import GroupStore, MemberState, PartitionState, TopicPartition
from compactor.results import JsonResult
from compactor.topics.naming import TopicName
from readers.attached import open_log
from readers.pinned import Segment
from readers.positions import StartPosition
from readers.reader import TopicReader

if TYPE_CHECKING:
    from compactor.lake import Lake


@dataclass
class PartitionLag(JsonResult):
    """One (topic, partition) of ``group describe``."""

    topic: str
    partition: int
    committed_offset: int | None
    log_end_offset: int | None
    log_start_offset: int | None
    lag: int | None
    lag_ms: int | None
    owner: str | None
    in_compacted_range: bool
    last_reset: dict[str, Any] | None
    reset_count: int
    owner_epoch: int = 0
    pending_range: list[int] | None = None  # [start, end) taken by an exactly-once step, not yet committed


@dataclass
class GroupDescription(JsonResult):
    """``group describe GROUP --json``."""

    group: str
    now_ms: int
    total_lag: int
    partitions: list[PartitionLag] = field(default_factory=list)
    members: list[dict[str, Any]] = field(default_factory=list)  # member_id, partitions, lease_expires_ms, ...
    group_store: str = ""  # where the group lives (no credentials)


@dataclass
class TopicView:
    """The log bounds of one topic for describing or resetting a group."""

    name: TopicName
    next_offsets: tuple[int, ...]
    log_start_offsets: tuple[int, ...]
    horizons: tuple[int, ...] | None
    compacted_start: tuple[int, ...] | None

    @classmethod
    def load(cls, lake: Lake, topic: str) -> TopicView:
        name = TopicName.parse(topic)
        state = load_compacted(lake.catalog, name)
        handle = open_log(lake, name)
        offsets = handle.offsets()
        cursor = state.cursor if state is not None and handle.settings.compacts else None
        return cls(name, offsets.next_offsets, offsets.log_start_offsets, cursor.horizons if cursor else None,
                   cursor.compacted_start if cursor else None)

    def earliest(self, partition: int) -> int:
        """The earliest position any view holds (the compacted view may reach below the raw log start)."""
        raw = self.log_start_offsets[partition]
        return min(raw, self.compacted_start[partition]) if self.compacted_start else raw


def _age_of_next(lake: Lake, view: TopicView, partition: int, committed: int, now_ms: int) -> int | None:
    """Age of the first raw record at or after ``committed`` (None if none is left)."""
    start = max(committed, view.log_start_offsets[partition])
    end = view.next_offsets[partition]
    if start >= end:
        return None
    reader = TopicReader(lake, view.name, read_compacted=False)
    for batch in reader.segment_batches(Segment(partition, start, end, False), (ts.OFFSET, ts.TIMESTAMP)):
        if batch.num_rows:
            return max(0, now_ms - int(batch.column(ts.TIMESTAMP).cast("int64")[0].as_py()) // 1000)
    return None


def describe_group(lake: Lake, group: str, now_ms: int | None = None) -> GroupDescription:
    """Per topic partition: committed offset, log end, lag (records and time), owner, compacted range, reset.
    Leases are judged on the group store's clock; ``now_ms`` (default: the wall clock) is only what record
    ages (``lag_ms``) are measured against."""
    now = resolve_now_ms(now_ms)
    store = GroupStore(lake)
    state, store_now = store.snapshot(group)
    members = state.member_states(store_now)
    live = {m.member_id for m in members}
    views: dict[str, TopicView | None] = {}
    out = GroupDescription(group, now, 0, group_store=store.description)
    rows = state.partition_states()
    out.members = [_member(m, rows) for m in members]
    for row in rows:
        if row.topic not in views:
            try:
                views[row.topic] = TopicView.load(lake, row.topic)
            except TopicNotFoundError:
                views[row.topic] = None  # deleted since: its positions stay until the group goes
        out.partitions.append(_lag(lake, views[row.topic], row, live, now))
    out.total_lag = sum(p.lag or 0 for p in out.partitions)
    return out


def _member(member: MemberState, rows: list[PartitionState]) -> dict[str, Any]:
    owned = [f"{r.topic}:{r.partition}" for r in rows if r.owner == member.member_id]
    return {"member_id": member.member_id, "partitions": owned, "lease_expires_ms": member.lease_expires_ms,
            "client": member.client, "topics": member.topics, "joined_ms": member.joined_ms,
            "static": member.static}


def _lag(lake: Lake, view: TopicView | None, row: PartitionState, live: set[str], now: int) -> PartitionLag:
    end = start = lag = age = None
    compacted = False
    if view is not None and row.partition < len(view.next_offsets):
        end, start = view.next_offsets[row.partition], view.log_start_offsets[row.partition]
        if row.committed_offset is not None:
            lag = max(0, end - row.committed_offset)
            age = _age_of_next(lake, view, row.partition, row.committed_offset, now) if lag else 0
            compacted = view.horizons is not None and row.committed_offset < view.horizons[row.partition]
    pending = row.pending
    return PartitionLag(row.topic, row.partition, row.committed_offset, end, start, lag, age,
                        row.owner if row.owner in live else None, compacted,
                        row.last_reset.as_json() if row.last_reset else None, row.reset_count,
                        row.owner_epoch, [pending.start, pending.end] if pending else None)


@dataclass
class ResetResult(JsonResult):
    """What ``group reset`` moved."""

    group: str
    topic: str
    positions: list[dict[str, Any]]


def reset_group(lake: Lake, group: str, topic: str, to: list[str], *, force: bool = False) -> ResetResult:
    """Move ``group``'s committed positions on ``topic`` (``to``: ``earliest``, ``latest``, ``offset P:O`` or
    ``timestamp P:T``); refused while members hold live leases unless ``force``, which fences them: their
    commits are refused, and their next poll after their next heartbeat resumes at the reset position."""
    store = GroupStore(lake)
    store.require(group)
    view = TopicView.load(lake, topic)
    targets = _targets(lake, view, to)
    tps = {TopicPartition(str(view.name), p): o for p, o in targets.items()}
    before = store.reset(group, tps, force=force, reason=f"group reset --to {' '.join(to)}")
    moved = [{"partition": tp.partition, "from": before[tp], "to": offset} for tp, offset in sorted(tps.items())]
    return ResetResult(group, str(view.name), moved)


def _targets(lake: Lake, view: TopicView, to: list[str]) -> dict[int, int]:
    partitions = range(len(view.next_offsets))
    kind = to[0] if to else ""
    if kind in ("earliest", "latest") and len(to) == 1:
        return {p: view.earliest(p) if kind == "earliest" else view.next_offsets[p] for p in partitions}
    if kind not in ("offset", "timestamp") or len(to) != 2:
        raise InputError(f"--to expects earliest, latest, offset P:O or timestamp P:T, got {' '.join(to)!r}")
    left, sep, right = to[1].partition(":")
    try:
        partition, value = int(left), int(right)
    except ValueError:
        raise InputError(f"--to {kind} expects P:{'O' if kind == 'offset' else 'T'}, got {to[1]!r}") from None
    if not sep or partition not in partitions:
        raise InputError(f"partition {left} does not exist: {view.name} has {len(partitions)} partition(s)")
    if kind == "timestamp":
        start = {partition: StartPosition.at_timestamp(value)}
        reader = TopicReader(lake, view.name, read_compacted=False, start=start)
        return {partition: reader.start_offsets[partition]}
    first, end = view.earliest(partition), view.next_offsets[partition]
    if not first <= value <= end:
        raise OffsetOutOfRangeError(f"offset {value} is out of range for partition {partition} of {view.name} "
                                    f"(positions [{first}, {end}] are valid)")
    return {partition: value}
