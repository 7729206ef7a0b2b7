"""Phase 1, the step: find each key's winner (its latest offset, or its highest rank under another
``compaction.strategy``) over the new range, and hand the winners to phase 2 in one of three forms (failure point
``after-phase-1`` fires once the step has run):

* **in the run's scratch table** (``compaction.scratch``): a Spark job of its own writes them as mask and key rows,
  which phase 2's passes read back partition by partition (storage-partitioned joins, in either layout);
* **inline** (``RunContext.winners_inline``: a small range under ``offset``, partitioned layout): no job and no
  table; the winners are lazy DataFrames that each of phase 2's queries computes itself, reading the range's narrow
  columns once more. A scratch table costs a job, its creation, a commit, a scan per pass and its drop whatever the
  range's size; a small range costs less to read twice. A smaller range (``CompactionPlan.winners_in_window``, a
  first run's too) needs not even the DataFrames: phase 2's passes find the winners among the range's rows
  themselves.
* **as bits in files** (``context.SHARED_KEY_TABLES``: a sliced first run under ``offset``): one job of hash tables
  that share each partition's keys among the task slots (``compactor.udf.SharedWinners``) writes a bit per offset
  through the compacted table's file IO, which the append pass's slices read back; the run deletes the files.

The DataFrame logic is ``latest`` and ``ranking``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyiceberg.catalog import Catalog

from compactor.compaction.context import SHARED_KEY_TABLES, RunContext
from compactor.compaction.execution import apply_settings, job_description, read_range, read_table
from compactor.compaction.phase1 import latest, ranking
from compactor.compaction.scratch import create_scratch
from compactor.schema import KEY, OFFSET, PARTITION
from compactor.spark.expressions import offset_masks
from compactor.spark.internals import observed_metrics
from compactor.spark.udf import SharedWinners, find_shared_winners
from compactor.topics.strategy import HEADER_STRATEGY, TIMESTAMP_STRATEGY

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Observation


@dataclass(frozen=True)
class Winners:
    """What phase 1 found: how many keys won (one row each in the view) and over how many mask words, how many
    header values of the range held no number (``header`` strategy), and how long it took; or, inline, the
    winners themselves as lazy DataFrames (``inline``), counted by nobody."""

    keys: int | None
    words: int | None
    unparsable: int
    ms: int
    inline: InlineWinners | None = None


@dataclass(frozen=True)
class InlineWinners:
    """The winners as phase 2's queries compute them: the same rows as the scratch table's, as offset masks
    (``masks``: partition, word, mask) and winning keys (``keys``: partition, key); neither when phase 2 finds
    them among the range's rows itself (``CompactionPlan.winners_in_window``); or, for a sliced first run, already
    found and written as bits per offset (``shared``, ``context.SHARED_KEY_TABLES``)."""

    masks: DataFrame | None = None
    keys: DataFrame | None = None
    shared: SharedWinners | None = None  # found by phase 1's own job, written as bits (``SHARED_KEY_TABLES``)


def find_winners(run: RunContext, catalog: Catalog) -> Winners:
    """Run phase 1 over the plan's new range: into the run's scratch table (``run.scratch``), or inline."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    started = time.monotonic()
    plan = run.plan
    in_window = run.winners_inline and plan.winners_in_window
    run.progress.phase("phase 1", "left to phase 2's passes, which find the winners among the range's rows"
                       if in_window else "finding each key's latest offset (partition, key, offset only)",
                       records=plan.records_in_range, layout=run.layout.kind, inline=run.winners_inline)
    if in_window:  # nothing to build here
        return Winners(None, None, 0, int((time.monotonic() - started) * 1000), InlineWinners())
    if run.append_winners == SHARED_KEY_TABLES:
        return _shared_winners(run, started)
    if run.winners_inline:
        narrow = read_range(run.spark, run.raw_table, plan.ranges, run.layout)
        found = latest.latest_offsets(narrow.select(*latest.NARROW_COLUMNS))
        return Winners(None, None, 0, int((time.monotonic() - started) * 1000),
                       InlineWinners(offset_masks(found), found.select(PARTITION, KEY)))
    create_scratch(catalog, run.name, run.view_location, plan.now_ms, run.run_id, contest=plan.contests_view)
    # sliced: the scan is split into slices and the aggregation exchanges (partition, key, offset); partitioned:
    # the scan is grouped by partition and the aggregation runs in place
    apply_settings(run.spark, run.layout, grouped=not run.layout.sliced)
    strategy = plan.settings.strategy
    narrow = read_range(run.spark, run.raw_table, plan.ranges, run.layout).select(
        *latest.NARROW_COLUMNS, *ranking.rank_inputs(strategy))
    parsed = Observation(f"strategy_{run.run_id}") if strategy.kind == HEADER_STRATEGY else None
    rows = _scratch_rows(run, narrow, parsed)
    observed = Observation(f"phase1_{run.run_id}")
    masks_only = F.col(KEY).isNull()
    counted = rows.observe(observed, F.count(F.when(masks_only, F.lit(1))).alias("words"),
                           latest.winner_count(masks_only))
    with job_description(run.spark, f"compactor {run.name}: phase 1 (latest offset per key)"):
        counted.writeTo(run.scratch_table).append()
    metrics = observed_metrics(observed)
    winners = Winners(keys=int(metrics.get("winners") or 0), words=int(metrics.get("words") or 0),
                      unparsable=int(observed_metrics(parsed).get("unparsable") or 0) if parsed is not None else 0,
                      ms=int((time.monotonic() - started) * 1000))
    run.progress.phase("phase 1 done", keys=winners.keys, mask_words=winners.words, ms=winners.ms)
    return winners


