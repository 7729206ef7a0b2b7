"""Where a consumer's position lands in a pinned view: initial positions, out-of-range positions and resets.

docs/guarantees.md#consumers-and-groups: a position below the view's start (retention removed the range) continues from
the compacted view for a compacted consumer with a cursor (no key's latest state is lost); otherwise
``auto.offset.reset`` decides (``earliest``, ``latest`` or ``error``), and the reset is logged, counted and
recorded for ``group describe``. A partition with no position yet (no commit) starts by the same policy,
which is not counted as a reset (Kafka's behaviour).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from compactor.errors import InputError, OffsetOutOfRangeError
from compactor.groups import TopicPartition
from readers.reader import TopicReader

log = logging.getLogger("compactor.consumer")

OffsetReset = Literal["earliest", "latest", "error"]
RESET_POLICIES = ("earliest", "latest", "error")


def check_policy(policy: str) -> OffsetReset:
    if policy not in RESET_POLICIES:
        raise InputError(f"auto_offset_reset must be one of {', '.join(RESET_POLICIES)}, got {policy!r}")
    return policy  # type: ignore[return-value]


@dataclass(frozen=True)
class Start:
    """Where a partition's read starts in a pinned view, and the reset that moved it there, if any: ``(from,
    to, reason)`` (recorded in the group store, on its clock)."""

    offset: int
    reset: tuple[int | None, int, str] | None = None


def resolve_start(reader: TopicReader, tp: TopicPartition, position: int | None, policy: OffsetReset) -> Start:
    """The start of ``tp`` in ``reader``'s pinned view for a consumer at ``position`` (None: no position)."""
    partition = tp.partition
    first, end = reader.view_start(partition), reader.pinned.end[partition]
    if position is None:
        if policy == "error":
            raise OffsetOutOfRangeError(f"{tp} has no committed position and auto_offset_reset is 'error': "
                                        "seek first, or choose earliest or latest")
        return Start(first if policy == "earliest" else end)
    if first <= position <= end:
        return Start(position)
    if position < first and reader.read_compacted and reader.cursor is not None:
        return Start(first)  # compacted: the view holds every key's latest state from its start
    where = "below the log start" if position < first else "beyond the log end"
    view = "compacted" if reader.read_compacted else "raw"
    if policy == "error":
        raise OffsetOutOfRangeError(f"position {position} of {tp} is {where} ({view} view holds [{first}, {end})) "
                                    "and auto_offset_reset is 'error': seek to a valid offset")
    target = first if policy == "earliest" else end
    log.warning("event=offset-reset partition=%s from=%d to=%d policy=%s reason=%r", tp, position, target, policy,
                where)
    return Start(target, (position, target, f"{where}: auto_offset_reset={policy}"))
