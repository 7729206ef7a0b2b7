"""Planning a raw table's snapshots one after another at a cost that does not grow with the topic.

A manifest never changes once written, so the data files a manifest lists are read once and remembered by its
path. Planning the next snapshot reads its manifest list (a few entries: manifests are merged size-tiered, so
there are O(log files) of them) and only the manifests not seen before, usually the one the last append
wrote. Manifests whose partition range holds none of the wanted partitions are not read at all, and only the
wanted partitions' files are kept. Only public pyiceberg API is used (``Snapshot.manifests``,
``ManifestFile.fetch_manifest_entry``).

A snapshot with delete manifests (not written to raw tables by the product, but possible on tables another
engine maintains) is planned by pyiceberg's own scan instead.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import DataFile, ManifestContent, ManifestFile
from pyiceberg.table import FileScanTask, Table
from pyiceberg.types import IntegerType


def _partition_range(manifest: ManifestFile) -> tuple[int, int] | None:
    """The smallest and largest partition a manifest's files hold, from its summary (None: unknown)."""
    summaries = manifest.partitions or []
    if not summaries or summaries[0].lower_bound is None or summaries[0].upper_bound is None:
        return None
    return (int(from_bytes(IntegerType(), summaries[0].lower_bound)),
            int(from_bytes(IntegerType(), summaries[0].upper_bound)))


class RawPlanner:
    """Plans snapshots of one raw table for a set of partitions, remembering manifests (module docstring)."""

    def __init__(self) -> None:
        self._files: dict[str, list[DataFile]] = {}  # manifest path -> its live files of ``self._partitions``
        self._partitions: frozenset[int] = frozenset()
        self.manifests_read = 0  # manifests read so far, and their entries (what planning cost)
        self.entries_read = 0

    def plan(self, table: Table, snapshot_id: int | None, partitions: Iterable[int]) -> list[FileScanTask]:
        """The data files of ``partitions`` in snapshot ``snapshot_id`` of ``table``, as scan tasks."""
        wanted = frozenset(partitions)
        if wanted != self._partitions:  # another assignment: what was remembered is for other partitions
            self._files, self._partitions = {}, wanted
        snapshot = table.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
        if snapshot is None or not wanted:
            return []
        manifests = snapshot.manifests(table.io)
        if any(m.content != ManifestContent.DATA for m in manifests):
            self._files = {}
            return [t for t in table.scan(snapshot_id=snapshot_id).plan_files()
                    if int(t.file.partition[0]) in wanted]
        kept: dict[str, list[DataFile]] = {}
        for manifest in manifests:
            files = self._files.get(manifest.manifest_path)
            if files is None:
                bounds = _partition_range(manifest)
                if bounds is not None and not any(bounds[0] <= p <= bounds[1] for p in wanted):
                    files = []
                else:
                    entries = manifest.fetch_manifest_entry(table.io, discard_deleted=True)
                    self.manifests_read += 1
                    self.entries_read += len(entries)
                    files = [e.data_file for e in entries if int(e.data_file.partition[0]) in wanted]
            kept[manifest.manifest_path] = files
        self._files = kept
        return [FileScanTask(data_file) for files in kept.values() for data_file in files]
