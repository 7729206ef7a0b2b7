"""An attached log where readers and consumers expect a topic (docs/attaching.md, "Reading"): ``AttachedTopic``
has a topic's name, settings (the view's), offsets and table (the source, pinned at one metadata version), and
refuses every change a ``Topic`` could make (the source is never written).

Offsets are read from the source's snapshot: ``N_p`` is one past the highest offset of partition ``p`` (the
partition and offset columns of the rows at or above the cursor's horizons, and of partitions the cursor does
not know, are read; Iceberg prunes files by the offset column's statistics), never below the horizon; ``LSO_p``
is the lowest offset lower bound of the data files that can hold ``p`` (file statistics; a lower bound, as
offsets may have gaps). The log is ``gapped``: an offset in ``[LSO_p, N_p)`` may hold no record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, In, IsNull, Or, Reference
from pyiceberg.table import FileScanTask, Table

from compactor.attach.cursor import UnknownPartitions, current_cursor
from compactor.attach.guard import int_bound
from compactor.attach.mapping import Mapping as ColumnMapping
from compactor.attach.records import column
from compactor.attach.registry import AttachedLog, require_attached
from compactor.errors import NotATopicError
from compactor.iceberg.catalog import translate_storage_errors
from compactor.iceberg.expressions import at_least, below, equal
from compactor.iceberg.scan import TaskReader, tasks_matching
from compactor.topics.settings import TopicSettings
from compactor.topics.state import PartitionOffsets
from compactor.topics.topic import Topic


class AttachedTopic(Topic):
    """An attached log as a read-only ``Topic`` (see the module docstring)."""

    def __init__(self, attached: AttachedLog, source: Table | None = None) -> None:  # not Topic's: no topic table
        self.catalog = attached.catalog
        self.name = attached.name
        self.attached = attached
        self.table = source if source is not None else attached.source()
        self._offsets: PartitionOffsets | None = None

    @property
    def settings(self) -> TopicSettings:
        return self.attached.settings

    @property
    def mirror(self) -> None:
        return None

    def offsets(self) -> PartitionOffsets:
        if self._offsets is None:
            cursor = current_cursor(self.attached.view)
            snapshot = self.table.current_snapshot()
            self._offsets = source_offsets(self.table, self.attached.mapping,
                                           snapshot.snapshot_id if snapshot else None,
                                           cursor.horizons if cursor else {})
        return self._offsets

    def refresh(self) -> AttachedTopic:
        self.attached = require_attached(self.catalog, self.name)
        self.table = self.attached.source()
        self._offsets = None
        return self

    def adopt(self, table: Table) -> NoReturn:
        self._refuse()

    def set_config(self, updates: Mapping[str, str], removals: Sequence[str] = ()) -> NoReturn:
        self._refuse()

    def set_internal_properties(self, updates: Mapping[str, str], removals: Sequence[str] = ()) -> NoReturn:
        self._refuse()

    def add_partitions(self, partitions: int) -> NoReturn:
        self._refuse()

    def change_properties(self, change: Any, what: str) -> NoReturn:
        self._refuse()

    def _refuse(self) -> NoReturn:
        raise NotATopicError(f"'{self.name}' is an attached log: the product never writes to its source table")


def source_offsets(source: Table, mapping: ColumnMapping, snapshot_id: int | None, horizons: Mapping[int, int],
                   tasks: Sequence[FileScanTask] | None = None) -> PartitionOffsets:
    """``N_p`` and ``LSO_p`` of every partition in snapshot ``snapshot_id`` of ``source`` (module docstring);
    ``tasks``: that snapshot's files, if the caller planned them already."""
    ends: dict[int, int] = dict(horizons)
    starts: dict[int, int] = {}
    if snapshot_id is not None:
        if tasks is None:
            tasks = planned_files(source, mapping, snapshot_id)
        for row in offsets_past_horizons(source, mapping, tasks, horizons).group_by("p").aggregate(
                [("o", "max")]).to_pylist():
            p = int(row["p"])
            ends[p] = max(ends.get(p, 0), int(row["o_max"]) + 1)
        schema = source.schema()
        partition_field, offset_field = schema.find_field(mapping.partition), schema.find_field(mapping.offset)
        for task in tasks:
            lo = int_bound(task.file.lower_bounds, partition_field)
            hi = int_bound(task.file.upper_bounds, partition_field)
            first = int_bound(task.file.lower_bounds, offset_field)
            if lo is None or hi is None or first is None:
                continue
            for p in range(max(lo, 0), min(hi, max(ends, default=-1)) + 1):
                starts[p] = min(starts.get(p, first), first)
    count = max(ends, default=-1) + 1
    next_offsets = tuple(ends.get(p, 0) for p in range(count))
    log_starts = tuple(min(max(starts.get(p, 0), 0), next_offsets[p]) for p in range(count))
    return PartitionOffsets(next_offsets, log_starts, gapped=True)


def planned_files(source: Table, mapping: ColumnMapping, snapshot_id: int) -> list[FileScanTask]:
    """Every data file of snapshot ``snapshot_id`` of ``source``."""
    with translate_storage_errors(f"reading the source {mapping.source}"):
        return list(source.scan(snapshot_id=snapshot_id).plan_files())


def offsets_past_horizons(source: Table, mapping: ColumnMapping, tasks: Sequence[FileScanTask],
                          horizons: Mapping[int, int]) -> pa.Table:
    """The partition (``p``) and offset (``o``) of each row of the files ``tasks`` of ``source`` that is at or
    above its partition's horizon, or in a partition without one (``past_horizons``); rows without a partition
    are left out. Only the files whose statistics can hold such rows are read, and only those two columns."""
    row_filter = past_horizons(mapping, horizons)
    with translate_storage_errors(f"reading the source {mapping.source}"):
        matching = tasks_matching(source.schema(), list(tasks), row_filter)
        projection = source.scan(selected_fields=(mapping.partition, mapping.offset)).projection()
        reader = TaskReader(source, matching, row_filter, projection)
        batches = [batch for task in matching for batch in reader.read(task)]
    rows = pa.Table.from_batches(batches, projection.as_arrow()) if batches else projection.as_arrow().empty_table()
    return pa.table({"p": column(rows, mapping.partition).cast(pa.int64()),
                     "o": column(rows, mapping.offset).cast(pa.int64())}).filter(
        pc.is_valid(column(rows, mapping.partition)))


def past_horizons(mapping: ColumnMapping, horizons: Mapping[int, int]) -> BooleanExpression:
    """Rows at or above their partition's horizon, and every row of a partition without one (picked as
    ``cursor.UnknownPartitions`` says, so that pyiceberg skips the files that hold neither)."""
    if not horizons:
        return AlwaysTrue()
    known = [And(equal(mapping.partition, p), at_least(mapping.offset, h)) for p, h in sorted(horizons.items())]
    split = UnknownPartitions.of(horizons)
    others = [below(mapping.partition, split.lowest), at_least(mapping.partition, split.highest + 1),
              IsNull(term=Reference(mapping.partition))]
    if split.gaps:
        others.append(In(term=Reference(mapping.partition), literals=set(split.gaps)))
    return Or(*others, *known)


__all__ = ["AttachedTopic", "offsets_past_horizons", "past_horizons", "planned_files", "source_offsets"]
