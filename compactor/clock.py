"""The one clock reading a command uses for all of its decisions (``--now-ms`` or the wall clock)."""

from __future__ import annotations

import time

from compactor.errors import InputError

# The largest record timestamp (9999-12-31T23:59:59.999Z), as Kafka's tools accept.
MAX_TIMESTAMP_MS = 253402300799999


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def resolve_now_ms(now_ms: int | None) -> int:
    """``now_ms`` if given (validated), else the wall clock."""
    if now_ms is None:
        return wall_clock_ms()
    if isinstance(now_ms, bool) or not isinstance(now_ms, int) or not 0 <= now_ms <= MAX_TIMESTAMP_MS:
        raise InputError(f"--now-ms must be milliseconds since the epoch in [0, {MAX_TIMESTAMP_MS}], got {now_ms!r}")
    return now_ms
