"""Phase 2, rewrite: write the whole compacted view afresh on the staging branch.

Used when position deletes pile up (``plan.REWRITE_DELETED_RATIO`` of the live rows) or the view has too many
files (``plan.REWRITE_FILES_PER_PARTITION`` per partition), so reads stay fast; and on request. The view's
surviving rows (``phase2.surviving_rows``: the complement of what an incremental run would delete) and the new
range's kept rows are written together, each task's rows sorted by offset, replacing every data and delete
file of the branch.
"""

from __future__ import annotations

from compactor.compaction import phase2
from compactor.compaction.context import RunContext
from compactor.compaction.execution import job_description
from compactor.compaction.outcome import Phase2Result, RangeFigures
from compactor.compaction.trim import trim_starts
from compactor.cursor import ViewStats
from compactor.schema import OFFSET, PARTITION


def write_rewrite(ctx: RunContext) -> Phase2Result:
    """Overwrite the staging branch with the new view; see the module docstring."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    plan = ctx.plan
    started = ctx.started()
    ctx.settings(grouped=True)
    trims = trim_starts(ctx) if plan.trim_before_ms is not None else {}
    ctx.progress.phase("phase 2 rewrite", f"rewriting the compacted view ({plan.rewrite_reason})",
                       records=plan.records_in_range, view_rows=plan.view.rows)
    kept_old, read, kept_new = (Observation(f"{what}_{ctx.run_id}") for what in ("survivors", "range", "kept"))
    survivors = phase2.surviving_rows(ctx.view_at_cursor(), ctx.winning_keys(), now_ms=plan.now_ms,
                                      drop_null_keys=not plan.settings.retain_null_keys,
                                      trim_before_ms=plan.trim_before_ms, hash_keys=ctx.hash_keys)
    view = survivors.observe(kept_old, *phase2.view_stats_columns(""))
    if plan.ranges:
        new = ctx.kept_range_rows(read)
        view = view.unionByName(new.observe(kept_new, *phase2.view_stats_columns("")))
    with job_description(ctx.spark, f"compactor {ctx.name}: phase 2 (rewrite the view)"):
        view.sortWithinPartitions(PARTITION, OFFSET).writeTo(ctx.stage_identifier).overwrite(F.lit(True))
    result = Phase2Result(ViewStats.from_metrics(kept_old.get),
                          ViewStats.from_metrics(kept_new.get) if plan.ranges else ViewStats(),
                          RangeFigures.from_metrics(read.get) if plan.ranges else RangeFigures(), (), trims)
    ctx.progress.phase("phase 2 rewrite done", rows=result.survivors.rows + result.appended.rows,
                       ms=ctx.took("rewrite_ms", started))
    return result