def _shared_winners(run: RunContext, started: float) -> Winners:
    """Phase 1 as one job of key tables (``udf.find_shared_winners``): the range's narrow columns read grouped by
    partition, ``run.key_table_buckets`` times, the winners written as bits below the run's scratch location for the
    append pass's slices (the run deletes them at its end)."""
    apply_settings(run.spark, run.layout, grouped=True)  # a task per partition (each bucket's)
    narrow = read_range(run.spark, run.raw_table, run.plan.ranges, None).select(*latest.NARROW_COLUMNS)
    with job_description(run.spark, f"compactor {run.name}: phase 1 (latest offset per key, in key tables)"):
        shared = find_shared_winners(narrow, run.view_table, run.scratch_location, run.key_table_buckets)
    winners = Winners(keys=shared.keys, words=shared.words, unparsable=0, ms=int((time.monotonic() - started) * 1000),
                      inline=InlineWinners(shared=shared))
    run.progress.phase("phase 1 done", keys=winners.keys, mask_words=winners.words, ms=winners.ms,
                       buckets=run.key_table_buckets)
    return winners


def _scratch_rows(run: RunContext, narrow: DataFrame, parsed: Observation | None) -> DataFrame:
    """The scratch rows of the range's winners: each key's latest offset under ``offset``; else its highest rank
    (``ranking``), contested with the view's row of the key when there is a view, with the unparsable header
    values of the range's keyed records counted in ``parsed``."""
    from pyspark.sql import functions as F

    plan = run.plan
    strategy = plan.settings.strategy
    if strategy.by_offset:
        return latest.scratch_rows(latest.latest_offsets(narrow), with_keys=plan.cursor is not None)
    pack = ranking.packing(strategy, run.raw_timestamps, plan.ranges)
    header = parsed is not None
    ranked = ranking.with_rank(narrow, strategy, pack, unparsable=ranking.UNPARSABLE if header else None)
    winners = ranking.ranked_latest(ranked, pack, count_unparsable=header,
                                    always_ranked=strategy.kind == TIMESTAMP_STRATEGY)
    if parsed is not None:  # counted per key by the aggregation, summed here over far fewer rows than records
        winners = winners.observe(parsed, F.sum(ranking.UNPARSABLE).alias("unparsable"))
    if plan.cursor is None:
        return latest.scratch_rows(winners.select(PARTITION, KEY, OFFSET), with_keys=False)
    view = read_table(run.spark, run.view_table, plan.cursor.snapshot_id, run.layout, run.layout.view_split_bytes)
    return ranking.contest_scratch_rows(ranking.contest(winners, view, strategy, hash_keys=plan.hash_keys))
