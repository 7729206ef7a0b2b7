"""Publishing a run of an attached log: one conditional commit on the view (docs/guarantees.md#attached-logs).

A run writes its files under one run directory of the view, ``data/run-<run clock>-<id>/``: the new view rows
(Parquet written by Spark, under ``rows/``) and, for an incremental run, under ``deletes/``, the position deletes
of the view rows it removes (``iceberg.position_deletes``: the native job's writer). The commit builds one snapshot
(``iceberg.snapshots.build_snapshot``, manifests from ``iceberg.manifests``) and moves ``main`` to it on condition
that ``main`` is still the cursor ``C`` the run started from (``iceberg.commits.commit``), with the cursor in its
summary:

* **incremental**: ``C``'s manifests, plus one manifest of the new data files and one of the position deletes;
* **replace** (the first run, or a rewrite once deletes pile up): only the new data files.

If ``main`` moved, nothing is published ("cursor moved") and the run directory is deleted; so is it after any
other failure that certainly left the view unchanged. Retention removes the run directories of dead runs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pyiceberg.catalog import Catalog
from pyiceberg.io.pyarrow import parquet_file_to_data_file
from pyiceberg.manifest import DataFile, ManifestFile
from pyiceberg.table import Table, TableProperties
from pyiceberg.table.snapshots import Operation, Snapshot, SnapshotSummaryCollector

from compactor import failpoints
from compactor.config import LakeConfig
from compactor.cursor import MAIN
from compactor.errors import CommitConflictError, OutcomeUnknownError
from compactor.iceberg.catalog import translate_storage_errors
from compactor.iceberg.commits import RefMove, commit
from compactor.iceberg.manifests import DeleteFileInfo, data_manifest, delete_manifest
from compactor.iceberg.snapshots import build_snapshot
from compactor.iceberg.storage import delete_prefix

log = logging.getLogger(__name__)

RUN_PREFIX = "run-"
REMOVED_TOTALS = {"total-data-files": "deleted-data-files", "total-records": "deleted-records",
                  "total-delete-files": "removed-delete-files", "total-position-deletes": "removed-position-deletes",
                  "total-files-size": "removed-files-size"}


def run_of(location: str) -> str | None:
    """The run directory (``run-<clock>-<id>``) a file of the view lies in, if any."""
    parts = location.split("/data/", 1)[-1].split("/")
    return parts[0] if len(parts) > 1 and parts[0].startswith(RUN_PREFIX) else None


def publish_view(catalog: Catalog, config: LakeConfig, view: Table, cursor: int | None, directory: str,
                 data_paths: Sequence[str], deletes: Sequence[DeleteFileInfo], summary: dict[str, str], *,
                 replace: bool) -> int:
    """Commit the run's files under ``directory`` as the view's new snapshot with the cursor ``summary``, if
    ``main`` is still ``cursor``; returns the new snapshot's id. See the module docstring."""
    name = ".".join(view.name())
    try:
        with translate_storage_errors(f"publishing the view {name}"):
            snapshot = _snapshot(view, cursor, data_paths, deletes, summary, replace)
            mapping = {} if view.metadata.name_mapping() is not None else {  # Spark's files carry no field ids
                TableProperties.DEFAULT_NAME_MAPPING: view.schema().name_mapping.model_dump_json()}
            failpoints.hit("before-commit")
            commit(catalog, view, snapshot=snapshot, moves=[RefMove(MAIN, None)], properties=mapping,
                   expect={MAIN: cursor}, what=f"publishing the view {name}")
    except OutcomeUnknownError:
        raise  # the commit may have landed: its files stay
    except CommitConflictError as exc:
        delete_prefix(config, directory, view.io)
        raise CommitConflictError(f"cursor moved: the cursor of {name} moved while this run ran (another run "
                                  f"published first): nothing was published ({exc})") from None
    except BaseException:
        delete_prefix(config, directory, view.io)
        raise
    return int(snapshot.snapshot_id)


def _snapshot(view: Table, cursor: int | None, data_paths: Sequence[str], deletes: Sequence[DeleteFileInfo],
              summary: dict[str, str], replace: bool) -> Snapshot:
    metadata = view.metadata
    parent = metadata.snapshot_by_id(cursor) if cursor is not None else None
    added: list[DataFile] = [f for f in (parquet_file_to_data_file(view.io, metadata, path) for path in data_paths)
                             if f.record_count > 0]  # Spark writes an empty file when it has no rows
    spec = metadata.spec()
    collector = SnapshotSummaryCollector()
    for data_file in [*added, *(info.data_file(spec.spec_id, not spec.is_unpartitioned()) for info in deletes)]:
        collector.add_file(data_file, schema=metadata.schema(), partition_spec=spec)
    counters = collector.build()
    if replace and parent is not None and parent.summary is not None:
        totals = parent.summary.additional_properties
        counters.update({removed: totals[total] for total, removed in REMOVED_TOTALS.items()
                         if totals.get(total, "0") != "0"})

    def manifests(snapshot_id: int) -> list[ManifestFile]:
        out: list[ManifestFile] = []
        if added:
            location = view.location_provider().new_metadata_location(f"run-{snapshot_id}-m0.avro")
            out.append(data_manifest(view, location, snapshot_id, added, []))
        if deletes:
            out.append(delete_manifest(view, snapshot_id, deletes))
        return out

    operation = Operation.APPEND if parent is None or not (replace or deletes) else Operation.OVERWRITE
    return build_snapshot(view, parent, summary, manifests, counters, carry=not replace, operation=operation)
