"""What phase 2 produced, whichever way it wrote the view: the figures the publish step builds the cursor from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyiceberg.manifest import DataFile

from compactor.cursor import ViewStats
from compactor.iceberg.manifests import DeleteFileInfo


@dataclass(frozen=True)
class RangeFigures:
    """The raw records of the new range as phase 2 read them (the count is also a density check)."""

    records: int = 0
    tombstones: int = 0

    @classmethod
    def from_metrics(cls, metrics: Mapping[str, object]) -> RangeFigures:
        return cls(int(metrics.get("records") or 0), int(metrics.get("tombstones") or 0))  # type: ignore[call-overload]


@dataclass(frozen=True)
class Phase2Result:
    """The new view as phase 2 wrote it: on the staging branch (a rewrite), or as files for the cursor commit.

    ``survivors``: the compacted rows of ``C`` it keeps; ``appended``: the rows of the new range it added;
    ``delete_files``: position deletes still to register with the cursor commit (incremental runs);
    ``data_files``: the kept rows' data files, also registered by the cursor commit (incremental runs);
    ``trims``: per partition trimmed by a retention trim, how many rows went and the lowest offset kept;
    ``durations_ms``: how long its passes took (``delete_ms``, ``append_ms`` or ``rewrite_ms``).
    """

    survivors: ViewStats
    appended: ViewStats
    range: RangeFigures = RangeFigures()
    delete_files: tuple[DeleteFileInfo, ...] = ()
    trims: Mapping[int, tuple[int, int | None]] = field(default_factory=dict)
    durations_ms: Mapping[str, int] = field(default_factory=dict)
    data_files: tuple[DataFile, ...] = ()
