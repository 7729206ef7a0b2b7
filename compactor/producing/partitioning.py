"""Planning a batch, vectorised: each row's partition and its rank within that partition, in input order.

Partitions: an explicit ``partition`` wins; otherwise Kafka's murmur2 of the key; keyless rows go round-robin
from the batch's round-robin start (kept for the batch's life, so a re-plan after a lost race moves only
offsets, never partitions). A row's offset is ``base_p + rank``, where ``rank`` counts the batch's earlier rows
of the same partition, so offsets are dense and follow input order per partition whatever ``base_p`` becomes.
Planning is incremental: a batch may arrive in chunks (a streamed file), and the counters carry over.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from compactor.errors import InvalidRecordError
from compactor.producing.arrow_input import KEY, OFFSET, PARTITION, RowNumbers
from compactor.topics.partitioner import partitions_for_keys

SMALL_PARTITION_COUNT = 16


@dataclass(frozen=True)
class Grouping:
    """Rows grouped by partition, keeping input order within each group: group ``g`` holds the rows
    ``order[bounds[g]:bounds[g + 1]]``, all of partition ``keys[g]``."""

    order: np.ndarray
    keys: np.ndarray
    bounds: np.ndarray

    @classmethod
    def of(cls, partitions: np.ndarray, count: int) -> Grouping:
        if count <= SMALL_PARTITION_COUNT:  # a few comparisons beat a sort
            members = [np.flatnonzero(partitions == q) for q in range(count)]
            present = [q for q in range(count) if len(members[q])]
            order = np.concatenate([members[q] for q in present]) if present else np.zeros(0, np.int64)
            sizes = np.asarray([len(members[q]) for q in present], np.int64)
            keys = np.asarray(present, np.int64)
        else:
            order = np.argsort(partitions, kind="stable")
            ordered = partitions[order]
            cuts = np.flatnonzero(np.diff(ordered)) + 1
            starts = np.concatenate(([0], cuts)).astype(np.int64)
            sizes = np.diff(np.concatenate((starts, [len(order)])))
            keys = ordered[starts].astype(np.int64) if len(order) else np.zeros(0, np.int64)
        bounds = np.zeros(len(sizes) + 1, np.int64)
        np.cumsum(sizes, out=bounds[1:])
        return cls(order.astype(np.int64), keys, bounds)

    def within(self) -> np.ndarray:
        """Each row's position within its group (in input index space)."""
        ranks = np.empty(len(self.order), np.int64)
        ranks[self.order] = np.arange(len(self.order), dtype=np.int64) - np.repeat(self.bounds[:-1],
                                                                                  np.diff(self.bounds))
        return ranks

    def ranks(self, start: np.ndarray) -> np.ndarray:
        """Each row's ``start[partition]`` plus its position within its group (in input index space): one
        range per group, so for a few groups cheaper than ``start[partitions] + within()``."""
        ranks = np.empty(len(self.order), np.int64)
        for g, key in enumerate(self.keys.tolist()):
            lo, hi = int(self.bounds[g]), int(self.bounds[g + 1])
            ranks[self.order[lo:hi]] = np.arange(start[key], start[key] + hi - lo, dtype=np.int64)
        return ranks

    def groups(self) -> list[tuple[int, np.ndarray]]:
        return [(int(self.keys[g]), self.order[self.bounds[g]:self.bounds[g + 1]]) for g in range(len(self.keys))]


@dataclass
class BatchPlan:
    """The running plan of one batch: partition counts and logical bytes so far, and the round-robin cursor."""

    partitions: int
    rr_start: int
    counts: np.ndarray = field(init=False)
    sizes: np.ndarray = field(init=False)
    next_rr: int = field(init=False)

    def __post_init__(self) -> None:
        self.counts = np.zeros(self.partitions, np.int64)
        self.sizes = np.zeros(self.partitions, np.int64)
        self.next_rr = self.rr_start

    @property
    def records(self) -> int:
        return int(self.counts.sum())

    def assign(self, batch: pa.RecordBatch) -> np.ndarray:
        """The partition of every row of ``batch`` (int32), advancing the round-robin cursor."""
        explicit = batch.column(PARTITION)
        keys = batch.column(KEY)
        count = batch.num_rows
        has_partition = explicit.is_valid().to_numpy(zero_copy_only=False)
        has_key = keys.is_valid().to_numpy(zero_copy_only=False)
        out = np.zeros(count, np.int32)
        if has_partition.any():
            out[has_partition] = explicit.fill_null(0).to_numpy(zero_copy_only=False)[has_partition]
        hashed = has_key & ~has_partition
        if hashed.all():
            out = partitions_for_keys(keys, self.partitions)
        elif hashed.any():
            out[hashed] = partitions_for_keys(keys.filter(pa.array(hashed)), self.partitions)
        keyless = ~has_key & ~has_partition
        keyless_count = int(keyless.sum())
        if keyless_count:
            out[keyless] = (self.next_rr + np.arange(keyless_count, dtype=np.int64)) % self.partitions
            self.next_rr += keyless_count
        return out

    def rank(self, partitions: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, Grouping]:
        """Each row's rank within its partition over the whole batch so far (int64), and the chunk's rows
        grouped by partition; updates the counters."""
        grouping = Grouping.of(partitions, self.partitions)
        if self.partitions <= SMALL_PARTITION_COUNT:
            ranks = grouping.ranks(self.counts)
        else:
            ranks = self.counts[partitions] + grouping.within()
        self.counts[grouping.keys] += np.diff(grouping.bounds)
        if len(partitions):
            self.sizes += np.bincount(partitions, weights=sizes, minlength=self.partitions).astype(np.int64)
        return ranks, grouping


