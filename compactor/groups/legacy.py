"""Groups written by earlier versions (four tables in the catalog database) move into the group store's
documents the first time a store on that database opens: committed positions, resets and commit times are
kept; members and leases are not (a member of the earlier version re-joins). The moved rows are removed in the
same transaction, so a group is moved once and a group deleted later never comes back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Engine, inspect, text

from compactor.groups.model import Reset, TopicPartition
from compactor.groups.state import GroupState, Slot

GROUPS, PARTITIONS = "compactor_groups", "compactor_group_partitions"
OTHERS = ("compactor_group_members", "compactor_group_pending")


def import_legacy_groups(engine: Engine, catalog_name: str,
                         insert_if_absent: Callable[[Connection, dict[str, Any]], int]) -> None:
    """Move the groups of ``catalog_name`` from the earlier tables, if any (see the module docstring)."""
    with engine.connect() as probe:
        if not inspect(probe.execution_options(compactor_read_only=True)).has_table(PARTITIONS):
            return
    where = {"c": catalog_name}
    with engine.begin() as conn:
        groups = conn.execute(text(f"SELECT group_id, created_ms, last_commit_ms FROM {GROUPS} "
                                   "WHERE catalog_name = :c"), where).all()
        for group, created_ms, last_commit_ms in groups:
            state = GroupState(int(created_ms), int(last_commit_ms), None)
            rows = conn.execute(text(f"SELECT topic, partition, committed_offset, committed_ms, last_reset, "
                                     f"reset_count FROM {PARTITIONS} WHERE catalog_name = :c AND group_id = :g"),
                                {**where, "g": group}).all()
            for topic, partition, committed, committed_ms, last_reset, reset_count in rows:
                state.slots[TopicPartition(topic, int(partition))] = Slot(
                    committed, committed_ms, None, 0, Reset.from_json(last_reset), int(reset_count or 0))
            insert_if_absent(conn, {"catalog_name": catalog_name, "group_id": group, "version": 1,
                                    "state": state.to_json(), "updated_ms": int(last_commit_ms)})
        for table in (GROUPS, PARTITIONS, *OTHERS):
            if inspect(conn).has_table(table):
                conn.execute(text(f"DELETE FROM {table} WHERE catalog_name = :c"), where)
