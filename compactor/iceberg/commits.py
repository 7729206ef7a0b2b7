"""Every catalog commit of the product, built here: appends, cursor commits, expiry and retention deletes.

``commit`` turns what a commit does (a snapshot to add, refs to move or remove, properties to set, snapshot
entries to drop) and what it requires (the same table; each named ref still at a given snapshot) into
pyiceberg's table updates and requirements, and ``send`` sends them with ``catalog.commit_table``. Snapshots
are built by ``iceberg.snapshots`` (appends and cursor snapshots) or by pyiceberg's own snapshot producers in a
transaction (retention's delete, sent by ``send_transaction``). pyiceberg's ``Transaction.commit_transaction``
is not used to send: it cannot tell a lost reply from a failed commit, which the product must (exit 75).

Failure handling:

* ``CommitFailedException`` or a metadata validation error: the commit did not happen (``CommitConflictError``).
* a commit that certainly never reached a REST catalog (a refused connection; 401, 403, 400): the catalog's
  error, with nothing changed (``iceberg.rest.commit_never_sent``).
* anything else (the database or object store went away mid-commit, a REST catalog's 5xx or timeout): the table
  is re-read to learn whether the commit landed; if it cannot be re-read the outcome is unknown
  (``OutcomeUnknownError``, exit 75). So is a REST commit whose answer timed out or whose connection was lost
  after it was sent and that the table does not show: the server may still apply it
  (``iceberg.rest.commit_in_flight``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pydantic import ValidationError
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    AssertTableUUID,
    RemoveSnapshotRefUpdate,
    RemoveSnapshotsUpdate,
    SetPropertiesUpdate,
    SetSnapshotRefUpdate,
    TableRequirement,
    TableUpdate,
)

from compactor.errors import CommitConflictError, InputError, OutcomeUnknownError
from compactor.iceberg.catalog import first_line, is_storage_failure, storage_error
from compactor.iceberg.internals import delete_old_metadata, transaction_parts
from compactor.iceberg.rest import commit_in_flight, commit_never_sent, detail, rest_failure

log = logging.getLogger(__name__)


def branch_history(metadata: TableMetadata, ref: str = "main") -> list[Snapshot]:
    """The snapshots of ``ref``'s history, newest first (following parents while their entries exist)."""
    by_id = {s.snapshot_id: s for s in metadata.snapshots}  # one pass: ``snapshot_by_id`` scans the list each time
    out: list[Snapshot] = []
    seen: set[int] = set()
    head = metadata.refs.get(ref)
    snapshot = by_id.get(head.snapshot_id) if head is not None else None
    while snapshot is not None and snapshot.snapshot_id not in seen:
        out.append(snapshot)
        seen.add(snapshot.snapshot_id)
        parent = snapshot.parent_snapshot_id
        snapshot = by_id.get(parent) if parent is not None else None
    return out


@dataclass(frozen=True)
class RefMove:
    """Point ``name`` (a branch or tag) at ``snapshot_id``; ``None`` means the new snapshot being committed."""

    name: str
    snapshot_id: int | None
    kind: SnapshotRefType = SnapshotRefType.BRANCH


def commit(
    catalog: Catalog,
    table: Table,
    *,
    snapshot: Snapshot | None = None,
    moves: Sequence[RefMove] = (),
    removals: Sequence[str] = (),
    properties: Mapping[str, str] | None = None,
    remove_snapshots: Sequence[int] = (),
    expect: Mapping[str, int | None],
    what: str,
    landed: Callable[[TableMetadata], bool] | None = None,
) -> Table:
    """The one builder of the product's catalog commits (appends, cursor commits, expiry; retention's delete
    comes through ``send_transaction``): add ``snapshot``, move/remove refs, set ``properties``, drop the
    entries of ``remove_snapshots``, all only if the table is the same table and every ref in ``expect`` is
    as given. ``landed`` tells, after an ambiguous failure, whether the re-read table holds the commit (by
    default: the new snapshot, or the ref moves and removals). Returns the table as committed."""
    updates: list[TableUpdate] = []
    if snapshot is not None:
        updates.append(AddSnapshotUpdate(snapshot=snapshot))
    for move in moves:
        target = move.snapshot_id if move.snapshot_id is not None else (snapshot.snapshot_id if snapshot else None)
        if target is None:
            raise InputError(f"ref {move.name} has no target: name a snapshot or commit one")
        updates.append(SetSnapshotRefUpdate(ref_name=move.name, type=move.kind, snapshot_id=target,
                                            max_ref_age_ms=None, max_snapshot_age_ms=None, min_snapshots_to_keep=None))
    updates.extend(RemoveSnapshotRefUpdate(ref_name=name) for name in removals)
    if properties:
        updates.append(SetPropertiesUpdate(updates=dict(properties)))
    if remove_snapshots:
        updates.append(RemoveSnapshotsUpdate(snapshot_ids=list(remove_snapshots)))
    requirements: list[TableRequirement] = [AssertTableUUID(uuid=table.metadata.table_uuid)]
    requirements.extend(AssertRefSnapshotId(ref=ref, snapshot_id=sid) for ref, sid in expect.items())

    def moved(metadata: TableMetadata) -> bool:
        if snapshot is not None:
            return metadata.snapshot_by_id(snapshot.snapshot_id) is not None
        return all(metadata.refs.get(m.name) is not None and metadata.refs[m.name].snapshot_id == m.snapshot_id
                   for m in moves) and all(name not in metadata.refs for name in removals)

    return send(catalog, table, tuple(requirements), tuple(updates), landed or moved, what)


