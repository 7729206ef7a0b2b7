"""The durable record of committed batch ids: idempotent producing for ``producer.id.expiration.ms``.

Re-sending a batch whose id was committed appends nothing and returns the original offsets
(docs/guarantees.md#the-raw-log). The record must outlive snapshot expiry and retention, stay bounded, change in the
same commit as the append, and cost the same on every commit whatever the topic's age. So it is a small log-structured
store referenced from one table property (``compactor.batch-ids``), never from snapshots:

* the **tail**: the newest entries, inline in the property (at most ``TAIL_ENTRIES`` entries and about
  ``TAIL_BYTES`` bytes), so an append rewrites only a few kilobytes of it;
* **segments**: immutable Parquet files under the table's ``metadata/`` directory, each listed in the property
  with its entry count and clock range. When the tail fills up it becomes a segment; while the newest segment
  is at least a quarter the size of the one before, the two are merged (dropping expired entries), so there
  are O(log entries) segments and each entry is rewritten O(log entries) times. Segments whose newest entry
  is older than the window are dropped whole.

An entry holds the batch id, the batch's clock, its snapshot id, its round-robin start and, per partition it
touched, its base offset and record count: enough to recompute every record's offset when the batch is sent
again, and to tell a different batch sent under the same id. An entry is honoured while ``now - its clock <
producer.id.expiration.ms``; after that the id may be committed again as a new batch. Segments are read once
per process and cached (they never change). Retention's orphan cleanup keeps every file the record lists
(``record_files``).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.table import Table

from compactor.errors import TopicCorruptError
from compactor.iceberg.catalog import translate_storage_errors
from compactor.properties import BATCH_IDS_PROPERTY

TAIL_ENTRIES = 32
TAIL_BYTES = 16 * 1024
SEGMENT_RATIO = 4
CACHED_SEGMENTS = 64
SEGMENT_SCHEMA = pa.schema([("batch_id", pa.string()), ("now_ms", pa.int64()), ("snapshot_id", pa.int64()),
                            ("rr_start", pa.int64()), ("plan", pa.string())])


@dataclass(frozen=True)
class BatchEntry:
    """One committed batch: its id, clock, snapshot, round-robin start and ``(partition, base, count)`` runs.
    The record keeps the entries of batches with an id; a commit returns one for every batch."""

    batch_id: str | None
    now_ms: int
    snapshot_id: int
    rr_start: int
    plan: tuple[tuple[int, int, int], ...]

    def arrays(self, partitions: int) -> tuple[np.ndarray, np.ndarray]:
        """``(base, counts)`` per partition (untouched partitions: base 0, count 0)."""
        base = np.zeros(partitions, np.int64)
        counts = np.zeros(partitions, np.int64)
        for partition, first, count in self.plan:
            if not 0 <= partition < partitions:
                raise TopicCorruptError(f"batch id {self.batch_id!r} names partition {partition}, which the topic "
                                        "does not have")
            base[partition], counts[partition] = first, count
        return base, counts

    def as_list(self) -> list[Any]:
        return [self.batch_id, self.now_ms, self.snapshot_id, self.rr_start, [list(run) for run in self.plan]]

    @classmethod
    def from_list(cls, item: Any) -> BatchEntry:
        batch_id, now_ms, snapshot_id, rr_start, plan = item
        return cls(str(batch_id), int(now_ms), int(snapshot_id), int(rr_start),
                   tuple((int(p), int(b), int(c)) for p, b, c in plan))

    @classmethod
    def of(cls, batch_id: str | None, now_ms: int, snapshot_id: int, rr_start: int, base: Sequence[int],
           counts: Sequence[int]) -> BatchEntry:
        plan = tuple((p, int(b), int(c)) for p, (b, c) in enumerate(zip(base, counts, strict=True)) if c)
        return cls(batch_id, now_ms, snapshot_id, rr_start, plan)


@dataclass(frozen=True)
class Segment:
    """One immutable segment file of the record."""

    path: str
    count: int
    min_now: int
    max_now: int


class _SegmentCache:
    """Segments already read by this process: path -> (newest row per batch id, the rows). Never stale."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: OrderedDict[str, tuple[dict[str, int], pa.Table]] = OrderedDict()

    def get(self, table: Table, path: str) -> tuple[dict[str, int], pa.Table]:
        with self._lock:
            if path in self._items:
                self._items.move_to_end(path)
                return self._items[path]
        with (translate_storage_errors(f"reading the batch-id record of {table.name()}"),
              table.io.new_input(path).open() as stream):
            rows = pq.read_table(stream)
        index = {batch_id: i for i, batch_id in enumerate(rows.column("batch_id").to_pylist())}
        with self._lock:
            self._items[path] = (index, rows)
            while len(self._items) > CACHED_SEGMENTS:
                self._items.popitem(last=False)
        return index, rows


_CACHE = _SegmentCache()


def _entry_of(rows: pa.Table, i: int) -> BatchEntry:
    return BatchEntry(rows.column("batch_id")[i].as_py(), rows.column("now_ms")[i].as_py(),
                      rows.column("snapshot_id")[i].as_py(), rows.column("rr_start")[i].as_py(),
                      tuple((int(p), int(b), int(c)) for p, b, c in json.loads(rows.column("plan")[i].as_py())))


