"""What a cursor is and how it is written into (and read back from) a snapshot summary.

Design (docs/guarantees.md#the-cursor-and-failures; docs/architecture.md):

* A topic ``ns.t`` has a sibling Iceberg table ``ns.t__compacted``: the topic's columns plus
  ``delete_horizon_ms`` (set on tombstones, KIP-534). Other engines read it as plain Iceberg; its ``main``
  branch is the current compacted view.
* **The cursor is the head of ``main``.** Its snapshot summary carries the horizons, the raw snapshot id
  ``S``, the run's ``now``, the settings used, statistics and bookkeeping (``compactor.*`` keys below).
  Readers and runs trust only this ref; the copy on the raw table (``compactor.compaction-cursor``) is for
  people and tools.
* A run writes on a private staging branch and publishes with ONE catalog commit that adds the cursor
  snapshot, moves ``main`` to it on condition that ``main`` still points at ``C`` (Iceberg's
  assert-ref-snapshot-id), tags ``C`` as ``cursor-<C>`` so the replaced cursor stays protected from expiry
  while retained, and drops the staging branch (see ``compaction.publish``).
* Cursors form a chain through ``compactor.previous-cursor``. A cursor is retained while current and for
  ``compaction.cursor.retain-ms`` after the run that replaced it, measured on recorded run clocks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pyiceberg.table.snapshots import Snapshot

from compactor.cursor.stats import CompactionStats, ViewStats
from compactor.errors import CursorCorruptError
from compactor.properties import (
    CURSOR_BYTES_AT_HORIZON,
    CURSOR_COMPACTED_START,
    CURSOR_HORIZONS,
    CURSOR_MARKER,
    CURSOR_NOW,
    CURSOR_POLICY_COMPACT,
    CURSOR_PREVIOUS,
    CURSOR_RAW_NEXT_OFFSETS,
    CURSOR_RAW_SNAPSHOT,
    CURSOR_RUN_ID,
    CURSOR_SETTINGS,
    CURSOR_STATS,
    CURSOR_VERSION,
    CURSOR_VIEW,
)
from compactor.topics.strategy import Strategy

MAIN = "main"
TAG_PREFIX = "cursor-"


def cursor_tag(snapshot_id: int) -> str:
    """The tag that keeps a replaced cursor ``snapshot_id`` from expiry while it is retained."""
    return f"{TAG_PREFIX}{snapshot_id}"


def tagged_cursor(ref: str) -> int | None:
    """The cursor a ref tags (``cursor_tag``), or ``None`` if the ref is no cursor tag."""
    if not ref.startswith(TAG_PREFIX):
        return None
    try:
        return int(ref[len(TAG_PREFIX):])
    except ValueError:
        return None


@dataclass(frozen=True)
class Cursor:
    """One published cursor: a compacted snapshot and what it was computed from."""

    snapshot_id: int
    horizons: tuple[int, ...]
    compacted_start: tuple[int, ...]
    raw_snapshot_id: int | None
    raw_next_offsets: tuple[int, ...]
    now_ms: int
    settings: dict[str, str]
    stats: CompactionStats
    view: ViewStats
    previous: int | None
    run_id: str
    policy_compact: bool = True
    bytes_at_horizon: tuple[int, ...] = ()
    timestamp_ms: int = 0
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def partitions(self) -> int:
        return len(self.horizons)

    @property
    def strategy(self) -> Strategy:
        """The ``compaction.strategy`` this cursor's view was built with (``offset`` for older cursors)."""
        return Strategy.from_settings(self.settings)

    def widened(self, partitions: int) -> Cursor:
        """This cursor for a topic of ``partitions`` partitions: a mirrored topic follows its source, whose
        partition count only grows, so partitions added since this run have no compacted rows and horizon 0
        (their whole log is the raw tail). More partitions than the topic has is a corrupt cursor."""
        if partitions == self.partitions:
            return self
        if partitions < self.partitions:
            raise CursorCorruptError(f"cursor {self.snapshot_id} has {self.partitions} partitions; the topic has "
                                     f"{partitions}")
        more = (0,) * (partitions - self.partitions)
        at_horizon = self.bytes_at_horizon + more if len(self.bytes_at_horizon) == self.partitions else ()
        return replace(self, horizons=self.horizons + more, compacted_start=self.compacted_start + more,
                       raw_next_offsets=self.raw_next_offsets + more, bytes_at_horizon=at_horizon)

    def horizons_dict(self) -> dict[str, int]:
        return {str(p): h for p, h in enumerate(self.horizons)}

    def as_json(self) -> dict[str, Any]:
        """The ``compact`` output fields of this cursor."""
        return {
            "committed": True,
            "compacted_snapshot_id": self.snapshot_id,
            "raw_snapshot_id": self.raw_snapshot_id,
            "horizons": self.horizons_dict(),
            "compacted_start": {str(p): s for p, s in enumerate(self.compacted_start)},
            "run_time_ms": self.now_ms,
            "previous_cursor": self.previous,
            "settings": self.settings,
            "strategy": self.strategy.label,
            "stats": self.stats.as_json(),
            "view": self.view.as_json(),
        }


