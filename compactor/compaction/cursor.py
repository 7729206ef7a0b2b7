"""The compaction cursor (Pulsar's ``__compaction`` cursor) and the compacted table that holds it.

Design (SEMANTICS section 3; README "Architecture"):

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

import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from compactor.catalog import translate_storage_errors
from compactor.errors import CursorCorruptError
from compactor.topics.naming import TopicName

CURSOR_MARKER = "compactor.cursor"
CURSOR_VERSION = "v1"
K_HORIZONS = "compactor.horizons"
K_COMPACTED_START = "compactor.compacted-start"
K_RAW_SNAPSHOT = "compactor.raw-snapshot-id"
K_RAW_NEXT_OFFSETS = "compactor.raw-next-offsets"
K_BYTES_AT_HORIZON = "compactor.bytes-at-horizon"
K_NOW = "compactor.now-ms"
K_SETTINGS = "compactor.settings"
K_STATS = "compactor.stats"
K_VIEW = "compactor.view"
K_PREVIOUS = "compactor.previous-cursor"
K_RUN_ID = "compactor.run-id"
K_POLICY_COMPACT = "compactor.policy-compact"

MAIN = "main"
TAG_PREFIX = "cursor-"
STAGE_PREFIX = "compactor-run-"


@dataclass(frozen=True)
class ViewStats:
    """Bookkeeping about the compacted rows a cursor holds (drives cheap decisions in the next run).

    Counts and ``clean_bytes`` are exact. The two minimums are lower bounds: exact after a first run or a
    rewrite; an incremental run only lowers them (it knows what it adds, not what the removed rows held),
    so at worst a later run makes a pass that finds nothing to expire.
    """

    rows: int = 0
    tombstones: int = 0
    null_key_rows: int = 0
    clean_bytes: int = 0
    min_tombstone_delete_horizon: int | None = None
    min_timestamp_ms: int | None = None

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ViewStats:
        data = json.loads(text)
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


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
    stats: dict[str, Any]
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
            "stats": self.stats,
            "view": self.view.__dict__,
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
    horizons = _int_list(props, K_HORIZONS, sid)
    starts = _int_list(props, K_COMPACTED_START, sid)
    raw_next = _int_list(props, K_RAW_NEXT_OFFSETS, sid)
    at_horizon = _int_list(props, K_BYTES_AT_HORIZON, sid) if K_BYTES_AT_HORIZON in props else ()
    if not (len(horizons) == len(starts) == len(raw_next)) or any(s > h for s, h in zip(starts, horizons,
                                                                                        strict=True)):
        raise CursorCorruptError(f"cursor {sid}: horizons, starts and raw offsets disagree")
    try:
        now_ms = int(props[K_NOW])
        settings = json.loads(props.get(K_SETTINGS, "{}"))
        stats = json.loads(props.get(K_STATS, "{}"))
        view = ViewStats.from_json(props.get(K_VIEW, "{}"))
        raw_sid_text = props.get(K_RAW_SNAPSHOT, "")
        raw_sid = int(raw_sid_text) if raw_sid_text else None
        previous_text = props.get(K_PREVIOUS, "")
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
        run_id=props.get(K_RUN_ID, ""),
        policy_compact=props.get(K_POLICY_COMPACT, "true") == "true",
        bytes_at_horizon=at_horizon,
        timestamp_ms=snapshot.timestamp_ms,
        extra={k: v for k, v in props.items() if not k.startswith("compactor.")},
    )


def cursor_properties(c: Cursor) -> dict[str, str]:
    """The snapshot summary properties that encode cursor ``c`` (inverse of ``parse_cursor``)."""
    return {
        CURSOR_MARKER: CURSOR_VERSION,
        K_HORIZONS: json.dumps(list(c.horizons), separators=(",", ":")),
        K_COMPACTED_START: json.dumps(list(c.compacted_start), separators=(",", ":")),
        K_RAW_SNAPSHOT: "" if c.raw_snapshot_id is None else str(c.raw_snapshot_id),
        K_RAW_NEXT_OFFSETS: json.dumps(list(c.raw_next_offsets), separators=(",", ":")),
        K_BYTES_AT_HORIZON: json.dumps(list(c.bytes_at_horizon), separators=(",", ":")),
        K_NOW: str(c.now_ms),
        K_SETTINGS: json.dumps(c.settings, sort_keys=True, separators=(",", ":")),
        K_STATS: json.dumps(c.stats, sort_keys=True, separators=(",", ":")),
        K_VIEW: c.view.to_json(),
        K_PREVIOUS: "" if c.previous is None else str(c.previous),
        K_RUN_ID: c.run_id,
        K_POLICY_COMPACT: "true" if c.policy_compact else "false",
    }


@dataclass(frozen=True)
class CompactedState:
    """The compacted table as loaded at one moment: the table (pinned metadata) and its current cursor."""

    table: Table
    cursor: Cursor | None

    def snapshot(self, snapshot_id: int) -> Snapshot | None:
        return self.table.metadata.snapshot_by_id(snapshot_id)


def load_compacted(catalog: Any, name: TopicName) -> CompactedState | None:
    """Load ``ns.t__compacted`` and parse its cursor; ``None`` if the table does not exist."""
    with translate_storage_errors(f"loading the compacted view of {name}"):
        try:
            table = catalog.load_table(name.compacted_identifier)
        except NoSuchTableError:
            return None
    head = table.metadata.snapshot_by_name(MAIN)
    if head is None:
        if MAIN in table.metadata.refs:
            raise CursorCorruptError(f"the compacted view of {name} names a missing snapshot "
                                     f"{table.metadata.refs[MAIN].snapshot_id}")
        return CompactedState(table, None)
    return CompactedState(table, parse_cursor(head))


def cursor_chain(state: CompactedState) -> list[Cursor]:
    """The current cursor and its predecessors still present in the table's metadata, newest first."""
    out: list[Cursor] = []
    current = state.cursor
    seen: set[int] = set()
    while current is not None and current.snapshot_id not in seen:
        out.append(current)
        seen.add(current.snapshot_id)
        if current.previous is None:
            break
        previous = state.snapshot(current.previous)
        if previous is None:
            break
        try:
            current = parse_cursor(previous)
        except CursorCorruptError:
            break
    return out


def retained_cursors(state: CompactedState, now_ms: int, retain_ms: int) -> list[Cursor]:
    """Cursors retained at ``now_ms``: the current one, and each predecessor replaced < retain_ms ago.

    "Replaced at" is the recorded clock of the run that published the successor (never a commit time).
    """
    chain = cursor_chain(state)
    if not chain:
        return []
    retained = [chain[0]]
    for successor, cursor in itertools.pairwise(chain):
        if successor.now_ms + retain_ms > now_ms:
            retained.append(cursor)
    return retained
