"""What the DataFrame producer shares (``Counts``, ``ROW_BITS``), and the staging tables of earlier
versions.

The producer once had Spark write a batch's files into a private staging table whose data path was the topic's
data directory, then registered them in the topic's commit and dropped the table. It now writes the files
itself (``producing.spark_files``) and creates no staging table; a producer of an earlier version that died
before its clean-up left one behind, which retention drops (``drop_stale_staging``) once older than
``compaction.orphan-min-age-ms``, leaving its data files to the topic or to orphan cleanup.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass

import numpy as np
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from compactor import properties as props
from compactor import schema as ts
from compactor.config import LakeConfig
from compactor.iceberg.catalog import translate_storage_errors
from compactor.iceberg.storage import delete_prefix, drop_stale_tables
from compactor.lake import Lake
from compactor.topics.naming import TopicName
from compactor.topics.topic import Topic

ROW_BITS = 33  # monotonically_increasing_id() = (Spark partition << 33) + position within the partition
STAGING_INFIX = "__producing_"
STAGING_DIR = "_compactor_staging"  # under the warehouse: the staging tables' metadata (their data is the topic's)
STAGED_ROW_GROUP_BYTES = str(32 * 1024 * 1024)


@dataclass(frozen=True)
class Counts:
    """Rows and bytes per (Spark partition, topic partition), from the counting pass."""

    cells: dict[tuple[int, int], int]
    sizes: np.ndarray
    counts: np.ndarray


def create_staging(lake: Lake, topic: Topic, table: Table) -> tuple[str, str]:
    """Create a staging table for ``topic`` as earlier versions did for each DataFrame batch (its data path is the
    topic's): ``(identifier, location)``. Today only tests call it, to leave one behind as a dead producer did."""
    name = f"{topic.name.topic}{STAGING_INFIX}{uuid.uuid4().hex[:12]}"
    identifier = ".".join((*topic.name.namespace, name))
    location = f"{lake.config.warehouse.rstrip('/')}/{STAGING_DIR}/{name}"
    data_path = table.metadata.properties.get("write.data.path", f"{table.metadata.location.rstrip('/')}/data")
    with translate_storage_errors(f"creating a staging table for {topic.name}"):
        lake.catalog.create_table(identifier, schema=ts.TOPIC_SCHEMA, location=location,
                                  partition_spec=ts.TOPIC_PARTITION_SPEC,
                                  properties={**props.TOPIC_TABLE_PROPERTIES, "write.data.path": data_path,
                                              # rows arrive sorted by partition: one open file a task
                                              "write.spark.fanout.enabled": "false",
                                              # Spark's writer has no row limit per row group: keep them small
                                              # enough for compaction to split files
                                              "write.parquet.row-group-size-bytes": STAGED_ROW_GROUP_BYTES})
    return identifier, location


def drop_staging_table(lake: Lake, identifier: str, location: str) -> None:
    """Drop one staging table and delete its metadata (best effort: retention drops what is left behind)."""
    with contextlib.suppress(Exception):
        lake.catalog.drop_table(identifier)
    with contextlib.suppress(Exception):
        delete_prefix(lake.config, location)


def drop_stale_staging(catalog: Catalog, config: LakeConfig, name: TopicName, now_ms: int, min_age_ms: int, *,
                       dry_run: bool = False) -> list[str]:
    """Drop the staging tables of ``name``'s DataFrame batches last changed more than ``min_age_ms`` before
    ``now_ms`` (a producer that died left them); returns their identifiers (in a dry run, those it would drop).

    Only the catalog entry and the staging metadata go, never the data: a staging table's manifests list files
    in the topic's own data directory, which the topic may have committed (so never ``DROP TABLE ... PURGE``
    one by hand either); files no snapshot of the topic references are left to orphan cleanup.
    """
    def stale(_: str, table: Table) -> bool:
        metadata = table.metadata
        return (props.MARKER_PROPERTY not in metadata.properties  # not a topic of that name
                and f"/{STAGING_DIR}/" in metadata.location
                and metadata.last_updated_ms + min_age_ms < now_ms)  # else possibly a producer still at work

    return drop_stale_tables(catalog, config, name.namespace, f"{name.topic}{STAGING_INFIX}", stale, "staging table",
                             dry_run=dry_run)


__all__ = [
    "ROW_BITS",
    "Counts",
    "create_staging",
    "drop_staging_table",
    "drop_stale_staging",
]
