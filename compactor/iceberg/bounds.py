"""Per-file statistics the product plans with: offset and timestamp bounds of data files.

Raw files hold one partition and a contiguous offset range, so a file's lower and upper ``offset`` bounds
say exactly which records it holds; its ``timestamp`` bounds drive time-based retention and the lag rule.
Everything here reads manifest metadata only, never data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pyiceberg.conversions import from_bytes
from pyiceberg.types import LongType, TimestamptzType

from compactor.schema import OFFSET_FIELD_ID

BoundKind = Literal["long", "ts"]
NO_UPPER_BOUND = 2**63 - 1


def file_bound(bounds: Mapping[int, bytes] | None, field_id: int, kind: BoundKind) -> int | None:
    """A file's lower or upper bound of one ``long`` or ``timestamptz`` column (microseconds), if recorded."""
    if not bounds or field_id not in bounds:
        return None
    value = from_bytes(LongType() if kind == "long" else TimestamptzType(), bounds[field_id])
    return int(value)


def task_range(task: Any) -> tuple[int, int]:
    """``(first, last)`` offset of a scan task's data file from its statistics (unknown: the widest range)."""
    lo = file_bound(task.file.lower_bounds, OFFSET_FIELD_ID, "long")
    hi = file_bound(task.file.upper_bounds, OFFSET_FIELD_ID, "long")
    return (lo if lo is not None else -1, hi if hi is not None else NO_UPPER_BOUND)