def _int_list(props: Mapping[str, str], key: str, snapshot_id: int) -> tuple[int, ...]:
    try:
        values = json.loads(props[key])
    except (KeyError, json.JSONDecodeError):
        raise CursorCorruptError(f"cursor {snapshot_id} lacks a valid '{key}'") from None
    if not isinstance(values, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                               for v in values):
        raise CursorCorruptError(f"cursor {snapshot_id}: '{key}' is not a list of offsets")
    return tuple(values)


def parse_cursor(snapshot: Snapshot) -> Cursor:
    """Decode a cursor snapshot's summary; ``CursorCorruptError`` if it is not a well-formed cursor."""
    props = dict(snapshot.summary.additional_properties) if snapshot.summary else {}
    sid = snapshot.snapshot_id
    if props.get(CURSOR_MARKER) != CURSOR_VERSION:
        raise CursorCorruptError(f"snapshot {sid} at the head of the compacted table is not a cursor "
                                 f"(missing '{CURSOR_MARKER}')")
    horizons = _int_list(props, CURSOR_HORIZONS, sid)
    starts = _int_list(props, CURSOR_COMPACTED_START, sid)
    raw_next = _int_list(props, CURSOR_RAW_NEXT_OFFSETS, sid)
    at_horizon = _int_list(props, CURSOR_BYTES_AT_HORIZON, sid) if CURSOR_BYTES_AT_HORIZON in props else ()
    if not (len(horizons) == len(starts) == len(raw_next)) or any(s > h for s, h in zip(starts, horizons,
                                                                                        strict=True)):
        raise CursorCorruptError(f"cursor {sid}: horizons, starts and raw offsets disagree")
    try:
        now_ms = int(props[CURSOR_NOW])
        settings = json.loads(props.get(CURSOR_SETTINGS, "{}"))
        stats = CompactionStats.from_mapping(json.loads(props.get(CURSOR_STATS, "{}")))
        view = ViewStats.from_json(props.get(CURSOR_VIEW, "{}"))
        raw_sid_text = props.get(CURSOR_RAW_SNAPSHOT, "")
        raw_sid = int(raw_sid_text) if raw_sid_text else None
        previous_text = props.get(CURSOR_PREVIOUS, "")
        previous = int(previous_text) if previous_text else None
    except (KeyError, ValueError, TypeError, json.JSONDecodeError) as exc:
        raise CursorCorruptError(f"cursor {sid} carries malformed metadata: {exc}") from None
    return Cursor(
        snapshot_id=sid,
        horizons=horizons,
        compacted_start=starts,
        raw_snapshot_id=raw_sid,
        raw_next_offsets=raw_next,
        now_ms=now_ms,
        settings=settings,
        stats=stats,
        view=view,
        previous=previous,
        run_id=props.get(CURSOR_RUN_ID, ""),
        policy_compact=props.get(CURSOR_POLICY_COMPACT, "true") == "true",
        bytes_at_horizon=at_horizon,
        timestamp_ms=snapshot.timestamp_ms,
        extra={k: v for k, v in props.items() if not k.startswith("compactor.")},
    )


def cursor_properties(c: Cursor) -> dict[str, str]:
    """The snapshot summary properties that encode cursor ``c`` (inverse of ``parse_cursor``)."""
    return {
        CURSOR_MARKER: CURSOR_VERSION,
        CURSOR_HORIZONS: json.dumps(list(c.horizons), separators=(",", ":")),
        CURSOR_COMPACTED_START: json.dumps(list(c.compacted_start), separators=(",", ":")),
        CURSOR_RAW_SNAPSHOT: "" if c.raw_snapshot_id is None else str(c.raw_snapshot_id),
        CURSOR_RAW_NEXT_OFFSETS: json.dumps(list(c.raw_next_offsets), separators=(",", ":")),
        CURSOR_BYTES_AT_HORIZON: json.dumps(list(c.bytes_at_horizon), separators=(",", ":")),
        CURSOR_NOW: str(c.now_ms),
        CURSOR_SETTINGS: json.dumps(c.settings, sort_keys=True, separators=(",", ":")),
        CURSOR_STATS: json.dumps(c.stats.as_json(), sort_keys=True, separators=(",", ":")),
        CURSOR_VIEW: c.view.to_json(),
        CURSOR_PREVIOUS: "" if c.previous is None else str(c.previous),
        CURSOR_RUN_ID: c.run_id,
        CURSOR_POLICY_COMPACT: "true" if c.policy_compact else "false",
    }
