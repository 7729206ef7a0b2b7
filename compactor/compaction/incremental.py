"""Phase 2, incremental: position-delete the compacted rows this run removes and append the range's kept rows.

The normal case. Two independent Spark jobs run side by side on the staging branch:

* the **delete pass** reads the view's narrow columns (partition, key, delete horizon, record bytes, and
  Iceberg's ``_file``/``_pos``), marks the rows the run removes (``phase2.classify_view``) and writes their
  positions as Iceberg position-delete files, registered by the cursor commit (``compaction.deletes``);
* the **append pass** joins the range's full rows with phase 1's masks (``phase2.new_view_rows``) and appends
  the kept rows, tombstones stamped with their delete horizon.

The view is never recopied, so a run costs in proportion to the new data plus one narrow pass over the view.
The first run of a topic is this strategy with no view to delete from.

Under a ``compaction.strategy`` other than offset, phase 1's contest already read the view and found the rows
to delete (``RunContext.contested``): the delete pass only copies their positions from the scratch table, and
the append pass is the run's critical path. The delete pass then waits until the append pass has built its
query, so that the two do not contend for the driver while the append, the critical path, is being built.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any

from compactor import failpoints
from compactor.compaction import phase2
from compactor.compaction.context import RunContext
from compactor.compaction.deletes import DeleteFileInfo, collect_delete_files, write_position_deletes
from compactor.compaction.execution import job_description
from compactor.compaction.outcome import Phase2Result, RangeFigures
from compactor.compaction.trim import trim_starts
from compactor.config import LakeConfig
from compactor.cursor import ViewStats
from compactor.spark.active import call_active


def write_incremental(ctx: RunContext, config: LakeConfig) -> Phase2Result:
    """Delete and append on the staging branch; see the module docstring."""
    plan = ctx.plan
    ctx.settings(grouped=True)
    trims = trim_starts(ctx) if plan.trim_before_ms is not None else {}
    passes: dict[str, Any] = {}
    planned = threading.Event()  # set once the append pass has built its query (or failed to)
    if not (ctx.contested and plan.ranges):
        planned.set()
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        if plan.ranges:
            passes["append"] = pool.submit(call_active, ctx.spark, _append_pass, ctx, planned)
        if plan.removes_view_rows:
            passes["delete"] = pool.submit(call_active, ctx.spark, _delete_pass, ctx, config, planned)
        failures = [f.exception() for f in passes.values() if f.exception() is not None]
    if failures:
        raise failures[0]
    removed, delete_files = passes["delete"].result() if "delete" in passes else (ViewStats(), [])
    appended, figures = passes["append"].result() if "append" in passes else (ViewStats(), RangeFigures())
    survivors = plan.view.without(removed)
    if plan.trim_before_ms is not None:
        survivors = survivors.at_least(plan.trim_before_ms)  # every surviving row is at least this new
    return Phase2Result(survivors, appended, figures, tuple(delete_files), trims)


def _delete_pass(ctx: RunContext, config: LakeConfig,
                 planned: threading.Event) -> tuple[ViewStats, list[DeleteFileInfo]]:
    """Write position deletes for the compacted rows this run removes (one narrow pass), once ``planned``."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    planned.wait()
    started = ctx.started()
    ctx.progress.phase("phase 2 deletes", "finding the compacted rows this run removes (narrow columns)")
    contested = ctx.contested_positions()  # a strategy other than offset: phase 1 found them
    doomed = (contested if contested is not None
              else ctx.classified_view(with_positions=True).where(F.col(phase2.DOOMED)))
    observed = Observation(f"doomed_{ctx.run_id}")
    location = f"{ctx.view_location.rstrip('/')}/data/compactor-deletes/{ctx.run_id}"
    with job_description(ctx.spark, f"compactor {ctx.name}: phase 2 (position deletes)"):
        write_position_deletes(doomed.observe(
            observed, *phase2.view_stats_columns("doomed_", minimums=False)), location)
    removed = ViewStats.from_metrics(observed.get, "doomed_")
    files = collect_delete_files(config, location, ctx.view_io) if removed.rows else []
    ctx.progress.phase("phase 2 deletes done", rows=removed.rows, tombstones=removed.tombstones,
                       delete_files=len(files), ms=ctx.took("delete_ms", started))
    failpoints.hit("after-delete")
    return removed, files


def _append_pass(ctx: RunContext, planned: threading.Event) -> tuple[ViewStats, RangeFigures]:
    """Append the kept rows of the new range to the staging branch; set ``planned`` once its query is built."""
    from pyspark.sql import Observation

    plan = ctx.plan
    started = ctx.started()
    read, kept = Observation(f"range_{ctx.run_id}"), Observation(f"kept_{ctx.run_id}")
    try:  # whatever happens, the delete pass must not wait for ever
        ctx.progress.phase("phase 2 appends", "writing the kept rows of the new range",
                           records=plan.records_in_range)
        rows = ctx.kept_range_rows(read).observe(kept, *phase2.view_stats_columns(""))
    finally:
        planned.set()
    with job_description(ctx.spark, f"compactor {ctx.name}: phase 2 (append the kept rows)"):
        rows.writeTo(ctx.stage_identifier).append()
    appended = ViewStats.from_metrics(kept.get)
    ctx.progress.phase("phase 2 appends done", rows=appended.rows, ms=ctx.took("append_ms", started))
    return appended, RangeFigures.from_metrics(read.get)
