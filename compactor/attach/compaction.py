"""One compaction run of an attached log (docs/guarantees.md#attached-logs), as a Spark job.

1. **pin**: the source's current snapshot ``S`` and the cursor ``C`` (the view's current snapshot), the settings
   once; the view's schema follows columns added to the source (a change it cannot follow is an error naming
   it, before anything is written).
2. **range**: the source rows of ``S`` at or above each partition's horizon, read with a filter on the source's
   own offset column, so Iceberg prunes data files by that column's statistics whatever the source's
   partitioning, file layout, snapshot history or maintenance (expired snapshots, rewritten files) did: the run
   needs no snapshot but ``S``. One aggregate gives each partition's new log end, and refuses duplicate offsets.
3. **latest per key**: over ``C``'s rows and the range; tombstones get their delete horizon when first written.
4. **publish**: Spark writes the new view's Parquet files under the view's location; one pyiceberg commit on
   the view replaces its files with them and records the cursor in the snapshot summary, on condition that
   ``main`` is still ``C`` (else "cursor moved", and the run's files are deleted). The source is never written.

The horizon is each partition's log end in ``S`` (``min.compaction.lag.ms`` is not applied to attached logs).
The whole view is rewritten each run: the cost of a run is the new range plus the view (not the source).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyiceberg.exceptions import CommitFailedException, ValidationError
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.schema import index_by_name
from pyiceberg.table import TableProperties

from compactor.attach.cursor import AttachedCursor, current_cursor
from compactor.attach.guard import check_appends_above
from compactor.attach.mapping import AttachError
from compactor.attach.registry import (
    DELETE_HORIZON_MS,
    OFFSET,
    PARTITION,
    TOMBSTONE,
    AttachedLog,
    require_attached,
    source_part,
    view_schema,
)
from compactor.clock import resolve_now_ms
from compactor.errors import CursorMovedError, PolicyError, TopicCorruptError
from compactor.iceberg.catalog import translate_storage_errors
from compactor.iceberg.storage import delete_prefix, list_files
from compactor.results import JsonResult

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame, SparkSession

    from compactor.lake import Lake

log = logging.getLogger(__name__)
JOB_SETTINGS = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
                "spark.sql.parquet.compression.codec": "zstd"}


@dataclass
class AttachedCompactionResult(JsonResult):
    """What ``compactor compact`` prints for an attached log (the ``compact`` fields of
    docs/reference.md#json-results)."""

    committed: bool
    topic: str
    compacted_snapshot_id: int | None
    raw_snapshot_id: int | None
    horizons: dict[str, int]
    run_time_ms: int
    stats: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    strategy: str = "offset"
    source: str = ""


def compact_attached(lake: Lake, name: str, *, now_ms: int | None = None) -> AttachedCompactionResult:
    """Compact the attached log ``name`` once (see the module docstring)."""
    return AttachedRun(lake, require_attached(lake.catalog, name), resolve_now_ms(now_ms)).run()


class AttachedRun:
    def __init__(self, lake: Lake, attached: AttachedLog, now_ms: int) -> None:
        self.lake = lake
        self.attached = attached
        self.now_ms = now_ms
        self.started = time.monotonic()

    def run(self) -> AttachedCompactionResult:
        attached = self.attached
        settings = attached.settings
        if "compact" not in settings.cleanup_policy:
            policy = ",".join(sorted(settings.cleanup_policy))
            raise PolicyError(f"attached log {attached.name} has cleanup.policy={policy}, without 'compact'")
        source = attached.source()
        pinned = source.current_snapshot()
        cursor = current_cursor(attached.view)
        if pinned is None:
            return self._unchanged(cursor, None, "the source table has no snapshot yet")
        follow_schema(attached, source)
        if cursor is not None:
            check_appends_above(source, attached.mapping, cursor.source_snapshot_id, pinned.snapshot_id,
                                cursor.horizons)
        spark = self.lake.job_spark()
        from compactor.spark.active import active_session

        with active_session(spark):
            for key, value in JOB_SETTINGS.items():  # the job session is the product's own
                spark.conf.set(key, value)
            return self._compact(spark, source, pinned.snapshot_id, cursor, settings)

    def _compact(self, spark: SparkSession, source: Table, snapshot_id: int, cursor: AttachedCursor | None,
                 settings: Any) -> AttachedCompactionResult:
        from pyspark.sql import functions as F

        from compactor.attach import frames

        attached, mapping = self.attached, self.attached.mapping
        catalog_name = self.lake.config.catalog_name
        schema = source.schema()
        horizons = dict(cursor.horizons) if cursor else {}
        lowest = min(horizons.values()) if horizons and set(horizons) else None
        raw = frames.read_snapshot(spark, frames.spark_table(catalog_name, mapping.source), snapshot_id)
        new = frames.above(frames.source_rows(raw, mapping, schema, lowest), horizons)
        ends = new.groupBy(PARTITION).agg(F.count(F.lit(1)).alias("n"), F.countDistinct(OFFSET).alias("d"),
                                          F.max(OFFSET).alias("hi")).collect()
        for row in ends:
            if row["n"] != row["d"]:
                raise TopicCorruptError(f"source {mapping.source} holds duplicate offsets in partition "
                                        f"{row[PARTITION]} (offsets at or above {horizons.get(row[PARTITION], 0)}): "
                                        "it is not an append-only log of one topic; nothing was written")
            if row[PARTITION] is None:
                raise TopicCorruptError(f"source {mapping.source} has rows without a partition ('{mapping.partition}' "
                                        "is null); nothing was written")
        records_read = sum(int(r["n"]) for r in ends)
        expiring = cursor is not None and cursor.min_delete_horizon_ms is not None \
            and cursor.min_delete_horizon_ms <= self.now_ms
        if records_read == 0 and not expiring:
            return self._unchanged(cursor, snapshot_id, "nothing to compact: no new source rows and no tombstone "
                                   "past its delete horizon")
        new_horizons = {**horizons, **{int(r[PARTITION]): int(r["hi"]) + 1 for r in ends}}
        fresh = frames.with_delete_horizon(new, self.now_ms, settings.delete_retention_ms)
        view_columns = [f.name for f in attached.view.schema().fields]
        previous = frames.read_snapshot(spark, frames.spark_table(catalog_name, attached.name.identifier),
                                        cursor.snapshot_id) if cursor is not None else None
        result = frames.latest_per_key(previous, fresh, mapping, self.now_ms, settings.retain_null_keys)
        result = result.select(*[F.col(f"`{c}`") if c in result.columns else
                                 F.lit(None).alias(c) for c in view_columns])
        return self._publish(spark, result, cursor, snapshot_id, new_horizons, records_read)

    def _publish(self, spark: SparkSession, result: DataFrame, cursor: AttachedCursor | None, snapshot_id: int,
                 horizons: dict[int, int], records_read: int) -> AttachedCompactionResult:
        from pyspark.sql import functions as F

        view = self.attached.view
        directory = f"{view.metadata.location.rstrip('/')}/data/run-{self.now_ms}-{uuid.uuid4().hex[:12]}"
        spark_directory = directory.replace("s3://", "s3a://", 1)
        result.write.mode("errorifexists").parquet(spark_directory)
        written = spark.read.parquet(spark_directory)
        figures = written.agg(F.count(F.lit(1)).alias("rows"),
                              F.sum(F.col(TOMBSTONE).cast("int")).alias("tombstones"),
                              F.min(DELETE_HORIZON_MS).alias("min_horizon")).collect()[0]
        files = [f.location for f in list_files(self.lake.config, directory, view.io)
                 if f.location.endswith(".parquet")]
        rows_before = int(cursor.stats.get("records_kept", 0)) if cursor else 0
        stats = {"records_read": records_read, "records_kept": int(figures["rows"]),
                 "records_removed": records_read + rows_before - int(figures["rows"]),
                 "tombstones_kept": int(figures["tombstones"] or 0), "unparsable_strategy_values": 0,
                 "files_written": len(files), "duration_ms": int((time.monotonic() - self.started) * 1000)}
        new_cursor = AttachedCursor(0, horizons, snapshot_id, self.now_ms,
                                    int(figures["min_horizon"]) if figures["min_horizon"] is not None else None, stats)
        try:
            committed = commit_view(view, files, new_cursor.summary())
        except BaseException:
            delete_prefix(self.lake.config, directory, view.io)
            raise
        log.info("published the view of attached log %s: %d source rows read, view %d -> %d rows",
                 self.attached.name, records_read, rows_before, stats["records_kept"])
        return AttachedCompactionResult(True, str(self.attached.name), committed, snapshot_id,
                                        {str(p): h for p, h in sorted(horizons.items())}, self.now_ms, stats,
                                        source=self.attached.mapping.source)

    def _unchanged(self, cursor: AttachedCursor | None, snapshot_id: int | None,
                   reason: str) -> AttachedCompactionResult:
        return AttachedCompactionResult(False, str(self.attached.name), cursor.snapshot_id if cursor else None,
                                        snapshot_id, {str(p): h for p, h in sorted((cursor.horizons if cursor
                                                                                     else {}).items())},
                                        self.now_ms, {"records_read": 0}, reason, source=self.attached.mapping.source)


def commit_view(view: Table, files: list[str], summary: dict[str, str]) -> int:
    """Replace the view's files with ``files`` and record the cursor, in one commit conditional on ``main``
    still being the snapshot ``view`` was loaded at; returns the new cursor's snapshot id."""
    with translate_storage_errors(f"publishing the view {'.'.join(view.name())}"):
        tx = view.transaction()
        if view.current_snapshot() is not None:
            tx.delete(AlwaysTrue(), snapshot_properties=summary)
        if files:
            tx.add_files(files, snapshot_properties=summary, check_duplicate_files=False)
        else:
            import pyarrow as pa

            tx.append(pa.Table.from_pylist([], schema=view.schema().as_arrow()), snapshot_properties=summary)
        try:
            table = tx.commit_transaction()
        except CommitFailedException as exc:
            raise CursorMovedError(f"the cursor of {'.'.join(view.name())} moved while this run ran (another run "
                                   f"published first): nothing was published ({exc})") from None
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return snapshot.snapshot_id


def follow_schema(attached: AttachedLog, source: Table) -> None:
    """Add to the view the columns added to the source (nested ones too); a change the view cannot follow (a
    column whose type changed incompatibly) is an ``AttachError`` naming it, and nothing changes."""
    wanted = view_schema(source.schema())
    have = attached.view.schema()
    missing = _new_paths(source_part(wanted), source_part(have))
    for path in _common_paths(source_part(wanted), source_part(have)):
        new_type, old_type = wanted.find_type(path), have.find_type(path)
        if new_type.is_primitive and old_type.is_primitive and new_type != old_type \
                and not _promotable(old_type, new_type):
            raise AttachError(f"the source {attached.mapping.source} changed column '{path}' from {old_type} to "
                              f"{new_type}: the view of {attached.name} cannot follow that change; nothing was written")
    if not missing:
        return
    try:
        with translate_storage_errors(f"adding columns to the view of {attached.name}"):
            with attached.view.transaction() as tx, tx.update_schema() as update:
                update.union_by_name(source_part(wanted))
            view = attached.refresh().view
            with view.transaction() as tx:
                tx.set_properties({TableProperties.DEFAULT_NAME_MAPPING: view.schema().name_mapping.model_dump_json()})
    except (ValidationError, ValueError) as exc:
        raise AttachError(f"the source {attached.mapping.source} changed its schema in a way the view of "
                          f"{attached.name} cannot follow ({exc}); nothing was written") from None
    attached.refresh()
    log.info("the view of %s follows the source's new column(s): %s", attached.name, ", ".join(missing))


def _new_paths(wanted: Any, have: Any) -> list[str]:
    have_names = set(index_by_name(have))
    return sorted(n for n in index_by_name(wanted) if n not in have_names)


def _common_paths(wanted: Any, have: Any) -> list[str]:
    have_names = set(index_by_name(have))
    return sorted(n for n in index_by_name(wanted) if n in have_names)


def _promotable(old: Any, new: Any) -> bool:
    from pyiceberg.types import DoubleType, FloatType, IntegerType, LongType

    return (isinstance(old, IntegerType) and isinstance(new, LongType)) or \
        (isinstance(old, FloatType) and isinstance(new, DoubleType))
