"""The base of every typed result the product returns (compaction, retention, status, produce, describe).

Results are dataclasses whose field names are the JSON field names of ``docs/reference.md``, so renaming
a field is a type error in the code that builds it, not a surprise in a user's script. ``as_json`` renders the
dataclass (nested results included) as the JSON object the command line prints.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


class JsonResult:
    """Mixin for result dataclasses: ``as_json()`` is ``dataclasses.asdict`` of the result."""

    def as_json(self) -> dict[str, Any]:
        result: dict[str, Any] = dataclasses.asdict(self)  # type: ignore[call-overload]
        return result


@dataclass
class CompactOutcome(JsonResult):
    """The fields every ``compact`` result starts with, a topic's (``compactor.compaction.job.CompactionResult``)
    and an attached log's (``compactor.attach.compaction.AttachedCompactionResult``): the ``compact`` fields of
    docs/reference.md#json-results, in this order."""

    committed: bool
    topic: str
    compacted_snapshot_id: int | None
    raw_snapshot_id: int | None
    horizons: dict[str, int]
    run_time_ms: int
