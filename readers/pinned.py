"""What a reader pins when it opens (docs/guarantees.md#readers): the cursor ``C`` first, then the raw snapshot ``R``
and the list of its data files, and how the pinned tables' files are planned for a read.

The raw files are planned at open: later appends drop older snapshots' metadata entries (``producing.commit``)
and expiry keeps only the *files* of snapshots replaced within the lease, so an open reader never needs
``R``'s manifests again, only its data files. The compacted side is planned when read: the cursor's snapshot
is protected from expiry while the cursor is retained.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyiceberg.expressions import And, BooleanExpression
from pyiceberg.table import FileScanTask, Table

from compactor.cursor import CompactedState, Cursor, load_compacted, retained_cursors
from compactor.errors import CursorCorruptError, CursorExpiredError, SnapshotExpiredError
from compactor.iceberg.bounds import task_range
from compactor.iceberg.catalog import first_line
from compactor.iceberg.expressions import partition_range, ranges
from compactor.iceberg.scan import TaskReader, tasks_matching
from compactor.topics.naming import TopicName
from compactor.topics.topic import Topic
from readers.planning import RawIndex

if TYPE_CHECKING:
    from compactor.lake import Lake


@dataclass(frozen=True)
class Segment:
    """A contiguous piece of one partition's view: rows ``[lo, hi)`` of one pinned snapshot."""

    partition: int
    lo: int
    hi: int
    compacted: bool


MISSING_FILE_MARKERS = ("no such file", "nosuchkey", "no_such_key", "path does not exist")


def is_missing_file(exc: BaseException) -> bool:
    """Whether ``exc`` says a file is gone (a snapshot expired under a reader that outlived its lease): a
    ``FileNotFoundError``, or an ``OSError`` whose text is a file system's or S3's "no such file" (not any text
    that happens to contain "not found")."""
    if isinstance(exc, FileNotFoundError):
        return True
    text = str(exc).lower()
    return isinstance(exc, OSError) and any(marker in text for marker in MISSING_FILE_MARKERS)


@contextlib.contextmanager
def expired_if_missing(what: str) -> Iterator[None]:
    """Report a missing file while reading ``what`` as ``SnapshotExpiredError`` (it expired under the reader)."""
    try:
        yield
    except (OSError, ValueError) as exc:
        if is_missing_file(exc):
            raise SnapshotExpiredError(f"{what} is no longer readable (expired?): {first_line(exc)}") from exc
        raise


@dataclass(frozen=True)
class Pins:
    """What a reader may be told to pin instead of loading the current state: the raw ``table`` already loaded
    (and its files, planned by the caller: ``raw_tasks``, or a ``raw_index`` planned incrementally,
    ``readers.planning``), or a given raw snapshot and retained cursor (a replay of a range read earlier,
    ``consumer.units``)."""

    table: Table | None = None
    raw_tasks: Sequence[FileScanTask] | None = None
    raw_index: RawIndex | None = None  # instead of ``raw_tasks``: the files by partition and offset
    raw_snapshot_id: int | None = None
    cursor_id: int | None = None


