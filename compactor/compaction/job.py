"""The TwoPhaseCompactor: one compaction run of one topic, as a Spark batch job (SEMANTICS sections 2, 3).

A run pins the raw snapshot ``S`` and the current cursor ``C`` at its start, reads the settings once, and:

0. **plan** (no Spark): horizons ``H_p = max(H_p(C), min(N_p(S), L_p))`` from metadata (``horizons.py``);
   if no horizon advances and no compacted row must change (expired tombstones, keyless rows after a switch
   to ``drop``) it ends here with ``committed: false``.
1. **phase 1**: over the new raw range ``[H_p(C), H_p)`` read ``(partition, key, offset)`` and find each key's
   latest offset, partition by partition, kept on the executors (persisted, never collected).
2. **phase 2** on a private staging branch of the compacted table, started at ``C``:
   position-delete the compacted rows this run removes (superseded keys, expired tombstones, keyless rows
   under ``drop``) and append the range's kept rows with tombstone delete horizons. Only the view's narrow
   columns are read to find superseded rows, so an incremental run costs in proportion to the new data plus
   one narrow pass over the view, never a rewrite of it. When position deletes pile up (or on the first run)
   the view is rewritten whole instead.
3. **publish**: one catalog commit adds the cursor snapshot (summary: horizons, ``S``, ``now``, settings,
   statistics), moves ``main`` to it if ``main`` is still ``C``, tags ``C`` so it stays protected while
   retained, and drops the staging branch (``publish.py``). If another run won, this one starts again from
   phase 1 on the new cursor (up to ``max_attempts``), then fails with "cursor moved".

Failure at any point leaves ``main`` (the cursor) as it was; the staging branch of a failed run is dropped when
possible, and otherwise removed by retention after ``compaction.orphan-min-age-ms``. Readers never see it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from compactor import failpoints
from compactor import properties as props
from compactor import schema as ts
from compactor.clock import resolve_now_ms
from compactor.compaction.deletes import (
    DeleteFileInfo,
    collect_delete_files,
    delete_manifest,
    summary_counts,
    write_position_deletes,
)
from compactor.compaction.horizons import RawSnapshotView, bytes_at, compute_horizons
from compactor.compaction.publish import create_stage_branch, ensure_base_branch, require_cursor
from compactor.compaction.triggers import assess, start_bytes
from compactor.cursor import (
    MAIN,
    STAGE_PREFIX,
    TAG_PREFIX,
    Cursor,
    ViewStats,
    cursor_properties,
    parse_cursor,
)
from compactor.cursor.table import ensure_compacted_table
from compactor.errors import (
    CommitConflictError,
    CursorCorruptError,
    CursorMovedError,
    PolicyError,
    TopicCorruptError,
)
from compactor.iceberg.catalog import first_line, translate_storage_errors
from compactor.iceberg.commits import RefMove, build_snapshot, commit, send
from compactor.progress import Listener, Progress
from compactor.results import JsonResult
from compactor.spark.columns import offset_ranges
from compactor.topics.naming import TopicName
from compactor.topics.settings import TopicSettings
from compactor.topics.topic import Topic

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from compactor.lake import Lake

log = logging.getLogger(__name__)

# Session settings of the job: storage-partitioned grouping (no shuffle between the raw range, the winners
# and the view), and no broadcast of anything built from keys or records.
SPARK_SETTINGS = {
    "spark.sql.sources.v2.bucketing.enabled": "true",
    "spark.sql.iceberg.planning.preserve-data-grouping": "true",
    "spark.sql.requireAllClusterKeysForCoPartition": "false",
    "spark.sql.sources.v2.bucketing.pushPartValues.enabled": "true",
    "spark.sql.sources.v2.bucketing.partiallyClusteredDistribution.enabled": "false",
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    "spark.sql.adaptive.autoBroadcastJoinThreshold": "-1",
    "spark.sql.optimizer.runtime.bloomFilter.enabled": "false",
}
# The view is rewritten whole (instead of deletes + appends) when position-deleted rows reach this share of
# its live rows, or when it has this many data files per partition.
REWRITE_DELETED_RATIO = 0.3
REWRITE_FILES_PER_PARTITION = 64
PUBLISH_ATTEMPTS = 5


@dataclass
class CompactionResult(JsonResult):
    """The outcome of a run, printed by ``compactor compact`` as JSON."""

    committed: bool
    topic: str
    compacted_snapshot_id: int | None
    raw_snapshot_id: int | None
    horizons: dict[str, int]
    run_time_ms: int
    stats: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    previous_cursor: int | None = None
    attempts: int = 1

    def as_json(self) -> dict[str, Any]:
        return {
            "committed": self.committed,
            "topic": self.topic,
            "compacted_snapshot_id": self.compacted_snapshot_id,
            "raw_snapshot_id": self.raw_snapshot_id,
            "horizons": self.horizons,
            "run_time_ms": self.run_time_ms,
            "stats": self.stats,
            "reason": self.reason,
            "previous_cursor": self.previous_cursor,
            "attempts": self.attempts,
        }


@dataclass
class _Plan:
    topic: Topic
    settings: TopicSettings
    raw: RawSnapshotView
    next_offsets: tuple[int, ...]
    logical_bytes: tuple[int, ...]
    log_starts: tuple[int, ...]
    view_table: Any
    cursor: Cursor | None
    previous: list[int]
    horizons: list[int]
    purge_expired: bool
    purge_keyless: bool
    rewrite: str | None
    trim_before_ms: int | None = None  # delete,compact retention: remove view rows older than this

    @property
    def ranges(self) -> dict[int, tuple[int, int]]:
        return {p: (lo, hi) for p, (lo, hi) in enumerate(zip(self.previous, self.horizons, strict=True)) if hi > lo}

    @property
    def records_in_range(self) -> int:
        return sum(hi - lo for lo, hi in self.ranges.values())


class TwoPhaseCompactor:
    """Compacts one topic; see the module docstring for the algorithm."""

    def __init__(self, lake: Lake, topic: str | TopicName, *, now_ms: int | None = None, if_due: bool = False,
                 max_attempts: int = 3, listener: Listener | None = None, force_rewrite: bool = False,
                 trim_before_ms: int | None = None) -> None:
        self.lake = lake
        self.name = topic if isinstance(topic, TopicName) else TopicName.parse(topic)
        self.now_ms = resolve_now_ms(now_ms)
        self.if_due = if_due
        self.max_attempts = max_attempts
        self.force_rewrite = force_rewrite
        # Retention under delete,compact: a run that only removes compacted rows with timestamp < this, and
        # publishes a new cursor with the same horizons (SEMANTICS section 4).
        self.trim_before_ms = trim_before_ms
        self.progress = Progress("compact", str(self.name), listener=listener)

    # --- the run -------------------------------------------------------------------------------------

    def run(self) -> CompactionResult:
        for attempt in range(1, self.max_attempts + 1):
            try:
                result = self._attempt()
                result.attempts = attempt
                return result
            except (CursorMovedError, CommitConflictError) as exc:
                if attempt == self.max_attempts:
                    raise
                self.progress.phase("restart", f"{exc}; starting again from phase 1 on the new cursor",
                                    attempt=attempt)
        raise AssertionError("unreachable")

    def _attempt(self) -> CompactionResult:
        plan_or_result = self._plan()
        if isinstance(plan_or_result, CompactionResult):
            return plan_or_result
        plan = plan_or_result
        failpoints.hit("after-plan")
        timings = {"plan_ms": self.progress.elapsed_ms()}
        spark = self.lake.spark()
        timings["spark_ms"] = self.progress.elapsed_ms() - timings["plan_ms"]
        for key, value in SPARK_SETTINGS.items():
            spark.conf.set(key, value)
        run_id = uuid.uuid4().hex[:12]
        stage = f"{STAGE_PREFIX}{self.now_ms}-{run_id}"
        base = plan.cursor.snapshot_id if plan.cursor else ensure_base_branch(self.lake.catalog, plan.view_table)
        with translate_storage_errors(f"creating the staging branch of {self.name}"):
            create_stage_branch(self.lake.catalog, self.name.compacted_identifier, stage, base,
                                plan.cursor.snapshot_id if plan.cursor else None)
        published = False
        cleanup: list[Any] = []
        try:
            with spark_commit_conflicts(f"writing the staging branch of {self.name}"):
                cursor, delete_files = self._compact(spark, plan, stage, run_id, cleanup, timings)
            if not plan.ranges and not cursor.stats["rows_deleted_from_view"]:
                # only a pass for expired tombstones or keyless rows, and it found none (the minimums it
                # planned on are lower bounds): the compacted rows did not change, so nothing is published
                return self._not_committed(plan.raw, plan.cursor, "nothing to compact: no compacted row needed "
                                           "removing")
            failpoints.hit("before-commit")
            snapshot_id = self._publish(plan, stage, cursor, delete_files)
            published = True
            failpoints.hit("after-commit")
            self._mirror(plan.topic, snapshot_id, cursor)
            stats = dict(cursor.stats)
            self.progress.summary(
                f"published cursor {snapshot_id}: {stats['records_read']} raw records "
                f"({stats['bytes_read'] / 1e6:.1f} MB) compacted in {stats['duration_ms'] / 1000:.1f}s; view "
                f"{stats['view_rows_before']} -> {stats['records_kept']} rows",
                **{k: stats[k] for k in ("records_read", "records_kept", "records_removed", "tombstones_kept",
                                         "tombstones_dropped", "bytes_read", "bytes_written", "duration_ms")})
            return CompactionResult(True, str(self.name), snapshot_id, plan.raw.snapshot_id,
                                    cursor.horizons_dict(), self.now_ms, stats, "compacted",
                                    plan.cursor.snapshot_id if plan.cursor else None)
        finally:
            for item in cleanup:
                with contextlib.suppress(Exception):
                    item()
            if not published:
                self._drop_stage(stage)

    # --- planning (pyiceberg only) -----------------------------------------------------------------------

    def _plan(self) -> _Plan | CompactionResult:
        now = self.now_ms
        topic = self.lake.topic(self.name)
        settings = topic.settings
        if not settings.compacts:
            raise PolicyError(f"topic {self.name} has cleanup.policy={settings.policy_text}; compaction needs "
                              "'compact' (topic config --set cleanup.policy=compact or delete,compact)")
        offsets = topic.offsets()
        snapshot = topic.snapshot
        raw = RawSnapshotView(topic.table, snapshot.snapshot_id if snapshot else None)
        view_table = ensure_compacted_table(topic)
        head = view_table.metadata.snapshot_by_name(MAIN)
        cursor = parse_cursor(head) if head is not None else None
        if cursor is not None and cursor.partitions != offsets.partitions:
            raise CursorCorruptError(f"cursor {cursor.snapshot_id} has {cursor.partitions} partitions; "
                                     f"{self.name} has {offsets.partitions}")
        if self.if_due and self.trim_before_ms is None:
            assessment = assess(raw, offsets, topic.properties, settings, cursor, now)
            if not assessment.due:
                return self._not_committed(raw, cursor, f"not due: {assessment.due_reason}")
        if cursor is not None:
            previous = [max(h, s) for h, s in zip(cursor.horizons, offsets.log_start_offsets, strict=True)]
        else:
            previous = list(offsets.log_start_offsets)
        if self.trim_before_ms is not None:
            horizons = list(previous)  # a retention trim keeps the horizons
        else:
            horizons = compute_horizons(raw, previous, offsets.next_offsets, now, settings.min_compaction_lag_ms)
        view = cursor.view if cursor else ViewStats()
        purge_expired = (view.tombstones > 0 and view.min_tombstone_delete_horizon is not None
                         and view.min_tombstone_delete_horizon <= now)
        purge_keyless = not settings.retain_null_keys and view.null_key_rows > 0
        trim = self.trim_before_ms
        if trim is not None and (view.rows == 0 or view.min_timestamp_ms is None or view.min_timestamp_ms >= trim):
            trim = None  # every compacted row is at least this new (the minimum is a lower bound)
        plan = _Plan(topic, settings, raw, offsets.next_offsets, offsets.logical_bytes, offsets.log_start_offsets,
                     view_table, cursor, previous, horizons, purge_expired, purge_keyless,
                     self._rewrite_reason(cursor, offsets.partitions), trim)
        if not plan.ranges and not purge_expired and not purge_keyless and trim is None:
            return self._not_committed(raw, cursor, "nothing to compact: no horizon advances and no compacted row "
                                       "needs removing")
        self.progress.phase("plan", "pinned raw snapshot and cursor", raw_snapshot_id=raw.snapshot_id,
                            cursor=cursor.snapshot_id if cursor else None,
                            ranges={str(p): list(r) for p, r in plan.ranges.items()},
                            records=plan.records_in_range, expire_tombstones=purge_expired,
                            drop_keyless=purge_keyless, trim_before_ms=trim, rewrite=plan.rewrite)
        return plan

    def _rewrite_reason(self, cursor: Cursor | None, partitions: int) -> str | None:
        if cursor is None:
            return None
        if self.force_rewrite:
            return "requested"
        deleted = int(cursor.stats.get("view_position_deletes", 0) or 0)
        if cursor.view.rows and deleted >= REWRITE_DELETED_RATIO * cursor.view.rows:
            return f"{deleted} position-deleted rows >= {REWRITE_DELETED_RATIO:.0%} of {cursor.view.rows} live rows"
        files = int(cursor.stats.get("view_data_files", 0) or 0)
        if files > REWRITE_FILES_PER_PARTITION * partitions:
            return f"{files} data files > {REWRITE_FILES_PER_PARTITION} per partition"
        return None

    def _not_committed(self, raw: RawSnapshotView, cursor: Cursor | None, reason: str) -> CompactionResult:
        self.progress.summary(f"no commit: {reason}")
        return CompactionResult(False, str(self.name), cursor.snapshot_id if cursor else None, raw.snapshot_id,
                                cursor.horizons_dict() if cursor else {}, self.now_ms,
                                {"duration_ms": self.progress.elapsed_ms()}, reason,
                                cursor.snapshot_id if cursor else None)

    # --- phases 1 and 2 (Spark) ------------------------------------------------------------------------------

    def _compact(self, spark: SparkSession, plan: _Plan, stage: str, run_id: str, cleanup: list[Any],
                 timings: dict[str, int]) -> tuple[Cursor, list[DeleteFileInfo]]:
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        from compactor.compaction import phases

        now = self.now_ms
        settings = plan.settings
        catalog_name = self.lake.config.catalog_name
        raw_ident = self.name.spark_identifier(catalog_name)
        view_ident = self.name.spark_identifier(catalog_name, compacted=True)
        stage_ident = self.name.spark_identifier(catalog_name, compacted=True, branch=stage)
        sc = spark.sparkContext
        drop_keyless = not settings.retain_null_keys

        # Phase 1 is defined once and evaluated inside each job that needs it: it reads only narrow columns
        # of the new range, partition by partition. It is deliberately not cached: Spark 3.5 misaligns
        # storage-partitioned joins against cached or checkpointed inputs (wrong results, or "Can't zip RDDs").
        winners: DataFrame | None = None
        range_rows: DataFrame | None = None
        if plan.ranges:
            # The rows of [H_p(C), H_p) never change once in S (offsets are never reused, and retention stays below
            # every retained cursor's horizon), so the current main holds exactly S's rows of the range. Reading
            # it, not S by id, keeps the run working after appends drop S's metadata entry (topics.snapshots).
            raw_df = spark.read.format("iceberg").load(raw_ident)
            condition = offset_ranges((p, lo, hi) for p, (lo, hi) in plan.ranges.items())
            assert condition is not None
            range_rows = raw_df.where(condition)
            winners = phases.latest_offsets(range_rows)
        view_at_c: DataFrame | None = None
        if plan.cursor is not None:
            view_at_c = (spark.read.format("iceberg").option("snapshot-id", str(plan.cursor.snapshot_id))
                         .load(view_ident))
        range_obs = Observation(f"range_{run_id}")
        kept_obs = Observation(f"kept_{run_id}")
        kept_new: DataFrame | None = None
        if winners is not None and range_rows is not None:
            kept_new = phases.new_view_rows(range_rows.observe(range_obs, *phases.range_stats_columns()), winners,
                                            retain_null_keys=settings.retain_null_keys, now_ms=now,
                                            delete_retention_ms=settings.delete_retention_ms)
        survivors = plan.cursor.view if plan.cursor else ViewStats()
        doomed = ViewStats()
        kept_stats = ViewStats()
        range_stats: dict[str, Any] = {"records": 0, "tombstones": 0}
        delete_files: list[DeleteFileInfo] = []
        delete_location = f"{plan.view_table.metadata.location.rstrip('/')}/data/compactor-deletes/{run_id}"
        hadoop = sc._jsc.hadoopConfiguration()
        hadoop.set("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")

        trims: dict[int, tuple[int, int | None]] = {}
        if plan.trim_before_ms is not None and view_at_c is not None:
            # retention under delete,compact advances the compacted start of each partition it trims to the
            # lowest offset the view keeps there (SEMANTICS section 5): one narrow pass, a row per partition
            sc.setJobDescription(f"compactor {self.name}: retention trim (compacted start per partition)")
            classified = phases.classify_view(view_at_c, winners, now_ms=now, drop_null_keys=drop_keyless,
                                              trim_before_ms=plan.trim_before_ms)
            trims = {int(row[ts.PARTITION]): (int(row["trimmed"]),
                                              None if row["first_kept"] is None else int(row["first_kept"]))
                     for row in phases.trim_starts(classified).collect()}
        if plan.rewrite is not None and view_at_c is not None:
            started = time.monotonic()
            sc.setJobDescription(f"compactor {self.name}: phases 1+2 (rewrite of the view)")
            self.progress.phase("phase 2", f"rewriting the compacted view ({plan.rewrite})",
                                records=plan.records_in_range)
            failpoints.hit("after-phase-1")
            survivors_rows = phases.surviving_rows(view_at_c, winners, now_ms=now, drop_null_keys=drop_keyless,
                                                   trim_before_ms=plan.trim_before_ms)
            new_view = survivors_rows if kept_new is None else survivors_rows.unionByName(kept_new)
            (new_view.sortWithinPartitions(ts.PARTITION, ts.OFFSET)
             .observe(kept_obs, *phases.view_stats_columns("")).writeTo(stage_ident).overwrite(F.lit(True)))
            kept_stats = ViewStats(**_stats(kept_obs.get, ""))
            if kept_new is not None:
                range_stats = dict(range_obs.get)
            before = plan.cursor.view.rows if plan.cursor else 0
            survivors = ViewStats()
            doomed = ViewStats(rows=max(before + int(range_stats["records"]) - kept_stats.rows, 0))
            timings["write_ms"] = _ms(started)
        else:
            failpoints.hit("after-phase-1")
            previous_view = survivors

            def delete_pass() -> ViewStats:
                """Write position deletes for the compacted rows this run removes (one narrow pass)."""
                assert view_at_c is not None
                started = time.monotonic()
                sc.setJobDescription(f"compactor {self.name}: phases 1+2 (position deletes)")
                self.progress.phase("phase 2", "finding compacted rows that this run removes (narrow columns)",
                                    records=plan.records_in_range)
                classified = phases.classify_view(view_at_c, winners, now_ms=now, drop_null_keys=drop_keyless,
                                                  with_positions=True, trim_before_ms=plan.trim_before_ms)
                view_obs = Observation(f"view_{run_id}")
                write_position_deletes(
                    classified.where(F.col(phases.DOOMED))
                    .observe(view_obs, *phases.view_stats_columns("doomed_", minimums=False)), delete_location)
                removed = ViewStats(**_stats(view_obs.get, "doomed_"))
                if removed.rows:
                    delete_files.extend(collect_delete_files(self.lake.config, delete_location))
                timings["delete_ms"] = _ms(started)
                self.progress.phase("phase 2 deletes", rows=removed.rows, tombstones=removed.tombstones,
                                    delete_files=len(delete_files))
                failpoints.hit("after-delete")
                return removed

            def write_pass() -> tuple[ViewStats, dict[str, Any]]:
                """Append the kept rows of the new range to the staging branch."""
                assert kept_new is not None
                started = time.monotonic()
                sc.setJobDescription(f"compactor {self.name}: phases 1+2 (write the kept rows)")
                self.progress.phase("phase 2", "writing the kept rows of the new range", records=plan.records_in_range)
                kept_new.observe(kept_obs, *phases.view_stats_columns("")).writeTo(stage_ident).append()
                timings["write_ms"] = _ms(started)
                return ViewStats(**_stats(kept_obs.get, "")), dict(range_obs.get)

            # The two passes are independent Spark jobs: run them side by side.
            needs_delete = view_at_c is not None and (winners is not None or plan.purge_expired
                                                      or plan.purge_keyless or plan.trim_before_ms is not None)
            with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
                removing = pool.submit(delete_pass) if needs_delete else None
                writing = pool.submit(write_pass) if kept_new is not None else None
                failures = [f.exception() for f in (removing, writing) if f is not None and f.exception()]
                if failures:
                    raise failures[0]  # type: ignore[misc]
                if removing is not None:
                    doomed = removing.result()
                    survivors = _subtract(previous_view, doomed)
                    if plan.trim_before_ms is not None and survivors.min_timestamp_ms is not None:
                        # every surviving row is at least trim_before_ms: a tighter lower bound
                        survivors = dataclasses.replace(
                            survivors, min_timestamp_ms=max(survivors.min_timestamp_ms, plan.trim_before_ms))
                if writing is not None:
                    kept_stats, range_stats = writing.result()
        failpoints.hit("after-write")
        if int(range_stats["records"]) != plan.records_in_range:
            raise TopicCorruptError(
                f"{self.name}: the raw range {plan.ranges} holds {range_stats['records']} records, expected "
                f"{plan.records_in_range} (offsets must be dense); nothing was published")
        return self._cursor(plan, run_id, stage, survivors, doomed, kept_stats, range_stats, timings,
                            delete_files, trims), delete_files

    def _cursor(self, plan: _Plan, run_id: str, stage: str, survivors: ViewStats, doomed: ViewStats,
                kept: ViewStats, range_stats: dict[str, Any], timings: dict[str, int],
                delete_files: list[DeleteFileInfo], trims: dict[int, tuple[int, int | None]]) -> Cursor:
        """The new cursor. ``trims``: per partition, rows a retention trim removed and the lowest offset kept."""
        previous = plan.cursor
        view = _combine(survivors, kept)
        with translate_storage_errors(f"reading the staging branch of {self.name}"):
            table = self.lake.catalog.load_table(self.name.compacted_identifier)
        head = table.metadata.snapshot_by_name(stage)
        summary = head.summary.additional_properties if head is not None and head.summary else {}
        written = _bytes_written(table, head, previous.snapshot_id if previous else None)
        written += sum(f.size_bytes for f in delete_files)
        before_rows = previous.view.rows if previous else 0
        before_tombstones = previous.view.tombstones if previous else 0
        bytes_at_horizon = [bytes_at(plan.raw, p, h, n, b) for p, (h, n, b) in
                            enumerate(zip(plan.horizons, plan.next_offsets, plan.logical_bytes, strict=True))]
        if previous is not None and len(previous.bytes_at_horizon) == len(bytes_at_horizon):
            bytes_before = list(previous.bytes_at_horizon)
        else:
            bytes_before = start_bytes(plan.topic.properties, len(bytes_at_horizon))
        stats: dict[str, Any] = {
            "records_read": int(range_stats["records"]),
            "records_kept": view.rows,
            "records_removed": before_rows + int(range_stats["records"]) - view.rows,
            "tombstones_kept": view.tombstones,
            "tombstones_dropped": before_tombstones + int(range_stats["tombstones"]) - view.tombstones,
            "bytes_read": sum(max(a - b, 0) for a, b in zip(bytes_at_horizon, bytes_before, strict=True)),
            "bytes_written": written,
            "duration_ms": self.progress.elapsed_ms(),
            "durations_ms": dict(timings),
            "view_rows_before": before_rows,
            "rows_deleted_from_view": doomed.rows,
            "rows_appended": kept.rows,
            "rewrite": plan.rewrite or "",
            "view_position_deletes": int(summary.get("total-position-deletes", 0) or 0)
            + sum(f.record_count for f in delete_files),
            "view_data_files": int(summary.get("total-data-files", 0) or 0),
            "view_delete_files": int(summary.get("total-delete-files", 0) or 0) + len(delete_files),
        }
        start = list(previous.compacted_start) if previous else list(plan.log_starts)
        for partition, (trimmed, first_kept) in trims.items():
            if trimmed:  # nothing below first_kept is left; an emptied partition continues at its horizon
                start[partition] = max(start[partition], plan.horizons[partition] if first_kept is None
                                       else first_kept)
        return Cursor(
            snapshot_id=0,
            horizons=tuple(plan.horizons),
            compacted_start=tuple(start),
            raw_snapshot_id=plan.raw.snapshot_id,
            raw_next_offsets=tuple(plan.next_offsets),
            now_ms=self.now_ms,
            settings=plan.settings.as_kafka_dict(),
            stats=stats,
            view=view,
            previous=previous.snapshot_id if previous else None,
            run_id=run_id,
            policy_compact=True,
            bytes_at_horizon=tuple(bytes_at_horizon),
        )

    # --- publish ----------------------------------------------------------------------------------------------

    def _publish(self, plan: _Plan, stage: str, cursor: Cursor, delete_files: list[DeleteFileInfo]) -> int:
        catalog = self.lake.catalog
        expected = plan.cursor.snapshot_id if plan.cursor else None
        started = time.monotonic()
        for _ in range(PUBLISH_ATTEMPTS):
            with translate_storage_errors(f"publishing the cursor of {self.name}"):
                table = catalog.load_table(self.name.compacted_identifier)
            require_cursor(table, expected, str(self.name), "; nothing was published")
            head = table.metadata.snapshot_by_name(stage)
            if head is None:
                raise CommitConflictError(f"the staging branch {stage} of this run disappeared")
            props = cursor_properties(cursor)
            props = {**props, "compactor.stats": json.dumps({**cursor.stats, "commit_ms": _ms(started)},
                                                            sort_keys=True, separators=(",", ":"))}
            manifests = (lambda sid, t=table: [delete_manifest(t, sid, delete_files)]) if delete_files else None
            snapshot = build_snapshot(table, head, props, manifests, summary_counts(delete_files))
            moves = [RefMove(MAIN, None)]
            if expected is not None:
                from pyiceberg.table.refs import SnapshotRefType

                moves.append(RefMove(f"{TAG_PREFIX}{expected}", expected, SnapshotRefType.TAG))
            try:
                commit(catalog, table, snapshot=snapshot, moves=moves, removals=[stage],
                       expect={MAIN: expected, stage: head.snapshot_id}, what=f"publishing the cursor of {self.name}")
            except CommitConflictError as exc:
                self.progress.phase("publish retry", str(exc))
                continue
            self.progress.phase("published", compacted_snapshot_id=snapshot.snapshot_id, commit_ms=_ms(started))
            return int(snapshot.snapshot_id)
        raise CommitConflictError(f"could not publish the cursor of {self.name} after {PUBLISH_ATTEMPTS} attempts: "
                                  "the compacted table kept changing")

    def _mirror(self, topic: Topic, snapshot_id: int, cursor: Cursor) -> None:
        """Show the cursor on the raw table too (for people and tools; nothing trusts it)."""
        value = json.dumps({"compacted_table": self.name.compacted_identifier, "compacted_snapshot_id": snapshot_id,
                            "horizons": cursor.horizons_dict(), "raw_snapshot_id": cursor.raw_snapshot_id,
                            "run_time_ms": cursor.now_ms}, separators=(",", ":"))
        from pyiceberg.exceptions import CommitFailedException

        for _ in range(5):
            try:
                topic.refresh()
                tx = topic.table.transaction()
                tx.set_properties({props.CURSOR_MIRROR_PROPERTY: value})
                tx.commit_transaction()
                return
            except CommitFailedException:
                time.sleep(0.05)
            except Exception as exc:  # the cursor is published; the mirror is best effort
                log.warning("could not mirror the cursor of %s on the raw table: %s", self.name, exc)
                return
        log.warning("could not mirror the cursor of %s on the raw table: producers kept committing", self.name)

    def _drop_stage(self, stage: str) -> None:
        """Best effort: remove a failed run's staging branch (retention removes it otherwise)."""
        from pyiceberg.table.update import RemoveSnapshotRefUpdate


        try:
            table = self.lake.catalog.load_table(self.name.compacted_identifier)
            if stage in table.metadata.refs:
                send(self.lake.catalog, table, (), (RemoveSnapshotRefUpdate(ref_name=stage),),
                     lambda m: stage not in m.refs, f"dropping staging branch {stage}")
        except Exception as exc:
            log.info("staging branch %s of %s left for retention to remove: %s", stage, self.name, exc)


