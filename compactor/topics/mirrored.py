"""A mirrored topic's record of its Kafka source (docs/guarantees.md#mirrors), kept in one table property.

A topic whose table carries ``compactor.mirror`` is a mirror: its offsets are its Kafka source's, so they strictly
increase per partition but may have gaps (transaction markers, aborted records, records Kafka's cleaner or
retention removed). The mirror's position per partition is the topic's ``N_p`` itself, which moves in the same
commit as the rows it appends; this record changes in that commit too, with what the mirror saw of the source:

* ``source``: the Kafka topic, and ``topic_id``: its Kafka topic id when last seen (a topic deleted and created
  again gets a new one);
* ``skipped``: per partition, how many source offsets the mirror skipped (``--on-source-gap skip``), cumulative;
* ``source_log_end``: per partition, the source's log end (the last stable offset under ``read_committed``) as
  the mirror saw it at ``observed_ms``, so ``status`` shows the lag to the source without contacting Kafka.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from compactor.errors import TopicCorruptError
from compactor.properties import MIRROR_PROPERTY


def _counts(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                              for v in value):
        raise TopicCorruptError(f"{MIRROR_PROPERTY}: '{what}' must be a list of non-negative integers")
    return tuple(value)


def _padded(values: Sequence[int], partitions: int) -> tuple[int, ...]:
    return (tuple(values) + (0,) * partitions)[:max(partitions, len(values))]


@dataclass(frozen=True)
class MirrorState:
    """What a mirrored topic records about its Kafka source (see the module docstring)."""

    source: str
    topic_id: str | None = None
    skipped: tuple[int, ...] = ()
    source_log_end: tuple[int, ...] = ()
    observed_ms: int | None = None

    @classmethod
    def of(cls, properties: Mapping[str, str]) -> MirrorState | None:
        """The record in a topic's properties, or ``None`` for a topic that is not a mirror."""
        text = properties.get(MIRROR_PROPERTY)
        if text is None:
            return None
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise TopicCorruptError(f"{MIRROR_PROPERTY} is not valid JSON: {text[:80]!r}") from None
        if not isinstance(value, dict) or not isinstance(value.get("source"), str):
            raise TopicCorruptError(f"{MIRROR_PROPERTY} must be an object naming its 'source': {text[:80]!r}")
        topic_id, observed = value.get("topic_id"), value.get("observed_ms")
        return cls(value["source"], topic_id if isinstance(topic_id, str) else None,
                   _counts(value.get("skipped", []), "skipped"),
                   _counts(value.get("source_log_end", []), "source_log_end"),
                   observed if isinstance(observed, int) and not isinstance(observed, bool) else None)

    def to_property(self) -> str:
        return json.dumps({"source": self.source, "topic_id": self.topic_id, "skipped": list(self.skipped),
                           "source_log_end": list(self.source_log_end), "observed_ms": self.observed_ms},
                          separators=(",", ":"))

    def widened(self, partitions: int) -> MirrorState:
        """The record with at least ``partitions`` entries per list (partitions added at the source: zeros)."""
        return replace(self, skipped=_padded(self.skipped, partitions),
                       source_log_end=_padded(self.source_log_end, partitions))

    def skipped_at(self, partition: int) -> int:
        return self.skipped[partition] if partition < len(self.skipped) else 0


def is_mirrored(properties: Mapping[str, str]) -> bool:
    """Whether a topic's offsets are a Kafka source's (and so may have gaps)."""
    return MIRROR_PROPERTY in properties


__all__ = ["MirrorState", "is_mirrored"]
