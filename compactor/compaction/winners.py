"""Phase 1, the step: find each key's winner (its latest offset, or its highest rank under another
``compaction.strategy``) over the new range and keep the winners in the scratch
table (``compaction.scratch``), as a Spark job of its own, so it is timed, reported and failure-tested as a
step (failure point ``after-phase-1`` fires once it has run). The DataFrame logic is ``phase1``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyiceberg.catalog import Catalog

from compactor.compaction import phase1, ranking
from compactor.compaction.context import RunContext
from compactor.compaction.execution import job_description
from compactor.compaction.scratch import create_scratch
from compactor.schema import KEY, OFFSET, PARTITION
from compactor.topics.strategy import HEADER_STRATEGY, TIMESTAMP_STRATEGY

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Observation


@dataclass(frozen=True)
class Winners:
    """What phase 1 found: how many keys won (one row each in the view) and over how many mask words."""

    keys: int
    words: int


def find_winners(ctx: RunContext, catalog: Catalog) -> Winners:
    """Run phase 1 over the plan's new range into a new scratch table (``ctx.scratch``)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    started = ctx.started()
    ctx.progress.phase("phase 1", "finding each key's latest offset (partition, key, offset only)",
                       records=ctx.plan.records_in_range, layout=ctx.layout.kind)
    contest = not ctx.plan.settings.strategy.by_offset and ctx.plan.cursor is not None
    ctx.scratch = create_scratch(catalog, ctx.name, ctx.view_location, ctx.plan.now_ms, ctx.run_id, contest=contest)
    # sliced: the scan is split into slices and the aggregation exchanges (partition, key, offset); partitioned:
    # the scan is grouped by partition and the aggregation runs in place
    ctx.settings(grouped=not ctx.layout.sliced)
    strategy = ctx.plan.settings.strategy
    narrow = ctx.raw_range().select(*phase1.NARROW_COLUMNS, *ranking.rank_inputs(strategy))
    parsed = Observation(f"strategy_{ctx.run_id}") if strategy.kind == HEADER_STRATEGY else None
    rows = _scratch_rows(ctx, narrow, parsed)
    observed = Observation(f"phase1_{ctx.run_id}")
    masks_only = F.col(KEY).isNull()
    counted = rows.observe(observed, F.count(F.when(masks_only, F.lit(1))).alias("words"),
                           phase1.winner_count(masks_only))
    quoted = ".".join(f"`{part}`" for part in (ctx.catalog_name, *ctx.scratch.split(".")))
    with job_description(ctx.spark, f"compactor {ctx.name}: phase 1 (latest offset per key)"):
        counted.writeTo(quoted).append()
    metrics = observed.get
    winners = Winners(keys=int(metrics.get("winners") or 0), words=int(metrics.get("words") or 0))
    if parsed is not None:
        ctx.unparsable = int(parsed.get.get("unparsable") or 0)
    ctx.progress.phase("phase 1 done", keys=winners.keys, mask_words=winners.words,
                       ms=ctx.took("phase1_ms", started))
    return winners


def _scratch_rows(ctx: RunContext, narrow: DataFrame, parsed: Observation | None) -> DataFrame:
    """The scratch rows of the range's winners: each key's latest offset under ``offset``; else its highest rank
    (``compaction.ranking``), contested with the view's row of the key when there is a view, with the unparsable
    header values of the range's keyed records counted in ``parsed``."""
    from pyspark.sql import functions as F

    strategy = ctx.plan.settings.strategy
    if strategy.by_offset:
        return phase1.scratch_rows(phase1.latest_offsets(narrow), with_keys=ctx.plan.cursor is not None)
    pack = ranking.packing(strategy, ctx.raw_timestamps, ctx.plan.ranges)
    header = parsed is not None
    ranked = ranking.with_rank(narrow, strategy, pack, unparsable=ranking.UNPARSABLE if header else None)
    winners = ranking.ranked_latest(ranked, pack, count_unparsable=header,
                                    always_ranked=strategy.kind == TIMESTAMP_STRATEGY)
    if parsed is not None:  # counted per key by the aggregation, summed here over far fewer rows than records
        winners = winners.observe(parsed, F.sum(ranking.UNPARSABLE).alias("unparsable"))
    if ctx.plan.cursor is None:
        return phase1.scratch_rows(winners.select(PARTITION, KEY, OFFSET), with_keys=False)
    return ranking.contest_scratch_rows(ranking.contest(winners, ctx.view_at_cursor(), strategy,
                                                        hash_keys=ctx.hash_keys))
