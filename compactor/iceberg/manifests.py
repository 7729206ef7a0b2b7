"""The entries the product's snapshots list, and the manifests it writes them into.

Every file the product adds to a table is registered here: a topic's data files, written by pyarrow
(``producing.files``) or by Spark's tasks (``producing.spark_files``), and an incremental compaction run's
(``compaction.phase2.files``), become ``DataFile`` entries from their Parquet footers (``partition_data_file``); a
compaction run's position-delete files (a native run's: ``compaction.phase2.files``; an attached log's:
``iceberg.position_deletes``) become ``DataFile`` entries of content ``POSITION_DELETES`` (``DeleteFileInfo``).
``data_manifest`` writes an append's manifest and ``delete_manifest`` a cursor commit's delete manifest;
``iceberg.snapshots`` lists them in a snapshot. The delete manifest writer is pyiceberg's V2 writer with the
content set to deletes (``iceberg.internals.PositionDeleteManifestWriter``); entry encoding, partition summaries
and sequence-number inheritance are pyiceberg's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    write_manifest,
)
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.typedef import Record

from compactor import schema as ts
from compactor.errors import InputError
from compactor.iceberg.catalog import translate_storage_errors
from compactor.iceberg.internals import PositionDeleteManifestWriter
from compactor.iceberg.storage import delete_uncommitted
from compactor.workers import pool

FILE_PATH_ID = 2147483546  # Iceberg's reserved field ids of position delete files
POS_ID = 2147483545


def topic_data_file(table: Table, path: str, partition: int, size_bytes: int, footer: Any) -> DataFile:
    """A topic's data file of ``partition`` as a ``DataFile`` entry, with its column statistics from its Parquet
    footer (``footer``: pyarrow's ``FileMetaData``) under the table's metrics settings."""
    return partition_data_file(table, ts.TOPIC_SCHEMA, path, partition, size_bytes, footer)


def partition_data_file(table: Table, schema: Schema, path: str, partition: int, size_bytes: int,
                        footer: Any) -> DataFile:
    """A data file of ``partition`` of a table partitioned by ``identity(partition)`` (a topic's or a compacted
    view's, of columns ``schema``) as a ``DataFile`` entry, with its column statistics from its Parquet footer."""
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=footer,
        stats_columns=compute_statistics_plan(schema, table.metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema),
    )
    return DataFile.from_args(
        content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET, partition=Record(partition),
        file_size_in_bytes=size_bytes, sort_order_id=None, spec_id=table.metadata.default_spec_id,
        equality_ids=None, key_metadata=None, **statistics.to_serialized_dict())


def written_data_files(table: Table, schema: Schema, written: Sequence[tuple[str, int, int, int]],
                       what: str) -> list[DataFile]:
    """Files just written into ``table`` (each ``(path, partition, rows, bytes)``, of columns ``schema``) as
    ``DataFile`` entries, from their footers read side by side; each must hold the rows its writer counted. If
    any cannot be read or does not, the files are deleted (they were never committed) and the error raised."""
    try:
        with translate_storage_errors(f"reading the footers of {what}'s new files"):
            return list(pool().map(lambda w: _footer_data_file(table, schema, *w), written))
    except BaseException:
        delete_uncommitted(table.io, [path for path, *_ in written])
        raise


def _footer_data_file(table: Table, schema: Schema, path: str, partition: int, rows: int, size: int) -> DataFile:
    with table.io.new_input(path).open() as stream:
        footer = pq.read_metadata(stream)
    if footer.num_rows != rows:
        raise InputError(f"the new data file {path} holds {footer.num_rows} rows, its writer wrote {rows}")
    return partition_data_file(table, schema, path, partition, size, footer)


@dataclass(frozen=True)
class DeleteFileInfo:
    """One position delete file as written: where, which partition, how many positions, path bounds."""

    location: str
    partition: int
    record_count: int
    size_bytes: int
    min_path: str | None
    max_path: str | None

    def data_file(self, spec_id: int, partitioned: bool = True) -> DataFile:
        """The file as a ``DataFile`` entry of content ``POSITION_DELETES`` (of an unpartitioned table's spec
        unless ``partitioned``)."""
        low, high = ({FILE_PATH_ID: self.min_path.encode()}, {FILE_PATH_ID: self.max_path.encode()}) \
            if self.min_path and self.max_path else (None, None)
        return DataFile.from_args(
            content=DataFileContent.POSITION_DELETES,
            file_path=self.location,
            file_format=FileFormat.PARQUET,
            partition=Record(self.partition) if partitioned else Record(),
            record_count=self.record_count,
            file_size_in_bytes=self.size_bytes,
            lower_bounds=low,
            upper_bounds=high,
            spec_id=spec_id,
        )


def avro_compression(table: Table) -> str:
    """The codec of the table's manifests and manifest lists (``write.avro.compression-codec``)."""
    return table.metadata.properties.get("write.avro.compression-codec", "gzip")


def data_manifest(table: Table, location: str, snapshot_id: int, added: Sequence[DataFile],
                  carried: Sequence[ManifestFile]) -> ManifestFile:
    """Write, at ``location``, the manifest of an append snapshot ``snapshot_id``: the ``added`` data files, and
    the live entries of the ``carried`` manifests (merged into it) as existing entries."""
    metadata = table.metadata
    with write_manifest(format_version=metadata.format_version, spec=metadata.spec(), schema=metadata.schema(),
                        output_file=table.io.new_output(location), snapshot_id=snapshot_id,
                        avro_compression=avro_compression(table)) as writer:  # type: ignore[arg-type]
        for data_file in added:
            writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id,
                                               data_file=data_file))
        for manifest in carried:
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                writer.existing(entry)
    return writer.to_manifest_file()


def delete_manifest(table: Table, snapshot_id: int, files: Sequence[DeleteFileInfo]) -> ManifestFile:
    """Write one manifest listing ``files`` as position deletes added by snapshot ``snapshot_id``."""
    spec = table.spec()
    location = table.location_provider().new_metadata_location(f"deletes-{snapshot_id}-m0.avro")
    writer = PositionDeleteManifestWriter(spec, table.schema(), table.io.new_output(location), snapshot_id,
                                          avro_compression(table))  # type: ignore[arg-type]
    with writer:
        for info in files:
            writer.add_entry(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id,
                                                     data_file=info.data_file(spec.spec_id,
                                                                              not spec.is_unpartitioned())))
    return writer.to_manifest_file()


def delete_summary(files: Sequence[DeleteFileInfo]) -> dict[str, str]:
    """Snapshot summary counters for the delete files a commit adds (pyiceberg derives the totals)."""
    if not files:
        return {}
    return {
        "added-delete-files": str(len(files)),
        "added-position-delete-files": str(len(files)),
        "added-position-deletes": str(sum(f.record_count for f in files)),
        "added-files-size": str(sum(f.size_bytes for f in files)),
    }


__all__ = ["FILE_PATH_ID", "POS_ID", "DeleteFileInfo", "data_manifest", "delete_manifest", "delete_summary",
           "partition_data_file", "topic_data_file", "written_data_files"]
