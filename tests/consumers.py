"""Helpers of the consumer tests: a clock the test moves, and producing numbered records."""

from __future__ import annotations

from collections.abc import Sequence

from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.topics.records import ProducerRecord


class FakeClock:
    """Milliseconds that move only when the test says so (leases, commits, resets)."""

    def __init__(self, now_ms: int = 1_767_225_600_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def produce_keys(lake: Lake, name: str, keys: Sequence[str], partition: int = 0,
                 values: Sequence[str | None] | None = None, timestamp_ms: int | None = None) -> list[int]:
    """Append one record per key to ``partition`` (values default to ``v-KEY``); returns their offsets."""
    vals = values if values is not None else [f"v-{k}" for k in keys]
    records = [ProducerRecord(key=k.encode(), value=None if v is None else v.encode(), partition=partition,
                              timestamp_ms=timestamp_ms) for k, v in zip(keys, vals, strict=True)]
    return [o for _, o in produce(lake.topic(name), records).offsets]
