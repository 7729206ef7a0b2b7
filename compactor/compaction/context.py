"""What the steps of one compaction run share: the plan, the layout, the job session and the tables' scans."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from compactor.compaction.execution import Layout, apply_settings, read_table
from compactor.compaction.plan import CompactionPlan
from compactor.progress import Progress
from compactor.schema import DELETE_HORIZON, KEY, PARTITION, RECORD_BYTES
from compactor.spark.columns import offset_ranges
from compactor.topics.naming import TopicName

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Observation, SparkSession

# A partition's winning keys are hashed in one task's memory up to this many records in its range (about 50 to
# 100 bytes each); past it the joins on keys sort both sides instead, and spill.
HASH_KEYS_LIMIT = 2_000_000


@dataclass
class RunContext:
    """One attempt of a run: everything its steps read, and the timings they record."""

    name: TopicName
    plan: CompactionPlan
    spark: SparkSession
    layout: Layout
    catalog_name: str
    run_id: str
    stage: str                      # the private staging branch of the compacted table
    view_location: str              # the compacted table's location (position delete files go below it)
    progress: Progress
    scratch: str | None = None      # the phase-1 scratch table, once phase 1 created it
    timings: dict[str, int] = field(default_factory=dict)
    unparsable: int = 0             # phase 1: header values of the range that are no number (header strategy)
    raw_timestamps: tuple[int, int] | None = None  # bounds (µs) of the range files' timestamps, if all known

    @property
    def stage_identifier(self) -> str:
        return self.name.spark_identifier(self.catalog_name, compacted=True, branch=self.stage)

    @property
    def hash_keys(self) -> bool:
        """Whether joins on the winning keys may hold one partition's keys in a task's memory."""
        return max((self.plan.range_records(p) for p in self.plan.ranges), default=0) <= HASH_KEYS_LIMIT

    def settings(self, *, grouped: bool) -> None:
        """Set the job session for the next jobs (see ``execution.apply_settings``)."""
        apply_settings(self.spark, self.layout, grouped=grouped)

    def raw_range(self) -> DataFrame:
        """The raw rows of the new range ``[H_p(C), H_p)`` of the pinned snapshot ``S``, read from the current
        ``main``: the rows of that range never change once in ``S`` (offsets are never reused, and retention
        stays below every retained cursor's horizon), and appends may drop ``S``'s metadata entry meanwhile
        (``producing.commit``), so Spark could not find ``S`` by id."""
        condition = offset_ranges((p, lo, hi) for p, (lo, hi) in self.plan.ranges.items())
        assert condition is not None, "raw_range() needs a range"
        return read_table(self.spark, self.name.spark_identifier(self.catalog_name), None,
                          self.layout.raw_split_bytes).where(condition)

    def view_at_cursor(self) -> DataFrame:
        """The compacted rows of the pinned cursor ``C``."""
        assert self.plan.cursor is not None, "view_at_cursor() needs a cursor"
        return read_table(self.spark, self.name.spark_identifier(self.catalog_name, compacted=True),
                          self.plan.cursor.snapshot_id, self.layout.view_split_bytes)

    def _scratch(self) -> DataFrame:
        assert self.scratch is not None, "phase 1 has not run"
        quoted = ".".join(f"`{part}`" for part in (self.catalog_name, *self.scratch.split(".")))
        return read_table(self.spark, quoted, None, None)

    def masks(self) -> DataFrame:
        """Phase 1's winners as offset masks ``(partition, word, mask)``."""
        from pyspark.sql import functions as F

        return self._scratch().where(F.col(KEY).isNull())

    def winning_keys(self) -> DataFrame | None:
        """Phase 1's winning keys ``(partition, key)``; ``None`` when the run has no new range."""
        from pyspark.sql import functions as F

        if not self.plan.ranges:
            return None
        return self._scratch().where(F.col(KEY).isNotNull())

    @property
    def contested(self) -> bool:
        """Whether phase 1's contest with the view found the compacted rows this run removes, so that the delete
        pass reads only the scratch table (``contested_positions``)."""
        plan = self.plan
        return not (plan.settings.strategy.by_offset or plan.cursor is None or not plan.ranges or plan.purge_expired
                    or plan.purge_keyless or plan.trim_before_ms is not None)

    def contested_positions(self) -> DataFrame | None:
        """The compacted rows phase 1's contest found superseded (``compaction.ranking.contest``), as the delete
        pass writes them (partition, key, delete horizon, record bytes, ``_file``, ``_pos``); ``None`` when the
        pass must classify the whole view instead: under ``offset``, or when expired tombstones, keyless rows
        or a trim go as well."""
        from pyspark.sql import functions as F

        from compactor.compaction.scratch import FILE_PATH, POS

        if not self.contested:
            return None
        return self._scratch().where(F.col(FILE_PATH).isNotNull()).select(
            PARTITION, KEY, DELETE_HORIZON, RECORD_BYTES, F.col(FILE_PATH).alias("_file"), F.col(POS).alias("_pos"))

    def kept_range_rows(self, read: Observation) -> DataFrame:
        """The new range's rows the view keeps (``phase2.new_view_rows``); the raw rows read are counted in
        ``read`` (``phase2.range_stats_columns``)."""
        from compactor.compaction import phase2

        plan = self.plan
        return phase2.new_view_rows(self.raw_range().observe(read, *phase2.range_stats_columns()), self.masks(),
                                    retain_null_keys=plan.settings.retain_null_keys, now_ms=plan.now_ms,
                                    delete_retention_ms=plan.settings.delete_retention_ms)

    def classified_view(self, *, with_positions: bool = False) -> DataFrame:
        """The compacted rows of ``C``, each marked with whether this run removes it (``phase2.classify_view``)."""
        from compactor.compaction import phase2

        plan = self.plan
        return phase2.classify_view(self.view_at_cursor(), self.winning_keys(), now_ms=plan.now_ms,
                                    drop_null_keys=not plan.settings.retain_null_keys, with_positions=with_positions,
                                    trim_before_ms=plan.trim_before_ms, hash_keys=self.hash_keys)

    def started(self) -> float:
        return time.monotonic()

    def took(self, step: str, started: float) -> int:
        """Record how long ``step`` took (``durations_ms`` in the statistics)."""
        self.timings[step] = int((time.monotonic() - started) * 1000)
        return self.timings[step]
