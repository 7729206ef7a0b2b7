"""One retention pass over one topic (``compactor retention``): docs/guarantees.md#retention, in this order.

1. **Raw prefix removal** (pyiceberg, no Spark): per partition, whole files from the front by
   ``retention.ms`` and ``retention.bytes``, capped under ``compact`` below the horizon of every retained
   cursor; the new log start offsets are committed with the removal (see ``retention.raw``).
2. **Compacted trim** under ``delete,compact`` (a Spark job, only when the cursor's statistics say some
   compacted row is older than ``retention.ms``): a compaction run that removes only those rows and publishes
   a new cursor with the same horizons through the conditional cursor commit.
3. **Policy off**: while the policy lacks ``compact``, compacted reads already return the raw view; once it has
   lacked ``compact`` for ``compaction.cursor.retain-ms`` (recorded on the raw table when first seen), the
   compacted table is dropped with its files.
4. **Expiry** of both tables' snapshots, stale refs (tags of cursors no longer retained, staging branches of
   runs that died), files only expired snapshots referenced, and orphans past ``compaction.orphan-min-age-ms``
   (see ``retention.expiry``).

Settings are read once, at the start. ``dry_run`` plans every step and changes nothing.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import defaultdict
from typing import TYPE_CHECKING

from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.expressions import BooleanExpression, Or

from compactor import failpoints
from compactor import properties as props
from compactor.clock import resolve_now_ms, wall_clock_ms
from compactor.compaction.horizons import RawSnapshotView
from compactor.compaction.lease import is_stale, live_runs
from compactor.compaction.scratch import drop_stale_scratch
from compactor.compaction.staging import stage_mark
from compactor.cursor import CompactedState, Cursor, load_compacted, retained_cursors, tagged_cursor
from compactor.errors import CommitConflictError, TopicCorruptError
from compactor.iceberg.catalog import translate_storage_errors
from compactor.iceberg.commits import send_transaction
from compactor.iceberg.expressions import partition_range
from compactor.iceberg.storage import delete_prefix
from compactor.progress import Progress
from compactor.retention.expiry import ExpiryResult, expire_table
from compactor.retention.raw import PartitionPlan, new_properties, plan_partition, retention_caps
from compactor.retention.result import CompactedTrim, Expiry, PolicyOff, RawRemoval, RetentionResult
from compactor.topics.naming import TopicName
from compactor.topics.settings import TopicSettings
from compactor.topics.state import offsets_to_dict
from compactor.topics.topic import RawFile, Topic
from compactor.topics.window import SnapshotWindow

if TYPE_CHECKING:
    from compactor.lake import Lake

log = logging.getLogger("compactor.retention")

RAW_ATTEMPTS = 20


def run_retention(lake: Lake, name: str | TopicName, *, now_ms: int | None = None,
                  dry_run: bool = False) -> RetentionResult:
    """Apply ``name``'s cleanup policy at ``now_ms`` and expire snapshots; report what was removed."""
    return RetentionPass(lake, name, now_ms=now_ms, dry_run=dry_run).run()


