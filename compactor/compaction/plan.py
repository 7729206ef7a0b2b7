"""Planning a compaction run: pure decisions from pinned metadata, testable without a JVM or a catalog.

Given the pinned cursor ``C``, the raw offsets of snapshot ``S``, the settings read once and ``now``, the plan
says what the run does (docs/guarantees.md#compaction): the new range ``[H_p(C), H_p)`` of each partition, whether
compacted rows must go without a horizon advancing (expired tombstones, keyless rows after a switch to
``drop``, a retention trim), whether to rewrite the view instead of deleting and appending, and whether there
is anything to do at all. ``execution.choose_layout`` then picks how Spark runs it (``start``, the plan step's
I/O, reads the metadata these decisions are made from).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from compactor.cursor import Cursor, ViewStats
from compactor.cursor.stats import REWRITE_DELETED_RATIO, REWRITE_FILES_PER_PARTITION
from compactor.topics.settings import TopicSettings
from compactor.topics.state import PartitionOffsets
from compactor.topics.strategy import Strategy
from compactor.topics.topic import RawFile

# A partition's winning keys are hashed in one task's memory up to this many records in its range (about 50 to
# 100 bytes each); past it the joins on keys sort both sides instead, and spill.
HASH_KEYS_LIMIT = 2_000_000
# Up to this many records in its range, a partitioned run under compaction.strategy=offset keeps no scratch table:
# phase 2's queries find the winners themselves (``phase1.winners``), each reading the range's narrow columns again.
INLINE_WINNERS_LIMIT = 1_000_000
# Up to this many records, an incremental run with inline winners finds them in the rows it appends from (a window
# over the range's full rows, sorted by key within each task) instead of finding them in a hash table of the keys
# (``compactor.udf.RangeWinners``), which reads the range's narrow columns a second time: a scan fewer to plan and
# run, for a sort of rows that are few. Measured at 200,000 records (+1% of a 200,000-record topic's 4 or 1
# partitions), the window 0.47 and 0.43 s against the table's 0.53 and 0.49 s; at 50,000 of 5,000,000 a tie.
WINDOW_WINNERS_LIMIT = 200_000
# A first run finds its winners in a window while each partition's range holds at most this many records: a task
# then sorts few rows. Past it the hash table costs less than the sort: 200,000 records in 1 partition 0.71 against
# 0.91 s (60,000: 0.44 against 0.43 s; 200,000 in 4 partitions, 50,000 each: 0.70 against 0.72 s).
FIRST_RUN_WINDOW_LIMIT = 100_000


@dataclass(frozen=True)
class CompactionPlan:
    """What one run does, decided before any data is read."""

    raw_snapshot_id: int | None
    cursor: Cursor | None
    settings: TopicSettings
    now_ms: int
    previous: tuple[int, ...]          # H_p(C), raised to the log start where retention passed it
    horizons: tuple[int, ...]          # H_p of this run
    next_offsets: tuple[int, ...]      # N_p(S)
    logical_bytes: tuple[int, ...]     # cumulative logical bytes of [0, N_p(S)) per partition
    log_starts: tuple[int, ...]        # LSO_p at S
    purge_expired: bool                # some compacted tombstone's delete horizon has passed
    purge_keyless: bool                # the view holds keyless rows and the setting is now drop
    rewrite_reason: str | None         # why the view is written afresh (None: deletes plus appends)
    trim_before_ms: int | None = None  # delete,compact retention: remove compacted rows older than this
    strategy_changed: bool = False     # the cursor was built under another compaction.strategy: rewrite
    # A mirrored topic's offsets may have gaps: its records per range, counted from the files (``partition,
    # count``); a produced topic's are dense, so a range's records are its width.
    range_counts: tuple[tuple[int, int], ...] = ()

    @property
    def ranges(self) -> dict[int, tuple[int, int]]:
        """``partition -> (H_p(C), H_p)`` for every partition whose horizon advances."""
        return {p: (lo, hi) for p, (lo, hi) in enumerate(zip(self.previous, self.horizons, strict=True)) if hi > lo}

    @property
    def range_records(self) -> dict[int, int]:
        """``partition -> how many raw records its new range holds`` (its width, or counted: ``range_counts``)."""
        counted = dict(self.range_counts)
        return {p: counted.get(p, hi - lo) for p, (lo, hi) in self.ranges.items()}

    @property
    def records_in_range(self) -> int:
        return sum(self.range_records.values())

    @property
    def partitions(self) -> int:
        return len(self.horizons)

    @property
    def view(self) -> ViewStats:
        """The compacted rows at ``C`` (none before the first run)."""
        return self.cursor.view if self.cursor else ViewStats()

    @property
    def has_work(self) -> bool:
        return (bool(self.ranges) or self.purge_expired or self.purge_keyless or self.trim_before_ms is not None
                or self.strategy_changed)

    @property
    def removes_view_rows(self) -> bool:
        """Whether compacted rows at ``C`` may be removed (superseded, expired, keyless, trimmed)."""
        return self.cursor is not None and self.has_work

    @property
    def hash_keys(self) -> bool:
        """Whether joins on the winning keys may hold one partition's keys in a task's memory."""
        return max(self.range_records.values(), default=0) <= HASH_KEYS_LIMIT

    @property
    def small_range(self) -> bool:
        """Whether phase 2's queries may compute phase 1's winners themselves instead of reading a scratch table
        (``context.RunContext.winners_inline``), under ``offset`` (the winners are the keys' highest offsets; no
        contest with the view): a small range, or any range of a first run (its only pass that needs the winners
        is the append, so they are computed once either way)."""
        return bool(self.ranges) and self.settings.strategy.by_offset and (
            self.cursor is None or self.records_in_range <= INLINE_WINNERS_LIMIT)

    @property
    def scratch_only_if_sliced(self) -> bool:
        """Whether slicing the run would cost it a scratch table that the partitioned layout does without
        (``execution.SCRATCH_WORK``): a small range (``small_range``) past the first run. A first run's sliced
        layout shares key tables instead (``context.RunContext.shared_key_tables``): 500,000 records in 1
        partition, partitioned (one task) 2.60 s, sliced 1.98 s (naive 2.37 s)."""
        return self.small_range and self.cursor is not None

    @property
    def winners_in_window(self) -> bool:
        """Whether the append pass finds the range's winners among the rows it reads (``rows.latest_range_rows``)
        instead of finding them in a hash table of the keys (``winners_in_key_table``) or joining phase 1's
        masks: a small range under ``offset`` (``WINDOW_WINNERS_LIMIT``; a first run's by its partitions' ranges,
        ``FIRST_RUN_WINDOW_LIMIT``)."""
        if not self.small_range:
            return False
        if self.cursor is None:
            return max(self.range_records.values(), default=0) <= FIRST_RUN_WINDOW_LIMIT
        return self.records_in_range <= WINDOW_WINNERS_LIMIT

    @property
    def winners_in_key_table(self) -> bool:
        """Whether the append pass finds an inline run's winners in a hash table of the range's keys per task
        (``compactor.udf.RangeWinners``) instead of joining offset masks aggregated by Spark: a range past the
        window's limits whose partitions' ranges fit a task's memory (``hash_keys``)."""
        return self.small_range and not self.winners_in_window and self.hash_keys

    @property
    def contests_view(self) -> bool:
        """Whether phase 1 contests the range's winners with the view's rows (a strategy other than ``offset``,
        and a view to contest): its scratch table then also holds the compacted rows each winner supersedes."""
        return not self.settings.strategy.by_offset and self.cursor is not None

    @property
    def deletes_contested(self) -> bool:
        """Whether the compacted rows this run removes are exactly those phase 1's contest found superseded, so
        that the delete pass reads them from the scratch table instead of classifying the whole view: not when
        expired tombstones, keyless rows or a trim go as well, nor without a new range."""
        return (self.contests_view and bool(self.ranges) and not self.purge_expired and not self.purge_keyless
                and self.trim_before_ms is None)

    @property
    def published_reason(self) -> str:
        """A published run's reason: ``compacted``, and why the view was rewritten after a strategy change."""
        return f"compacted; view rewritten: {self.rewrite_reason}" if self.strategy_changed else "compacted"

    @property
    def mode(self) -> str:
        """``first``, ``trim``, ``rewrite`` or ``incremental`` (see ``cursor.stats.CompactionStats``)."""
        if self.cursor is None:
            return "first"
        if self.trim_before_ms is not None and not self.ranges:
            return "trim" if self.rewrite_reason is None else "rewrite"
        return "incremental" if self.rewrite_reason is None else "rewrite"


