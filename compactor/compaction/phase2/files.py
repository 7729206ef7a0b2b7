"""The files of an incremental run, written by Spark's tasks and registered by the cursor commit.

Each of the run's two passes writes its files from the tasks of its job, through the compiled
``compactor.udf.ViewFiles``: the append pass, per topic partition a task holds, one data file of its kept rows
through Iceberg's own Parquet writer (the table's schema and field ids, its write properties and metrics
settings); the delete pass, the positions of the compacted rows it removes as Iceberg position-delete files,
sorted by data file and position. No Spark file commit, no listing: each task returns a line per file.

Nothing is committed by Spark: the driver reads each data file's footer for its column statistics (per-file
metadata only); a delete file's line carries its count and path bounds. The cursor commit lists the data files in
a data manifest and the delete files in a delete manifest (``publish.publish_cursor``), so an incremental run makes
one snapshot, the cursor's.

Files of a run that never publishes are registered nowhere; retention removes them as orphans once older than
``compaction.orphan-min-age-ms`` (and spares them while the run's lease is live).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from compactor import schema as ts
from compactor.iceberg.manifests import DeleteFileInfo, written_data_files
from compactor.spark.udf import parse_file_line, view_files

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

POSITION_COLUMNS = ("_file", "_pos")  # Iceberg's metadata columns: a compacted row's data file and position
# positions a task holds before it writes them out (its memory for them: about 8 bytes each)
FLUSH_POSITIONS = 1 << 20


def write_data_files(kept: DataFrame, table: Table, spark_name: str, batch: str) -> tuple[DataFile, ...]:
    """Write ``kept`` (rows in the view's columns) as new data files of the compacted table ``table``
    (``spark_name``: as the job session's catalog names it), committing nothing. ``batch`` goes into the files'
    names."""
    from pyspark.sql import functions as F

    frame = kept.select(*ts.VIEW_COLUMNS, F.lit(None).cast("string").alias("_file"),
                        F.lit(None).cast("bigint").alias("_pos"))
    lines = view_files(frame, spark_name, batch, FLUSH_POSITIONS)
    written = [parse_file_line(line.split("\t", 1)[1])[:4] for line in lines]
    return tuple(written_data_files(table, ts.COMPACTED_SCHEMA, written, str(table.name()))) if written else ()


def write_delete_files(removed: DataFrame, table: Table, spark_name: str, batch: str) -> tuple[DeleteFileInfo, ...]:
    """Write the positions of ``removed`` (compacted rows with their partition, ``_file`` and ``_pos``) as
    position-delete files of the compacted table ``table`` (``spark_name`` as above), committing nothing."""
    deletes = []
    for line in view_files(removed.select(ts.PARTITION, *POSITION_COLUMNS), spark_name, batch, FLUSH_POSITIONS):
        path, partition, positions, size, first, last = line.split("\t")[1:]
        deletes.append(DeleteFileInfo(path, int(partition), int(positions), int(size), first, last))
    return tuple(sorted(deletes, key=lambda f: (f.partition, f.location)))
