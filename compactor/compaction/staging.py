"""A run's private staging branch of the compacted table: created at the cursor ``C`` (or at the empty base
snapshot that first runs branch from) on condition that ``main`` is still ``C``, written by phase 2, and
dropped by the cursor commit (or, when the run fails, here). Readers never see it.

Its name is ``compactor-run-<run clock>-<run id>`` (``stage_branch``), so that retention can tell a dead run's
branch from a live one's (``stage_mark``, ``lease.is_stale``).
"""

from __future__ import annotations

import contextlib
import logging
import time

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from compactor import properties as props
from compactor.compaction.lease import RunMark
from compactor.cursor import MAIN
from compactor.errors import CommitConflictError
from compactor.iceberg.commits import RefMove, commit
from compactor.iceberg.snapshots import build_snapshot

log = logging.getLogger(__name__)

BASE_BRANCH = "compactor-base"
STAGE_PREFIX = "compactor-run-"
STAGE_ATTEMPTS = 8


def stage_branch(now_ms: int, run_id: str) -> str:
    """The name of the staging branch of the run ``run_id`` started at ``now_ms``."""
    return RunMark(now_ms, run_id).name(STAGE_PREFIX, "-")


def stage_mark(ref: str) -> RunMark | None:
    """The run clock and run id of a staging branch's name (``None``: not a staging branch)."""
    return RunMark.parse(ref, STAGE_PREFIX, "-") if ref.startswith(STAGE_PREFIX) else None


def ensure_base_branch(catalog: Catalog, table: Table) -> int:
    """The id of the empty snapshot on ``compactor-base`` (created if missing) that first runs branch from.

    Spark cannot write to a branch of a table without snapshots, and pyiceberg refuses branch writes there.
    """
    ref = table.metadata.refs.get(BASE_BRANCH)
    if ref is not None:
        return ref.snapshot_id
    snapshot = build_snapshot(table, None, {props.SUMMARY_BASE: "true"})
    # pyiceberg's AssertRefSnapshotId rejects any ref but main on a table without snapshots, so the base is
    # created unconditionally: two racing creators each add an empty snapshot and the later ref wins, which
    # is harmless (both are empty and stay in the metadata).
    expect: dict[str, int | None] = {BASE_BRANCH: None} if table.metadata.snapshots else {}
    with contextlib.suppress(CommitConflictError):  # another run created it first
        commit(catalog, table, snapshot=snapshot, moves=[RefMove(BASE_BRANCH, None)],
               expect=expect, what="creating the compacted table's base snapshot")
    fresh = catalog.load_table(table.name())
    return int(fresh.metadata.refs[BASE_BRANCH].snapshot_id)



def require_cursor(table: Table, cursor: int | None, identifier: str, consequence: str = "") -> None:
    """Raise ``CommitConflictError`` ("cursor moved") unless ``main`` of the compacted table is still the run's
    pinned ``cursor``."""
    main = table.metadata.refs.get(MAIN)
    current = main.snapshot_id if main else None
    if current != cursor:
        raise CommitConflictError(f"cursor moved: {identifier}'s cursor is now {current}, this run started from "
                                  f"{cursor}{consequence}")


def create_stage_branch(catalog: Catalog, identifier: str, stage: str, base: int, cursor: int | None) -> None:
    """Create the run's private staging branch at ``base``, on condition that ``main`` is still ``cursor``.

    A metadata-only commit made here rather than with Spark's ``ALTER TABLE ... CREATE BRANCH``: under
    concurrent commits Iceberg 1.10's transactional ref update fails ("Table metadata refresh is required")
    even with retries enabled. Here a lost race is retried on the refreshed table, and a cursor that moved in
    the meantime ends the attempt early (``CommitConflictError``, "cursor moved"), before any Spark work.
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


def drop_stage_branch(catalog: Catalog, identifier: str, stage: str) -> None:
    """Best effort: remove a failed run's staging branch (retention removes it otherwise)."""
    try:
        table = catalog.load_table(identifier)
        if stage in table.metadata.refs:
            commit(catalog, table, removals=[stage], expect={}, what=f"dropping staging branch {stage}")
    except Exception as exc:
        log.info("staging branch %s of %s left for retention to remove: %s", stage, identifier, exc)
