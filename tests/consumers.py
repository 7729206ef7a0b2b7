"""Helpers of the consumer and group tests: clocks the test moves, and producing numbered records.

``FakeClock`` is both kinds of clock a group needs: the group store's (``store_clock``: the one every lease is
judged on) and a member's own (durations, and the timer of its background heartbeat, which runs when the test
moves time, in the test's thread). ``SkewedClock`` is a member's clock that reads ahead of (or behind) the
store's by a fixed amount, for hosts whose clocks disagree.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.topics.records import ProducerRecord


@dataclass
class _Timer:
    interval_ms: int
    fn: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class FakeClock:
    """Milliseconds that move only when the test says so; timers fire, in order, as time moves past them."""

    now: int = 1_767_225_600_000
    _due: list[tuple[int, int, _Timer]] = field(default_factory=list)
    _order: itertools.count[int] = field(default_factory=itertools.count)

    def __call__(self) -> int:
        return self.now

    def now_ms(self) -> int:
        return self.now

    def every(self, interval_ms: int, fn: Callable[[], None], name: str = "") -> _Timer:
        timer = _Timer(interval_ms, fn)
        heapq.heappush(self._due, (self.now + interval_ms, next(self._order), timer))
        return timer

    def advance(self, ms: int) -> None:
        """Move time by ``ms``, running each timer due on the way at its own time."""
        target = self.now + ms
        while self._due and self._due[0][0] <= target:
            at, _, timer = heapq.heappop(self._due)
            if timer.cancelled:
                continue
            self.now = max(self.now, at)
            timer.fn()
            heapq.heappush(self._due, (at + timer.interval_ms, next(self._order), timer))
        self.now = target


@dataclass
class SkewedClock:
    """A member's clock ``skew_ms`` ahead of ``world`` (behind if negative); its timers run on the world's."""

    world: FakeClock
    skew_ms: int

    def __call__(self) -> int:
        return self.world.now + self.skew_ms

    def now_ms(self) -> int:
        return self.world.now + self.skew_ms

    def every(self, interval_ms: int, fn: Callable[[], None], name: str = "") -> _Timer:
        return self.world.every(interval_ms, fn, name)


def store_clock(lake: Lake, clock: Callable[[], int]) -> None:
    """Make ``clock`` the group store's clock for ``lake`` (every member's leases are judged on it)."""
    from compactor.groups import GroupStore

    with contextlib.suppress(TypeError):  # a version that judged leases on each member's clock: nothing to replace
        GroupStore(lake, clock=clock)  # type: ignore[call-arg, unused-ignore]


def produce_keys(lake: Lake, name: str, keys: Sequence[str], partition: int = 0,
                 values: Sequence[str | None] | None = None, timestamp_ms: int | None = None) -> list[int]:
    """Append one record per key to ``partition`` (values default to ``v-KEY``); returns their offsets."""
    vals = values if values is not None else [f"v-{k}" for k in keys]
    records = [ProducerRecord(key=k.encode(), value=None if v is None else v.encode(), partition=partition,
                              timestamp_ms=timestamp_ms) for k, v in zip(keys, vals, strict=True)]
    return [o for _, o in produce(lake.topic(name), records).offsets]
