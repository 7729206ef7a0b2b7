"""The source side of a running mirror: which Kafka topics it copies, and where each partition stands against
its source (docs/guarantees.md#mirrors).

``Follower.discover`` opens the lake topic of every Kafka topic to mirror (under a pattern, of topics created
later too), grows it with partitions added at the source, and judges every partition's position against the
source's offsets (``mirror.gaps``): a partition the lake never held starts where the source does; a gap is an
error, or skipped and counted; a partition whose recreated source has not reached its position waits. The
consumer then reads each ready partition from its position.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from compactor.errors import KafkaTopicNotFoundError, SourceGapError, UsageError
from compactor.lake import Lake
from compactor.mirror.gaps import find_gap
from compactor.mirror.names import Selection
from compactor.mirror.settings import ClientSettings
from compactor.mirror.source import Source, TopicInfo
from compactor.mirror.target import Target, open_lake_topic

log = logging.getLogger("compactor.mirror")


class Follower:
    """Mirrored topics and their partitions' positions against the source (see the module docstring)."""

    def __init__(self, lake: Lake, source: Source, consumer: Any, selection: Selection, settings: ClientSettings,
                 topic_config: Mapping[str, str], *, skip_gaps: bool) -> None:
        self.lake = lake
        self.source = source
        self.consumer = consumer
        self.selection = selection
        self.settings = settings
        self.topic_config = dict(topic_config)
        self.skip_gaps = skip_gaps
        self.targets: dict[str, Target] = {}
        self.skipped = 0  # source offsets skipped by this run

    @property
    def servers(self) -> str:
        return self.source.servers

    def out_of_range(self, target: Target, partition: int) -> None:
        """The consumer found ``partition``'s position out of the source's range: judge it again."""
        info = self.source.describe([target.source]).get(target.source)
        if info is None:
            log.warning("event=source-missing topic=%s: the Kafka topic no longer exists; the mirror waits for it",
                        target.source)
            return
        self.check(target, [partition], assign=[partition], topic_id=info.topic_id)

    def discover(self, available: Sequence[str]) -> None:
        """Open the topics to mirror (new ones under a pattern), follow added partitions and recreated topics."""
        wanted = self.selection.chosen(available)
        missing = [t for t in self.selection.topics if t not in available]
        if missing and not self.targets:
            raise KafkaTopicNotFoundError(f"Kafka at {self.servers} has no topic {', '.join(map(repr, missing))}")
        infos = self.source.describe(wanted)
        for name in wanted:
            if name not in infos:
                continue
            info = infos[name]
            target = self.targets.get(name)
            if target is None:
                self._open(info)
                continue
            before = target.partitions
            if info.partitions > before:
                target.grow(info.partitions)
                log.info("event=partitions-added topic=%s partitions=%d", name, info.partitions)
            # every partition against the source: new ones start, gaps are found before a fetch fails on them,
            # waiting ones may go on, and the lag to the source's end is fresh
            self.check(target, range(target.partitions), topic_id=info.topic_id,
                                   assign=range(before, target.partitions))
        for name, target in self.targets.items():
            if name not in infos:
                log.warning("event=source-missing topic=%s: the Kafka topic no longer exists; the mirror waits for "
                            "it (a topic created again under the name is a source gap)", target.source)

    def _open(self, info: TopicInfo) -> None:
        name = self.selection.lake_name(info.name)
        taken = [t.source for t in self.targets.values() if t.name == name]
        if taken:
            raise UsageError(f"Kafka topics '{taken[0]}' and '{info.name}' would both be mirrored into {name}: "
                             "--rename one of them")
        settings = {**self.source.settings_of(info.name), **self.topic_config}
        target = Target(info, open_lake_topic(self.lake, name, info, settings))
        self.targets[info.name] = target
        log.info("event=mirroring source=%s topic=%s partitions=%d", info.name, name, info.partitions)
        self.check(target, range(target.partitions), topic_id=info.topic_id,
                               assign=range(target.partitions))

    def check(self, target: Target, partitions: Sequence[int] | range, *, topic_id: str | None,
                          assign: Sequence[int] | range = ()) -> None:
        """Judge each partition's position against the source (``mirror.gaps``): start the ones the lake never
        held, skip or refuse gaps, hold back the ones whose (recreated) source has not reached their position,
        and have the consumer read from its position every partition in ``assign``, skipped past a gap, or no
        longer held back."""
        from confluent_kafka import TopicPartition

        offsets = self.source.offsets([(target.source, p) for p in partitions])
        recorded_id = target.topic_id
        id_change = (recorded_id, topic_id) if topic_id and recorded_id and topic_id != recorded_id else None
        if topic_id:
            target.topic_id = topic_id
        moved, held = set(assign), set()
        for p in partitions:
            start, end = offsets[(target.source, p)]
            if int(target.positions[p]) == 0:  # a partition the lake never held starts where the source does
                target.positions[p] = start if self.settings.start == "earliest" else end
            target.source_end[p] = end if id_change is not None else max(int(target.source_end[p]), end)
            gap = find_gap(target.source, p, int(target.positions[p]), start, end,
                           waiting=target.was_waiting(p), id_change=id_change)
            if gap is not None:
                if not self.skip_gaps:
                    raise SourceGapError(gap.message())
                log.warning("event=source-gap-skipped topic=%s partition=%d position=%d resume=%d skipped=%d "
                            "reason=%r", target.source, p, gap.position, gap.resume, gap.skipped, gap.reason)
                target.skip(gap)
                self.skipped += gap.skipped
                moved.add(p)
            if int(target.positions[p]) > end:
                if p not in target.waiting:
                    log.info("event=waiting topic=%s partition=%d position=%d source_end=%d", target.source, p,
                             int(target.positions[p]), end)
                target.waiting.add(p)
                held.add(p)
            elif p in target.waiting:
                target.waiting.discard(p)
                moved.add(p)
        assigned = {tp.partition for tp in self.consumer.assignment() if tp.topic == target.source}
        stale = sorted(p for p in (moved | held) & assigned)
        if stale:
            self.consumer.incremental_unassign([TopicPartition(target.source, p) for p in stale])
        fresh = sorted(moved - held)
        if fresh:
            self.consumer.incremental_assign([TopicPartition(target.source, p, int(target.positions[p]))
                                              for p in fresh])


__all__ = ["Follower"]
