"""A consumer's own clock: durations on this host (heartbeat and auto-commit intervals, ``max.poll.interval.ms``,
its estimate of its lease) and the timer that runs its background heartbeat.

Who owns a partition is never decided on this clock: leases are judged on the group store's
(``groups.backend``). A test passes a clock whose ``every`` runs the timers as the test moves time, so nothing
in the tests sleeps or races a thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

log = logging.getLogger("compactor.consumer")


class Ticker(Protocol):
    def cancel(self) -> None: ...


@runtime_checkable
class LocalClock(Protocol):
    """Milliseconds on this host, and timers."""

    def now_ms(self) -> int: ...

    def every(self, interval_ms: int, fn: Callable[[], None], name: str) -> Ticker:
        """Call ``fn`` every ``interval_ms`` until the ticker is cancelled."""


class _ThreadTicker:
    def __init__(self, interval_ms: int, fn: Callable[[], None], name: str) -> None:
        self._stop = threading.Event()
        self._interval_s = interval_ms / 1000
        self._fn = fn
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self._fn()
            except Exception:  # a timer must not die: the next tick tries again
                log.exception("event=background-task-failed")

    def cancel(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=30)


class WallClock:
    """The host's monotonic clock, and timers on daemon threads."""

    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def every(self, interval_ms: int, fn: Callable[[], None], name: str) -> Ticker:
        return _ThreadTicker(interval_ms, fn, name)


class CallableClock(WallClock):
    """A plain ``() -> milliseconds`` function as a clock (timers on daemon threads)."""

    def __init__(self, fn: Callable[[], int]) -> None:
        self.fn = fn

    def now_ms(self) -> int:
        return int(self.fn())


def as_clock(clock: LocalClock | Callable[[], int] | None) -> LocalClock:
    if clock is None:
        return WallClock()
    if isinstance(clock, LocalClock):
        return clock
    return CallableClock(clock)
