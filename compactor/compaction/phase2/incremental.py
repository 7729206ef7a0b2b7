"""Phase 2, incremental: position-delete the compacted rows this run removes and append the range's kept rows.

The normal case. Two independent Spark jobs run side by side, each building and planning its own query on the
driver while the other's tasks run:

* the **delete pass** reads the view's narrow columns (partition, key, delete horizon, record bytes, and
  Iceberg's ``_file``/``_pos``), marks the rows the run removes (``rows.classify_view``) and writes their
  positions as Iceberg position-delete files;
* the **append pass** joins the range's full rows with phase 1's masks (``rows.new_view_rows``), or for a small
  range finds each key's latest among them (``rows.latest_range_rows``), and writes the kept rows, tombstones
  stamped with their delete horizon, as new data files.

Both write from Spark's tasks through Iceberg's own writers (``files``) and commit nothing: the cursor commit
registers both kinds of file (``publish``), so the run's only snapshot is the cursor's. The view is never recopied,
so a run costs in proportion to the new data plus one narrow pass over the view. Neither pass writes to the
staging branch (a rewrite does). The first run of a topic is this strategy with no view to delete from.

Under a ``compaction.strategy`` other than offset, phase 1's contest already read the view and found the rows
to delete (``CompactionPlan.deletes_contested``): the delete pass only copies their positions from the scratch
table, and the append pass is the run's critical path. The delete pass then waits until the append pass has
built its query, so that the two do not contend for the driver while the append, the critical path, is being
built.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Mapping
from typing import Any

from pyiceberg.manifest import DataFile

from compactor import failpoints
from compactor.compaction.context import RunContext
from compactor.compaction.execution import job_description
from compactor.compaction.phase1.winners import Winners
from compactor.compaction.phase2 import frames, rows
from compactor.compaction.phase2.files import write_data_files, write_delete_files
from compactor.compaction.phase2.outcome import Phase2Result, RangeFigures
from compactor.cursor import ViewStats
from compactor.iceberg.manifests import DeleteFileInfo
from compactor.spark.active import call_active
from compactor.spark.internals import observed_metrics


def write_incremental(run: RunContext, winners: Winners | None,
                      trims: Mapping[int, tuple[int, int | None]]) -> Phase2Result:
    """Write the run's position deletes and kept rows as files for the cursor commit; see the module docstring."""
    plan = run.plan
    passes: dict[str, Any] = {}
    planned = threading.Event()  # set once the append pass has built its query (or failed to)
    if not (plan.deletes_contested and plan.ranges):
        planned.set()
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        if winners is not None:
            passes["append"] = pool.submit(call_active, run.spark, _append_pass, run, winners, planned)
        if plan.removes_view_rows:
            passes["delete"] = pool.submit(call_active, run.spark, _delete_pass, run, winners, planned)
        failures = [f.exception() for f in passes.values() if f.exception() is not None]
    if failures:
        raise failures[0]
    removed, delete_files, delete_ms = passes["delete"].result() if "delete" in passes else (ViewStats(), (), None)
    appended, figures, data_files, append_ms = (passes["append"].result() if "append" in passes
                                                else (ViewStats(), RangeFigures(), (), None))
    survivors = plan.view.without(removed)
    if plan.trim_before_ms is not None:
        survivors = survivors.at_least(plan.trim_before_ms)  # every surviving row is at least this new
    durations = {name: ms for name, ms in (("delete_ms", delete_ms), ("append_ms", append_ms)) if ms is not None}
    return Phase2Result(survivors, appended, figures, delete_files, trims, durations, data_files)


def _delete_pass(run: RunContext, winners: Winners | None,
                 planned: threading.Event) -> tuple[ViewStats, tuple[DeleteFileInfo, ...], int]:
    """Write position deletes for the compacted rows this run removes (one narrow pass), once ``planned``."""
    from pyspark.sql import Observation

    planned.wait()
    started = time.monotonic()
    run.progress.phase("phase 2 deletes", "finding the compacted rows this run removes (narrow columns)")
    observed = Observation(f"doomed_{run.run_id}")
    doomed = frames.removed_positions(run, winners).observe(
        observed, *rows.view_stats_columns("doomed_", minimums=False))
    with job_description(run.spark, f"compactor {run.name}: phase 2 (position deletes)"):
        files = write_delete_files(doomed, run.view, run.view_table, run.run_id)
    removed = ViewStats.from_metrics(observed_metrics(observed), "doomed_")
    ms = int((time.monotonic() - started) * 1000)
    run.progress.phase("phase 2 deletes done", rows=removed.rows, tombstones=removed.tombstones,
                       delete_files=len(files), ms=ms)
    failpoints.hit("after-delete")
    return removed, files, ms


def _append_pass(run: RunContext, winners: Winners,
                 planned: threading.Event) -> tuple[ViewStats, RangeFigures, tuple[DataFile, ...], int]:
    """Write the kept rows of the new range as new data files of the view; set ``planned`` once its query is
    built."""
    from pyspark.sql import Observation

    started = time.monotonic()
    kept = Observation(f"kept_{run.run_id}")
    try:  # whatever happens, the delete pass must not wait for ever
        run.progress.phase("phase 2 appends", "writing the kept rows of the new range",
                           records=run.plan.records_in_range, winners=run.append_winners)
        new = frames.kept_range_rows(run, winners)
        new_rows = new.rows.observe(kept, *rows.view_stats_columns(""))
    finally:
        planned.set()
    with job_description(run.spark, f"compactor {run.name}: phase 2 (append the kept rows)"):
        data_files = write_data_files(new_rows, run.view, run.view_table, run.run_id)
    appended = ViewStats.from_metrics(observed_metrics(kept))
    ms = int((time.monotonic() - started) * 1000)
    run.progress.phase("phase 2 appends done", rows=appended.rows, data_files=len(data_files), ms=ms)
    return appended, new.figures(), data_files, ms
