"""The position side of ``Consumer``: commit, committed, position, seek (offset, time, beginning, end),
``caught_up`` and the ranges a batch engine reads (``ranges``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from compactor.consumer.starts import OffsetReset, resolve_start
from compactor.errors import InputError, NotOwnerError, OffsetOutOfRangeError
from compactor.groups import GroupStore, Membership, TopicPartition
from compactor.topics.naming import TopicName
from readers.positions import StartPosition
from readers.reader import TopicReader

if TYPE_CHECKING:
    from collections.abc import Callable

    from compactor.consumer.fetch import Fetch
    from compactor.lake import Lake


class PositionsMixin:
    """Positions of the assigned partitions (raw offsets), and what moves them."""

    lake: Lake
    names: dict[str, TopicName]
    partition_counts: dict[str, int]
    group: str | None
    store: GroupStore | None
    membership: Membership | None
    epochs: dict[TopicPartition, int]
    positions: dict[TopicPartition, int | None]
    ends: dict[TopicPartition, int]
    fetches: dict[str, Fetch]
    read_compacted: bool
    auto_offset_reset: OffsetReset
    clock: Callable[[], int]

    def _starts(self, topic: str, tps: list[TopicPartition], reader: object = None) -> dict[int, int]:
        raise NotImplementedError

    def _heartbeat(self, force: bool = False) -> None:
        raise NotImplementedError

    def _tp(self, partition: TopicPartition | int, topic: str | None = None) -> TopicPartition:
        """``partition`` as a ``TopicPartition`` (a bare number needs ``topic`` when there are several)."""
        if isinstance(partition, TopicPartition):
            tp = TopicPartition(str(TopicName.parse(partition.topic)), partition.partition)
        elif isinstance(partition, int) and not isinstance(partition, bool):
            if topic is None and len(self.names) != 1:
                raise InputError("this consumer reads several topics: name the topic of the partition")
            tp = TopicPartition(str(TopicName.parse(topic)) if topic else next(iter(self.names)), partition)
        else:
            raise InputError(f"not a partition: {partition!r}")
        if tp.topic not in self.names:
            raise InputError(f"{tp.topic} is not a topic of this consumer ({', '.join(sorted(self.names))})")
        if not 0 <= tp.partition < self.partition_counts[tp.topic]:
            raise InputError(f"partition {tp.partition} does not exist: {tp.topic} has "
                             f"{self.partition_counts[tp.topic]} partition(s)")
        return tp

    def _assigned(self, partition: TopicPartition | int, topic: str | None = None) -> TopicPartition:
        tp = self._tp(partition, topic)
        if tp not in self.epochs:
            raise InputError(f"{tp} is not assigned to this consumer (assignment: "
                             f"{', '.join(map(str, sorted(self.epochs))) or 'none'})")
        return tp

    def _resolve(self, tps: Sequence[TopicPartition]) -> None:
        """Give every partition in ``tps`` without a position one (by ``auto_offset_reset``)."""
        for topic in sorted({tp.topic for tp in tps if self.positions.get(tp) is None}):
            self._starts(topic, [tp for tp in tps if tp.topic == topic and self.positions.get(tp) is None])

    # --- reading positions ---------------------------------------------------------------------------------

    def position(self) -> dict[TopicPartition, int]:
        """The next offset each assigned partition will return from (resolved by the reset policy if new)."""
        self._resolve(list(self.epochs))
        return {tp: p for tp in sorted(self.epochs) if (p := self.positions.get(tp)) is not None}

    def committed(self, partitions: Sequence[TopicPartition | int] | None = None) -> dict[TopicPartition, int | None]:
        """The group's committed positions (of the assignment, or of ``partitions``)."""
        if self.store is None or self.group is None:
            raise InputError("this consumer has no group: nothing is committed")
        tps = [self._tp(p) for p in partitions] if partitions is not None else sorted(self.epochs)
        return self.store.committed(self.group, tps)

    def end_offsets(self) -> dict[TopicPartition, int]:
        """``N_p`` of the latest raw snapshot for every assigned partition (reads the topics' metadata)."""
        out: dict[TopicPartition, int] = {}
        for topic in sorted({tp.topic for tp in self.epochs}):
            offsets = self.lake.topic(self.names[topic]).offsets()
            for tp in self.epochs:
                if tp.topic == topic:
                    out[tp] = offsets.next_offsets[tp.partition]
                    self.ends[tp] = out[tp]
        return out

    def caught_up(self) -> bool:
        """Whether every assigned partition's position is at ``N_p`` of the latest raw snapshot (whatever the
        view's last row is: a trailing tombstone or a compacted-away record does not matter)."""
        ends = self.end_offsets()
        positions = self.position()
        return all(positions.get(tp, -1) >= end for tp, end in ends.items())

    def ranges(self) -> dict[TopicPartition, tuple[int, int]]:
        """For a batch engine (Spark): per assigned partition, ``[position, N_p)`` resolved in the current view
        (resets applied and recorded). Read it, then ``commit({tp: end})``. Renews the lease when due."""
        self._heartbeat()
        ends = self.end_offsets()
        positions = self.position()
        return {tp: (positions[tp], max(positions[tp], ends[tp])) for tp in sorted(ends)}

    # --- moving positions -----------------------------------------------------------------------------

    def seek(self, partition: TopicPartition | int, offset: int, topic: str | None = None) -> None:
        """Read ``partition`` from raw offset ``offset`` next. Beyond ``N_p`` is always an error; below the
        view's start is one only with ``auto_offset_reset='error'`` (else the next poll resets, recorded)."""
        tp = self._assigned(partition, topic)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InputError(f"an offset must be a non-negative integer, got {offset!r}")
        end = self.lake.topic(self.names[tp.topic]).offsets().next_offsets[tp.partition]
        if offset > end:
            raise OffsetOutOfRangeError(f"offset {offset} is beyond the end of {tp} (next offset {end})")
        if self.auto_offset_reset == "error":
            reader = self._reader(tp.topic)
            resolve_start(reader, tp, offset, "error", self.clock())
        self._move(tp, offset)

    def seek_to_beginning(self, partitions: Sequence[TopicPartition | int] | None = None) -> None:
        self._seek_to(partitions, StartPosition.earliest())

    def seek_to_end(self, partitions: Sequence[TopicPartition | int] | None = None) -> None:
        self._seek_to(partitions, StartPosition.latest())

    def seek_to_timestamp(self, timestamp_ms: int, partitions: Sequence[TopicPartition | int] | None = None) -> None:
        """Kafka's offsetsForTimes: the smallest offset whose timestamp >= ``timestamp_ms`` in the view read."""
        self._seek_to(partitions, StartPosition.at_timestamp(timestamp_ms))

    def _seek_to(self, partitions: Sequence[TopicPartition | int] | None, where: StartPosition) -> None:
        tps = [self._assigned(p) for p in partitions] if partitions is not None else sorted(self.epochs)
        for topic in sorted({tp.topic for tp in tps}):
            mine = {tp.partition: where for tp in tps if tp.topic == topic}
            reader = TopicReader(self.lake, self.names[topic], read_compacted=self.read_compacted, start=mine)
            for partition in mine:
                self._move(TopicPartition(topic, partition), reader.start_offsets[partition])

    def _reader(self, topic: str) -> TopicReader:
        return TopicReader(self.lake, self.names[topic], read_compacted=self.read_compacted)

    def _move(self, tp: TopicPartition, offset: int) -> None:
        self.positions[tp] = offset
        self.fetches.pop(tp.topic, None)

    # --- committing -----------------------------------------------------------------------------------

    def commit(self, offsets: Mapping[TopicPartition | int, int] | None = None) -> dict[TopicPartition, int]:
        """Commit ``offsets`` (default: the current positions) for the group, all or nothing: partitions this
        member does not own under a live lease raise ``NotOwnerError`` and nothing changes."""
        if self.store is None or self.group is None:
            raise InputError("this consumer has no group: there is nowhere to commit")
        if offsets is None:
            chosen = {tp: p for tp in sorted(self.epochs) if (p := self.positions.get(tp)) is not None}
        else:
            chosen = {self._tp(p): o for p, o in offsets.items()}
        epochs = dict(self.epochs)  # the ownership these positions were read under: the fence of this commit
        self._heartbeat()  # a member that only commits (a batch engine's loop) keeps its lease too
        for tp, offset in chosen.items():
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise InputError(f"a committed offset must be a non-negative integer, got {offset!r} for {tp}")
            end = self.ends.get(tp)
            if end is None or offset > end:
                end = self.lake.topic(self.names[tp.topic]).offsets().next_offsets[tp.partition]
                if offset > end:
                    raise OffsetOutOfRangeError(f"cannot commit offset {offset} for {tp}: beyond its end ({end})")
        if self.membership is not None:
            missing = [tp for tp in chosen if tp not in epochs]
            if missing:
                raise NotOwnerError(f"not the owner: member {self.membership.member_id} of group '{self.group}' "
                                    f"is not assigned {', '.join(map(str, missing))}; nothing was committed")
            self.membership.commit(chosen, self.clock(), epochs)
        else:
            self.store.commit(self.group, None, {tp: (o, -1) for tp, o in chosen.items()}, self.clock())
        return chosen
