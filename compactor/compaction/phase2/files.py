"""The data files of an incremental run's kept rows, written by Spark's tasks and registered by the cursor commit.

The append pass's rows go straight into new data files of the compacted table: each task writes, per topic
partition it holds, one Parquet file through Iceberg's own Parquet writer (the compiled ``compactor.udf.TopicFiles``
that the DataFrame producer uses: the table's schema and field ids, its write properties and metrics settings).
Nothing is committed by Spark: the driver reads each file's footer for its column statistics (per-file metadata
only) and the cursor commit lists the files in a data manifest beside the run's position deletes
(``publish.publish_cursor``). So an incremental run makes one snapshot, the cursor's, instead of a Spark append on
the staging branch and the cursor on top of it: a catalog commit and a manifest list fewer per run.

Files of a run that never publishes are registered nowhere; retention removes them as orphans once older than
``compaction.orphan-min-age-ms`` (and spares them while the run's lease is live).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from compactor import schema as ts
from compactor.iceberg.manifests import written_data_files
from compactor.spark.udf import parse_file_line, topic_files

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

NO_RECORD_LIMIT = (1 << 63) - 1  # the view's rows were each checked when produced


def write_view_files(rows: DataFrame, table: Table, spark_name: str, batch: str) -> list[DataFile]:
    """Write ``rows`` (the view's columns, in schema order) into new data files of the compacted table ``table``
    (``spark_name``: as the job session's catalog names it), committing nothing; returns them as ``DataFile``
    entries. ``batch`` goes into the files' names."""
    from pyspark.sql import functions as F

    framed = rows.select(*ts.VIEW_COLUMNS, F.coalesce(F.col(ts.RECORD_BYTES), F.lit(0)).cast("bigint"),
                         F.lit(0).cast("bigint"))  # TopicFiles' size and row-id columns: sizes are summed, unchecked
    written = [parse_file_line(line)[:4] for line in topic_files(framed, spark_name, batch, {}, NO_RECORD_LIMIT)]
    return written_data_files(table, ts.COMPACTED_SCHEMA, written, str(table.name()))