def timestamp_bounds(files: Sequence[RawFile]) -> tuple[int, int] | None:
    """The smallest and largest timestamp (µs) of ``files`` from their statistics; ``None`` if any lacks them."""
    lows = [f.min_timestamp_us for f in files]
    highs = [f.max_timestamp_us for f in files]
    if not files or any(v is None for v in lows + highs):
        return None
    return min(v for v in lows if v is not None), max(v for v in highs if v is not None)


def previous_horizons(cursor: Cursor | None, log_starts: Sequence[int]) -> tuple[int, ...]:
    """Where each partition's new range starts: ``H_p(C)``, or the log start before any compaction or where
    retention removed records past the horizon (docs/guarantees.md#retention, "Policy changes")."""
    if cursor is None:
        return tuple(log_starts)
    return tuple(max(h, s) for h, s in zip(cursor.horizons, log_starts, strict=True))


def strategy_change(cursor: Cursor | None, settings: TopicSettings) -> str | None:
    """Why the view must be rewritten for a change of ``compaction.strategy`` since ``cursor``, or ``None``."""
    if cursor is None:
        return None
    built = Strategy.from_settings(cursor.settings)
    if built == settings.strategy:
        return None
    return f"compaction.strategy changed from {built.label} to {settings.strategy.label}"


