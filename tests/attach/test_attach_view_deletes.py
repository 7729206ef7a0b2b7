"""An incremental run of an attached log writes only the range's winners and position deletes of the view rows
they replace or that expire; the view's earlier files stay as they were; Spark and pyiceberg read the view with
its deletes alike; a rewrite once deletes pile up; ``min.compaction.lag.ms``; a run that fails or loses the
cursor race publishes nothing and leaves no file behind; a killed run leaves the previous cursor."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from compactor import attach_table, compact_attached, failpoints, read_attached
from compactor.attach.cursor import current_cursor
from compactor.attach.registry import OFFSET, PARTITION, load_attached
from compactor.attach.status import attached_retention
from compactor.errors import CommitConflictError, InjectedFailureError
from compactor.lake import Lake
from tests.attach.sources import BASE_MS, connect_rows, connect_table, location_path

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]


def row(id_: str | None, amount: int | None, p: int, o: int) -> dict[str, Any]:
    """A sink row keyed by ``id`` (its values ``region`` and ``amount``: a tombstone when ``amount`` is None)."""
    return {"id": id_, "region": None if amount is None else "eu", "amount": amount,
            "_kafka_metadata_partition": p, "_kafka_metadata_offset": o, "_kafka_metadata_timestamp": BASE_MS + o}


def view_files(lake: Lake, name: str) -> tuple[set[str], set[str]]:
    """The data files and delete files of the view's current snapshot."""
    attached = load_attached(lake.catalog, name)
    assert attached is not None
    tasks = list(attached.view.scan().plan_files())
    return {t.file.file_path for t in tasks}, {d.file_path for t in tasks for d in t.delete_files}


def pyiceberg_rows(lake: Lake, name: str) -> list[tuple[int, int]]:
    """(partition, offset) of the view's rows as pyiceberg reads them (position deletes applied)."""
    attached = load_attached(lake.catalog, name)
    assert attached is not None
    table = attached.view.scan(selected_fields=(PARTITION, OFFSET)).to_arrow()
    return sorted(zip(table[PARTITION].to_pylist(), table[OFFSET].to_pylist(), strict=True))


def spark_rows(lake: Lake, name: str) -> list[tuple[int, int]]:
    attached = load_attached(lake.catalog, name)
    assert attached is not None
    cursor = current_cursor(attached.view)
    assert cursor is not None
    return sorted((r["partition"], r["offset"]) for r in read_attached(lake, name, read_compacted=True)
                  if r["offset"] < cursor.horizons[r["partition"]])


def run_directories(lake: Lake, name: str) -> set[str]:
    """The run directories of the view that hold files."""
    attached = load_attached(lake.catalog, name)
    assert attached is not None
    data = location_path(attached.view) / "data"
    return {p.name for p in data.iterdir() if any(f.is_file() for f in p.rglob("*"))} if data.exists() else set()


def test_an_incremental_run_adds_the_winners_and_position_deletes_only(lake: Lake, spark: object) -> None:
    source = connect_table(lake.catalog, "sink.inc")
    source.append(connect_rows(source, [row(k, i, i % 2, i) for i, k in enumerate("abcdefghijklmnopqrst")]))
    attach_table(lake, "lake.inc", table="sink.inc", layout="kafka-connect", key_columns=["id"],
                 config={"delete.retention.ms": "100"})
    first = compact_attached(lake, "lake.inc", now_ms=BASE_MS)
    assert first.stats["mode"] == "rewrite" and first.stats["records_kept"] == 20
    before, no_deletes = view_files(lake, "lake.inc")
    assert no_deletes == set()
    # a new value for a (p0) and c (p0), a tombstone for b (p1), a new key z
    source.append(connect_rows(source, [row("a", 10, 0, 20), row("b", None, 1, 21), row("c", 11, 0, 22),
                                        row("z", 12, 1, 23)]))
    second = compact_attached(lake, "lake.inc", now_ms=BASE_MS + 1)
    assert second.stats["mode"] == "incremental" and second.stats["records_read"] == 4
    assert second.stats["position_deletes"] == 3 and second.stats["records_kept"] == 21
    after, deletes = view_files(lake, "lake.inc")
    assert before < after and len(deletes) >= 1  # the first run's files stay; the new rows are added beside them
    expected = sorted([(0, o) for o in range(4, 23, 2)] + [(1, o) for o in range(3, 24, 2)])
    assert pyiceberg_rows(lake, "lake.inc") == spark_rows(lake, "lake.inc") == expected
    # no new rows, the tombstone's delete horizon passed: a run only position-deletes it
    third = compact_attached(lake, "lake.inc", now_ms=BASE_MS + 200)
    assert third.committed and third.stats["mode"] == "incremental" and third.stats["records_read"] == 0
    assert third.stats["position_deletes"] == 1 and third.stats["tombstones_kept"] == 0
    assert pyiceberg_rows(lake, "lake.inc") == spark_rows(lake, "lake.inc") == [e for e in expected if e != (1, 21)]
    assert not compact_attached(lake, "lake.inc", now_ms=BASE_MS + 300).committed  # nothing left to do