class RetentionPass:
    """One retention pass (see the module docstring)."""

    def __init__(self, lake: Lake, name: str | TopicName, *, now_ms: int | None = None,
                 dry_run: bool = False) -> None:
        self.lake = lake
        self.name = name if isinstance(name, TopicName) else TopicName.parse(name)
        self.now = resolve_now_ms(now_ms)
        self.dry_run = dry_run
        self.progress = Progress("retention", str(self.name))

    def run(self) -> RetentionResult:
        topic = self.lake.topic(self.name)
        settings = topic.settings  # read once
        state = load_compacted(self.lake.catalog, self.name)
        retained = (retained_cursors(state, self.now, settings.cursor_retain_ms)
                    if state is not None and state.cursor is not None else [])
        result = RetentionResult(topic=str(self.name), dry_run=self.dry_run, now_ms=self.now,
                                 policy=settings.policy_text, retained_cursors=[c.snapshot_id for c in retained])

        plans = self._raw(topic, settings, retained)
        removed = [p for p in plans if p.files]
        result.removed_records = sum(p.records for p in removed)
        result.removed_files = sum(len(p.files) for p in removed)
        result.removed_bytes = sum(p.size_bytes for p in removed)
        topic.refresh()
        result.log_start_offsets = offsets_to_dict(
            [p.new_log_start for p in plans] if self.dry_run else topic.offsets().log_start_offsets)
        result.raw = {str(p.partition): RawRemoval(len(p.files), p.records, p.size_bytes, p.log_start,
                                                   p.new_log_start, p.reason) for p in removed}
        self.progress.phase("raw", raw_message(bool(removed), self.dry_run), records=result.removed_records,
                            files=result.removed_files, bytes=result.removed_bytes)
        failpoints.hit("retention-after-delete")

        result.compacted_trim = self._trim(settings, state)
        if result.compacted_trim.committed:
            result.removed_records += result.compacted_trim.rows_removed
        result.policy_off = self._policy_off(topic, settings, state)

        failpoints.hit("retention-before-expire")
        expiry = Expiry(self._expire_raw(topic, settings), self._expire_compacted(settings))
        result.expiry = expiry
        result.dropped_run_tables = (drop_stale_scratch(
            self.lake.catalog, self.lake.config, self.name, self.now, settings.orphan_min_age_ms,
            view_location=state.table.metadata.location, dry_run=self.dry_run, view_io=state.table.io)
            if state is not None else [])
        result.expired_snapshots = len(expiry.raw.expired_snapshots) + len(expiry.compacted.expired_snapshots)
        result.deleted_files = sum(e.deleted_files + e.orphan_files for e in (expiry.raw, expiry.compacted))
        result.deleted_bytes = sum(e.deleted_bytes + e.orphan_bytes for e in (expiry.raw, expiry.compacted))
        result.duration_ms = self.progress.elapsed_ms()
        self.progress.summary(
            f"{'would remove' if self.dry_run else 'removed'} {result.removed_records} records in "
            f"{result.removed_files} raw files, expired {result.expired_snapshots} snapshots, "
            f"deleted {result.deleted_files} files", metric="retention", dry_run=self.dry_run,
            removed_records=result.removed_records, removed_files=result.removed_files,
            removed_bytes=result.removed_bytes, expired_snapshots=result.expired_snapshots)
        return result

    # --- 1. raw prefix removal ------------------------------------------------------------------------

    def _raw(self, topic: Topic, settings: TopicSettings, retained: list[Cursor]) -> list[PartitionPlan]:
        for attempt in range(1, RAW_ATTEMPTS + 1):
            if attempt > 1:
                time.sleep(min(0.5, 0.01 * 2 ** attempt))
                topic.refresh()
            offsets = topic.offsets()
            snapshot = topic.snapshot
            partitions = offsets.partitions
            caps = retention_caps(settings.compacts, [c.horizons for c in retained], offsets.log_start_offsets)
            files: dict[int, list[RawFile]] = defaultdict(list)
            for raw_file in topic.raw_files(snapshot.snapshot_id if snapshot else None):
                files[raw_file.partition].append(raw_file)
            plans = [plan_partition(p, files[p], offsets.log_start_offsets[p], offsets.next_offsets[p], settings,
                                    self.now, caps[p]) for p in range(partitions)]
            if self.dry_run or not any(p.files for p in plans):
                return plans
            raw = RawSnapshotView(topic.table, snapshot.snapshot_id if snapshot else None)
            properties = new_properties(raw, plans, topic.properties, offsets.log_start_offsets)
            terms: list[BooleanExpression] = [partition_range(p.partition, 0, p.new_log_start) for p in plans
                                              if p.files]
            predicate = terms[0] if len(terms) == 1 else Or(*terms)
            what = f"applying retention to {self.name}"
            with translate_storage_errors(what):
                tx = topic.table.transaction()
                tx.set_properties(properties)
                delete = tx.update_snapshot(snapshot_properties={
                    props.SUMMARY_OPERATION: "retention", props.SUMMARY_NOW: str(self.now)}).delete()
                delete.delete_by_predicate(predicate)
                if delete.rewrites_needed:
                    raise TopicCorruptError(f"{self.name}: a raw file straddles the new log start; raw files "
                                            "must hold contiguous offset ranges. Nothing was removed")
                delete.commit()  # stages the snapshot in the transaction; nothing is committed yet
            try:  # an ambiguous failure is resolved by re-reading the table, else exit 75 (outcome unknown)
                send_transaction(topic.catalog, tx, what)
            except CommitConflictError:
                continue  # a producer (or another retention) committed first: plan again on the new head
            topic.refresh()
            return plans
        raise CommitConflictError(f"retention of {self.name} lost the race with other writers {RAW_ATTEMPTS} "
                                  "times; nothing was removed. Try again later")

    # --- 2. compacted trim under delete,compact ----------------------------------------------------------

    def _trim(self, settings: TopicSettings, state: CompactedState | None) -> CompactedTrim:
        if not (settings.compacts and settings.deletes and settings.retention_ms >= 0):
            return CompactedTrim(applies=False)
        if state is None or state.cursor is None:
            return CompactedTrim(applies=True, reason="no compacted view yet")
        limit = self.now - settings.retention_ms
        view = state.cursor.view
        if view.rows == 0 or view.min_timestamp_ms is None or view.min_timestamp_ms >= limit:
            return CompactedTrim(applies=True, trim_before_ms=limit,
                                 reason="no compacted row is older than retention.ms")
        if self.dry_run:
            return CompactedTrim(applies=True, trim_before_ms=limit, reason="dry run: compacted rows older than "
                                 "retention.ms may exist (a run would remove them)")
        from compactor.compaction.job import TwoPhaseCompactor  # imports pyspark: only a trim needs it

        outcome = TwoPhaseCompactor(self.lake, self.name, now_ms=self.now, trim_before_ms=limit).run()
        return CompactedTrim(applies=True, committed=outcome.committed, trim_before_ms=limit,
                             compacted_snapshot_id=outcome.compacted_snapshot_id,
                             rows_removed=outcome.stats.rows_deleted_from_view, reason=outcome.reason)

    # --- 3. compacted data of a topic whose policy lacks compact -----------------------------------------

    def _policy_off(self, topic: Topic, settings: TopicSettings, state: CompactedState | None) -> PolicyOff:
        since_text = topic.properties.get(props.COMPACT_OFF_SINCE_PROPERTY)
        if settings.compacts:
            if since_text is not None and not self.dry_run:
                topic.set_internal_properties({}, [props.COMPACT_OFF_SINCE_PROPERTY])
            return PolicyOff(applies=False)
        if state is None:
            return PolicyOff(applies=True, reason="no compacted view")
        if since_text is None:
            if not self.dry_run:
                topic.set_internal_properties({props.COMPACT_OFF_SINCE_PROPERTY: str(self.now)}, [])
            return PolicyOff(applies=True, policy_off_since_ms=self.now)
        since = _clock_property(since_text, self.name)
        if self.now - since < settings.cursor_retain_ms:
            return PolicyOff(applies=True, policy_off_since_ms=since, drop_at_ms=since + settings.cursor_retain_ms)
        if self.dry_run:
            return PolicyOff(applies=True, policy_off_since_ms=since, would_drop=True)
        location = state.table.metadata.location
        with translate_storage_errors(f"dropping the compacted view of {self.name}"):
            with contextlib.suppress(NoSuchTableError):
                self.lake.catalog.drop_table(self.name.compacted_identifier)
            files = delete_prefix(self.lake.config, location, state.table.io)
        topic.set_internal_properties({}, [props.COMPACT_OFF_SINCE_PROPERTY, props.CURSOR_MIRROR_PROPERTY])
        return PolicyOff(applies=True, dropped=True, policy_off_since_ms=since, deleted_files=files)

    # --- 4. expiry -------------------------------------------------------------------------------------------

    def _expire_raw(self, topic: Topic, settings: TopicSettings) -> ExpiryResult:
        topic.refresh()
        return expire_table(self.lake.catalog, self.lake.config, topic.table, now_ms=self.now,
                            max_age_ms=settings.expire_max_snapshot_age_ms,
                            min_keep=settings.expire_min_snapshots_to_keep, lease_ms=settings.cursor_retain_ms,
                            orphan_min_age_ms=settings.orphan_min_age_ms, dry_run=self.dry_run,
                            spare=lambda metadata: SnapshotWindow.of(settings).in_window(metadata, self.now))

    def _expire_compacted(self, settings: TopicSettings) -> ExpiryResult:
        state = load_compacted(self.lake.catalog, self.name)
        if state is None:
            return ExpiryResult()
        # runs at work: their staging branches and files are spared. Read after the refs (a run writes its lease
        # before it creates its branch, so every branch read has a lease to be found), and files written after
        # this reading are spared too (a run that starts later)
        listed_ms = wall_clock_ms()
        live = live_runs(self.lake.config, state.table.metadata.location, delete_lapsed=not self.dry_run,
                         io=state.table.io)
        spare_files_from = min(live.earliest_start_ms or listed_ms, listed_ms)
        retained = retained_cursors(state, self.now, settings.cursor_retain_ms) if state.cursor else []
        keep = {c.snapshot_id for c in retained}
        stale: list[str] = []
        for ref in state.table.metadata.refs:
            tagged = tagged_cursor(ref)
            if (tagged is not None and tagged not in keep) or is_stale(stage_mark(ref), live, self.now,
                                                                         settings.orphan_min_age_ms):
                stale.append(ref)
        return expire_table(self.lake.catalog, self.lake.config, state.table, now_ms=self.now,
                            max_age_ms=settings.expire_max_snapshot_age_ms,
                            min_keep=settings.expire_min_snapshots_to_keep, lease_ms=settings.cursor_retain_ms,
                            orphan_min_age_ms=settings.orphan_min_age_ms, protected=keep, stale_refs=stale,
                            orphans_before_ms=spare_files_from, dry_run=self.dry_run)


def _clock_property(text: str, name: TopicName) -> int:
    """The run clock stored in ``compactor.compact-off-since-ms``; a malformed one is a corrupt topic."""
    if not text.lstrip("-").isdigit():
        raise TopicCorruptError(f"{name}: table property {props.COMPACT_OFF_SINCE_PROPERTY} is not a clock "
                                f"(milliseconds): {text[:40]!r}; unset it to start the policy-off lease again")
    return int(text)


def raw_message(removed: bool, dry_run: bool) -> str:
    """The raw step's progress line: what was (or, in a dry run, would be) removed, or that nothing was."""
    if not removed:
        return "would remove no raw files" if dry_run else "removed no raw files"
    return "would remove a prefix of raw files" if dry_run else "removed a prefix of raw files"
