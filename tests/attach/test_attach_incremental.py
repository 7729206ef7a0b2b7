"""Incremental = full on an attached log: a random log (two partitions, offsets with gaps, a composite key with
nulls, tombstones) appended in slices and compacted after each (position deletes and appends, and a rewrite once
deletes pile up), against one full run of a second attached log on the same source and against a reference
model; under both null-key policies."""

from __future__ import annotations

import random
from typing import Any

import pytest

from compactor import attach_table, compact_attached, read_attached
from compactor.attach import compaction as attach_compaction
from compactor.lake import Lake
from tests.attach.sources import BASE_MS, connect_rows, connect_table

pytestmark = pytest.mark.spark


def random_log(seed: int, count: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    next_offset = [0, 0]
    rows = []
    for _ in range(count):
        p = rng.randrange(2)
        next_offset[p] += rng.choice([1, 1, 1, 3])  # gaps
        rows.append({"id": rng.choice(["a", "b", "c", None]), "region": rng.choice(["eu", None]),
                     "amount": None if rng.random() < 0.15 else rng.randrange(100),
                     "_kafka_metadata_partition": p, "_kafka_metadata_offset": next_offset[p],
                     "_kafka_metadata_timestamp": BASE_MS + next_offset[p]})
    return rows


def model(rows: list[dict[str, Any]], retain: bool) -> list[tuple[int, int]]:
    latest: dict[tuple[Any, ...], int] = {}
    kept: list[tuple[int, int]] = []
    for r in rows:
        p, o = r["_kafka_metadata_partition"], r["_kafka_metadata_offset"]
        if r["id"] is None and r["region"] is None:
            if retain:
                kept.append((p, o))
            continue
        key = (p, r["id"], r["region"])
        latest[key] = max(latest.get(key, -1), o)
    return sorted(kept + [(k[0], o) for k, o in latest.items()])


@pytest.mark.parametrize(("seed", "null_key", "small"), [(1, "drop", True), (2, "retain", False)])
def test_incremental_runs_equal_one_full_run_and_the_model(lake: Lake, spark: object, seed: int, null_key: str,
                                                           small: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """``small``: the incremental runs take the small-range path (one shuffle partition, no adaptive execution);
    else the general one."""
    if not small:
        monkeypatch.setattr(attach_compaction, "SMALL_RANGE_ROWS", 0)
    decisions: list[bool] = []
    decide = attach_compaction.AttachedRun._small_range

    def small_range(self: Any, *args: Any) -> bool:
        decisions.append(decide(self, *args))
        return decisions[-1]

    monkeypatch.setattr(attach_compaction.AttachedRun, "_small_range", small_range)
    rows = random_log(seed, 60)
    source = connect_table(lake.catalog, "sink.random")
    settings = {"compaction.null-key": null_key}
    attach_table(lake, "lake.incremental", table="sink.random", layout="kafka-connect",
                 key_columns=["id", "region"], config=settings)
    modes = []
    for lo, hi in ((0, 25), (25, 26), (26, 40), (40, 60)):
        source.append(connect_rows(source, rows[lo:hi]))
        modes.append(compact_attached(lake, "lake.incremental", now_ms=BASE_MS + hi).stats["mode"])
    assert modes[:2] == ["rewrite", "incremental"]  # the first run writes the view; the next ones delete and add
    assert [d for d, m in zip(decisions, modes, strict=True) if m == "incremental"] == \
        [small] * modes.count("incremental")
    attach_table(lake, "lake.full", table="sink.random", layout="kafka-connect", key_columns=["id", "region"],
                 config=settings)
    compact_attached(lake, "lake.full", now_ms=BASE_MS + 60)
    incremental = list(read_attached(lake, "lake.incremental", read_compacted=True))
    full = list(read_attached(lake, "lake.full", read_compacted=True))
    assert incremental == full
    assert [(r["partition"], r["offset"]) for r in full] == model(rows, null_key == "retain")
    tombstones = {(r["_kafka_metadata_partition"], r["_kafka_metadata_offset"]) for r in rows if r["amount"] is None}
    assert {(r["partition"], r["offset"]) for r in full if r["value"] is None} <= tombstones
