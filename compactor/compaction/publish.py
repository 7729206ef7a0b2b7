"""Hand-built catalog commits on the compacted table: the cursor publish, and the empty base snapshot.

Why not a library call: publishing must be ONE commit that adds the cursor snapshot, moves ``main`` to it,
tags the replaced cursor and drops the run's staging branch, on condition that ``main`` still points at the
cursor the run started from. pyiceberg's snapshot producers cannot take that condition (and their automatic
retry would strip ref assertions and re-commit on a new head); Spark's SQL writes cannot carry snapshot
properties. So the snapshot is built here (a new manifest list over the parent's manifests: no data changes)
and sent with its updates and requirements straight to ``catalog.commit_table``.

Failure handling:

* ``CommitFailedException`` or a metadata validation error: the commit did not happen (``CommitConflictError``).
* anything else (the database or object store went away mid-commit): the table is re-read to learn whether
  the commit landed; if it cannot be re-read the outcome is unknown (``OutcomeUnknownError``, exit 75).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.manifest import ManifestFile, write_manifest_list
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, Summary, update_snapshot_summaries
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    AssertTableUUID,
    RemoveSnapshotRefUpdate,
    SetSnapshotRefUpdate,
    TableRequirement,
    TableUpdate,
)

from compactor.catalog import first_line, is_storage_failure, storage_error
from compactor.compaction.cursor import MAIN
from compactor.errors import CommitConflictError, CursorMovedError, OutcomeUnknownError

BASE_BRANCH = "compactor-base"


@dataclass(frozen=True)
class RefMove:
    """Point ``name`` (a branch or tag) at ``snapshot_id``; ``None`` means the new snapshot being committed."""

    name: str
    snapshot_id: int | None
    kind: SnapshotRefType = SnapshotRefType.BRANCH


def build_snapshot(table: Table, parent: Snapshot | None, properties: Mapping[str, str],
                   extra: Callable[[int], Sequence[ManifestFile]] | None = None,
                   counters: Mapping[str, str] | None = None) -> Snapshot:
    """A snapshot with the parent's content and extra summary properties.

    ``extra`` may add manifests written for the new snapshot (it receives the new snapshot id; the cursor
    commit adds the run's position deletes this way), with their summary ``counters``.
    """
    metadata = table.metadata
    snapshot_id = metadata.new_snapshot_id()
    sequence_number = metadata.next_sequence_number()
    manifests = list(parent.manifests(table.io)) if parent is not None else []
    added = list(extra(snapshot_id)) if extra is not None else []
    manifests.extend(added)
    location = table.location_provider().new_metadata_location(
        f"snap-{snapshot_id}-0-{uuid.uuid4()}.avro")
    compression = metadata.properties.get("write.avro.compression-codec", "gzip")
    with write_manifest_list(
        format_version=metadata.format_version,
        output_file=table.io.new_output(location),
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent.snapshot_id if parent else None,
        sequence_number=sequence_number,
        avro_compression=compression,  # type: ignore[arg-type]
    ) as writer:
        writer.add_manifests(manifests)
    operation = Operation.DELETE if added else Operation.APPEND
    summary = update_snapshot_summaries(
        Summary(operation=operation, **dict(counters or {}), **dict(properties)),
        previous_summary=parent.summary.additional_properties if parent is not None and parent.summary else None,
    )
    return Snapshot(
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent.snapshot_id if parent else None,
        sequence_number=sequence_number,
        manifest_list=location,
        summary=summary,
        schema_id=metadata.current_schema_id,
    )


def commit(
    catalog: Any,
    table: Table,
    *,
    snapshot: Snapshot | None,
    moves: Sequence[RefMove] = (),
    removals: Sequence[str] = (),
    expect: Mapping[str, int | None],
    what: str,
) -> None:
    """One conditional commit: add ``snapshot``, move/remove refs, if every ref in ``expect`` is as given."""
    updates: list[TableUpdate] = []
    if snapshot is not None:
        updates.append(AddSnapshotUpdate(snapshot=snapshot))
    for move in moves:
        target = move.snapshot_id if move.snapshot_id is not None else (snapshot.snapshot_id if snapshot else None)
        if target is None:
            raise ValueError(f"ref {move.name} has no target")
        updates.append(SetSnapshotRefUpdate(ref_name=move.name, type=move.kind, snapshot_id=target,
                                            max_ref_age_ms=None, max_snapshot_age_ms=None, min_snapshots_to_keep=None))
    updates.extend(RemoveSnapshotRefUpdate(ref_name=name) for name in removals)
    requirements: list[TableRequirement] = [AssertTableUUID(uuid=table.metadata.table_uuid)]
    requirements.extend(AssertRefSnapshotId(ref=ref, snapshot_id=sid) for ref, sid in expect.items())

    def landed(metadata: TableMetadata) -> bool:
        if snapshot is not None:
            return metadata.snapshot_by_id(snapshot.snapshot_id) is not None
        return all(metadata.refs.get(m.name) is not None and metadata.refs[m.name].snapshot_id == m.snapshot_id
                   for m in moves) and all(name not in metadata.refs for name in removals)

    send(catalog, table, tuple(requirements), tuple(updates), landed, what)


def send(catalog: Any, table: Table, requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...],
         landed: Callable[[TableMetadata], bool], what: str) -> None:
    """``catalog.commit_table`` with the failure classification described in the module docstring."""
    try:
        catalog.commit_table(table, requirements, updates)
        return
    except CommitFailedException as exc:
        raise CommitConflictError(f"{what}: {first_line(exc)}") from exc
    except (ValueError, ValidationError) as exc:
        if not is_storage_failure(exc):
            raise CommitConflictError(f"{what}: the table changed underneath ({first_line(exc)})") from exc
        failure: BaseException = exc
    except Exception as exc:
        failure = exc
    try:
        current = catalog.load_table(table.name())
    except Exception as reload_exc:
        raise OutcomeUnknownError(
            f"{what} failed with '{first_line(failure)}' and the table could not be re-read to learn whether it "
            f"committed ('{first_line(reload_exc)}'); re-running is safe") from failure
    if landed(current.metadata):
        return
    if is_storage_failure(failure):
        raise storage_error(what, failure) from failure
    raise failure


def ensure_base_branch(catalog: Any, table: Table) -> int:
    """The id of the empty snapshot on ``compactor-base`` (created if missing) that first runs branch from.

    Spark cannot write to a branch of a table without snapshots, and pyiceberg refuses branch writes there.
    """
    ref = table.metadata.refs.get(BASE_BRANCH)
    if ref is not None:
        return ref.snapshot_id
    snapshot = build_snapshot(table, None, {"compactor.base": "true"})
    # pyiceberg's AssertRefSnapshotId rejects any ref but main on a table without snapshots, so the base is
    # created unconditionally: two racing creators each add an empty snapshot and the later ref wins, which
    # is harmless (both are empty and stay in the metadata).
    expect: dict[str, int | None] = {BASE_BRANCH: None} if table.metadata.snapshots else {}
    with contextlib.suppress(CommitConflictError):  # another run created it first
        commit(catalog, table, snapshot=snapshot, moves=[RefMove(BASE_BRANCH, None)],
               expect=expect, what="creating the compacted table's base snapshot")
    fresh = catalog.load_table(table.name())
    return int(fresh.metadata.refs[BASE_BRANCH].snapshot_id)


STAGE_ATTEMPTS = 8


def require_cursor(table: Table, cursor: int | None, identifier: str, consequence: str = "") -> None:
    """Raise ``CursorMovedError`` unless ``main`` of the compacted table is still the run's pinned ``cursor``."""
    main = table.metadata.refs.get(MAIN)
    current = main.snapshot_id if main else None
    if current != cursor:
        raise CursorMovedError(f"cursor moved: {identifier}'s cursor is now {current}, this run started from "
                               f"{cursor}{consequence}")


def create_stage_branch(catalog: Any, identifier: str, stage: str, base: int, cursor: int | None) -> None:
    """Create the run's private staging branch at ``base``, on condition that ``main`` is still ``cursor``.

    A metadata-only commit made here rather than with Spark's ``ALTER TABLE ... CREATE BRANCH``: under
    concurrent commits Iceberg 1.10's transactional ref update fails ("Table metadata refresh is required")
    even with retries enabled. Here a lost race is retried on the refreshed table, and a cursor that moved in
    the meantime ends the attempt early (``CursorMovedError``), before any Spark work.
    """
    for attempt in range(STAGE_ATTEMPTS):
        table = catalog.load_table(identifier)
        require_cursor(table, cursor, identifier)
        try:
            commit(catalog, table, snapshot=None, moves=[RefMove(stage, base)], expect={MAIN: cursor, stage: None},
                   what=f"creating staging branch {stage}")
            return
        except CommitConflictError:
            time.sleep(0.05 * (attempt + 1))
    raise CommitConflictError(f"could not create staging branch {stage} of {identifier} after {STAGE_ATTEMPTS} "
                              "attempts: the table kept changing")
