"""What a mirror prints on exit (``compactor mirror``'s JSON summary): per topic partition its position, the records
copied and the offsets skipped, with the source's log end and the lag to it."""

from __future__ import annotations

from dataclasses import dataclass, field

from compactor.results import JsonResult


@dataclass(frozen=True)
class PartitionProgress(JsonResult):
    """One mirrored partition at the mirror's exit."""

    topic: str            # the lake topic
    source: str           # the Kafka topic
    partition: int
    position: int         # the next source offset: the lake topic's N_p as committed
    copied: int           # records this run appended
    skipped: int          # source offsets this run skipped (--on-source-gap skip)
    source_log_end: int   # the source's log end as last seen (the last stable offset under read_committed)
    lag: int              # source_log_end - position, in offsets (as Kafka counts lag)
    waiting: bool = False  # the source was recreated below the position: the mirror waits for it to reach it


@dataclass
class MirrorSummary(JsonResult):
    """The mirror's summary on exit."""

    stopped: str  # "once" (the source's end as of the start was reached) or "signal" (a stop was requested)
    records_copied: int = 0
    bytes_copied: int = 0
    offsets_skipped: int = 0
    commits: int = 0
    duration_ms: int = 0
    partitions: list[PartitionProgress] = field(default_factory=list)


__all__ = ["MirrorSummary", "PartitionProgress"]
