"""pyiceberg's ``SqlCatalog`` with a commit whose cost does not carry two copies of the whole table metadata.

A topic keeps up to ``raw.snapshot.window.count`` snapshots in its metadata (``topics.window``), so each commit's
cost grows with the metadata. pyiceberg's ``SqlCatalog.commit_table`` spends most of it on two things that do not
need to be paid (measured with 1,000 snapshots: ``bench/README.md``, "Commit cost"):

* it re-reads and parses the current metadata.json to apply the updates to, even when the caller holds exactly
  that version: here, when the catalog's current metadata location is the one of the table being committed,
  the caller's parsed metadata is used (a metadata file never changes once written, so its location names its
  content);
* ``update_table_metadata`` ends with a deep copy of the new metadata (every snapshot, summary and log entry)
  that only protects against callers mutating metadata in place; nothing here does (pyiceberg's own updates
  build new objects with ``model_copy(update=...)``), so the same updates are applied without it.

Requirements are still validated against the catalog's current version, and the catalog row still moves only
if it still names the version read (pyiceberg's conditional ``UPDATE``), so conflicts are detected as before.
"""

from __future__ import annotations

import threading
from datetime import datetime

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.table import CommitTableResponse, StagedTable, Table
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import (
    TableRequirement,
    TableUpdate,
    _apply_table_update,
    _TableMetadataUpdateContext,
    _update_table_metadata_log,
)
from pyiceberg.typedef import Identifier
from pyiceberg.utils.datetime import datetime_to_millis


def apply_updates(base: TableMetadata, updates: tuple[TableUpdate, ...], base_location: str) -> TableMetadata:
    """``update_table_metadata(base, updates, metadata_location=base_location)`` without its final deep copy."""
    context = _TableMetadataUpdateContext()
    metadata = base
    for update in updates:
        metadata = _apply_table_update(update, metadata, context)
    if context.has_changes():
        metadata = _update_table_metadata_log(metadata, base_location, base.last_updated_ms)
        if base.last_updated_ms == metadata.last_updated_ms:
            metadata = metadata.model_copy(update={"last_updated_ms": datetime_to_millis(datetime.now().astimezone())})
    metadata.spec().check_compatible(metadata.schema())
    metadata.sort_order().check_compatible(metadata.schema())
    return metadata


class LakeSqlCatalog(SqlCatalog):
    """``SqlCatalog`` with the cheaper commit described in the module docstring."""

    def __init__(self, name: str, **properties: str) -> None:
        super().__init__(name, **properties)
        self._known = threading.local()  # the (location, metadata) of the table being committed by this thread

    def commit_table(self, table: Table, requirements: tuple[TableRequirement, ...],
                     updates: tuple[TableUpdate, ...]) -> CommitTableResponse:
        self._known.version = (table.metadata_location, table.metadata)
        try:
            return super().commit_table(table, requirements, updates)
        finally:
            self._known.version = None

    def _convert_orm_to_iceberg(self, orm_table: IcebergTables) -> Table:
        version: tuple[str, TableMetadata] | None = getattr(self._known, "version", None)
        if version is None or not orm_table.metadata_location or orm_table.metadata_location != version[0]:
            return super()._convert_orm_to_iceberg(orm_table)
        location, metadata = version
        return Table(identifier=(*Catalog.identifier_to_tuple(str(orm_table.table_namespace)), orm_table.table_name),
                     metadata=metadata, metadata_location=location,
                     io=self._load_file_io(metadata.properties, location), catalog=self)

    def _update_and_stage_table(self, current_table: Table | None, table_identifier: Identifier,
                                requirements: tuple[TableRequirement, ...],
                                updates: tuple[TableUpdate, ...]) -> StagedTable:
        if current_table is None:  # a table being created: pyiceberg's own path
            return super()._update_and_stage_table(current_table, table_identifier, requirements, updates)
        for requirement in requirements:
            requirement.validate(current_table.metadata)
        metadata = apply_updates(current_table.metadata, updates, current_table.metadata_location)
        version = self._parse_metadata_version(current_table.metadata_location) + 1
        provider = load_location_provider(metadata.location, metadata.properties)
        location = provider.new_table_metadata_file_location(version)
        return StagedTable(identifier=table_identifier, metadata=metadata, metadata_location=location,
                           io=self._load_file_io(properties=metadata.properties, location=location), catalog=self)


__all__ = ["LakeSqlCatalog", "apply_updates"]
