"""The position side of ``Consumer``: commit, committed, position, seeks, Kafka's offset look-ups
(``beginning_offsets``, ``end_offsets``, ``offsets_for_times``), ``pause``/``resume``, and the ranges a batch
engine reads (``ranges``).

A commit is judged under the owner epochs the positions were read under, before any heartbeat (so it never
fails for a partition the member still owns, and never lands for one it lost meanwhile); a refused commit has
the next poll settle the group at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from compactor import schema as ts
from compactor.consumer.base import ConsumerBase
from compactor.consumer.starts import resolve_start
from compactor.cursor import load_compacted
from compactor.errors import InputError, NotOwnerError, OffsetOutOfRangeError
from compactor.groups import TopicPartition
from compactor.topics.naming import TopicName
from readers.attached import open_log
from readers.positions import StartPosition
from readers.reader import TopicReader


@dataclass(frozen=True)
class OffsetAndTimestamp:
    """Kafka's ``OffsetAndTimestamp``: the first offset at or after a time, and that record's timestamp."""

    offset: int
    timestamp_ms: int


class PositionsMixin(ConsumerBase):
    """Positions of the assigned partitions (raw offsets), and what moves them."""

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

    def _tps(self, partitions: Sequence[TopicPartition | int] | None) -> list[TopicPartition]:
        return [self._tp(p) for p in partitions] if partitions is not None else sorted(self.epochs)

    def _assigned(self, partition: TopicPartition | int, topic: str | None = None) -> TopicPartition:
        tp = self._tp(partition, topic)
        if tp not in self.epochs:
            raise InputError(f"{tp} is not assigned to this consumer (assignment: "
                             f"{', '.join(map(str, sorted(self.epochs))) or 'none'})")
        return tp

    def _resolve(self, tps: Sequence[TopicPartition]) -> None:
        """Give every partition in ``tps`` without a position one (by ``auto_offset_reset``)."""
        for topic in sorted({tp.topic for tp in tps if self.positions.get(tp) is None}):
            self.start_positions(topic, [tp for tp in tps if tp.topic == topic and self.positions.get(tp) is None])

    # --- reading positions ---------------------------------------------------------------------------------

    def position(self) -> dict[TopicPartition, int]:
        """The next offset each assigned partition will return from (resolved by the reset policy if new)."""
        self._resolve(list(self.epochs))
        return {tp: p for tp in sorted(self.epochs) if (p := self.positions.get(tp)) is not None}

    def committed(self, partitions: Sequence[TopicPartition | int] | None = None) -> dict[TopicPartition, int | None]:
        """The group's committed positions (of the assignment, or of ``partitions``)."""
        if self.store is None or self.group is None:
            raise InputError("this consumer has no group: nothing is committed")
        return self.store.committed(self.group, self._tps(partitions))

    def end_offsets(self, partitions: Sequence[TopicPartition | int] | None = None) -> dict[TopicPartition, int]:
        """``N_p`` of the latest raw snapshot (of the assignment, or of ``partitions``)."""
        out: dict[TopicPartition, int] = {}
        tps = self._tps(partitions)
        for topic in sorted({tp.topic for tp in tps}):
            offsets = open_log(self.lake, self.names[topic]).offsets()
            for tp in tps:
                if tp.topic == topic:
                    out[tp] = offsets.next_offsets[tp.partition]
                    self.ends[tp] = out[tp]
        return out

    def beginning_offsets(self, partitions: Sequence[TopicPartition | int] | None = None) -> dict[TopicPartition, int]:
        """The first offset of the view this consumer reads: the raw log start ``LSO_p``, or for a compacted
        consumer the compacted view's start once the topic has a cursor."""
        out: dict[TopicPartition, int] = {}
        tps = self._tps(partitions)
        for topic in sorted({tp.topic for tp in tps}):
            handle = open_log(self.lake, self.names[topic])
            starts = handle.offsets().log_start_offsets
            if self.read_compacted and handle.settings.compacts:
                state = load_compacted(self.lake.catalog, self.names[topic])
                if state is not None and state.cursor is not None:
                    starts = state.cursor.compacted_start
            out.update({tp: starts[tp.partition] for tp in tps if tp.topic == topic})
        return out

    def offsets_for_times(self, timestamps: Mapping[TopicPartition | int, int]
                          ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Kafka's ``offsetsForTimes``: per partition, the smallest offset whose timestamp is at least the given
        time in the view this consumer reads, with that record's timestamp (None when there is none)."""
        wanted = {self._tp(p): t for p, t in timestamps.items()}
        out: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for topic in sorted({tp.topic for tp in wanted}):
            mine = {tp.partition: StartPosition.at_timestamp(t) for tp, t in wanted.items() if tp.topic == topic}
            reader = TopicReader(self.lake, self.names[topic], read_compacted=self.read_compacted, start=mine)
            for partition in mine:
                offset = reader.start_offsets[partition]
                out[TopicPartition(topic, partition)] = _record_time(reader, partition, offset)
        return out

    def caught_up(self) -> bool:
        """Whether every assigned partition's position is at ``N_p`` of the latest raw snapshot (whatever the
        view's last row is: a trailing tombstone or a compacted-away record does not matter)."""
        ends = self.end_offsets()
        positions = self.position()
        return all(positions.get(tp, -1) >= end for tp, end in ends.items())

    def ranges(self) -> dict[TopicPartition, tuple[int, int]]:
        """For a batch engine: per assigned partition, ``[position, N_p)`` in the current view (resets applied
        and recorded). Read it, then ``commit({tp: end})``. Settles the group when a heartbeat is due."""
        self._rebalance()
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
        end = open_log(self.lake, self.names[tp.topic]).offsets().next_offsets[tp.partition]
        if offset > end:
            raise OffsetOutOfRangeError(f"offset {offset} is beyond the end of {tp} (next offset {end})")
        if self.auto_offset_reset == "error":
            reader = TopicReader(self.lake, self.names[tp.topic], read_compacted=self.read_compacted)
            resolve_start(reader, tp, offset, "error")
        self.move(tp, offset)

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
                self.move(TopicPartition(topic, partition), reader.start_offsets[partition])

    def move(self, tp: TopicPartition, offset: int) -> None:
        """Set ``tp``'s position (its topic's fetch re-opens from the positions at the next poll)."""
        self.positions[tp] = offset
        self._drop_fetch(tp.topic)

    def pause(self, partitions: Sequence[TopicPartition | int]) -> None:
        """Stop returning records of ``partitions`` without giving them up (Kafka's ``pause``)."""
        self.paused_partitions |= {self._assigned(p) for p in partitions}
        self._order = None

    def resume(self, partitions: Sequence[TopicPartition | int]) -> None:
        resumed = {self._tp(p) for p in partitions} & self.paused_partitions
        self.paused_partitions -= resumed
        self._order = None
        for topic in {tp.topic for tp in resumed}:  # what they missed while paused is looked for again
            fetch = self.fetches.get(topic)
            if fetch is not None:
                fetch.location = ""

    def paused(self) -> list[TopicPartition]:
        return sorted(self.paused_partitions)

    # --- committing -----------------------------------------------------------------------------------

    def commit(self, offsets: Mapping[TopicPartition, int] | Mapping[int, int] | None = None
               ) -> dict[TopicPartition, int]:
        """Commit ``offsets`` (default: the current positions) for the group, all or nothing, under the owner
        epochs they were read under: a partition not owned under that epoch (reassigned, a lapsed lease, a
        forced reset) raises ``NotOwnerError`` and nothing changes."""
        if self.store is None or self.group is None:
            raise InputError("this consumer has no group: there is nowhere to commit")
        if offsets is None:
            chosen = {tp: p for tp in sorted(self.epochs) if (p := self.positions.get(tp)) is not None}
        else:
            chosen = {self._tp(p): o for p, o in offsets.items()}
        for tp, offset in chosen.items():
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise InputError(f"a committed offset must be a non-negative integer, got {offset!r} for {tp}")
            end = self.ends.get(tp)
            if end is None or offset > end:
                end = open_log(self.lake, self.names[tp.topic]).offsets().next_offsets[tp.partition]
                if offset > end:
                    raise OffsetOutOfRangeError(f"cannot commit offset {offset} for {tp}: beyond its end ({end})")
        if self.member is not None:
            self.member.check_usable()
            missing = [tp for tp in chosen if tp not in self.epochs]
            if missing:
                raise NotOwnerError(f"not the owner: member {self.member.member_id} of group '{self.group}' is "
                                    f"not assigned {', '.join(map(str, missing))}; nothing was committed")
            try:
                self.member.membership.commit(chosen, self.epochs)
            except NotOwnerError:
                self.member.request_settle()
                raise
        else:
            self.store.commit(self.group, None, "", {tp: (o, -1) for tp, o in chosen.items()})
        self._last_auto_commit_ms = self.clock.now_ms()
        return chosen


def _record_time(reader: TopicReader, partition: int, offset: int) -> OffsetAndTimestamp | None:
    """The record at ``offset`` (the first at or after it) of ``reader``'s view, as offset and time."""
    for segment in reader.segments(partition, offset):
        for batch in reader.segment_batches(segment, (ts.OFFSET, ts.TIMESTAMP)):
            if batch.num_rows:
                return OffsetAndTimestamp(int(batch.column(ts.OFFSET)[0].as_py()),
                                          int(batch.column(ts.TIMESTAMP).cast("int64")[0].as_py()) // 1000)
    return None
