"""What the DataFrame producer shares (``Counts``, ``ROW_BITS``, ``bad_row``), and the staging tables of
earlier versions.

The producer once had Spark write a batch's files into a private staging table whose data path was the topic's
data directory, then registered them in the topic's commit and dropped the table. It now writes the files
itself (``producing.spark_files``) and creates no staging table; a producer of an earlier version that died
before its clean-up left one behind, which retention drops (``drop_stale_staging``) once older than
``compaction.orphan-min-age-ms``, leaving its data files to the topic or to orphan cleanup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from compactor import properties as props
from compactor.config import LakeConfig
from compactor.errors import InvalidRecordError
from compactor.iceberg.storage import drop_stale_tables
from compactor.topics.naming import TopicName
from compactor.topics.record_rules import SIZE, problem_message

ROW_BITS = 33  # monotonically_increasing_id() = (Spark partition << 33) + position within the partition
STAGING_INFIX = "__producing_"
STAGING_DIR = "_compactor_staging"  # under the warehouse: the staging tables' metadata (their data is the topic's)


@dataclass(frozen=True)
class Counts:
    """Rows per (Spark partition, topic partition) and per topic partition, from the counting pass; ``values``:
    whether the pass read every column (else only those the placement and the checks need)."""

    cells: dict[tuple[int, int], int]
    counts: np.ndarray
    values: bool = True


def bad_row(kind: str, value: Any, partitions: int, max_message_bytes: int, spark_partition: int,
            row: int) -> InvalidRecordError:
    """The error for a bad input row of ``kind`` (``record_rules``) whose offending value is ``value``, named by
    its Spark partition and its 1-based row within it, whether the counting pass or the writer found it."""
    message = problem_message(kind, value, partitions, max_message_bytes)
    if kind == SIZE:
        message = f"a {message}"
    return InvalidRecordError(f"{message} (Spark partition {spark_partition}, row {row} of that partition); "
                              "nothing was written")


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
    "bad_row",
    "drop_stale_staging",
]
