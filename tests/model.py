"""A small pure-Python reference model of docs/guarantees.md#compaction and #readers (compacted reads).

It is written from the contract, independently of the Spark job: the randomised tests drive the same
operations through the real product and through this model, and compare what comes out.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from compactor.topics.records import Record
from compactor.topics.strategy import Rank, Strategy


@dataclass(frozen=True)
class ModelSettings:
    null_key: str = "drop"
    delete_retention_ms: int = 86_400_000
    min_lag_ms: int = 0
    strategy: Strategy = field(default_factory=Strategy)

    def rank(self, record: Record) -> Rank:
        """The record's rank under the strategy (``compaction.strategy``): the highest wins."""
        return self.strategy.rank(record.offset, record.timestamp_ms, record.headers)


@dataclass(frozen=True)
class CompactedRow:
    record: Record
    delete_horizon_ms: int | None


@dataclass
class ModelCursor:
    horizons: list[int]
    start: list[int]
    rows: dict[tuple[int, int], CompactedRow] = field(default_factory=dict)


@dataclass
class RawLog:
    """A topic's raw log as produced so far: per partition, its records in offset order (dense from 0)."""

    partitions: int
    log: list[list[Record]] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)  # a mirror's positions past its last records (gaps)

    def __post_init__(self) -> None:
        if not self.log:
            self.log = [[] for _ in range(self.partitions)]
        if not self.ends:
            self.ends = [0] * self.partitions

    def append(self, records: list[Record], *, gaps: bool = False) -> None:
        """Records in offset order per partition: dense (a produced topic) or, with ``gaps``, strictly increasing
        from ``N_p`` (a mirrored topic)."""
        for r in records:
            if gaps:
                assert r.offset >= self.next_offsets()[r.partition], "offsets strictly increase"
            else:
                assert r.offset == len(self.log[r.partition]), "the model expects dense offsets in order"
            self.log[r.partition].append(r)

    def advance(self, partition: int, end: int) -> None:
        """A mirror's position moved past its last record (transaction markers, aborted records)."""
        self.ends[partition] = max(self.ends[partition], end)

    def next_offsets(self) -> list[int]:
        return [max(end, records[-1].offset + 1 if records else 0) for records, end in zip(self.log, self.ends,
                                                                                            strict=True)]

    def between(self, partition: int, lo: int, hi: int) -> list[Record]:
        """The records of ``partition`` at offsets ``[lo, hi)`` (offsets may have gaps)."""
        return [r for r in self.log[partition] if lo <= r.offset < hi]