class PinnedView:
    """The tables one reader reads, pinned at open: ``C`` (if reading compacted) and ``R`` with its files."""

    def __init__(self, lake: Lake, name: TopicName, *, read_compacted: bool, as_of_cursor: int | None,
                 now_ms: int, pins: Pins | None = None) -> None:
        self.name = name
        pins = pins or Pins()
        # Pin C first, then R (docs/guarantees.md#readers): R is then at least as new as C's raw snapshot.
        compacted: CompactedState | None = load_compacted(lake.catalog, name) if read_compacted else None
        self.topic: Topic = Topic(lake.catalog, name, pins.table) if pins.table is not None else lake.topic(name)
        self.raw_table = self.topic.table
        offsets = self.topic.offsets()
        self.partitions = offsets.partitions
        self.next_offsets = offsets.next_offsets
        self.log_start_offsets = offsets.log_start_offsets
        if pins.raw_snapshot_id is not None:
            if self.raw_table.snapshot_by_id(pins.raw_snapshot_id) is None:
                raise SnapshotExpiredError(f"raw snapshot {pins.raw_snapshot_id} of {name} is no longer in its "
                                           "metadata")
            self.raw_snapshot_id: int | None = pins.raw_snapshot_id
        else:
            snapshot = self.raw_table.current_snapshot()
            self.raw_snapshot_id = snapshot.snapshot_id if snapshot else None
        self.raw_index = pins.raw_index
        self._raw_tasks: list[FileScanTask] | None = None
        if pins.raw_tasks is not None:
            self._raw_tasks = list(pins.raw_tasks)
        elif pins.raw_index is None:
            self._raw_tasks = self._plan_raw()
        self.cursor: Cursor | None = None
        self.compacted_table: Table | None = None
        self.end: tuple[int, ...] = self.next_offsets  # where each partition's view ends
        if read_compacted and compacted is not None:
            if pins.cursor_id is not None:
                self._pin_cursor(compacted, pins.cursor_id, now_ms, keep_end=True)
            else:
                self._pin_cursor(compacted, as_of_cursor, now_ms)
        elif as_of_cursor is not None:
            raise CursorExpiredError(f"cursor {as_of_cursor} is not retained (the topic has no compacted view)")

    def _pin_cursor(self, state: CompactedState, as_of: int | None, now_ms: int, keep_end: bool = False) -> None:
        settings = self.topic.settings
        current = state.cursor
        if as_of is not None:
            retained = {c.snapshot_id: c for c in retained_cursors(state, now_ms, settings.cursor_retain_ms)}
            if as_of not in retained:
                raise CursorExpiredError(
                    f"cursor {as_of} is not retained (retained cursors: {sorted(retained) or 'none'}); "
                    "cursors stay readable for compaction.cursor.retain-ms after they are replaced")
            chosen: Cursor | None = retained[as_of]
        elif not settings.compacts:
            chosen = None  # policy lacks compact: compacted reads return exactly the raw view
        else:
            chosen = current
        if chosen is None:
            return
        chosen = chosen.widened(self.partitions)  # a mirrored topic may have grown since
        if state.snapshot(chosen.snapshot_id) is None:
            raise CursorCorruptError(f"cursor names missing snapshot {chosen.snapshot_id}")
        self.cursor = chosen
        self.compacted_table = state.table
        if as_of is not None and not keep_end:
            self.end = chosen.raw_next_offsets

    @property
    def raw_tasks(self) -> list[FileScanTask]:
        """Every raw file pinned at open."""
        if self._raw_tasks is None:
            assert self.raw_index is not None
            self._raw_tasks = self.raw_index.all()
        return self._raw_tasks

    def _plan_raw(self) -> list[FileScanTask]:
        if self.raw_snapshot_id is None:
            return []
        with expired_if_missing(f"raw snapshot {self.raw_snapshot_id} of {self.name}"):
            return list(self.raw_table.scan(snapshot_id=self.raw_snapshot_id).plan_files())

    def tasks(self, compacted: bool, scan: Any, row_filter: BooleanExpression | None = None) -> list[FileScanTask]:
        """Tasks of the pinned snapshot that may match ``row_filter``: raw ones from the files pinned at open,
        compacted ones planned now (the cursor's snapshot is protected while it is retained)."""
        if compacted:
            return list(scan.plan_files())
        if row_filter is None:
            return list(self.raw_tasks)
        return tasks_matching(self.raw_table.schema(), self.raw_tasks, row_filter)

    def table_for(self, compacted: bool) -> tuple[Table, int | None]:
        """The pinned table of one side, and its pinned snapshot id (``None``: nothing to read there)."""
        if compacted:
            assert self.cursor is not None and self.compacted_table is not None
            return self.compacted_table, self.cursor.snapshot_id
        return self.raw_table, self.raw_snapshot_id

    def plan_segment(self, segment: Segment, columns: tuple[str, ...] | None = None,
                     extra_filter: BooleanExpression | None = None) -> tuple[TaskReader, list[FileScanTask]]:
        """The file tasks that can hold rows of ``segment`` (pruned by partition, offset and ``extra_filter``)."""
        table, snapshot_id = self.table_for(segment.compacted)
        if snapshot_id is None:
            return TaskReader(self.raw_table, []), []
        row_filter = partition_range(segment.partition, segment.lo, segment.hi)
        if extra_filter is not None:
            row_filter = And(row_filter, extra_filter)
        scan = table.scan(row_filter=row_filter, snapshot_id=snapshot_id, selected_fields=columns or ("*",))
        if not segment.compacted and self.raw_index is not None:  # only the files of the segment's range
            candidates = self.raw_index.between(segment.partition, segment.lo, segment.hi)
            tasks = tasks_matching(self.raw_table.schema(), candidates, row_filter)
        else:
            tasks = self.tasks(segment.compacted, scan, row_filter)
        return TaskReader(table, tasks, row_filter, scan.projection()), tasks

    def segment_units(self, segment: Segment) -> list[tuple[TaskReader, FileScanTask]]:
        """The files of ``segment``, each with the reader to read it with: files wholly inside the segment (and
        of its partition only) without a row filter, the boundary files filtered (as ``plan_table`` does)."""
        filtered, tasks = self.plan_segment(segment)
        if not tasks:
            return []
        table, _ = self.table_for(segment.compacted)
        whole = TaskReader(table, [], None, None, deletes=filtered.deletes)  # every column, as plan_segment's
        units: list[tuple[TaskReader, FileScanTask]] = []
        for task in tasks:
            first, last = task_range(task)
            inside = first >= segment.lo and last < segment.hi and int(task.file.partition[0]) == segment.partition
            units.append((whole if inside else filtered, task))
        return units

    def plan_table(self, compacted: bool, chosen: dict[int, tuple[int, int]]
                    ) -> tuple[TaskReader, dict[int, list[tuple[TaskReader, FileScanTask]]]]:
        """Plan one table once for all its segments; prune files by partition and offset statistics here
        (cheaper than pyiceberg evaluating a many-term filter per manifest entry). Files wholly inside their
        segment are read without a row filter; only the boundary files are filtered."""
        table, snapshot_id = self.table_for(compacted)
        scan = table.scan(snapshot_id=snapshot_id, selected_fields=("*",))
        tasks = []
        for task in self.tasks(compacted, scan):
            partition = int(task.file.partition[0])
            if partition not in chosen:
                continue
            lo, hi = chosen[partition]
            first, last = task_range(task)
            if last >= lo and first < hi:
                tasks.append(task)
        whole = TaskReader(table, tasks, None, scan.projection())
        filtered = TaskReader(table, [], ranges(chosen), scan.projection(), deletes=whole.deletes)
        by_partition: dict[int, list[tuple[TaskReader, FileScanTask]]] = {}
        for task in tasks:
            partition = int(task.file.partition[0])
            lo, hi = chosen[partition]
            first, last = task_range(task)
            reader = whole if first >= lo and last < hi else filtered
            by_partition.setdefault(partition, []).append((reader, task))
        return whole, by_partition
