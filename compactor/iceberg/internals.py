"""Every use of pyiceberg's private API in the product, in this one module, each with why (checked against
pyiceberg 0.12.0, the pinned version: re-check each on an upgrade; ``tests/test_layering.py`` fails if another
module uses a private pyiceberg name).

* ``parquet_writer_kwargs``: the Parquet writer options pyiceberg derives from the table's ``write.parquet.*``
  properties (``pyiceberg.io.pyarrow._get_parquet_writer_kwargs``), so the product's own data files
  (``producing.files``, written chunk by chunk, which pyiceberg's ``append`` cannot) are written as pyiceberg's.
* ``metrics_evaluator``: the file-statistics test pyiceberg's scan planning applies to manifest entries
  (``pyiceberg.expressions.visitors._InclusiveMetricsEvaluator``), for tasks planned earlier (``iceberg.scan``).
* ``read_delete_files`` and ``task_batches``: reading one file scan task at a time with the plan's delete
  files read once (``pyiceberg.io.pyarrow._read_all_delete_files`` and
  ``ArrowScan._record_batches_from_scan_tasks_and_deletes``); the public ``ArrowScan.to_record_batches`` reads
  every task at once and holds their batches (``iceberg.scan``).
* ``delete_old_metadata``: ``write.metadata.delete-after-commit.enabled`` for commits sent with
  ``catalog.commit_table`` (``Catalog._delete_old_metadata``, which pyiceberg's own ``Table`` commit calls).
* ``transaction_parts``: the updates and requirements a pyiceberg ``Transaction`` staged (``_table``,
  ``_updates``, ``_requirements``), so that retention's delete, built by pyiceberg's public snapshot producer,
  is sent by ``iceberg.commits.send`` (which tells a lost reply from a failed commit) rather than by
  ``commit_transaction`` (which cannot).
* ``PositionDeleteManifestWriter``: pyiceberg's V2 manifest writer writing a delete manifest (its ``_meta``
  names the content), for the position deletes compaction writes (``iceberg.manifests``, ``iceberg.position_deletes``).
* ``LakeSqlCatalog`` and ``apply_updates``: pyiceberg's ``SqlCatalog`` with a commit whose cost does not
  carry two copies of the whole table metadata (below), and whose ``load_table`` of a table that did not change
  since this catalog last loaded it costs one query, not a parse of its metadata.json (the consumers' change
  watch loads the tables it follows at every idle poll: 25 ms a load at a full snapshot window, 0.3 ms cached).
* ``LakeRestCatalog``: pyiceberg's ``RestCatalog`` whose HTTP session has timeouts (overrides
  ``RestCatalog._create_session``, which every request's session, the ``/v1/config`` one included, comes from):
  pyiceberg gives ``requests`` none, so a catalog that stops answering would hang a command forever, and a commit
  whose answer never comes could not be reported as "outcome unknown".

``SqlCatalog`` and its commit cost. A topic keeps up to ``raw.snapshot.window.count`` snapshots in its
metadata (``topics.window``), so each commit's cost grows with the metadata. pyiceberg's
``SqlCatalog.commit_table`` spends most of it on two things that do not need to be paid (measured with 1,000
snapshots: ``bench/README.md``, "Commit cost"):

* it re-reads and parses the current metadata.json to apply the updates to, even when the caller holds exactly
  that version: here, when the catalog's current metadata location is the one of the table being committed,
  the caller's parsed metadata is used (a metadata file never changes once written, so its location names its
  content; overrides ``SqlCatalog._convert_orm_to_iceberg``);
* ``update_table_metadata`` ends with a deep copy of the new metadata (every snapshot, summary and log entry)
  that only protects against callers mutating metadata in place; nothing here does (pyiceberg's own updates
  build new objects with ``model_copy(update=...)``), so the same updates are applied without it
  (``_apply_table_update``, ``_TableMetadataUpdateContext``, ``_update_table_metadata_log``; overrides
  ``SqlCatalog._update_and_stage_table``).

Requirements are still validated against the catalog's current version, and the catalog row still moves only
if it still names the version read (pyiceberg's conditional ``UPDATE``), so conflicts are detected as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.expressions import BooleanExpression
from pyiceberg.expressions.visitors import _InclusiveMetricsEvaluator
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import ArrowScan, _get_parquet_writer_kwargs, _read_all_delete_files
from pyiceberg.manifest import ManifestContent, ManifestWriterV2
from pyiceberg.schema import Schema
from pyiceberg.table import CommitTableResponse, FileScanTask, StagedTable, Table, Transaction
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import (
    AssertTableUUID,
    TableRequirement,
    TableUpdate,
    _apply_table_update,
    _TableMetadataUpdateContext,
    _update_table_metadata_log,
)
from pyiceberg.typedef import Identifier
from pyiceberg.utils.datetime import datetime_to_millis
from requests import PreparedRequest, Response, Session
from requests.adapters import HTTPAdapter

PARSED_METADATA_KEPT = 32  # tables whose last loaded metadata is kept, so loading an unchanged table is one query


def _key(orm_table: IcebergTables) -> tuple[str, str]:
    return str(orm_table.table_namespace), str(orm_table.table_name)


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
        self._parsed: OrderedDict[tuple[str, str], tuple[str, TableMetadata]] = OrderedDict()  # the last loaded
        self._parsed_lock = threading.Lock()

    def commit_table(self, table: Table, requirements: tuple[TableRequirement, ...],
                     updates: tuple[TableUpdate, ...]) -> CommitTableResponse:
        self._known.version = (table.metadata_location, table.metadata)
        try:
            return super().commit_table(table, requirements, updates)
        finally:
            self._known.version = None

    def _convert_orm_to_iceberg(self, orm_table: IcebergTables) -> Table:
        version: tuple[str, TableMetadata] | None = getattr(self._known, "version", None)
        location = orm_table.metadata_location
        if version is not None and location and location == version[0]:
            metadata = version[1]
        elif location and (cached := self._parsed.get(_key(orm_table))) is not None and cached[0] == location:
            metadata = cached[1]  # a metadata file never changes once written: an unchanged table is not parsed again
        else:
            table = super()._convert_orm_to_iceberg(orm_table)
            with self._parsed_lock:
                self._parsed[_key(orm_table)] = (table.metadata_location, table.metadata)
                self._parsed.move_to_end(_key(orm_table))
                while len(self._parsed) > PARSED_METADATA_KEPT:
                    self._parsed.popitem(last=False)
            return table
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


class _TimeoutAdapter(HTTPAdapter):
    """``requests``' adapter with a default (connect, read) timeout for every request sent without one."""

    def __init__(self, timeout: tuple[float, float]) -> None:
        super().__init__()
        self.timeout = timeout

    def send(self, request: PreparedRequest, *args: Any, **kwargs: Any) -> Response:
        if kwargs.get("timeout") is None:
            kwargs["timeout"] = self.timeout
        return super().send(request, *args, **kwargs)


