"""What producing returns: three types, one per way of asking.

* ``BatchSummary``: one committed (or replayed) batch, as the command line prints it for columnar input and
  ``produce_dataframe`` returns it (its JSON fields: ``batch_id``, ``records``, ``duplicate``, ``snapshot_id``,
  ``attempts``, ``first_offsets``, ``counts``);
* ``ProduceResult``: that summary plus where each record landed, in input order (``produce``,
  ``produce_arrow``, the command line's JSON Lines output, the buffered producer);
* ``RecordMetadata``: where one record sent by ``Producer.send`` landed.

Internally a commit's outcome is the batch's ``BatchEntry`` (``producing.batch_ids``: snapshot, round-robin
start, per-partition base and count), the same entry the batch-id record keeps. A replay's result is made here
too, the last step of a produce: a re-sent batch must place as many records in each partition as the original
(``check_replay``), and its records then get the original's offsets.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from compactor.producing.batch_ids import BatchEntry
from compactor.producing.placements import Placements, same_batch
from compactor.results import JsonResult


class RecordMetadata(NamedTuple):
    """Where a sent record landed."""

    partition: int
    offset: int


@dataclass(frozen=True)
class BatchSummary(JsonResult):
    """One committed (or replayed) batch: what the command line prints for columnar input."""

    batch_id: str | None
    records: int
    duplicate: bool
    snapshot_id: int | None
    attempts: int
    first_offsets: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, entry: BatchEntry | None, duplicate: bool = False, attempts: int = 0,
           batch_id: str | None = None) -> BatchSummary:
        """The summary of the batch committed as ``entry`` (``None``: an empty batch, nothing committed)."""
        if entry is None:
            return cls(batch_id, 0, False, None, 0)
        return cls(entry.batch_id, sum(count for _, _, count in entry.plan), duplicate, entry.snapshot_id, attempts,
                   {str(p): base for p, base, _ in entry.plan}, {str(p): count for p, _, count in entry.plan})


def check_replay(entry: BatchEntry, counts: np.ndarray) -> None:
    """A re-sent batch must put as many records in each partition (``counts``) as the batch committed as
    ``entry`` did (else ``BatchIdConflictError``)."""
    same_batch(counts, entry.arrays(len(counts))[1], entry.batch_id)


def landed_summary(entry: BatchEntry, duplicate: bool, attempts: int, counts: np.ndarray) -> BatchSummary:
    """The summary of a batch whose records per partition are ``counts``, landed as ``entry`` (a replay's is
    checked against the original's first)."""
    if duplicate:
        check_replay(entry, counts)
    return BatchSummary.of(entry, duplicate, attempts)


class ProduceResult:
    """A batch's summary and where each of its records landed, resolved from its placements in input order
    (``resolve`` streams them; ``partitions`` / ``offset_array`` / ``offsets`` hold them all)."""

    @classmethod
    def landed(cls, entry: BatchEntry | None, duplicate: bool, attempts: int, placements: Placements, partitions: int,
               rr_start: int, now_ms: int) -> ProduceResult:
        """The result of a batch whose rows are ``placements`` (keyless ones placed from ``rr_start``), landed as
        ``entry`` (``None``: empty, nothing committed). A replay (``duplicate``) is checked against the original
        and its keyless rows shifted onto the original's round-robin start."""
        if entry is None:
            return cls(BatchSummary.of(None), None, placements, partitions, 0, now_ms)
        shift = entry.rr_start - rr_start if duplicate else 0
        summary = landed_summary(entry, duplicate, attempts, placements.counts(partitions, shift))
        return cls(summary, entry, placements, partitions, shift, now_ms)

    def __init__(self, summary: BatchSummary, entry: BatchEntry | None, placements: Placements, partitions: int,
                 rr_shift: int, now_ms: int) -> None:
        self.summary = summary
        self.now_ms = now_ms
        self.records = placements.rows if entry is not None else 0
        self._entry = entry
        self._placements = placements
        self._partitions = partitions
        self._rr_shift = rr_shift
        self._resolved: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def batch_id(self) -> str | None:
        return self.summary.batch_id

    @property
    def snapshot_id(self) -> int | None:
        return self.summary.snapshot_id

    @property
    def duplicate(self) -> bool:
        return self.summary.duplicate

    @property
    def attempts(self) -> int:
        return self.summary.attempts

    def resolve(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(partition, offset)`` arrays per chunk of input, in input order (nothing for an empty batch)."""
        if self._resolved is not None:
            yield self._resolved
            return
        if self._entry is None:
            return
        base, _ = self._entry.arrays(self._partitions)
        yield from self._placements.resolve(base, self._partitions, self._rr_shift)

    def close(self) -> None:
        """Release the placements (a spooled batch's temporary file)."""
        self._placements.close()

    def materialise(self) -> ProduceResult:
        """Resolve every record's placement into arrays, then release the placements."""
        if self._resolved is None:
            parts, offsets = zip(*self.resolve(), strict=True) if self._entry is not None else ((), ())
            self._resolved = (np.concatenate(parts) if parts else np.zeros(0, np.int32),
                              np.concatenate(offsets) if offsets else np.zeros(0, np.int64))
            self.close()
        return self

    @property
    def partitions(self) -> np.ndarray:
        return self.materialise()._resolved[0]  # type: ignore[index]

    @property
    def offset_array(self) -> np.ndarray:
        return self.materialise()._resolved[1]  # type: ignore[index]

    @property
    def offsets(self) -> list[tuple[int, int]]:
        """``(partition, offset)`` per record, in input order (Python objects: for small batches)."""
        return list(zip(self.partitions.tolist(), self.offset_array.tolist(), strict=True))


__all__ = ["BatchSummary", "ProduceResult", "RecordMetadata", "check_replay", "landed_summary"]
