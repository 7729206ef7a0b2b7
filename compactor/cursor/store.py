"""Loading the compacted table and its cursor chain: which cursor is current, and which are still retained."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from compactor.cursor.model import MAIN, Cursor, parse_cursor
from compactor.errors import CursorCorruptError
from compactor.iceberg.catalog import translate_storage_errors
from compactor.topics.naming import TopicName


@dataclass(frozen=True)
class CompactedState:
    """The compacted table as loaded at one moment: the table (pinned metadata) and its current cursor."""

    table: Table
    cursor: Cursor | None

    def snapshot(self, snapshot_id: int) -> Snapshot | None:
        return self.table.metadata.snapshot_by_id(snapshot_id)


def load_compacted(catalog: Catalog, name: TopicName) -> CompactedState | None:
    """Load ``ns.t__compacted`` and parse its cursor; ``None`` if the table does not exist."""
    with translate_storage_errors(f"loading the compacted view of {name}"):
        try:
            table = catalog.load_table(name.compacted_identifier)
        except NoSuchTableError:
            return None
    head = table.metadata.snapshot_by_name(MAIN)
    if head is None:
        if MAIN in table.metadata.refs:
            raise CursorCorruptError(f"the compacted view of {name} names a missing snapshot "
                                     f"{table.metadata.refs[MAIN].snapshot_id}")
        return CompactedState(table, None)
    return CompactedState(table, parse_cursor(head))


def cursor_chain(state: CompactedState) -> list[Cursor]:
    """The current cursor and its predecessors still present in the table's metadata, newest first."""
    out: list[Cursor] = []
    current = state.cursor
    seen: set[int] = set()
    while current is not None and current.snapshot_id not in seen:
        out.append(current)
        seen.add(current.snapshot_id)
        if current.previous is None:
            break
        previous = state.snapshot(current.previous)
        if previous is None:
            break
        try:
            current = parse_cursor(previous)
        except CursorCorruptError:
            break
    return out


def retained_cursors(state: CompactedState, now_ms: int, retain_ms: int) -> list[Cursor]:
    """Cursors retained at ``now_ms``: the current one, and each predecessor replaced < retain_ms ago.

    "Replaced at" is the recorded clock of the run that published the successor (never a commit time).
    """
    chain = cursor_chain(state)
    if not chain:
        return []
    retained = [chain[0]]
    for successor, cursor in itertools.pairwise(chain):
        if successor.now_ms + retain_ms > now_ms:
            retained.append(cursor)
    return retained
