"""The lake side of one mirrored Kafka topic: its lake topic, positions, pending records and commits.

The position of each partition (the next source offset) is the lake topic's ``N_p``: a commit appends the
pending records with their own offsets and moves ``N_p`` to the position in ONE conditional Iceberg commit
(``producing.producer.produce_stream`` with ``keep_offsets``), together with the mirror's record of its source
(``topics.mirrored``: skipped offsets, the source's log end, its topic id). A mirror killed at any moment
therefore resumes from the lake exactly where its last commit left it: no record twice, none skipped. A commit
with no records (positions moved past transaction markers or aborted records, or a skip) changes only those
properties, on the latest metadata.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from compactor.errors import InvalidRecordError, InvalidSettingError, TopicExistsError, TopicNotFoundError
from compactor.lake import Lake
from compactor.mirror.batches import PendingRecords
from compactor.mirror.gaps import SourceGap
from compactor.mirror.source import TopicInfo
from compactor.producing.arrow_input import RowNumbers
from compactor.producing.producer import produce_stream
from compactor.properties import MIRROR_PROPERTY, NEXT_OFFSETS_PROPERTY
from compactor.topics.mirrored import MirrorState
from compactor.topics.naming import TopicName
from compactor.topics.state import encode_offsets, read_offsets
from compactor.topics.topic import Topic

log = logging.getLogger("compactor.mirror")


def open_lake_topic(lake: Lake, name: TopicName, source: TopicInfo, settings: Mapping[str, str]) -> Topic:
    """The lake topic that mirrors ``source``: created with its partition count and ``settings`` when missing; an
    existing one must mirror ``source`` (a topic never written may become its mirror: made by ``topic create``
    with settings of one's choosing, or left by a mirror that stopped between creating and marking it). Like
    ``topic create``, the first topic a mirror makes may make the lake itself."""
    lake.open(create=True)
    try:
        topic = lake.topic(name)
    except TopicNotFoundError:
        try:
            topic = lake.create_topic(str(name), source.partitions, settings)
        except TopicExistsError:
            topic = lake.topic(name)  # another mirror created it meanwhile
        except InvalidSettingError as exc:
            raise InvalidSettingError(f"creating {name} with the settings of Kafka topic {source.name}: {exc}; "
                                      f"create it first (compactor topic create {name} --config ...) and mirror "
                                      "into it") from None
    state = topic.mirror
    if state is not None and state.source != source.name:
        raise InvalidSettingError(f"{name} mirrors Kafka topic '{state.source}', not '{source.name}': use "
                                  f"--rename {source.name}=NS.NAME to mirror it elsewhere")
    if state is None:
        offsets = topic.offsets()
        if topic.snapshot is not None or any(offsets.next_offsets):
            raise InvalidSettingError(f"{name} exists and is not a mirror (it holds produced records): use "
                                      f"--rename {source.name}=NS.NAME to mirror Kafka topic '{source.name}' "
                                      "elsewhere")
        fresh = MirrorState(source.name, source.topic_id).widened(offsets.partitions)
        topic.change_properties(lambda current: ({} if MIRROR_PROPERTY in current
                                                 else {MIRROR_PROPERTY: fresh.to_property()}, []),
                                f"mark {name} as a mirror of Kafka topic {source.name}")
    if source.partitions > topic.partitions:
        topic.add_partitions(source.partitions)
    return topic


class Target:
    """One Kafka topic and its lake topic while a mirror runs (see the module docstring)."""

    def __init__(self, source: TopicInfo, topic: Topic) -> None:
        self.source = source.name
        self.topic = topic
        state = topic.mirror
        self.recorded = state.widened(topic.partitions) if state is not None else MirrorState(source.name)
        self.topic_id = self.recorded.topic_id  # the source's id as recorded; checked against the source's now
        self.committed = np.asarray(topic.offsets().next_offsets, np.int64)
        self.positions = self.committed.copy()
        self.pending = PendingRecords()
        self.pending_skips = np.zeros(len(self.positions), np.int64)
        self.copied = np.zeros(len(self.positions), np.int64)
        self.skipped = np.zeros(len(self.positions), np.int64)
        self.source_end = np.asarray(self.recorded.source_log_end[:len(self.positions)], np.int64)
        self.waiting: set[int] = set()

    @property
    def name(self) -> TopicName:
        return self.topic.name

    @property
    def partitions(self) -> int:
        return len(self.positions)

    def grow(self, partitions: int) -> None:
        """The source gained partitions: so does the lake topic (the new ones start empty)."""
        if partitions <= self.partitions:
            return
        self.topic.add_partitions(partitions)
        more = partitions - self.partitions
        zeros = np.zeros(more, np.int64)
        self.committed, self.positions = np.append(self.committed, zeros), np.append(self.positions, zeros)
        self.pending_skips, self.copied = np.append(self.pending_skips, zeros), np.append(self.copied, zeros)
        self.skipped, self.source_end = np.append(self.skipped, zeros), np.append(self.source_end, zeros)
        self.recorded = self.recorded.widened(partitions)

    def add(self, messages: list[Any]) -> None:
        """Keep records delivered by Kafka (in partition order) and move their partitions' positions past them."""
        first = len(self.pending)
        self.pending.extend(messages)
        partitions = np.asarray(self.pending.partitions[first:], np.int64)
        np.maximum.at(self.positions, partitions, np.asarray(self.pending.offsets[first:], np.int64) + 1)

    def reached(self, partition: int, end: int) -> None:
        """Kafka reports the end of ``partition`` at ``end``: every offset below it was delivered or is no record
        to deliver (a transaction marker, an aborted record), so the position moves there."""
        if partition < self.partitions:
            self.positions[partition] = max(int(self.positions[partition]), end)
            self.source_end[partition] = max(int(self.source_end[partition]), end)

    def was_waiting(self, partition: int) -> bool:
        """Whether ``partition`` waits for a recreated source to reach its position: held back by this run, or
        recorded so by the last commit (the source's end recorded below the committed position)."""
        ends = self.recorded.source_log_end
        return partition in self.waiting or (self.recorded.observed_ms is not None and partition < len(ends)
                                             and ends[partition] < int(self.committed[partition]))

    def skip(self, gap: SourceGap) -> None:
        """Go on past ``gap`` (``--on-source-gap skip``): counted, and recorded with the next commit."""
        self.positions[gap.partition] = max(int(self.positions[gap.partition]), gap.resume)
        self.pending_skips[gap.partition] += gap.skipped
        self.skipped[gap.partition] += gap.skipped
        self.source_end[gap.partition] = gap.end

    @property
    def dirty(self) -> bool:
        """Whether the lake lags what this run read: records, moved positions or skips not yet committed."""
        return bool(len(self.pending) or self.pending_skips.any() or (self.positions > self.committed).any())

    def _state(self, current: Mapping[str, str], now_ms: int) -> MirrorState:
        state = (MirrorState.of(current) or MirrorState(self.source)).widened(self.partitions)
        skipped = np.asarray(state.skipped[:self.partitions], np.int64) + self.pending_skips
        ends = np.maximum(self.source_end, self.positions)
        ends[list(self.waiting)] = self.source_end[list(self.waiting)]  # a recreated source below the position
        return MirrorState(self.source, self.topic_id or state.topic_id, tuple(skipped.tolist()),
                           tuple(ends.tolist()), now_ms)

    def commit(self, now_ms: int) -> int:
        """Commit the pending records and positions (see the module docstring); the records committed."""
        if not self.dirty:
            return 0
        records = len(self.pending)
        positions = self.positions.copy()
        recorded: list[MirrorState] = []

        def properties(current: Mapping[str, str]) -> dict[str, str]:
            recorded[:] = [self._state(current, now_ms)]
            return {MIRROR_PROPERTY: recorded[0].to_property()}

        if records:
            try:
                result = produce_stream(self.topic, [(self.pending.to_batch(), RowNumbers(unit="record"))],
                                        keep_offsets=True, now_ms=now_ms, operation="mirror",
                                        positions=positions.tolist(), properties=properties)
            except InvalidRecordError as exc:
                if exc.line is None:
                    raise
                partition, offset = self.pending.located(exc.line)
                raise InvalidRecordError(f"Kafka topic {self.source} partition {partition} offset {offset}: "
                                         f"{str(exc).split(': ', 1)[-1]}") from None
            for key, count in result.summary.counts.items():
                self.copied[int(key)] += count
        else:
            def change(current: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
                ends = np.maximum(np.asarray(read_offsets(current).next_offsets, np.int64), positions)
                return {NEXT_OFFSETS_PROPERTY: encode_offsets(ends.tolist()), **properties(current)}, []

            self.topic.change_properties(change, f"record the mirror's positions in {self.name}")
        self.committed = np.maximum(self.committed, positions)
        self.positions = self.committed.copy()
        self.recorded = recorded[0] if recorded else self.recorded
        self.pending.clear()
        self.pending_skips[:] = 0
        return records


__all__ = ["Target", "open_lake_topic"]