def test_a_rewrite_once_deletes_pile_up_and_min_compaction_lag(lake: Lake, spark: object) -> None:
    source = connect_table(lake.catalog, "sink.churn")
    attach_table(lake, "lake.churn", table="sink.churn", layout="kafka-connect", key_columns=["id"],
                 config={"min.compaction.lag.ms": "50"})
    modes = []
    for step in range(3):  # each step replaces every key: deletes reach the view's live rows by the third run
        source.append(connect_rows(source, [row(k, step, 0, step * 4 + i) for i, k in enumerate("abcd")]))
        result = compact_attached(lake, "lake.churn", now_ms=BASE_MS + step * 4 + 100)
        modes.append(result.stats["mode"])
    assert modes == ["rewrite", "incremental", "rewrite"]
    assert "position deletes" in result.stats["rewrite_reason"]
    _, deletes = view_files(lake, "lake.churn")
    assert deletes == set() and pyiceberg_rows(lake, "lake.churn") == [(0, 8), (0, 9), (0, 10), (0, 11)]
    # offsets 12..15 at BASE_MS+12..15: at now = BASE_MS + 63, only those older than now - 50 (12) are compacted
    source.append(connect_rows(source, [row(k, 9, 0, 12 + i) for i, k in enumerate("abcd")]))
    lagged = compact_attached(lake, "lake.churn", now_ms=BASE_MS + 63)
    assert lagged.horizons == {"0": 14} and lagged.stats["records_read"] == 2
    assert pyiceberg_rows(lake, "lake.churn") == [(0, 10), (0, 11), (0, 12), (0, 13)]
    assert [r["offset"] for r in read_attached(lake, "lake.churn", read_compacted=True)] == [10, 11, 12, 13, 14, 15]


def test_a_failed_or_outraced_run_publishes_nothing_and_leaves_no_file(lake: Lake, spark: object) -> None:
    source = connect_table(lake.catalog, "sink.fail")
    source.append(connect_rows(source, [row(k, i, 0, i) for i, k in enumerate("abc")]))
    attach_table(lake, "lake.fail", table="sink.fail", layout="kafka-connect", key_columns=["id"])
    compact_attached(lake, "lake.fail", now_ms=BASE_MS)
    source.append(connect_rows(source, [row("a", 5, 0, 3)]))
    published = current_cursor(load_attached(lake.catalog, "lake.fail").view)  # type: ignore[union-attr]
    runs = run_directories(lake, "lake.fail")
    for point in ("after-write", "before-commit"):
        with failpoints.enabled(f"{point}=raise"), pytest.raises(InjectedFailureError):
            compact_attached(lake, "lake.fail", now_ms=BASE_MS + 1)
        assert current_cursor(load_attached(lake.catalog, "lake.fail").view) == published  # type: ignore[union-attr]
        assert run_directories(lake, "lake.fail") == runs
    # another run publishes while this one is about to commit: this one loses, its files go
    raced: list[int] = []

    def publish_first() -> None:
        if not raced:
            raced.append(1)
            assert compact_attached(lake, "lake.fail", now_ms=BASE_MS + 2).committed

    with failpoints.enabled({"before-commit": publish_first}), pytest.raises(CommitConflictError, match="moved"):
        compact_attached(lake, "lake.fail", now_ms=BASE_MS + 1)
    assert len(run_directories(lake, "lake.fail")) == len(runs) + 1  # the winner's run only
    assert pyiceberg_rows(lake, "lake.fail") == [(0, 1), (0, 2), (0, 3)]


