"""The Spark passes of one run of an attached log and what they wrote, under the run's directory of the view
(``data/run-<run clock>-<id>/``): the new view rows (``write_rows``, in ``rows/``) and the position deletes of
the view rows the run removes (``write_deletes``, in ``deletes/``, with the native job's writer:
``iceberg.position_deletes``). Their figures come from Spark observations of the written rows, so nothing is read
back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from compactor.attach.frames import REMOVED
from compactor.attach.publish import RUN_PREFIX
from compactor.attach.registry import DELETE_HORIZON_MS, PARTITION, TOMBSTONE
from compactor.config import LakeConfig
from compactor.iceberg.manifests import DeleteFileInfo
from compactor.iceberg.position_deletes import collect_delete_files, write_position_deletes
from compactor.iceberg.storage import list_files
from compactor.spark.internals import observed_metrics

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyspark.sql import DataFrame

ROWS, DELETES = "rows", "deletes"  # the run directory's two parts, written side by side
# A side of a join is sent whole to every task (so the other side's rows are not shuffled) up to this many bytes
# (it passes through the driver): the range's offset masks (about 20 bytes a row, a row per 64 offsets) and the
# range's keys (about 16 bytes plus the keys' own). Past it both sides are shuffled.
BROADCAST_BYTES = 32 * 1024 * 1024


@dataclass
class Written:
    """One run's files and figures: ``rows`` written (``tombstones`` of them, the lowest delete horizon among
    them), view rows ``removed`` by position deletes (``removed_tombstones`` of them) and the lowest delete
    horizon of the view rows that stay."""

    now_ms: int
    run_id: str
    location: str                   # the view's location
    config: LakeConfig
    io: FileIO
    rows: int = 0
    tombstones: int = 0
    min_horizon: int | None = None
    removed: int = 0
    removed_tombstones: int = 0
    surviving_min_horizon: int | None = None
    data_paths: list[str] = field(default_factory=list)
    deletes: list[DeleteFileInfo] = field(default_factory=list)

    @property
    def directory(self) -> str:
        return f"{self.location.rstrip('/')}/data/{RUN_PREFIX}{self.now_ms}-{self.run_id}"

    def _spark_path(self, path: str) -> str:
        return path.replace("s3://", "s3a://", 1)

    def write_rows(self, rows: DataFrame, columns: list[Any]) -> None:
        """Write ``rows`` (in ``columns``, the view's) as Parquet files of the run directory."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        observed = Observation(f"attached_rows_{self.run_id}")
        out = rows.select(*columns).observe(observed, F.count(F.lit(1)).alias("rows"),
                                            F.count(F.when(F.col(TOMBSTONE), F.lit(1))).alias("tombstones"),
                                            F.min(DELETE_HORIZON_MS).alias("min_horizon"))
        location = f"{self.directory}/{ROWS}"
        out.write.mode("errorifexists").parquet(self._spark_path(location))
        figures = observed_metrics(observed)
        self.rows, self.tombstones = int(figures["rows"]), int(figures["tombstones"])
        self.min_horizon = None if figures["min_horizon"] is None else int(figures["min_horizon"])
        self.data_paths = [f.location for f in list_files(self.config, location, self.io)
                           if f.location.endswith(".parquet")]

    def write_deletes(self, classified: DataFrame) -> None:
        """Write the positions of the rows ``classified`` marks ``REMOVED`` as position delete files (one
        directory per source partition) under the run directory."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        observed = Observation(f"attached_removed_{self.run_id}")
        removed = F.col(REMOVED)
        marked = classified.observe(
            observed, F.count(F.when(removed, F.lit(1))).alias("removed"),
            F.count(F.when(removed & F.col(TOMBSTONE), F.lit(1))).alias("tombstones"),
            F.min(F.when(~removed, F.col(DELETE_HORIZON_MS))).alias("min_horizon"))
        location = f"{self.directory}/{DELETES}"
        write_position_deletes(marked.where(removed).select(F.col(PARTITION).alias("partition"), "_file", "_pos"),
                               self._spark_path(location))
        figures = observed_metrics(observed)
        self.removed, self.removed_tombstones = int(figures["removed"]), int(figures["tombstones"])
        self.surviving_min_horizon = None if figures["min_horizon"] is None else int(figures["min_horizon"])
        self.deletes = collect_delete_files(self.config, location, self.io) if self.removed else []

