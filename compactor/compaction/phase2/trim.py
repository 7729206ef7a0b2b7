"""The retention trim's extra pass (``delete,compact``): per partition, how many compacted rows the trim
removes and the lowest offset the view keeps, so the cursor's compacted start can advance (docs/guarantees.md#readers).
One narrow pass over the view that returns a row per partition: nothing record-sized reaches the driver."""

from __future__ import annotations

from compactor.compaction.context import RunContext
from compactor.compaction.execution import job_description
from compactor.compaction.phase1.winners import Winners
from compactor.compaction.phase2 import frames, rows
from compactor.schema import PARTITION


def trim_starts(run: RunContext, winners: Winners | None) -> dict[int, tuple[int, int | None]]:
    """``partition -> (rows trimmed, lowest offset kept or None)`` for a run with ``trim_before_ms``."""
    classified = frames.classified_view(run, winners)
    with job_description(run.spark, f"compactor {run.name}: retention trim (compacted start per partition)"):
        found = rows.trim_starts(classified).collect()
    return {int(row[PARTITION]): (int(row["trimmed"]), None if row["first_kept"] is None else int(row["first_kept"]))
            for row in found}
