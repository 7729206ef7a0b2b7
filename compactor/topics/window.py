"""The raw snapshot window: which append snapshots stay in a topic's table metadata for Iceberg's own readers.

Iceberg's incremental readers (Spark Structured Streaming resumed from a checkpoint, ``VERSION AS OF``,
pyiceberg's ``incremental_append_scan``) name raw snapshots by id, so those snapshots must stay in the table
metadata. But every commit reads, copies and writes all of the metadata, so a topic cannot keep every
snapshot: commit cost would grow with the topic's age. The window is what a topic promises, in time and in
count:

* ``raw.snapshot.window.ms`` (default one hour): a snapshot of ``main``'s history that was the current snapshot
  within that long, by the recorded clocks of the commits (``compactor.now-ms``; never Iceberg's commit
  times), i.e. whose replacing commit is younger than the window, ...
* ``raw.snapshot.window.count`` (default 1,000, chosen by measurement: ``bench/README.md``): ... and has at most
  that many snapshots committed after it, is in the window.

The newest ``history.expire.min-snapshots-to-keep`` (Iceberg's floor) are in it too. So a reader that
checkpointed the then-current snapshot resumes if it comes back within ``raw.snapshot.window.ms`` and after at
most ``raw.snapshot.window.count`` appends; past either its snapshot may be gone, and it fails with Iceberg's
own error. The product's consumers track offsets, not snapshots, and have no such window.

Two things remove a snapshot entry, never one in the window:

* an append (``prunable``) removes the *append* snapshots with more than ``raw.snapshot.window.count`` snapshots
  after them: the count bounds the metadata, so a commit's cost grows with the window, never with the topic's
  age. It never removes a ref's head, a non-append snapshot (a retention delete) or the parent of one, so the
  files a delete removed stay referenced until expiry's lease rule lets them go. Time plays no part here:
  older snapshots within the count cost no more than young ones, so a slowly written topic keeps them;
* snapshot expiry in retention (``retention.expiry``, Iceberg's ``history.expire.*`` rules and the reader lease)
  spares the window (``in_window``), so past ``raw.snapshot.window.ms`` a snapshot goes once it is older than
  ``history.expire.max-snapshot-age-ms``.
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

    def _in_window(self, history: list[Snapshot], now_ms: int) -> int:
        """How many of ``history`` (newest first, the first one current) are in the window at ``now_ms``."""
        for index in range(1, len(history)):
            replaced = snapshot_clock(history[index - 1])
            if index >= self.min_keep and not (now_ms - replaced < self.window_ms and index <= self.count):
                return index  # the window is a contiguous run of the newest: a reader's chain has no gap
        return len(history)

    def in_window(self, metadata: TableMetadata, now_ms: int) -> set[int]:
        """The ids of ``main``'s snapshots in the window at ``now_ms`` (expiry spares them)."""
        history = branch_history(metadata)
        return {s.snapshot_id for s in history[:self._in_window(history, now_ms)]}

    def prunable(self, metadata: TableMetadata) -> list[int]:
        """The snapshot entries an append removes from ``metadata`` as it commits a new current snapshot: ``main``'s
        append snapshots with more than ``count`` snapshots after them (the new one too), except ref heads,
        non-append snapshots and the parents of non-append snapshots (those are expiry's to decide)."""
        history = branch_history(metadata)
        kept = max(self.count, self.min_keep - 1, 1)  # of the existing history; the new snapshot comes on top
        heads = {ref.snapshot_id for ref in metadata.refs.values()}

        def operation(snapshot: Snapshot) -> Operation | None:
            return snapshot.summary.operation if snapshot.summary is not None else None

        out = []
        for index in range(kept, len(history)):
            candidate, child = history[index], history[index - 1]
            if (candidate.snapshot_id in heads or operation(candidate) != Operation.APPEND
                    or operation(child) != Operation.APPEND):
                continue  # a ref's head, a retention delete or the snapshot before one: expiry decides
            out.append(candidate.snapshot_id)
        return out


__all__ = ["SnapshotWindow", "snapshot_clock"]
