"""One compaction run of an attached log (docs/guarantees.md#attached-logs), as Spark jobs.

1. **pin**: the source's current snapshot ``S`` and the cursor ``C`` (the view's current snapshot), the settings
   once; the view's schema follows columns added to the source (``evolve``; a change it cannot follow is an
   error naming it, before anything is written).
2. **range**: the source rows of ``S`` at or above each partition's horizon, read with a filter on the source's
   own offset column, so Iceberg prunes data files by that column's statistics whatever the source's
   partitioning, file layout, snapshot history or maintenance (expired snapshots, rewritten files) did: the run
   needs no snapshot but ``S``. One aggregate gives each partition's new horizon (its log end in ``S``, or under
   ``min.compaction.lag.ms`` the first offset whose timestamp is newer than ``now - lag``), and refuses
   duplicate offsets.
3. **write**, under the run's directory of the view:

   * **incremental** (the normal case): the range's latest record per key (``frames.latest_per_key``), and
     position deletes of the view rows the run removes, found by one pass over the view's narrow columns
     (``frames.classify_view``: keys the range has again, tombstones past their delete horizon, keyless rows
     under ``compaction.null-key=drop``). The view is never recopied: a run costs the range plus one narrow
     pass over the view. A small range (``SMALL_RANGE_ROWS``, bounded by the rows the source's snapshots added
     since the cursor's) runs its shuffles in one partition without adaptive execution, as fewer Spark jobs.
   * **replace**: the first run, or once position deletes reach ``REWRITE_DELETED_RATIO`` of the live rows or
     the view has ``REWRITE_FILES_PER_PARTITION`` data files per partition: the whole view written afresh.

4. **publish** (``publish``): one commit on the view, conditional on ``main`` still being ``C`` (else "cursor
   moved", and the run's files are deleted), with the cursor in the snapshot summary. The source is never
   written.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from compactor import failpoints
from compactor.attach.cursor import AttachedCursor, current_cursor
from compactor.attach.evolve import follow_schema
from compactor.attach.guard import ancestry, check_appends_above
from compactor.attach.passes import BROADCAST_BYTES, Written
from compactor.attach.publish import publish_view
from compactor.attach.registry import (
    OFFSET,
    PARTITION,
    TIMESTAMP_MS,
    AttachedLog,
    require_attached,
)
from compactor.clock import resolve_now_ms
from compactor.cursor.stats import REWRITE_DELETED_RATIO, REWRITE_FILES_PER_PARTITION
from compactor.errors import PolicyError, TopicCorruptError
from compactor.iceberg.storage import delete_prefix
from compactor.results import CompactOutcome
from compactor.spark.active import active_session, call_active
from compactor.spark.expressions import offset_bit, offset_masks
from compactor.spark.settings import session_settings
from compactor.topics.settings import TopicSettings

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot
    from pyspark.sql import DataFrame, SparkSession

    from compactor.lake import Lake

log = logging.getLogger(__name__)
MASK_ROW_BYTES = 24  # a row of the offset masks (partition, word, mask) as Spark holds it
KEY_ROW_BYTES = 32   # a row of the range's keys as Spark holds it, besides the key columns' own bytes
JOB_SETTINGS = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
                "spark.sql.parquet.compression.codec": "zstd"}
# An incremental run over at most this many new source rows shuffles them in one partition with adaptive
# execution off: its few narrow shuffles (horizons, winners, keys) would be coalesced into one partition each by
# adaptive execution anyway, which would plan and submit every stage as a job of its own (ten small jobs for a
# run, where one query is one job without it). At this size the range's keys fit a broadcast unless they average
# hundreds of bytes, so the view is not shuffled.
SMALL_RANGE_ROWS = 100_000
SMALL_RANGE_SETTINGS = {"spark.sql.adaptive.enabled": "false", "spark.sql.shuffle.partitions": "1"}


@dataclass
class AttachedCompactionResult(CompactOutcome):
    """What ``compactor compact`` prints for an attached log (the ``compact`` fields of
    docs/reference.md#json-results)."""

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
        # the source's snapshots since the cursor's (None: no cursor, or its snapshot is no longer an ancestor)
        chain = (ancestry(source, pinned.snapshot_id, cursor.source_snapshot_id)
                 if cursor is not None and cursor.source_snapshot_id is not None else None)
        if cursor is not None and chain is not None:
            check_appends_above(source, attached.mapping, chain, cursor.horizons)
        spark = self.lake.job_spark()
        small = self._small_range(cursor, chain, settings)
        with active_session(spark), session_settings(spark, {**JOB_SETTINGS, **(SMALL_RANGE_SETTINGS if small
                                                                                  else {})}):
            return self._compact(spark, source, pinned.snapshot_id, cursor, settings)

    def _small_range(self, cursor: AttachedCursor | None, chain: list[Snapshot] | None,
                     settings: TopicSettings) -> bool:
        """Whether this run is incremental over at most ``SMALL_RANGE_ROWS`` new source rows: bounded by the
        rows that the source's snapshots since the cursor's (``chain``) added (rewrites count too, so the bound
        only errs high), when the cursor's snapshot is still an ancestor of the pinned one (else ``chain`` is
        ``None`` and nothing bounds the range) and no row is held back by ``min.compaction.lag.ms`` (held-back rows
        are above the horizons but not new)."""
        if cursor is None or chain is None or settings.min_compaction_lag_ms > 0 or \
                _rewrite_reason(self.attached.view, cursor, len(cursor.horizons)):
            return False
        return sum(int(snapshot.summary.additional_properties.get("added-records", 0) or 0)
                   for snapshot in chain if snapshot.summary is not None) <= SMALL_RANGE_ROWS

    def _compact(self, spark: SparkSession, source: Table, snapshot_id: int, cursor: AttachedCursor | None,
                 settings: TopicSettings) -> AttachedCompactionResult:
        from compactor.attach import frames

        attached, mapping = self.attached, self.attached.mapping
        horizons = dict(cursor.horizons) if cursor else {}
        raw = frames.read_snapshot(spark, frames.spark_table(self.lake.config.catalog_name, mapping.source),
                                   snapshot_id)
        new = frames.above(frames.source_rows(raw, mapping, source.schema(), horizons), horizons)
        new_horizons, read, words, key_bytes = self._horizons(new, horizons, settings.min_compaction_lag_ms,
                                                             with_keys=cursor is not None)
        expiring = cursor is not None and cursor.min_delete_horizon_ms is not None \
            and cursor.min_delete_horizon_ms <= self.now_ms
        if new_horizons == horizons and not expiring:
            return self._unchanged(cursor, snapshot_id, "nothing to compact: no new source rows past the horizons "
                                   "and no tombstone past its delete horizon")
        advanced = {p: h for p, h in new_horizons.items() if h != horizons.get(p)}
        fresh = frames.with_delete_horizon(frames.below(new, advanced), self.now_ms, settings.delete_retention_ms)
        reason = _rewrite_reason(attached.view, cursor, len(new_horizons))
        view = attached.view
        run = Written(self.now_ms, uuid.uuid4().hex[:12], view.metadata.location, self.lake.config, view.io)
        retain = settings.retain_null_keys
        replace = cursor is None or bool(reason)
        def append_pass() -> None:
            masks = offset_masks(frames.winning_offsets(fresh, mapping, retain))
            previous = self._view(spark, cursor) if cursor is not None and replace else None
            rows = frames.latest_per_key(previous, fresh, masks, mapping, self.now_ms, retain,
                                         broadcast=words * MASK_ROW_BYTES <= BROADCAST_BYTES)
            run.write_rows(rows, self._columns(rows))

        def delete_pass(cursor: AttachedCursor) -> None:
            small = read * KEY_ROW_BYTES + key_bytes <= BROADCAST_BYTES  # at most a key per row read
            run.write_deletes(frames.classify_view(self._view(spark, cursor), frames.range_keys(fresh, mapping),
                                                   mapping, self.now_ms, retain, broadcast=small))

        try:
            if replace or cursor is None:
                append_pass()
            else:  # side by side, each building its own query (neither waits for the other)
                with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
                    passes = [pool.submit(call_active, spark, append_pass), pool.submit(call_active, spark,
                                                                                        delete_pass, cursor)]
                for done in passes:
                    done.result()
            failpoints.hit("after-write")
        except BaseException:
            delete_prefix(self.lake.config, run.directory, view.io)
            raise
        return self._publish(run, cursor, snapshot_id, new_horizons, read, "first run" if cursor is None else reason)

    def _horizons(self, new: DataFrame, horizons: Mapping[int, int], lag_ms: int, *,
                  with_keys: bool) -> tuple[dict[int, int], int, int, int]:
        """Each partition's new horizon: its log end in the pinned snapshot, or under ``min.compaction.lag.ms``
        the first offset (at or above the horizon) whose timestamp is newer than ``now - lag``; never lower. And
        how many source rows lie below the new horizons (the rows the run reads), how many 64-offset words the
        new rows span (a bound on the offset masks' rows) and, ``with_keys``, the bytes of their keys (a bound on
        what the range's keys hold)."""
        from pyspark.sql import functions as F

        from compactor.attach import frames

        young = F.col(TIMESTAMP_MS) > F.lit(self.now_ms - lag_ms)
        # duplicates: per 64-offset word, rows counted against distinct offsets (bits set), so each task sends a
        # row per word of its rows' offsets, not per row
        bit = offset_bit(OFFSET)
        words = new.groupBy(F.col(PARTITION), F.shiftright(F.col(OFFSET), 6).alias("w")).agg(
            F.count(F.lit(1)).alias("n"), F.bit_or(bit).alias("bits"), F.max(OFFSET).alias("hi"),
            F.min(F.when(young, F.col(OFFSET))).alias("young"),
            F.sum(frames.key_bytes(self.attached.mapping) if with_keys else F.lit(0)).alias("key_bytes"))
        ends = words.groupBy(PARTITION).agg(F.sum("n").alias("n"), F.sum(F.bit_count("bits")).alias("d"),
                                            F.max("hi").alias("hi"), F.min("young").alias("young"),
                                            F.count(F.lit(1)).alias("words"),
                                            F.sum("key_bytes").alias("key_bytes")).collect()
        source = self.attached.mapping.source
        out = dict(horizons)
        read, limited = 0, False
        for row in ends:
            if row[PARTITION] is None:
                raise TopicCorruptError(f"source {source} has rows without a partition "
                                        f"('{self.attached.mapping.partition}' is null); nothing was written")
            if row["n"] != row["d"]:
                raise TopicCorruptError(f"source {source} holds duplicate offsets in partition {row[PARTITION]} "
                                        f"(offsets at or above {horizons.get(row[PARTITION], 0)}): it is not an "
                                        "append-only log of one topic; nothing was written")
            end, read = int(row["hi"]) + 1, read + int(row["n"])
            if lag_ms > 0 and row["young"] is not None:
                end, limited = int(row["young"]), True
            out[int(row[PARTITION])] = max(end, horizons.get(int(row[PARTITION]), 0))
        if limited:  # some rows are too young: count those below the new horizons
            read = frames.below(new, out).count()
        return out, read, sum(int(r["words"]) for r in ends), sum(int(r["key_bytes"] or 0) for r in ends)

    def _view(self, spark: SparkSession, cursor: AttachedCursor) -> DataFrame:
        from compactor.attach import frames

        return frames.read_snapshot(spark, frames.spark_table(self.lake.config.catalog_name,
                                                              self.attached.name.identifier), cursor.snapshot_id)

    def _columns(self, rows: DataFrame | None) -> list[Any]:
        """The view's columns, in its order (a column the rows lack, null)."""
        from pyspark.sql import functions as F

        names = rows.columns if rows is not None else None
        return [F.col(f"`{c.name}`") if names is None or c.name in names else F.lit(None).alias(c.name)
                for c in self.attached.view.schema().fields]

    def _publish(self, run: Written, cursor: AttachedCursor | None, snapshot_id: int, horizons: dict[int, int],
                 read: int, reason: str) -> AttachedCompactionResult:
        view = self.attached.view
        before = cursor.stats if cursor is not None else {}
        replace = bool(reason)
        kept = run.rows if replace else int(before.get("records_kept", 0)) - run.removed + run.rows
        tombstones = run.tombstones if replace else \
            int(before.get("tombstones_kept", 0)) - run.removed_tombstones + run.tombstones
        lowest = [h for h in (run.min_horizon, None if replace else run.surviving_min_horizon) if h is not None]
        stats = {"records_read": read, "records_kept": kept,
                 "records_removed": read + int(before.get("records_kept", 0)) - kept,
                 "tombstones_kept": tombstones, "unparsable_strategy_values": 0,
                 "files_written": len(run.data_paths), "mode": "rewrite" if replace else "incremental",
                 "rewrite_reason": reason, "position_deletes": run.removed if not replace else 0,
                 "delete_files_written": len(run.deletes),
                 "duration_ms": int((time.monotonic() - self.started) * 1000)}
        new_cursor = AttachedCursor(0, horizons, snapshot_id, self.now_ms, min(lowest) if lowest else None, stats)
        committed = publish_view(self.attached.catalog, self.lake.config, view,
                                 cursor.snapshot_id if cursor else None, run.directory, run.data_paths, run.deletes,
                                 new_cursor.summary(), replace=replace)
        failpoints.hit("after-commit")
        log.info("published the view of attached log %s (%s): %d source rows read, view %d -> %d rows",
                 self.attached.name, stats["mode"], read, int(before.get("records_kept", 0)), kept)
        return AttachedCompactionResult(True, str(self.attached.name), committed, snapshot_id,
                                        {str(p): h for p, h in sorted(horizons.items())}, self.now_ms, stats,
                                        source=self.attached.mapping.source)

    def _unchanged(self, cursor: AttachedCursor | None, snapshot_id: int | None,
                   reason: str) -> AttachedCompactionResult:
        return AttachedCompactionResult(False, str(self.attached.name), cursor.snapshot_id if cursor else None,
                                        snapshot_id, {str(p): h for p, h in sorted((cursor.horizons if cursor
                                                                                     else {}).items())},
                                        self.now_ms, {"records_read": 0}, reason, source=self.attached.mapping.source)


def _rewrite_reason(view: Table, cursor: AttachedCursor | None, partitions: int) -> str:
    """Why this run writes the whole view afresh instead of deleting and appending ("" if it does not): position
    deletes reached ``REWRITE_DELETED_RATIO`` of the live rows, or the view has ``REWRITE_FILES_PER_PARTITION``
    data files per source partition (both from the cursor's snapshot summary)."""
    snapshot = view.snapshot_by_id(cursor.snapshot_id) if cursor is not None else None
    totals = snapshot.summary.additional_properties if snapshot is not None and snapshot.summary else {}
    deleted = int(totals.get("total-position-deletes", 0) or 0)
    live = int(totals.get("total-records", 0) or 0) - deleted
    files = int(totals.get("total-data-files", 0) or 0)
    if deleted and deleted >= REWRITE_DELETED_RATIO * max(live, 1):
        return f"position deletes ({deleted}) reached {REWRITE_DELETED_RATIO:.0%} of the view's {live} live rows"
    if files >= REWRITE_FILES_PER_PARTITION * max(partitions, 1):
        return f"the view has {files} data files ({REWRITE_FILES_PER_PARTITION} per partition or more)"
    return ""
