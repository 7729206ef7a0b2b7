"""An attached log's small incremental runs (``attach.compaction.SMALL_RANGE_ROWS``): which runs count as small, and
that the settings they run with stay on the job session only for the run. That they compact as every other run
does is ``test_attach_incremental``'s incremental = full property, taken on both paths."""

from __future__ import annotations

from typing import Any

import pytest

from compactor import attach_table, compact_attached
from compactor.attach import compaction as attach_compaction
from compactor.lake import Lake
from tests.attach.sources import BASE_MS, connect_rows, connect_table

pytestmark = pytest.mark.spark
AQE, SHUFFLE = "spark.sql.adaptive.enabled", "spark.sql.shuffle.partitions"


def rows(start: int, count: int, keys: int = 3) -> list[dict[str, Any]]:
    return [{"id": f"k{o % keys}", "region": "eu", "amount": o, "_kafka_metadata_partition": 0,
             "_kafka_metadata_offset": o, "_kafka_metadata_timestamp": BASE_MS + o}
            for o in range(start, start + count)]


def spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, str | None, str | None]]:
    """Each run's decision, and the job session's adaptive and shuffle settings while it compacted."""
    seen: list[tuple[bool, str | None, str | None]] = []
    decide, compact = attach_compaction.AttachedRun._small_range, attach_compaction.AttachedRun._compact

    def small_range(self: Any, *args: Any) -> bool:
        seen.append((decide(self, *args), None, None))
        return seen[-1][0]

    def during(self: Any, spark: Any, *args: Any) -> Any:
        seen[-1] = (seen[-1][0], spark.conf.get(AQE, None), spark.conf.get(SHUFFLE, None))
        return compact(self, spark, *args)

    monkeypatch.setattr(attach_compaction.AttachedRun, "_small_range", small_range)
    monkeypatch.setattr(attach_compaction.AttachedRun, "_compact", during)
    return seen


def test_a_small_range_runs_in_one_partition_and_the_session_is_put_back(lake: Lake, spark: object,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    source = connect_table(lake.catalog, "sink.small")
    attach_table(lake, "lake.small", table="sink.small", layout="kafka-connect", key_columns=["id"])
    seen = spy(monkeypatch)
    job = lake.job_spark()
    source.append(connect_rows(source, rows(0, 6)))
    compact_attached(lake, "lake.small", now_ms=BASE_MS + 10)
    before = (job.conf.get(AQE, None), job.conf.get(SHUFFLE, None))
    source.append(connect_rows(source, rows(6, 4)))
    assert compact_attached(lake, "lake.small", now_ms=BASE_MS + 20).stats["mode"] == "incremental"
    assert seen == [(False, *before), (True, "false", "1")]  # the first run writes the whole view: not small
    assert (job.conf.get(AQE, None), job.conf.get(SHUFFLE, None)) == before


def test_what_bounds_a_small_range(lake: Lake, spark: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """Small: the rows the source's snapshots added since the cursor's are at most the limit. Not small: more
    rows than that, rows held back by ``min.compaction.lag.ms``, or a cursor whose source snapshot expired."""
    monkeypatch.setattr(attach_compaction, "SMALL_RANGE_ROWS", 5)
    seen = spy(monkeypatch)
    source = connect_table(lake.catalog, "sink.bounds")
    attach_table(lake, "lake.bounds", table="sink.bounds", layout="kafka-connect", key_columns=["id"])
    fresh = 1000  # every row a new key: no run deletes a view row, so none is a rewrite for that reason
    source.append(connect_rows(source, rows(0, 10, fresh)))
    modes = [compact_attached(lake, "lake.bounds", now_ms=BASE_MS + 100).stats["mode"]]
    source.append(connect_rows(source, rows(10, 3, fresh)))
    source.append(connect_rows(source, rows(13, 2, fresh)))  # two snapshots, five rows: at the limit
    modes.append(compact_attached(lake, "lake.bounds", now_ms=BASE_MS + 100).stats["mode"])
    source.append(connect_rows(source, rows(15, 6, fresh)))  # six rows: past it
    modes.append(compact_attached(lake, "lake.bounds", now_ms=BASE_MS + 100).stats["mode"])
    source = lake.catalog.load_table("sink.bounds")
    current = source.current_snapshot()
    assert current is not None
    source.append(connect_rows(source, rows(21, 1, fresh)))
    source = lake.catalog.load_table("sink.bounds")
    source.maintenance.expire_snapshots().by_ids([current.snapshot_id]).commit()  # the cursor's source snapshot
    modes.append(compact_attached(lake, "lake.bounds", now_ms=BASE_MS + 100).stats["mode"])
    assert modes == ["rewrite", "incremental", "incremental", "incremental"]
    assert [small for small, _, _ in seen] == [False, True, False, False]

    attach_table(lake, "lake.lagging", table="sink.bounds", layout="kafka-connect", key_columns=["id"],
                 config={"min.compaction.lag.ms": "1"})
    compact_attached(lake, "lake.lagging", now_ms=BASE_MS + 100)
    source = lake.catalog.load_table("sink.bounds")
    source.append(connect_rows(source, rows(22, 1, fresh)))
    compact_attached(lake, "lake.lagging", now_ms=BASE_MS + 100)
    assert [small for small, _, _ in seen[4:]] == [False, False]
