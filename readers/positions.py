"""Start positions for reading: earliest, latest, an offset, or a timestamp, per partition."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from compactor.errors import InputError

Kind = Literal["earliest", "latest", "offset", "timestamp"]
ResetPolicy = Literal["earliest", "latest"]


@dataclass(frozen=True)
class StartPosition:
    """Where to start reading one partition."""

    kind: Kind
    value: int | None = None

    @classmethod
    def earliest(cls) -> StartPosition:
        return cls("earliest")

    @classmethod
    def latest(cls) -> StartPosition:
        return cls("latest")

    @classmethod
    def at_offset(cls, offset: int) -> StartPosition:
        return cls("offset", offset)

    @classmethod
    def at_timestamp(cls, timestamp_ms: int) -> StartPosition:
        return cls("timestamp", timestamp_ms)

    def __str__(self) -> str:
        return self.kind if self.value is None else f"{self.kind} {self.value}"


StartSpec = StartPosition | int | str


def normalise_start(spec: StartSpec) -> StartPosition:
    """Accept a ``StartPosition``, a plain offset, or ``"earliest"`` / ``"latest"``."""
    if isinstance(spec, StartPosition):
        return spec
    if isinstance(spec, bool):
        raise InputError(f"not a start position: {spec!r}")
    if isinstance(spec, int):
        return StartPosition.at_offset(spec)
    if spec == "earliest":
        return StartPosition.earliest()
    if spec == "latest":
        return StartPosition.latest()
    raise InputError(f"not a start position: {spec!r} (use an offset, 'earliest', 'latest' or StartPosition)")


def parse_pairs(pairs: Iterable[str], kind: Kind, option: str) -> dict[int, StartPosition]:
    """Parse ``P:V`` pairs from the command line (``--from-offset 0:17``)."""
    out: dict[int, StartPosition] = {}
    for pair in pairs:
        left, sep, right = pair.partition(":")
        try:
            if not sep:
                raise ValueError
            partition, value = int(left), int(right)
        except ValueError:
            raise InputError(f"{option} expects PARTITION:{'OFFSET' if kind == 'offset' else 'TIMESTAMP_MS'}, "
                             f"got {pair!r}") from None
        if partition < 0:
            raise InputError(f"{option}: partition must be >= 0, got {partition}")
        if partition in out:
            raise InputError(f"{option}: partition {partition} is given more than once")
        out[partition] = StartPosition(kind, value)
    return out


def merge_starts(*groups: Mapping[int, StartPosition]) -> dict[int, StartPosition]:
    merged: dict[int, StartPosition] = {}
    for group in groups:
        for partition, position in group.items():
            if partition in merged:
                raise InputError(f"partition {partition} has more than one start position")
            merged[partition] = position
    return merged
