"""Phase 2, the step: write the new view on the run's staging branch, by one of two strategies (``incremental``:
position-delete the removed compacted rows and append the range's kept rows; ``rewrite``: write the whole view
afresh when deletes pile up), after the retention trim's pass when the run is one (``trim``)."""

from __future__ import annotations

from compactor.compaction.context import SHARED_KEY_TABLES, RunContext
from compactor.compaction.execution import apply_settings
from compactor.compaction.phase1.winners import Winners
from compactor.compaction.phase2.incremental import write_incremental
from compactor.compaction.phase2.outcome import Phase2Result
from compactor.compaction.phase2.rewrite import write_rewrite
from compactor.compaction.phase2.trim import trim_starts


def write_view(run: RunContext, winners: Winners | None) -> Phase2Result:
    """Write the view the plan asks for on the staging branch, from phase 1's ``winners`` (``None``: the run has
    no new range); see the module docstring."""
    plan = run.plan
    # scans report their grouping by partition (storage-partitioned joins, slices replicated), but for shared key
    # tables' append pass, whose slices join nothing and would otherwise be read one task a partition
    apply_settings(run.spark, run.layout, grouped=run.append_winners != SHARED_KEY_TABLES)
    trims = trim_starts(run, winners) if plan.trim_before_ms is not None else {}
    if plan.rewrite_reason:
        return write_rewrite(run, winners, trims)
    return write_incremental(run, winners, trims)
