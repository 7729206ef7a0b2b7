"""Source gaps: where a mirror's position no longer continues its Kafka source (docs/guarantees.md#mirrors). Pure logic.

A partition's position ``pos`` (the next source offset, the lake's ``N_p``) meets the source's ``[start, end)``:

* ``start <= pos <= end``: the mirror continues at ``pos``;
* ``pos < start``: the source's retention (or ``delete_records``) removed offsets the mirror never copied;
  skipping goes on at ``start`` and skips ``start - pos`` offsets;
* the topic was **recreated** (deleted and created again): its topic id changed, or its log end fell below the
  position (``end < pos``). The new topic's offsets below ``pos`` are never copied: skipping goes on at the first
  offset at or above ``pos`` (waiting until the new topic reaches it), and counts ``|pos - start|`` offsets
  skipped. A partition already waiting so (the lake recorded the source's end below its position) is not a new
  gap when its end is still below the position, after a restart too.

A gap is an error naming the partition, the position and the source's offsets, unless the mirror was told to
skip (``--on-source-gap skip``); a skip is counted and recorded with the next commit, never silent.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceGap:
    """A gap between one partition's position and its source, and what skipping it does."""

    topic: str
    partition: int
    position: int
    start: int
    end: int
    recreated: bool
    reason: str

    @property
    def resume(self) -> int:
        """Where the mirror goes on (it waits there while the source's end is below it)."""
        return max(self.position, self.start)

    @property
    def skipped(self) -> int:
        """Source offsets skipped: those the mirror never copies."""
        return abs(self.position - self.start) if self.recreated else self.start - self.position

    def message(self) -> str:
        return (f"source gap in Kafka topic {self.topic} partition {self.partition}: the mirror's position is "
                f"{self.position} but the source holds offsets [{self.start}, {self.end}): {self.reason}. Nothing "
                f"was skipped; run again with --on-source-gap skip to go on at offset {self.resume}, skipping "
                f"{self.skipped} offset(s) (counted and shown by the summary and by status)")


def find_gap(topic: str, partition: int, position: int, start: int, end: int, *, waiting: bool = False,
             id_change: tuple[str, str] | None = None) -> SourceGap | None:
    """The gap at ``position`` in a source holding ``[start, end)`` (see the module docstring), or ``None``.

    ``waiting``: the partition already waits for a recreated source to reach its position; ``id_change`` is
    ``(recorded id, current id)`` when the topic's id changed."""
    if position == 0:
        return None  # nothing was ever copied: a new partition starts wherever the source starts
    if id_change is not None:
        return SourceGap(topic, partition, position, start, end, True,
                         f"its topic id changed from {id_change[0]} to {id_change[1]}: the topic was deleted and "
                         "created again")
    if end < position and not waiting:
        return SourceGap(topic, partition, position, start, end, True,
                         f"its log end {end} fell below the position (the topic was deleted and created again?)")
    if position < start:
        return SourceGap(topic, partition, position, start, end, False,
                         f"the source's retention removed offsets [{position}, {start}) before the mirror "
                         "copied them")
    return None


__all__ = ["SourceGap", "find_gap"]
