"""Phase 2's DataFrame logic (``compaction.phase2.rows``) on plain DataFrames."""

from __future__ import annotations

import random

import pytest
from pyspark.sql import DataFrame, SparkSession

from compactor.compaction.phase1 import latest
from compactor.compaction.phase2 import rows as phase2_rows
from compactor.spark.expressions import offset_masks

pytestmark = pytest.mark.spark
DAY = 86_400_000


def _range(spark: SparkSession) -> tuple[DataFrame, list[tuple[int, int, bytes | None, bytes]],
                                         dict[tuple[int, bytes], int]]:
    """A range of two partitions whose offsets cross several 64-offset words (with the rows and each key's latest
    offset)."""
    rng = random.Random(5)
    rows = []
    for partition in (0, 1):
        for offset in range(300):
            key = None if offset % 97 == 5 else b"k%d" % rng.randrange(40 if offset < 130 or offset >= 200 else 3)
            rows.append((partition, offset, key, b"v"))
    # offsets 130-199 of each partition reuse three keys, so most of words 2 and 3 lose to later offsets
    winners: dict[tuple[int, bytes], int] = {}
    for partition, offset, key, _ in rows:
        if key is not None:
            winners[(partition, key)] = offset
    df = spark.createDataFrame(rows, "partition int, offset long, key binary, value binary") \
        .selectExpr("*", "timestamp_millis(0) AS timestamp", "CAST(NULL AS array<struct<key:string,value:binary>>) "
                    "AS headers")
    return df, rows, winners


@pytest.mark.slow  # a detail of phase 2; latest-wins stays in the loop (tests/compaction/test_compaction_rules.py)
def test_phase_two_keeps_exactly_the_winning_offsets_across_mask_words(spark: SparkSession) -> None:
    """Offsets at and around the 64-offset word boundaries, words where nothing won, and keyless rows."""
    df, rows, winners = _range(spark)
    for retain in (False, True):
        masks = offset_masks(latest.latest_offsets(df))
        kept = phase2_rows.new_view_rows(df, masks, retain_null_keys=retain, now_ms=1, delete_retention_ms=DAY)
        got = [(r["partition"], r["offset"]) for r in kept.collect()]
        want = sorted({(p, o) for (p, _), o in winners.items()}
                      | ({(p, o) for p, o, k, _ in rows if k is None} if retain else set()))
        assert sorted(got) == want, retain
        for partition in (0, 1):  # written in offset order within each partition
            offsets = [o for p, o in got if p == partition]
            assert offsets == sorted(offsets)


def test_a_small_range_finds_in_its_own_rows_what_phase_one_finds(spark: SparkSession) -> None:
    """Issue 34: an incremental run of a small range leaves its winners to phase 2. The window over the range's rows
    (``latest_range_rows``) keeps the rows the masks keep, and the range's keys (``range_keys``) are phase 1's
    winning keys."""
    df, _, winners = _range(spark)
    for retain in (False, True):
        masks = offset_masks(latest.latest_offsets(df))
        by_masks = phase2_rows.new_view_rows(df, masks, retain_null_keys=retain, now_ms=1, delete_retention_ms=DAY)
        by_window = phase2_rows.latest_range_rows(df, retain_null_keys=retain, now_ms=1, delete_retention_ms=DAY)
        def ordered(frame: DataFrame) -> list[tuple[object, ...]]:
            return sorted((tuple(r) for r in frame.collect()), key=lambda r: (r[0], r[1]))  # partition, offset

        assert ordered(by_window) == ordered(by_masks), retain
    keys = [(r["partition"], bytes(r["key"])) for r in phase2_rows.range_keys(df).collect()]
    assert sorted(keys) == sorted(winners) and len(keys) == len(set(keys))
