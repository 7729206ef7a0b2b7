"""The raw snapshot window: which append snapshots stay in a topic's table metadata for Iceberg's own readers.

Iceberg's incremental readers (Spark Structured Streaming resumed from a checkpoint, ``VERSION AS OF``,
pyiceberg's ``incremental_append_scan``) name raw snapshots by id, so those snapshots must stay in the table
metadata. But every commit reads, copies and writes all of the metadata, so a topic cannot keep every
snapshot: commit cost would grow with the topic's age. The window bounds it, per topic, in time and in count:

* ``raw.snapshot.window.ms`` (default one hour): a snapshot of ``main``'s history stays while it was the
  current snapshot within that long, by the recorded clocks of the commits (``compactor.now-ms``; never
  Iceberg's commit times), i.e. while the commit that replaced it is younger than the window;
* ``raw.snapshot.window.count`` (default 1,000, chosen by measurement: ``bench/README.md``): at most that many
  snapshots before the current one stay, whatever their age.

A snapshot is in the window iff both hold (time, capped by the count), or it is among the newest
``history.expire.min-snapshots-to-keep`` (Iceberg's floor). So a reader that checkpointed the then-current
snapshot resumes if it comes back within ``raw.snapshot.window.ms`` and after at most
``raw.snapshot.window.count`` appends; past either, its snapshot may be gone and it fails with Iceberg's own
error. The product's consumers track offsets, not snapshots, and have no such window.

Only two things remove a snapshot entry: an append pruning older *append* snapshots outside the window
(``prunable``; never a ref's head, never a non-append snapshot such as a retention delete, nor its parent, so
the files a delete removed stay referenced until expiry's lease rule lets them go), and snapshot expiry in
retention, which spares the window (``in_window``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation, Snapshot

from compactor import properties as props
from compactor.iceberg.commits import branch_history
from compactor.topics.settings import TopicSettings


def snapshot_clock(snapshot: Snapshot) -> int:
    """The recorded clock of a commit (``compactor.now-ms``), or Iceberg's commit time if it has none."""
    text = snapshot.summary.additional_properties.get(props.SUMMARY_NOW) if snapshot.summary is not None else None
    if text is not None and text.lstrip("-").isdigit():
        return int(text)
    return snapshot.timestamp_ms


@dataclass(frozen=True)
class SnapshotWindow:
    """A topic's raw snapshot window (see the module docstring)."""

    window_ms: int
    count: int
    min_keep: int = 1

    @classmethod
    def of(cls, settings: TopicSettings) -> SnapshotWindow:
        return cls(settings.raw_snapshot_window_ms, settings.raw_snapshot_window_count,
                   settings.expire_min_snapshots_to_keep)

    def _kept(self, history: list[Snapshot], now_ms: int, head_replaced_ms: int | None) -> int:
        """How many of ``history`` (newest first) are in the window. ``head_replaced_ms``: when the newest was
        replaced (an append about to commit replaces it now), or None when it is still current."""
        shift = 1 if head_replaced_ms is not None else 0
        for index in range(len(history)):
            replaced = head_replaced_ms if index == 0 else snapshot_clock(history[index - 1])
            after = index + shift  # how many snapshots were committed after it (the new one too)
            in_time = replaced is None or now_ms - replaced < self.window_ms
            if after >= max(self.min_keep, 1) and not (in_time and after <= self.count):
                return index  # the window is a contiguous run of the newest: a reader's chain has no gap
        return len(history)

    def in_window(self, metadata: TableMetadata, now_ms: int) -> set[int]:
        """The ids of ``main``'s snapshots in the window at ``now_ms`` (expiry spares them)."""
        history = branch_history(metadata)
        return {s.snapshot_id for s in history[:self._kept(history, now_ms, None)]}

    def prunable(self, metadata: TableMetadata, now_ms: int) -> list[int]:
        """The snapshot entries an append committing at ``now_ms`` removes from ``metadata``: ``main``'s append
        snapshots outside the window once the new snapshot is current, except ref heads, non-append snapshots and
        the parents of non-append snapshots (those are expiry's to decide)."""
        history = branch_history(metadata)
        kept = self._kept(history, now_ms, now_ms)
        heads = {ref.snapshot_id for ref in metadata.refs.values()}

        def operation(snapshot: Snapshot) -> Operation | None:
            return snapshot.summary.operation if snapshot.summary is not None else None

        out = []
        for index in range(max(kept, 1), len(history)):
            candidate, child = history[index], history[index - 1]
            if (candidate.snapshot_id in heads or operation(candidate) != Operation.APPEND
                    or operation(child) != Operation.APPEND):
                continue  # a ref's head, a retention delete or the snapshot before one: expiry decides
            out.append(candidate.snapshot_id)
        return out


__all__ = ["SnapshotWindow", "snapshot_clock"]
