"""The product's hand-built snapshots: an append's (``build_append``) and a cursor commit's (``build_snapshot``),
over manifests written by ``iceberg.manifests``.

An append's snapshot is built so that a commit costs the same on a topic's first day and its thousandth.
Hand-built because pyiceberg's public snapshot producers do not keep it flat (``bench/snapshot_producer_bench.py``:
the product's commit around either snapshot, one-record batches with ids; pyiceberg 0.12.0, a shared 2-core
machine): with ``fast_append`` the manifest list grows by one per commit and each commit reads it, 18 ms at
commit 1, 56 ms at 100, 215 ms at 500, 1,326 ms at 1,000 (1,000 manifests); ``merge_append`` keeps 10
manifests but rewrites them, 50 / 136 / 407 / 1,560 ms; built here, 15-36 ms at commit 1 and 30-71 ms at
1,000 (13 manifests; five runs, the spread is the shared machine's).

Three things would otherwise grow with every commit (measured in ``bench/produce_bench.py``):

* **Manifests.** An append adds one manifest; carrying every earlier one makes the manifest list grow by one
  per commit. Manifests are merged size-tiered instead: a manifest's tier is ``floor(log8(live files))``, and
  when the new files plus the existing manifests of their tier and below number ``MERGE_FACTOR`` or more they
  are rewritten as one manifest (then the next tier is checked). The list holds fewer than ``MERGE_FACTOR``
  manifests per tier, so O(log files) manifests, and each data file is rewritten O(log files) times in all.
* **Snapshot entries.** Table metadata holds every retained snapshot, and each commit reads, copies and
  writes all of it. An append therefore also removes the metadata entries of older raw append snapshots
  outside the topic's raw snapshot window (``topics.window``: ``raw.snapshot.window.ms`` capped by
  ``raw.snapshot.window.count``), so a commit's cost grows with the window, never with the topic's age. Every
  data file of a removed entry is still referenced by the next snapshot (appends only add files), and the
  parent of each retention delete keeps the files that delete removed until expiry's lease rule (measured from
  the delete's own clock) lets them go, so no open reader loses a file (readers plan their files at open; see
  ``readers.reader``).
* **Summaries.** Only the totals Iceberg needs and the product's few keys are written; no per-partition
  summaries, no batch plan (that lives in the batch-id record, ``producing.batch_ids``).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pyiceberg.manifest import DataFile, ManifestContent, ManifestFile, write_manifest_list
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation, Snapshot, SnapshotSummaryCollector, Summary, update_snapshot_summaries

from compactor.iceberg.manifests import avro_compression, data_manifest

MERGE_FACTOR = 8


@dataclass(frozen=True)
class BuiltSnapshot:
    """A snapshot ready to commit, and the metadata files written for it (deleted if it never commits)."""

    snapshot: Snapshot
    written: tuple[str, ...]


def _live_files(manifest: ManifestFile) -> int:
    return int(manifest.added_files_count or 0) + int(manifest.existing_files_count or 0)


def _tier(files: int) -> int:
    return int(math.log(max(files, 1), MERGE_FACTOR))


def choose_merge(new_files: int, existing: Sequence[ManifestFile]) -> list[ManifestFile]:
    """The existing manifests to rewrite together with the new files (size-tiered; see the module docstring)."""
    chosen: list[ManifestFile] = []
    total = new_files
    while True:
        tier = _tier(total)
        candidates = [m for m in existing if m not in chosen and _tier(_live_files(m)) <= tier]
        if len(candidates) + 1 < MERGE_FACTOR:
            return chosen
        chosen.extend(candidates)
        total += sum(_live_files(m) for m in candidates)


def build_append(table: Table, parent: Snapshot | None, data_files: Sequence[DataFile],
                 properties: Mapping[str, str]) -> BuiltSnapshot:
    """An append snapshot of ``data_files`` on top of ``parent`` (manifests merged size-tiered)."""
    metadata = table.metadata
    snapshot_id = metadata.new_snapshot_id()
    commit_uuid = uuid.uuid4()
    existing = [m for m in (parent.manifests(table.io) if parent is not None else []) if _live_files(m) > 0]
    merged = choose_merge(len(data_files), existing)
    location = table.location_provider().new_metadata_location(f"{commit_uuid}-m0.avro")
    written: list[str] = [location]
    new_manifest = data_manifest(table, location, snapshot_id, data_files, merged)
    kept = [m for m in existing if m not in merged]
    collector = SnapshotSummaryCollector()
    for data_file in data_files:
        collector.add_file(data_file, schema=metadata.schema(), partition_spec=metadata.spec())
    snapshot = _snapshot(table, parent, snapshot_id, f"snap-{snapshot_id}-0-{commit_uuid}.avro", [new_manifest, *kept],
                         Summary(operation=Operation.APPEND, **collector.build(), **dict(properties)))
    written.append(snapshot.manifest_list)
    return BuiltSnapshot(snapshot, tuple(written))


def build_snapshot(table: Table, parent: Snapshot | None, properties: Mapping[str, str],
                   extra: Callable[[int], Sequence[ManifestFile]] | None = None,
                   counters: Mapping[str, str] | None = None, *, carry: bool = True,
                   operation: Operation | None = None, data_files: Sequence[DataFile] = ()) -> Snapshot:
    """A snapshot with the parent's content (none unless ``carry``) and extra summary properties.

    ``extra`` may add manifests written for the new snapshot (it receives the new snapshot id; the cursor
    commit adds the run's position deletes this way, ``manifests.delete_manifest``), with their summary
    ``counters``; ``data_files`` are added through a data manifest of their own, into which the parent's data
    manifests are merged size-tiered as an append's are (delete manifests are carried as they are). Hand-built:
    pyiceberg 0.12's public snapshot producers write every added file into a data manifest
    (``_SnapshotProducer._manifests``), so they cannot add the run's position delete files, which need a delete
    manifest. ``operation`` defaults to an overwrite if both files and ``extra`` manifests are added, a delete if
    only the latter, else an append.
    """
    snapshot_id = table.metadata.new_snapshot_id()
    manifests = list(parent.manifests(table.io)) if parent is not None and carry else []
    summary = dict(counters or {})
    if data_files:
        data = [m for m in manifests if m.content == ManifestContent.DATA and _live_files(m) > 0]
        merged = choose_merge(len(data_files), data)
        location = table.location_provider().new_metadata_location(f"{uuid.uuid4()}-m0.avro")
        new_manifest = data_manifest(table, location, snapshot_id, data_files, merged)
        manifests = [new_manifest, *(m for m in manifests if m.content != ManifestContent.DATA or (m in data
                                     and m not in merged))]
        collector = SnapshotSummaryCollector()
        for data_file in data_files:
            collector.add_file(data_file, schema=table.metadata.schema(), partition_spec=table.metadata.spec())
        added = collector.build()
        size = int(added.get("added-files-size", 0)) + int(summary.get("added-files-size", 0))
        summary = {**summary, **added, "added-files-size": str(size)}
    extras = list(extra(snapshot_id)) if extra is not None else []
    operation = operation or (Operation.OVERWRITE if extras and data_files else
                              Operation.DELETE if extras else Operation.APPEND)
    return _snapshot(table, parent, snapshot_id, f"snap-{snapshot_id}-0-{uuid.uuid4()}.avro", [*manifests, *extras],
                     Summary(operation=operation, **summary, **dict(properties)))


def _snapshot(table: Table, parent: Snapshot | None, snapshot_id: int, list_name: str,
              manifests: Sequence[ManifestFile], summary: Summary) -> Snapshot:
    """The snapshot ``snapshot_id`` over ``manifests``: its manifest list written as ``list_name`` (in the
    table's metadata location), its summary's totals carried on from ``parent``'s."""
    metadata = table.metadata
    sequence_number = metadata.next_sequence_number()
    location = table.location_provider().new_metadata_location(list_name)
    with write_manifest_list(format_version=metadata.format_version, output_file=table.io.new_output(location),
                             snapshot_id=snapshot_id, parent_snapshot_id=parent.snapshot_id if parent else None,
                             sequence_number=sequence_number,
                             avro_compression=avro_compression(table)) as writer:  # type: ignore[arg-type]
        writer.add_manifests(list(manifests))
    totals = update_snapshot_summaries(summary, previous_summary=parent.summary if parent is not None else None)
    return Snapshot(snapshot_id=snapshot_id, parent_snapshot_id=parent.snapshot_id if parent else None,
                    sequence_number=sequence_number, manifest_list=location, summary=totals,
                    schema_id=metadata.current_schema_id)


__all__ = ["MERGE_FACTOR", "BuiltSnapshot", "build_append", "build_snapshot", "choose_merge"]
