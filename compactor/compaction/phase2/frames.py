"""The DataFrames phase 2 reads, from the run's data (``context.RunContext``) and phase 1's winners: the new
range's rows, the view at the cursor ``C`` and the winners (phase 1's scratch table, or its inline DataFrame),
combined by the pure logic of ``rows``. Each is a lazy Spark read, built when a pass needs it (after the pass has
set the job session for its jobs)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from compactor.compaction.context import KEY_TABLE, SHARED_KEY_TABLES, WINDOW, RunContext
from compactor.compaction.execution import read_range, read_table
from compactor.compaction.phase1.latest import NARROW_COLUMNS
from compactor.compaction.phase1.winners import Winners
from compactor.compaction.phase2 import rows
from compactor.compaction.phase2.outcome import RangeFigures
from compactor.spark.internals import observed_metrics
from compactor.spark.udf import LatestRows, keep_latest, keep_shared

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def view_at_cursor(run: RunContext) -> DataFrame:
    """The compacted rows of the pinned cursor ``C``."""
    cursor = run.plan.cursor
    if cursor is None:
        raise ValueError("the view at the cursor needs a cursor")
    return read_table(run.spark, run.view_table, cursor.snapshot_id, run.layout, run.layout.view_split_bytes)


def _scratch(run: RunContext) -> DataFrame:
    return read_table(run.spark, run.scratch_table, None, run.layout)


def winning_keys(run: RunContext, winners: Winners | None) -> DataFrame | None:
    """Phase 1's winning keys ``(partition, key)``, or the range's own keys where phase 1 left the winners to
    phase 2 (``plan.winners_in_window``: under ``offset`` every key of the range wins); ``None`` when the run has no
    new range (no phase 1)."""
    if winners is None:
        return None
    if winners.inline is not None:
        if winners.inline.keys is not None:
            return winners.inline.keys
        return rows.range_keys(read_range(run.spark, run.raw_table, run.plan.ranges, run.layout))
    return rows.key_rows(_scratch(run))


def _masks(run: RunContext, winners: Winners) -> DataFrame:
    """Phase 1's winners as offset masks ``(partition, word, mask)``."""
    if winners.inline is not None:
        if winners.inline.masks is None:
            raise ValueError("phase 1 built no masks: the append pass finds the winners in a window")
        return winners.inline.masks
    return rows.mask_rows(_scratch(run))


@dataclass(frozen=True)
class KeptRows:
    """The new range's rows the view keeps, and the raw records of the range as the job that reads them counts them
    (``figures``: call it once that job has run)."""

    rows: DataFrame
    figures: Callable[[], RangeFigures]


def kept_range_rows(run: RunContext, winners: Winners) -> KeptRows:
    """The new range's rows the view keeps (``rows.new_view_rows``; ``rows.latest_range_rows`` when the plan finds
    the winners in the range's own rows; ``rows.key_table_range_rows`` when a hash table of the range's keys per
    task finds them, or phase 1's shared key tables did), with the range's records and tombstones as the job reading
    them counts them (``rows.range_stats_columns``, or the key tables' own count)."""
    from pyspark.sql import Observation

    plan = run.plan
    way = run.append_winners
    range_rows = read_range(run.spark, run.raw_table, plan.ranges,
                            run.layout.unjoined() if way == SHARED_KEY_TABLES else run.layout)
    retain, retention = plan.settings.retain_null_keys, plan.settings.delete_retention_ms
    if way in (KEY_TABLE, SHARED_KEY_TABLES):
        found = _key_table_rows(range_rows, winners, shared=way == SHARED_KEY_TABLES)
        return KeptRows(rows.key_table_range_rows(found.rows, retain_null_keys=retain, now_ms=plan.now_ms,
                                                  delete_retention_ms=retention),
                        lambda: RangeFigures(*found.counts()))
    read = Observation(f"range_{run.run_id}")
    range_rows = range_rows.observe(read, *rows.range_stats_columns())
    if way == WINDOW:
        kept = rows.latest_range_rows(range_rows, retain_null_keys=retain, now_ms=plan.now_ms,
                                      delete_retention_ms=retention)
    else:
        kept = rows.new_view_rows(range_rows, _masks(run, winners), retain_null_keys=retain, now_ms=plan.now_ms,
                                  delete_retention_ms=retention)
    return KeptRows(kept, lambda: RangeFigures.from_metrics(observed_metrics(read)))


def _key_table_rows(range_rows: DataFrame, winners: Winners, *, shared: bool) -> LatestRows:
    """The range's rows a key table passes on: a table per task of the range read twice (``keep_latest``), or the
    bits of the tables phase 1 shared among tasks (``keep_shared``)."""
    flagged = rows.with_tombstone_flag(range_rows)
    if not shared:
        return keep_latest(range_rows.select(*NARROW_COLUMNS), flagged, rows.TOMBSTONE_FLAG)
    if winners.inline is None or winners.inline.shared is None:
        raise ValueError("phase 1 found no shared winners")
    return keep_shared(flagged, winners.inline.shared, rows.TOMBSTONE_FLAG)


def classified_view(run: RunContext, winners: Winners | None, *, with_positions: bool = False) -> DataFrame:
    """The compacted rows of ``C``, each marked with whether this run removes it (``rows.classify_view``)."""
    plan = run.plan
    return rows.classify_view(view_at_cursor(run), winning_keys(run, winners), now_ms=plan.now_ms,
                              drop_null_keys=not plan.settings.retain_null_keys, with_positions=with_positions,
                              trim_before_ms=plan.trim_before_ms, hash_keys=plan.hash_keys)


def removed_positions(run: RunContext, winners: Winners | None) -> DataFrame:
    """The compacted rows this run removes, with their positions (``_file``, ``_pos``), as the delete pass writes
    them: read from the scratch table where phase 1's contest found them (``plan.deletes_contested``), else found
    by classifying the view's narrow columns."""
    from pyspark.sql import functions as F

    if run.plan.deletes_contested:
        return rows.contested_rows(_scratch(run))
    return classified_view(run, winners, with_positions=True).where(F.col(rows.DOOMED))


def surviving_view_rows(run: RunContext, winners: Winners | None) -> DataFrame:
    """The full compacted rows this run keeps (``rows.surviving_rows``), for a rewrite."""
    plan = run.plan
    return rows.surviving_rows(view_at_cursor(run), winning_keys(run, winners), now_ms=plan.now_ms,
                               drop_null_keys=not plan.settings.retain_null_keys,
                               trim_before_ms=plan.trim_before_ms, hash_keys=plan.hash_keys)