class LakeRestCatalog(RestCatalog):
    """``RestCatalog`` whose requests time out (module docstring)."""

    def __init__(self, name: str, *, connect_timeout_s: float, read_timeout_s: float, **properties: str) -> None:
        self._timeout = (connect_timeout_s, read_timeout_s)
        super().__init__(name, **properties)

    def _create_session(self) -> Session:
        session = super()._create_session()
        adapter = _TimeoutAdapter(self._timeout)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        return session


def parquet_writer_kwargs(properties: Mapping[str, str]) -> dict[str, Any]:
    """pyarrow ``ParquetWriter`` options for a table with these properties, as pyiceberg's own writes use."""
    kwargs: dict[str, Any] = _get_parquet_writer_kwargs(dict(properties))
    return kwargs


def metrics_evaluator(schema: Schema, row_filter: BooleanExpression) -> Any:
    """An evaluator whose ``eval(data_file)`` says whether the file's statistics admit ``row_filter``."""
    return _InclusiveMetricsEvaluator(schema, row_filter)


def read_delete_files(io: FileIO, tasks: Sequence[FileScanTask]) -> Any:
    """The position deletes of ``tasks``' delete files, read once for the plan."""
    return _read_all_delete_files(io, tasks)


def task_batches(scan: ArrowScan, task: FileScanTask, deletes: Any) -> Iterator[pa.RecordBatch]:
    """The (filtered, delete-applied) record batches of one file scan task."""
    return scan._record_batches_from_scan_tasks_and_deletes([task], deletes)


def delete_old_metadata(io: FileIO, base: TableMetadata, committed: TableMetadata) -> None:
    """Delete the metadata.json versions the commit from ``base`` to ``committed`` dropped from the log."""
    Catalog._delete_old_metadata(io, base, committed)


def transaction_parts(tx: Transaction) -> tuple[Table, tuple[TableRequirement, ...], tuple[TableUpdate, ...]]:
    """A transaction's table, and the requirements (plus the table's UUID) and updates it staged."""
    table = tx._table
    return table, (*tx._requirements, AssertTableUUID(uuid=table.metadata.table_uuid)), tuple(tx._updates)


class PositionDeleteManifestWriter(ManifestWriterV2):
    """pyiceberg's V2 manifest writer, writing a manifest of position delete files."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


__all__ = ["LakeRestCatalog", "LakeSqlCatalog", "PositionDeleteManifestWriter", "apply_updates", "delete_old_metadata",
           "metrics_evaluator", "parquet_writer_kwargs", "read_delete_files", "task_batches", "transaction_parts"]