@dataclass(frozen=True)
class BatchIdRecord:
    """The record as of one table metadata version (see the module docstring)."""

    tail: tuple[BatchEntry, ...] = ()
    segments: tuple[Segment, ...] = ()

    @classmethod
    def of(cls, properties: Mapping[str, str]) -> BatchIdRecord:
        text = properties.get(BATCH_IDS_PROPERTY)
        if not text:
            return cls()
        try:
            data = json.loads(text)
            tail = tuple(BatchEntry.from_list(item) for item in data["tail"])
            segments = tuple(Segment(str(p), int(c), int(lo), int(hi)) for p, c, lo, hi in data["segments"])
        except (KeyError, TypeError, ValueError) as exc:
            raise TopicCorruptError(f"{BATCH_IDS_PROPERTY} is malformed ({exc}); the topic's batch ids cannot be "
                                    "read") from None
        return cls(tail, segments)

    def to_property(self) -> str:
        return json.dumps({"v": 1, "tail": [e.as_list() for e in self.tail],
                           "segments": [[s.path, s.count, s.min_now, s.max_now] for s in self.segments]},
                          separators=(",", ":"))

    @property
    def files(self) -> list[str]:
        return [s.path for s in self.segments]

    def find(self, table: Table, batch_id: str, now_ms: int, window_ms: int) -> BatchEntry | None:
        """The newest committed batch with this id, if its clock lies within the window before ``now_ms``."""
        found: BatchEntry | None = None
        for entry in reversed(self.tail):
            if entry.batch_id == batch_id:
                found = entry
                break
        if found is None:
            for segment in reversed(self.segments):
                if now_ms - segment.max_now >= window_ms:
                    break  # this segment and every older one lie wholly outside the window
                index, rows = _CACHE.get(table, segment.path)
                if batch_id in index:
                    found = _entry_of(rows, index[batch_id])
                    break
        if found is None or now_ms - found.now_ms >= window_ms:
            return None
        return found

    def with_entry(self, table: Table, entry: BatchEntry, now_ms: int, window_ms: int) -> tuple[BatchIdRecord,
                                                                                                list[str]]:
        """The record after ``entry`` commits, and any segment files written for it (to delete if it does not)."""
        written: list[str] = []
        tail = [e for e in self.tail if now_ms - e.now_ms < window_ms] + [entry]
        segments = [s for s in self.segments if now_ms - s.max_now < window_ms]
        if len(tail) > TAIL_ENTRIES or len(json.dumps([e.as_list() for e in tail])) > TAIL_BYTES:
            segments.append(_write_segment(table, tail, written))
            tail = []
            while len(segments) >= 2 and segments[-1].count * SEGMENT_RATIO >= segments[-2].count:
                older, newer = segments[-2], segments[-1]
                entries = [*_read_entries(table, older), *_read_entries(table, newer)]
                live = [e for e in entries if now_ms - e.now_ms < window_ms]
                segments[-2:] = [_write_segment(table, live, written)] if live else []
        return BatchIdRecord(tuple(tail), tuple(segments)), written


def _read_entries(table: Table, segment: Segment) -> list[BatchEntry]:
    _, rows = _CACHE.get(table, segment.path)
    return [_entry_of(rows, i) for i in range(rows.num_rows)]


def _write_segment(table: Table, entries: Sequence[BatchEntry], written: list[str]) -> Segment:
    path = table.location_provider().new_metadata_location(f"batch-ids-{uuid.uuid4().hex}.parquet")
    rows = pa.Table.from_arrays([
        pa.array([e.batch_id for e in entries], pa.string()),
        pa.array([e.now_ms for e in entries], pa.int64()),
        pa.array([e.snapshot_id for e in entries], pa.int64()),
        pa.array([e.rr_start for e in entries], pa.int64()),
        pa.array([json.dumps([list(r) for r in e.plan], separators=(",", ":")) for e in entries], pa.string()),
    ], schema=SEGMENT_SCHEMA)
    with (translate_storage_errors(f"writing the batch-id record of {table.name()}"),
          table.io.new_output(path).create(overwrite=True) as stream):
        pq.write_table(rows, stream, compression="zstd")
    written.append(path)
    return Segment(path, len(entries), min(e.now_ms for e in entries), max(e.now_ms for e in entries))


def committed_batch(table: Table, batch_id: str, now_ms: int, window_ms: int) -> BatchEntry | None:
    """The batch committed under ``batch_id`` within the window before ``now_ms``, as of ``table``'s metadata
    version (``None``: none; the id may be committed as a new batch)."""
    return BatchIdRecord.of(table.metadata.properties).find(table, batch_id, now_ms, window_ms)


def record_files(properties: Mapping[str, str]) -> list[str]:
    """Every file the batch-id record of a table with these properties lives in (orphan cleanup keeps them)."""
    return BatchIdRecord.of(properties).files


__all__ = ["BatchEntry", "BatchIdRecord", "committed_batch", "record_files"]
