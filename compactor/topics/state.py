"""A topic's durable per-partition offsets: next offset ``N_p`` and log start offset ``LSO_p``.

Both live in table properties, so they change in the same commit as the append (or the retention) that
moves them, and are read from one metadata version together with the snapshot they describe.
``N_p`` never decreases, even when retention empties a partition; ``LSO_p`` never decreases either.

Offsets strictly increase per partition. A produced topic's are dense from 0, so ``[LSO_p, N_p)`` holds one
record per offset; a mirrored topic's are its Kafka source's (``gapped``): an offset in ``[LSO_p, N_p)`` may hold
no record, and ``N_p`` may lie past the last record (the mirror's position). Offset counts (lag) are then counts
of offsets, as in Kafka, not of records.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from compactor.errors import TopicCorruptError
from compactor.properties import (
    LOG_START_BYTES_PROPERTY,
    LOG_START_OFFSETS_PROPERTY,
    LOGICAL_BYTES_PROPERTY,
    MIRROR_PROPERTY,
    NEXT_OFFSETS_PROPERTY,
    PARTITIONS_PROPERTY,
)
from compactor.topics.mirrored import MirrorState, is_mirrored


@dataclass(frozen=True)
class PartitionOffsets:
    """``N_p`` and ``LSO_p`` for every partition, as of one table metadata version."""

    next_offsets: tuple[int, ...]
    log_start_offsets: tuple[int, ...]
    logical_bytes: tuple[int, ...] = ()
    gapped: bool = False  # a mirrored topic: offsets may have gaps (see the module docstring)

    @property
    def partitions(self) -> int:
        return len(self.next_offsets)


def offsets_to_dict(values: Sequence[int]) -> dict[str, int]:
    """JSON-friendly ``{"0": n0, "1": n1, ...}`` (the form every JSON output uses)."""
    return {str(p): int(v) for p, v in enumerate(values)}


def encode_offsets(values: Sequence[int]) -> str:
    return json.dumps([int(v) for v in values], separators=(",", ":"))


def decode_offsets(text: str, partitions: int, what: str) -> tuple[int, ...]:
    try:
        values = json.loads(text)
    except json.JSONDecodeError:
        raise TopicCorruptError(f"{what} is not valid JSON: {text[:80]!r}") from None
    if (not isinstance(values, list) or len(values) != partitions
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values)):
        raise TopicCorruptError(f"{what} must be a list of {partitions} non-negative integers: {text[:80]!r}")
    return tuple(values)


def read_partition_count(properties: Mapping[str, str]) -> int:
    text = properties.get(PARTITIONS_PROPERTY)
    try:
        count = int(text) if text is not None else -1
    except ValueError:
        count = -1
    if count < 1:
        raise TopicCorruptError(f"{PARTITIONS_PROPERTY} is missing or invalid: {text!r}")
    return count


def read_offsets(properties: Mapping[str, str]) -> PartitionOffsets:
    partitions = read_partition_count(properties)
    zeros = encode_offsets([0] * partitions)
    next_offsets = decode_offsets(properties.get(NEXT_OFFSETS_PROPERTY, zeros), partitions, NEXT_OFFSETS_PROPERTY)
    starts = decode_offsets(properties.get(LOG_START_OFFSETS_PROPERTY, zeros), partitions,
                            LOG_START_OFFSETS_PROPERTY)
    if any(s > n for s, n in zip(starts, next_offsets, strict=True)):
        raise TopicCorruptError("a log start offset lies past its partition's next offset")
    logical = decode_offsets(properties.get(LOGICAL_BYTES_PROPERTY, zeros), partitions, LOGICAL_BYTES_PROPERTY)
    return PartitionOffsets(next_offsets, starts, logical, is_mirrored(properties))


def grown_properties(properties: Mapping[str, str], partitions: int) -> dict[str, str]:
    """The per-partition properties of a topic grown to ``partitions`` partitions (the new ones empty: ``N_p``,
    ``LSO_p`` and their byte counts 0), to be set in one commit. Only a mirrored topic grows, following its
    source (docs/guarantees.md#the-raw-log); fewer partitions than it has is an error."""
    offsets = read_offsets(properties)
    if partitions < offsets.partitions:
        raise TopicCorruptError(f"a topic never loses partitions: it has {offsets.partitions}, asked for "
                                f"{partitions}")
    more = [0] * (partitions - offsets.partitions)
    out = {PARTITIONS_PROPERTY: str(partitions),
           NEXT_OFFSETS_PROPERTY: encode_offsets([*offsets.next_offsets, *more]),
           LOG_START_OFFSETS_PROPERTY: encode_offsets([*offsets.log_start_offsets, *more]),
           LOGICAL_BYTES_PROPERTY: encode_offsets([*offsets.logical_bytes, *more])}
    below = properties.get(LOG_START_BYTES_PROPERTY)
    if below is not None:
        out[LOG_START_BYTES_PROPERTY] = encode_offsets(
            [*decode_offsets(below, offsets.partitions, LOG_START_BYTES_PROPERTY), *more])
    state = MirrorState.of(properties)
    if state is not None:
        out[MIRROR_PROPERTY] = state.widened(partitions).to_property()
    return out