@dataclass
class TopicModel(RawLog):
    """The raw log of one topic and its cursor, as the contract describes them."""

    cursor: ModelCursor | None = None
    stamped: dict[tuple[int, int], int] = field(default_factory=dict)  # every delete horizon a run stored

    # --- compaction -------------------------------------------------------------------------------

    def horizons_at(self, now_ms: int, settings: ModelSettings, previous: list[int]) -> list[int]:
        out = []
        for p in range(self.partitions):
            end = self.next_offsets()[p]
            limit = end
            if settings.min_lag_ms > 0:
                cutoff = now_ms - settings.min_lag_ms
                limit = next((r.offset for r in self.between(p, previous[p], end) if r.timestamp_ms > cutoff), end)
            out.append(max(previous[p], min(end, limit)))
        return out

    def compact(self, now_ms: int, settings: ModelSettings) -> bool:
        """One incremental run; returns whether it would commit."""
        previous = self.cursor.horizons if self.cursor else [0] * self.partitions
        horizons = self.horizons_at(now_ms, settings, previous)
        rows = dict(self.cursor.rows) if self.cursor else {}
        before = dict(rows)
        latest: dict[tuple[int, bytes], Record] = {}
        for p in range(self.partitions):
            for r in self.between(p, previous[p], horizons[p]):
                if r.key is not None:
                    current = latest.get((p, r.key))
                    if current is None or settings.rank(r) > settings.rank(current):
                        latest[(p, r.key)] = r  # under offset, later offsets overwrite: latest wins
        # a range winner that ranks below the compacted row of its key loses to it (offsets aside: the compacted
        # row's offset is always lower); the compacted rows compete whatever else this run removes
        compacted = {(row.record.partition, row.record.key): row.record for row in rows.values()
                     if row.record.key is not None}
        for position, winner in list(latest.items()):
            held = compacted.get(position)
            if held is not None and settings.rank(winner)[:2] < settings.rank(held)[:2]:
                del latest[position]
        # superseded compacted rows go
        for key, row in list(rows.items()):
            rec = row.record
            if rec.key is not None and (rec.partition, rec.key) in latest:
                del rows[key]
        # expired tombstones and (under drop) keyless rows go
        for key, row in list(rows.items()):
            expired = row.delete_horizon_ms is not None and not now_ms < row.delete_horizon_ms
            if expired or (row.record.key is None and settings.null_key == "drop"):
                del rows[key]
        # new rows come in
        for p in range(self.partitions):
            for r in self.between(p, previous[p], horizons[p]):
                if r.key is None:
                    if settings.null_key == "retain":
                        rows[(p, r.offset)] = CompactedRow(r, None)
                elif (p, r.key) in latest and latest[(p, r.key)].offset == r.offset:
                    if r.is_tombstone:
                        horizon = now_ms + settings.delete_retention_ms
                        if now_ms < horizon:
                            rows[(p, r.offset)] = CompactedRow(r, horizon)
                            self.stamped[(p, r.offset)] = horizon
                    else:
                        rows[(p, r.offset)] = CompactedRow(r, None)
        advanced = horizons != previous
        changed = rows != before
        if not advanced and not changed:
            return False
        self.cursor = ModelCursor(horizons, self.cursor.start if self.cursor else [0] * self.partitions, rows)
        return True

    def full_compaction(self, start: list[int], horizons: list[int], now_ms: int,
                        settings: ModelSettings) -> list[tuple[Record, int | None]]:
        """The rows (with their delete horizons) of one full compaction of raw offsets ``[start, horizon)`` at
        ``now``: every tombstone it keeps is stamped ``now + delete.retention.ms``."""
        fresh = TopicModel(self.partitions, [[r for r in records if r.offset < horizons[p]]
                                             for p, records in enumerate(self.log)],
                           ends=list(horizons))
        fresh.cursor = ModelCursor(list(start), list(start), {})
        fresh.compact(now_ms, replace(settings, min_lag_ms=0))
        return fresh.compacted_rows()

    # --- reads ---------------------------------------------------------------------------------------

    def compacted_view(self) -> list[Record]:
        """What a compacted reader returns: compacted rows below the horizon, then the raw tail."""
        out: list[Record] = []
        for p in range(self.partitions):
            horizon = self.cursor.horizons[p] if self.cursor else 0
            if self.cursor:
                out.extend(sorted((row.record for (q, _), row in self.cursor.rows.items() if q == p),
                                  key=lambda r: r.offset))
            out.extend(r for r in self.log[p] if r.offset >= horizon)
        return out

    def compacted_rows(self) -> list[tuple[Record, int | None]]:
        if self.cursor is None:
            return []
        return [(row.record, row.delete_horizon_ms) for _, row in sorted(self.cursor.rows.items())]


# --- consumers (docs/guarantees.md#consumers-and-groups) ------------------------------------------------


@dataclass
class ConsumerModel(RawLog):
    """What section 7 allows a group's consumers to return, over one topic's raw log as produced so far.

    ``check_delivery``: a member's deliveries of a partition, within one ownership session, start at the
    group's committed position when the session began and continue with every next offset, once each, in
    order; a jump forward is allowed only to a position a reset recorded (retention overtook the position, or
    ``group reset``). ``check_exactly_once``: an output that records the input ``(partition, offset)`` of each
    record holds each at most once, and every input record from the partition's last recorded reset on."""

    def check_delivery(self, record: Record, expected: int, reset_to: int | None, what: str) -> int:
        """Check one delivered record against the next offset ``expected`` of its session; returns the next."""
        assert record == self.log[record.partition][record.offset], f"{what}: {record.offset} differs from the log"
        if record.offset != expected:
            assert reset_to is not None and reset_to == record.offset and record.offset > expected, \
                f"{what}: partition {record.partition} jumped from {expected} to {record.offset} without a reset"
        return record.offset + 1

    def check_exactly_once(self, produced: list[tuple[int, int]], reset_from: dict[int, int], what: str) -> None:
        """``produced``: the input ``(partition, offset)`` of every output record; ``reset_from``: per partition,
        the position of its last recorded reset (0 when none)."""
        seen: set[tuple[int, int]] = set()
        for key in produced:
            assert key not in seen, f"{what}: input {key} is in the output twice"
            seen.add(key)
        for p in range(self.partitions):
            missing = [o for o in range(reset_from.get(p, 0), len(self.log[p])) if (p, o) not in seen]
            assert not missing, f"{what}: inputs {missing[:5]} of partition {p} are not in the output"