@pytest.mark.slow  # a JVM of its own
def test_a_killed_run_leaves_the_previous_cursor(lake: Lake, spark: object) -> None:
    source = connect_table(lake.catalog, "sink.kill")
    source.append(connect_rows(source, [row(k, i, 0, i) for i, k in enumerate("abc")]))
    attach_table(lake, "lake.kill", table="sink.kill", layout="kafka-connect", key_columns=["id"])
    compact_attached(lake, "lake.kill", now_ms=BASE_MS)
    source.append(connect_rows(source, [row("a", 5, 0, 3), row("b", None, 0, 4)]))
    before = current_cursor(load_attached(lake.catalog, "lake.kill").view)  # type: ignore[union-attr]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COMPACTOR_WAREHOUSE": str(lake.config.warehouse),
           "COMPACTOR_CATALOG_NAME": lake.config.catalog_name, failpoints.ENV: "before-commit=exit"}
    killed = subprocess.run([sys.executable, "-m", "compactor.cli.main", "compact", "lake.kill", "--now-ms",
                             str(BASE_MS + 1)], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert killed.returncode == 137, killed.stderr[-2000:]
    assert current_cursor(load_attached(lake.catalog, "lake.kill").view) == before  # type: ignore[union-attr]
    assert pyiceberg_rows(lake, "lake.kill") == [(0, 0), (0, 1), (0, 2)]
    assert len(run_directories(lake, "lake.kill")) == 2  # the killed run's files: never referenced
    assert compact_attached(lake, "lake.kill", now_ms=BASE_MS + 2).committed
    assert pyiceberg_rows(lake, "lake.kill") == [(0, 2), (0, 3), (0, 4)]
    attached = load_attached(lake.catalog, "lake.kill")
    assert attached is not None
    later = BASE_MS + 2 + attached.settings.orphan_min_age_ms + attached.settings.cursor_retain_ms
    attached_retention(attached, lake.config, now_ms=later)
    assert len(run_directories(lake, "lake.kill")) == 2  # the killed run's directory went; both live runs stay


def test_a_partition_that_appears_later_is_compacted_from_its_first_offset(lake: Lake, spark: object) -> None:
    """A source partition the cursor does not know yet (a Kafka partition added later) is compacted from its
    first offset, even below every other partition's horizon."""
    source = connect_table(lake.catalog, "sink.grown")
    source.append(connect_rows(source, [row(f"k{o % 3}", o, 0, o) for o in range(10)]))
    attach_table(lake, "lake.grown", table="sink.grown", layout="kafka-connect", key_columns=["id"])
    assert compact_attached(lake, "lake.grown", now_ms=BASE_MS).horizons == {"0": 10}
    source.append(connect_rows(source, [row("x", 1, 1, 0), row("y", 2, 1, 1), row("x", 3, 1, 2)]))
    result = compact_attached(lake, "lake.grown", now_ms=BASE_MS)
    assert result.horizons == {"0": 10, "1": 3} and result.stats["records_read"] == 3
    attached = load_attached(lake.catalog, "lake.grown")
    assert attached is not None
    view = attached.view.scan(selected_fields=(PARTITION, OFFSET, "id")).to_arrow().to_pylist()
    assert sorted((r[PARTITION], r[OFFSET], r["id"]) for r in view) == [
        (0, 7, "k1"), (0, 8, "k2"), (0, 9, "k0"), (1, 1, "y"), (1, 2, "x")]


def test_the_filter_for_partitions_without_a_horizon_is_one_iceberg_prunes_files_by(spark: object) -> None:
    """Partitions without a horizon are picked by ranges, a null test and the gaps, never ``NOT IN``: Iceberg
    cannot skip a data file by a ``NOT IN`` whose values its partition bounds span, so an incremental run with
    it read the whole source (2.4x a native run at 5M records; bench/README.md, "Attached logs")."""
    from pyspark.sql import functions as F

    from compactor.attach.frames import unknown_partition

    contiguous = str(unknown_partition(F.col("p"), {0: 5, 1: 7, 2: 1}))
    assert "NOT" not in contiguous.upper() and " IN " not in contiguous.upper(), contiguous
    assert "p < 0" in contiguous and "p > 2" in contiguous and "p IS NULL" in contiguous
    with_gap = str(unknown_partition(F.col("p"), {0: 5, 3: 2}))
    assert "NOT" not in with_gap.upper() and "p IN (1, 2)" in with_gap, with_gap