class CarriedOffsets:
    """The offsets a batch carries (``keep_offsets``: a mirror's), checked chunk by chunk in input order.

    docs/guarantees.md#the-raw-log: per partition they strictly increase in input order and are dense from exactly
    ``N_p`` (``base``) or, on a mirrored topic (``gaps``), start at or above it. ``ranks`` turns them into the ranks the
    batch's files are written with (offset ``base_p + rank``) and the ranks its result is resolved with (offset
    ``first_p + rank``: the batch's entry records each partition's first offset), and ``first`` / ``ends`` say
    where each partition's rows start and the ``N_p`` they leave. ``check=False`` (a re-sent batch id, which
    appends nothing) only computes the ranks.
    """

    def __init__(self, base: Sequence[int] | np.ndarray, *, gaps: bool, check: bool = True) -> None:
        self.base = np.asarray(base, np.int64)
        self.gaps = gaps
        self.check = check
        self.first = np.full(len(self.base), -1, np.int64)
        self.last = self.base - 1  # the offset each partition's next row must exceed

    def ranks(self, batch: pa.RecordBatch, partitions: np.ndarray, planned: np.ndarray, rows: RowNumbers,
              grouping: Grouping) -> tuple[np.ndarray, np.ndarray]:
        """The ranks of one chunk's rows for its files (offset minus ``base``) and for its result (offset minus
        ``first``), checked; ``planned`` are the dense ranks."""
        given = batch.column(OFFSET).to_numpy(zero_copy_only=False).astype(np.int64)
        if self.check and not self.gaps:
            expected = self.base[partitions] + planned
            wrong = np.nonzero(given != expected)[0]
            if len(wrong):
                i = int(wrong[0])
                raise mirror_error(int(partitions[i]), int(expected[i]), int(given[i]), rows.of(i), rows.unit)
        for p, members in grouping.groups():
            offsets = given[members]
            if self.check and self.gaps:
                previous = np.concatenate(([self.last[p]], offsets[:-1]))
                wrong = np.nonzero(offsets <= previous)[0]
                if len(wrong):
                    i = int(members[wrong[0]])
                    raise mirror_error(p, int(previous[wrong[0]]) + 1, int(given[i]), rows.of(i), rows.unit,
                                       gaps=True)
            if self.first[p] < 0:
                self.first[p] = offsets[0]
            self.last[p] = offsets[-1]
        return given - self.base[partitions], given - self.first[partitions]

    @property
    def ends(self) -> np.ndarray:
        """The ``N_p`` each partition's rows leave: one past its last row (``base`` where it has none)."""
        return self.last + 1


def mirror_error(partition: int, expected: int, found: int, line: int | None = None, unit: str = "row", *,
                 gaps: bool = False) -> InvalidRecordError:
    """A batch's carried offset where another was expected (``gaps``: at least ``expected``)."""
    if gaps:
        return InvalidRecordError(
            f"partition {partition}: expected an offset of at least {expected}, found {found} (an overlap); offsets "
            "must strictly increase per partition from its next offset. Nothing was written", line, unit)
    what = "a gap" if found > expected else "an overlap"
    return InvalidRecordError(
        f"partition {partition}: expected offset {expected}, found {found} ({what}); a batch that keeps its "
        "offsets must continue each partition densely from its next offset (gaps only on a mirrored topic). "
        "Nothing was written", line, unit)


__all__ = ["BatchPlan", "CarriedOffsets", "Grouping", "mirror_error"]