def send(catalog: Catalog, table: Table, requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...],
         landed: Callable[[TableMetadata], bool], what: str) -> Table:
    """``catalog.commit_table`` with the failure classification described in the module docstring.

    Returns the table as committed (when the commit was only learned by re-reading the table after an
    ambiguous failure, the table as re-read).
    """
    try:
        response = catalog.commit_table(table, requirements, updates)
        _delete_dropped_versions(table, response.metadata)
        return Table(identifier=table.name(), metadata=response.metadata,
                     metadata_location=response.metadata_location, io=table.io, catalog=catalog)
    except CommitFailedException as exc:
        raise CommitConflictError(f"{what}: {first_line(exc)}") from exc
    except (ValueError, ValidationError) as exc:
        if not is_storage_failure(exc):
            raise CommitConflictError(f"{what}: the table changed underneath ({first_line(exc)})") from exc
        failure: BaseException = exc
    except Exception as exc:
        failure = exc
    if commit_never_sent(failure):
        raise storage_error(what, failure) from failure
    try:
        current = catalog.load_table(table.name())
    except Exception as reload_exc:
        raise OutcomeUnknownError(
            f"{what} failed with '{first_line(failure)}' and the table could not be re-read to learn whether it "
            f"committed ('{first_line(reload_exc)}'); re-running is safe") from failure
    if landed(current.metadata):
        return current
    if commit_in_flight(failure):
        raise OutcomeUnknownError(
            f"{what}: the REST catalog did not answer ({detail(failure)}) and the table does not show the commit "
            "yet, but the catalog may still apply it; re-running is safe") from failure
    if is_storage_failure(failure) or rest_failure(what, failure) is not None:
        raise storage_error(what, failure) from failure
    raise failure


def _delete_dropped_versions(table: Table, committed: TableMetadata) -> None:
    """Iceberg's ``write.metadata.delete-after-commit.enabled``: delete the metadata.json versions this commit
    dropped from the metadata log (``write.metadata.previous-versions-max``), as pyiceberg's ``Table`` does
    after its own commits; commits sent here bypass it, and each version is a copy of the whole metadata (with
    a full raw snapshot window, ~800 kB). Best effort: a file left behind is only storage (pyiceberg logs it)."""
    try:
        delete_old_metadata(table.io, table.metadata, committed)
    except Exception:
        log.warning("could not delete old metadata versions of %s", table.name(), exc_info=True)


def send_transaction(catalog: Catalog, tx: Transaction, what: str) -> Table:
    """``send`` what a pyiceberg transaction staged (its updates and requirements, plus the table's UUID) instead
    of ``commit_transaction``, which retries blindly and cannot tell a lost reply from a failed commit.

    The transaction must add a snapshot: after an ambiguous failure, that snapshot's presence in the re-read
    table is how ``send`` learns that the commit landed.
    """
    table, requirements, updates = transaction_parts(tx)
    added = [u.snapshot.snapshot_id for u in updates if isinstance(u, AddSnapshotUpdate)]
    if not added:
        raise ValueError(f"{what}: send_transaction needs a transaction that adds a snapshot")
    return send(catalog, table, requirements, updates,
                lambda metadata: all(metadata.snapshot_by_id(i) is not None for i in added), what)