@contextlib.contextmanager
def spark_commit_conflicts(what: str) -> Iterator[None]:
    """Turn an Iceberg ``CommitFailedException`` raised inside a Spark write into ``CommitConflictError``.

    Iceberg retries its own commits first (the compacted table keeps the default retries); if it still lost
    the race, the whole attempt is started again on the refreshed table instead of failing the run.
    """
    try:
        yield
    except Exception as exc:
        if type(exc).__name__ == "Py4JJavaError" and "org.apache.iceberg.exceptions.CommitFailedException" in str(exc):
            raise CommitConflictError(f"{what}: {first_line(exc)}") from exc
        raise


def compact_topic(lake: Lake, topic: str, **kwargs: Any) -> CompactionResult:
    """Run one compaction of ``topic`` (see ``TwoPhaseCompactor`` for the keyword arguments)."""
    return TwoPhaseCompactor(lake, topic, **kwargs).run()


# --- helpers -----------------------------------------------------------------------------------------------------


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def _stats(metrics: dict[str, Any], prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("rows", "tombstones", "null_key_rows", "clean_bytes"):
        out[name] = int(metrics.get(prefix + name) or 0)
    for name in ("min_tombstone_delete_horizon", "min_timestamp_ms"):
        value = metrics.get(prefix + name)
        out[name] = None if value is None else int(value)
    return out


def _min(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _subtract(view: ViewStats, removed: ViewStats) -> ViewStats:
    """The view's rows after ``removed`` are deleted (minimums stay as lower bounds, see ``ViewStats``)."""
    return ViewStats(
        rows=view.rows - removed.rows,
        tombstones=view.tombstones - removed.tombstones,
        null_key_rows=view.null_key_rows - removed.null_key_rows,
        clean_bytes=view.clean_bytes - removed.clean_bytes,
        min_tombstone_delete_horizon=view.min_tombstone_delete_horizon if view.tombstones > removed.tombstones
        else None,
        min_timestamp_ms=view.min_timestamp_ms if view.rows > removed.rows else None,
    )


def _combine(a: ViewStats, b: ViewStats) -> ViewStats:
    return ViewStats(
        rows=a.rows + b.rows,
        tombstones=a.tombstones + b.tombstones,
        null_key_rows=a.null_key_rows + b.null_key_rows,
        clean_bytes=a.clean_bytes + b.clean_bytes,
        min_tombstone_delete_horizon=_min(a.min_tombstone_delete_horizon, b.min_tombstone_delete_horizon),
        min_timestamp_ms=_min(a.min_timestamp_ms, b.min_timestamp_ms),
    )


def _bytes_written(table: Any, head: Any, stop_at: int | None) -> int:
    """Bytes of the data and delete files the run's staging snapshots added."""
    total = 0
    snapshot = head
    while snapshot is not None and snapshot.snapshot_id != stop_at:
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        total += int(summary.get("added-files-size", 0) or 0)
        if snapshot.parent_snapshot_id is None:
            break
        snapshot = table.metadata.snapshot_by_id(snapshot.parent_snapshot_id)
    return total


__all__ = ["SPARK_SETTINGS", "CompactionResult", "TwoPhaseCompactor", "compact_topic"]
