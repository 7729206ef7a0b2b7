"""Where each record of a batch landed, kept compactly until the batch commits, then turned into offsets.

During staging every row gets a partition code (``p`` for keyed or explicitly placed rows, ``-(p + 1)`` for
keyless ones, which follow the round-robin start). After the commit the codes are replayed in input order with
running per-partition counters to give ``(partition, offset)`` per row. Keeping only an int32 per row (in
memory, or spooled to a temporary file for streamed input) means no Python object per record, and lets a
re-sent batch be replayed onto the original placement even if its keyless rows started elsewhere. A batch
that carries its offsets may have gaps (a mirrored topic), which counters cannot replay: its ranks (offset
minus base) are kept as well, spooled beside the codes (``keep_ranks``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from compactor.errors import BatchIdConflictError
from compactor.producing.partitioning import Grouping

SPOOL_CHUNK_ROWS = 1 << 16


def encode(partitions: np.ndarray, keyless: np.ndarray) -> np.ndarray:
    """Partition codes: ``p``, or ``-(p + 1)`` for keyless (round-robin) rows."""
    return np.where(keyless, -(partitions.astype(np.int32) + 1), partitions.astype(np.int32)).astype(np.int32)


class Placements:
    """Partition codes of one batch in input order, in memory or spooled to a temporary file."""

    def __init__(self, spool_dir: str | None = None, *, spool: bool = False, keep_ranks: bool = False) -> None:
        self._chunks: list[np.ndarray] = []
        self._ranks: list[np.ndarray] | None = None if spool else []
        self._file: tempfile._TemporaryFileWrapper[bytes] | None = None
        self._rank_file: tempfile._TemporaryFileWrapper[bytes] | None = None
        if spool:
            self._file = tempfile.NamedTemporaryFile(prefix="compactor-placements-", dir=spool_dir)  # noqa: SIM115
            if keep_ranks:
                self._rank_file = tempfile.NamedTemporaryFile(  # noqa: SIM115
                    prefix="compactor-ranks-", dir=spool_dir)
        self.rows = 0

    def append(self, codes: np.ndarray, ranks: np.ndarray | None = None) -> None:
        """Add a chunk's codes (and, in memory or with ``keep_ranks``, its ranks within partitions, which spare
        ``resolve`` a sort, and replay carried offsets)."""
        self.rows += len(codes)
        if self._file is not None:
            self._file.write(codes.astype("<i4").tobytes())
            if self._rank_file is not None:
                assert ranks is not None, "keep_ranks needs every chunk's ranks"
                self._rank_file.write(ranks.astype("<i8").tobytes())
            return
        self._chunks.append(codes)
        if self._ranks is not None and ranks is not None:
            self._ranks.append(ranks)
        else:
            self._ranks = None

    def chunks(self) -> Iterator[np.ndarray]:
        if self._file is None:
            yield from self._chunks
            return
        self._file.flush()
        with Path(self._file.name).open("rb") as stream:
            while True:
                data = stream.read(SPOOL_CHUNK_ROWS * 4)
                if not data:
                    return
                yield np.frombuffer(data, "<i4").astype(np.int32)

    def _spooled_ranks(self) -> Iterator[np.ndarray]:
        assert self._rank_file is not None
        self._rank_file.flush()
        with Path(self._rank_file.name).open("rb") as stream:
            while data := stream.read(SPOOL_CHUNK_ROWS * 8):
                yield np.frombuffer(data, "<i8").astype(np.int64)

    def close(self) -> None:
        if self._rank_file is not None:
            self._rank_file.close()
            self._rank_file = None
        if self._file is not None:
            self._file.close()
            self._file = None
        self._chunks = []
        self._ranks = []

    def resolve(self, base: np.ndarray, partitions: int, rr_shift: int = 0) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(partition, offset)`` arrays per chunk, in input order; keyless rows shifted by ``rr_shift``."""
        base = np.asarray(base, np.int64)
        if rr_shift == 0 and (self._ranks is not None or self._rank_file is not None):
            pairs = (zip(self._chunks, self._ranks, strict=True) if self._ranks is not None
                     else zip(self.chunks(), self._spooled_ranks(), strict=True))
            for codes, ranks in pairs:
                parts = decode(codes, partitions)
                yield parts, base[parts] + ranks
            return
        running = base.copy()
        for codes in self.chunks():
            parts = decode(codes, partitions, rr_shift)
            offsets = running[parts] + Grouping.of(parts, partitions).within()
            running += np.bincount(parts, minlength=partitions).astype(np.int64)
            yield parts, offsets

    def counts(self, partitions: int, rr_shift: int = 0) -> np.ndarray:
        total = np.zeros(partitions, np.int64)
        for codes in self.chunks():
            total += np.bincount(decode(codes, partitions, rr_shift), minlength=partitions).astype(np.int64)
        return total


def decode(codes: np.ndarray, partitions: int, rr_shift: int = 0) -> np.ndarray:
    keyless = codes < 0
    if not keyless.any():
        return codes
    shifted = (-(codes.astype(np.int64) + 1) + rr_shift) % partitions
    return np.where(keyless, shifted, codes).astype(np.int32)


def same_batch(mine: np.ndarray, entry_counts: np.ndarray, batch_id: str | None = None) -> None:
    """Raise ``BatchIdConflictError`` unless both batches put as many records in each partition."""
    if not np.array_equal(mine, entry_counts):
        name = "batch id" if batch_id is None else f"batch id {batch_id!r}"
        raise BatchIdConflictError(
            f"{name} was already used for a different batch: it committed {_records(entry_counts)}, this batch "
            f"has {_records(mine)}; nothing was appended (give new data a new batch id)")


def _records(counts: np.ndarray) -> str:
    """``3 records (partition 0: 2, partition 1: 1)``: a batch's records per partition, empty ones left out."""
    total = int(counts.sum())
    per_partition = ", ".join(f"partition {p}: {int(n)}" for p, n in enumerate(counts) if n)
    return f"{total} record{'' if total == 1 else 's'}" + (f" ({per_partition})" if per_partition else "")


__all__ = ["Placements", "decode", "encode", "same_batch"]