def rewrite_reason(cursor: Cursor | None, partitions: int, *, requested: bool,
                   settings: TopicSettings | None = None) -> str | None:
    """Why this run rewrites the view whole, or ``None`` to delete and append (the first run only appends)."""
    if cursor is None:
        return None
    changed = strategy_change(cursor, settings) if settings is not None else None
    if changed:
        return changed
    if requested:
        return "requested"
    deleted = cursor.stats.view_position_deletes
    if cursor.view.rows and deleted >= REWRITE_DELETED_RATIO * cursor.view.rows:
        return f"{deleted} position-deleted rows >= {REWRITE_DELETED_RATIO:.0%} of {cursor.view.rows} live rows"
    files = cursor.stats.view_data_files
    if files > REWRITE_FILES_PER_PARTITION * partitions:
        return f"{files} data files > {REWRITE_FILES_PER_PARTITION} per partition"
    return None


def make_plan(*, raw_snapshot_id: int | None, cursor: Cursor | None, offsets: PartitionOffsets,
              horizons: Sequence[int], settings: TopicSettings, now_ms: int, force_rewrite: bool = False,
              trim_before_ms: int | None = None) -> CompactionPlan:
    """The plan of a run whose horizons were computed as ``horizons`` (``compute_horizons``, or the previous
    horizons unchanged for a retention trim)."""
    view = cursor.view if cursor else ViewStats()
    purge_expired = (view.tombstones > 0 and view.min_tombstone_delete_horizon is not None
                     and view.min_tombstone_delete_horizon <= now_ms)
    purge_keyless = not settings.retain_null_keys and view.null_key_rows > 0
    trim = trim_before_ms
    if trim is not None and (view.rows == 0 or view.min_timestamp_ms is None or view.min_timestamp_ms >= trim):
        trim = None  # every compacted row is at least this new (the minimum is a lower bound)
    return CompactionPlan(
        raw_snapshot_id=raw_snapshot_id,
        cursor=cursor,
        settings=settings,
        now_ms=now_ms,
        previous=previous_horizons(cursor, offsets.log_start_offsets),
        horizons=tuple(horizons),
        next_offsets=tuple(offsets.next_offsets),
        logical_bytes=tuple(offsets.logical_bytes),
        log_starts=tuple(offsets.log_start_offsets),
        purge_expired=purge_expired,
        purge_keyless=purge_keyless,
        rewrite_reason=rewrite_reason(cursor, offsets.partitions, requested=force_rewrite, settings=settings),
        trim_before_ms=trim,
        strategy_changed=strategy_change(cursor, settings) is not None,
    )
