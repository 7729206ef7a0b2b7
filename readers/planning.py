"""Planning a raw table's snapshots one after another at a cost that does not grow with the topic.

A manifest never changes once written, so its live files are read once and remembered by its path. Planning
the next snapshot reads its manifest list (a few entries: the product merges manifests size-tiered, so there
are O(log files) of them) and only the manifests not seen before, usually the one the last append wrote; a
manifest that left the list (merged into another, or rewritten by retention) takes its files out of the index
unless another manifest still lists them. Manifests whose partition range holds none of the wanted partitions
are not read at all, and only the wanted partitions' files are kept.

The index keeps each partition's files in offset order (raw files hold contiguous, disjoint ranges), so the
files of a range ``[lo, hi)`` are found by bisection: a consumer's tail read costs the same at 100 files as at
100,000. Only public pyiceberg API is used (``Snapshot.manifests``, ``ManifestFile.fetch_manifest_entry``).

A snapshot with delete manifests (not written to raw tables by the product, but possible on tables another
engine maintains) is planned by pyiceberg's own scan instead, and indexed whole.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import DataFile, ManifestContent, ManifestFile
from pyiceberg.table import FileScanTask, Table
from pyiceberg.types import IntegerType

from compactor.iceberg.bounds import task_range


def _partition_range(manifest: ManifestFile) -> tuple[int, int] | None:
    """The smallest and largest partition a manifest's files hold, from its summary (None: unknown)."""
    summaries = manifest.partitions or []
    if not summaries or summaries[0].lower_bound is None or summaries[0].upper_bound is None:
        return None
    return (int(from_bytes(IntegerType(), summaries[0].lower_bound)),
            int(from_bytes(IntegerType(), summaries[0].upper_bound)))


class _Partition:
    """One partition's files in offset order (first offsets, and the tasks in the same order). Never changed
    once handed out: a change makes a new one (a copy of two lists of pointers), so a reader pinned on an
    earlier plan keeps reading exactly that plan."""

    def __init__(self, firsts: list[int] | None = None, tasks: list[FileScanTask] | None = None) -> None:
        self.firsts: list[int] = firsts or []
        self.tasks: list[FileScanTask] = tasks or []

    def changed(self, added: list[FileScanTask], removed: list[FileScanTask]) -> _Partition:
        firsts, tasks = list(self.firsts), list(self.tasks)
        for task in removed:
            at = bisect.bisect_left(firsts, task_range(task)[0])
            while tasks[at] is not task:
                at += 1
            del firsts[at], tasks[at]
        for task in added:
            first = task_range(task)[0]
            at = bisect.bisect_right(firsts, first)
            firsts.insert(at, first)
            tasks.insert(at, task)
        return _Partition(firsts, tasks)

    def between(self, lo: int, hi: int) -> list[FileScanTask]:
        """The files that can hold offsets in ``[lo, hi)`` (their ranges are disjoint and in order)."""
        start = max(0, bisect.bisect_right(self.firsts, lo) - 1)
        stop = bisect.bisect_left(self.firsts, hi)
        return [t for t in self.tasks[start:stop] if task_range(t)[1] >= lo]


class RawIndex:
    """The files of one planned snapshot, per partition in offset order (see the module docstring)."""

    def __init__(self, partitions: dict[int, _Partition]) -> None:
        self.partitions = partitions

    def between(self, partition: int, lo: int, hi: int) -> list[FileScanTask]:
        """The files of ``partition`` that can hold offsets in ``[lo, hi)``, in offset order."""
        index = self.partitions.get(partition)
        return index.between(lo, hi) if index is not None else []

    def all(self) -> list[FileScanTask]:
        """Every file (costs one entry per file)."""
        return [t for index in self.partitions.values() for t in index.tasks]


class RawPlanner:
    """Plans snapshots of one raw table for a set of partitions, remembering manifests (module docstring)."""

    def __init__(self) -> None:
        self.manifests_read = 0  # manifests read so far, and their entries (what planning cost)
        self.entries_read = 0
        self._forget(frozenset())

    def _forget(self, partitions: frozenset[int]) -> None:
        self._partitions = partitions
        self._manifests: dict[str, list[DataFile]] = {}  # manifest path -> its live files of the partitions
        self._counts: dict[str, int] = {}  # file path -> how many current manifests list it
        self._tasks: dict[str, FileScanTask] = {}  # file path -> its task
        self._index = RawIndex({p: _Partition() for p in partitions})

    def plan(self, table: Table, snapshot_id: int | None, partitions: Iterable[int]) -> RawIndex:
        """The files of ``partitions`` in snapshot ``snapshot_id`` of ``table``."""
        wanted = frozenset(partitions)
        if wanted != self._partitions:  # another assignment: what was remembered is for other partitions
            self._forget(wanted)
        snapshot = table.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
        manifests = snapshot.manifests(table.io) if snapshot is not None and wanted else []
        if any(m.content != ManifestContent.DATA for m in manifests):
            assert snapshot_id is not None
            self._replace({"": [t.file for t in table.scan(snapshot_id=snapshot_id).plan_files()
                                if int(t.file.partition[0]) in wanted]})
            return self._index
        current: dict[str, list[DataFile]] = {}
        for manifest in manifests:
            files = self._manifests.get(manifest.manifest_path)
            current[manifest.manifest_path] = files if files is not None else self._read(table, manifest, wanted)
        self._replace(current)
        return self._index

    def _read(self, table: Table, manifest: ManifestFile, wanted: frozenset[int]) -> list[DataFile]:
        bounds = _partition_range(manifest)
        if bounds is not None and not any(bounds[0] <= p <= bounds[1] for p in wanted):
            return []
        entries = manifest.fetch_manifest_entry(table.io, discard_deleted=True)
        self.manifests_read += 1
        self.entries_read += len(entries)
        return [e.data_file for e in entries if int(e.data_file.partition[0]) in wanted]

    def _replace(self, current: dict[str, list[DataFile]]) -> None:
        """Make ``current`` (manifest -> files) the remembered manifests; the index changes by what changed."""
        added: dict[int, list[FileScanTask]] = {}
        removed: dict[int, list[FileScanTask]] = {}
        for path, files in current.items():  # first what came (a merged manifest lists files kept), ...
            if path in self._manifests:
                continue
            self._manifests[path] = files
            for data_file in files:
                count = self._counts.get(data_file.file_path, 0) + 1
                self._counts[data_file.file_path] = count
                if count == 1:
                    task = self._tasks[data_file.file_path] = FileScanTask(data_file)
                    added.setdefault(int(data_file.partition[0]), []).append(task)
        for path in [p for p in self._manifests if p not in current]:  # ... then what went
            for data_file in self._manifests.pop(path):
                count = self._counts[data_file.file_path] - 1
                self._counts[data_file.file_path] = count
                if count == 0:
                    del self._counts[data_file.file_path]
                    task = self._tasks.pop(data_file.file_path)
                    removed.setdefault(int(data_file.partition[0]), []).append(task)
        if added or removed:
            partitions = dict(self._index.partitions)
            for p in set(added) | set(removed):
                partitions[p] = partitions[p].changed(added.get(p, []), removed.get(p, []))
            self._index = RawIndex(partitions)
