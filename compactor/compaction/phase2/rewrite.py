"""Phase 2, rewrite: write the whole compacted view afresh on the staging branch.

Used when position deletes pile up (``cursor.stats.REWRITE_DELETED_RATIO`` of the live rows) or the view has too
many files (``cursor.stats.REWRITE_FILES_PER_PARTITION`` per partition), so reads stay fast; and on request. The view's
surviving rows (``rows.surviving_rows``: the complement of what an incremental run would delete) and the new
range's kept rows are written together, each task's rows sorted by offset, replacing every data and delete
file of the branch.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from compactor.compaction.context import RunContext
from compactor.compaction.execution import job_description
from compactor.compaction.phase1.winners import Winners
from compactor.compaction.phase2 import frames, rows
from compactor.compaction.phase2.outcome import Phase2Result, RangeFigures
from compactor.cursor import ViewStats
from compactor.schema import OFFSET, PARTITION
from compactor.spark.internals import observed_metrics


def write_rewrite(run: RunContext, winners: Winners | None,
                  trims: Mapping[int, tuple[int, int | None]]) -> Phase2Result:
    """Overwrite the staging branch with the new view; see the module docstring."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    plan = run.plan
    started = time.monotonic()
    run.progress.phase("phase 2 rewrite", f"rewriting the compacted view ({plan.rewrite_reason})",
                       records=plan.records_in_range, view_rows=plan.view.rows)
    kept_old, kept_new = (Observation(f"{what}_{run.run_id}") for what in ("survivors", "kept"))
    view = frames.surviving_view_rows(run, winners).observe(kept_old, *rows.view_stats_columns(""))
    new = frames.kept_range_rows(run, winners) if winners is not None else None
    if new is not None:
        view = view.unionByName(new.rows.observe(kept_new, *rows.view_stats_columns("")))
    with job_description(run.spark, f"compactor {run.name}: phase 2 (rewrite the view)"):
        view.sortWithinPartitions(PARTITION, OFFSET).writeTo(run.stage_table).overwrite(F.lit(True))
    ms = int((time.monotonic() - started) * 1000)
    appended = ViewStats.from_metrics(observed_metrics(kept_new)) if new is not None else ViewStats()
    figures = new.figures() if new is not None else RangeFigures()
    result = Phase2Result(ViewStats.from_metrics(observed_metrics(kept_old)), appended, figures, (), trims,
                          {"rewrite_ms": ms})
    run.progress.phase("phase 2 rewrite done", rows=result.survivors.rows + result.appended.rows, ms=ms)
    return result
