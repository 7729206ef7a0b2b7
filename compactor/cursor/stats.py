"""The figures a cursor carries: what its compacted rows hold (``ViewStats``) and what the run that published
it did (``CompactionStats``). Both are stored as JSON in the cursor's snapshot summary and parsed leniently, so
a cursor written by an older version (fewer fields) still reads.

The run's figures add up (docs/compaction.md, "Statistics"); with ``rows_deleted_from_view`` the compacted rows
of the previous cursor that this run removed (superseded, expired tombstones, keyless rows under ``drop``,
rows trimmed by retention) and ``rows_appended`` the new range's records it kept:

* ``records_kept = view_rows_before - rows_deleted_from_view + rows_appended`` (the rows of the new view),
* ``records_read + view_rows_before = records_kept + records_removed``,
* ``tombstones_read + tombstones_before = tombstones_kept + tombstones_dropped``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from compactor.results import JsonResult

T = TypeVar("T")

# A compacted view (a native topic's, an attached log's) is rewritten whole, instead of position deletes and
# appends, when its position-deleted rows reach this share of its live rows, or when it has this many data files
# per partition.
REWRITE_DELETED_RATIO = 0.3
REWRITE_FILES_PER_PARTITION = 64


def _lower(a: int | None, b: int | None) -> int | None:
    """The smaller of two optional lower bounds (``None`` means no such row)."""
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _from_mapping(cls: type[T], data: Mapping[str, Any]) -> T:
    """Build ``cls`` from the fields of ``data`` it knows (older or newer writers may have others)."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class ViewStats(JsonResult):
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

    def without(self, removed: ViewStats) -> ViewStats:
        """These rows after ``removed`` (a subset of them) are deleted; the minimums stay lower bounds."""
        return ViewStats(
            rows=self.rows - removed.rows,
            tombstones=self.tombstones - removed.tombstones,
            null_key_rows=self.null_key_rows - removed.null_key_rows,
            clean_bytes=self.clean_bytes - removed.clean_bytes,
            min_tombstone_delete_horizon=(self.min_tombstone_delete_horizon if self.tombstones > removed.tombstones
                                          else None),
            min_timestamp_ms=self.min_timestamp_ms if self.rows > removed.rows else None,
        )

    def plus(self, other: ViewStats) -> ViewStats:
        """These rows and ``other``'s together."""
        return ViewStats(
            rows=self.rows + other.rows,
            tombstones=self.tombstones + other.tombstones,
            null_key_rows=self.null_key_rows + other.null_key_rows,
            clean_bytes=self.clean_bytes + other.clean_bytes,
            min_tombstone_delete_horizon=_lower(self.min_tombstone_delete_horizon, other.min_tombstone_delete_horizon),
            min_timestamp_ms=_lower(self.min_timestamp_ms, other.min_timestamp_ms),
        )

    def at_least(self, timestamp_ms: int) -> ViewStats:
        """These rows, known to be no older than ``timestamp_ms`` (a tighter lower bound after a trim)."""
        if self.min_timestamp_ms is None:
            return self
        return dataclasses.replace(self, min_timestamp_ms=max(self.min_timestamp_ms, timestamp_ms))

    def to_json(self) -> str:
        return json.dumps(self.as_json(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ViewStats:
        return _from_mapping(cls, json.loads(text))

    @classmethod
    def from_metrics(cls, metrics: Mapping[str, Any], prefix: str = "") -> ViewStats:
        """From aggregates named ``<prefix><field>`` (an observation of phase 2's ``rows.view_stats_columns``)."""
        def value(name: str) -> int | None:
            found = metrics.get(prefix + name)
            return None if found is None else int(found)

        return cls(rows=value("rows") or 0, tombstones=value("tombstones") or 0,
                   null_key_rows=value("null_key_rows") or 0, clean_bytes=value("clean_bytes") or 0,
                   min_tombstone_delete_horizon=value("min_tombstone_delete_horizon"),
                   min_timestamp_ms=value("min_timestamp_ms"))


@dataclass(frozen=True)
class CompactionStats(JsonResult):
    """What one run did (docs/reference.md#json-results ``compact`` ``stats``; the arithmetic is in the module
    docstring).

    ``records_read``: raw records of the new range ``[H_p(C), H_p)``; ``records_kept``: rows of the compacted
    view the run published (old and new together); ``records_removed``: compacted rows removed plus range
    records not kept; ``unparsable_strategy_values``: keyed records of the range whose strategy header
    (``compaction.strategy=header``) held no readable number. ``bytes_read``: logical bytes (key + value +
    headers) of the range; ``bytes_written``: bytes of the data and delete files the run wrote. ``mode``:
    ``first`` (no previous view), ``incremental``
    (position deletes plus appended rows), ``rewrite`` (the whole view written afresh, ``rewrite_reason`` says
    why), ``trim`` (a retention trim under ``delete,compact``) or ``none`` (nothing was published).
    """

    records_read: int = 0
    records_kept: int = 0
    records_removed: int = 0
    tombstones_kept: int = 0
    tombstones_dropped: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    duration_ms: int = 0
    mode: str = "none"
    rewrite_reason: str | None = None
    layout: str = ""
    slots: int = 0
    view_rows_before: int = 0
    rows_deleted_from_view: int = 0
    rows_appended: int = 0
    tombstones_before: int = 0
    tombstones_read: int = 0
    view_position_deletes: int = 0
    view_data_files: int = 0
    view_delete_files: int = 0
    durations_ms: dict[str, int] = field(default_factory=dict)
    unparsable_strategy_values: int = 0

    @classmethod
    def of_run(cls, *, before: ViewStats, survivors: ViewStats, appended: ViewStats, records_read: int,
               tombstones_read: int, **figures: Any) -> CompactionStats:
        """The figures of a run that kept ``survivors`` of the ``before`` rows and appended ``appended`` rows of a
        range of ``records_read`` records (``figures``: the other fields, by name)."""
        after = survivors.plus(appended)
        return cls(records_read=records_read, records_kept=after.rows,
                   records_removed=before.rows + records_read - after.rows,
                   tombstones_kept=after.tombstones,
                   tombstones_dropped=before.tombstones + tombstones_read - after.tombstones,
                   view_rows_before=before.rows, rows_deleted_from_view=before.rows - survivors.rows,
                   rows_appended=appended.rows, tombstones_before=before.tombstones,
                   tombstones_read=tombstones_read, **figures)

    @classmethod
    def unchanged(cls, view: ViewStats, duration_ms: int) -> CompactionStats:
        """The figures of a run that published nothing: the view stays as it was."""
        return cls(records_kept=view.rows, tombstones_kept=view.tombstones, view_rows_before=view.rows,
                   tombstones_before=view.tombstones, duration_ms=duration_ms)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> CompactionStats:
        return _from_mapping(cls, data)
