"""Compaction benchmark (BENCHMARK.md): full and incremental runs, side by side with the naive job and the
scan floor, in one Spark session, several repetitions, medians and ranges.

    .venv/bin/python -m bench.compaction_bench                 # the standard workload, 3 repetitions
    .venv/bin/python -m bench.compaction_bench --records 500000 --keys 50000 --repeats 1 --history 1

Figures:
  naive        row_number() OVER (PARTITION BY partition, key ORDER BY offset DESC) = 1 over the whole raw
               table, written to an Iceberg table
  floor        read the raw table once and write as many rows as compaction keeps, no shuffle
  full         the product's first compaction of the workload
  incremental  the product's run after appending 1% more records (from the same cursor each repetition)
  history      incremental after the same 1% append on 2x and 4x the history (should stay flat)
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.workload import BASE_TIME_MS, Workload, append
from compactor.compaction.job import TwoPhaseCompactor
from compactor.iceberg.commits import RefMove, commit
from compactor.lake import Lake
from compactor.spark.session import get_or_create_session


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def summarise(values: list[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "runs": [round(v, 3) for v in values]}


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.workdir = Path(args.workdir).resolve()
        if self.workdir.exists():
            shutil.rmtree(self.workdir)
        self.lake = Lake(warehouse=str(self.workdir / "warehouse"))
        self.spark = get_or_create_session(self.lake.config, extra={
            "spark.master": f"local[{args.cores}]",
            "spark.driver.memory": args.driver_memory,
            "spark.sql.shuffle.partitions": str(args.shuffle_partitions),
            "spark.ui.enabled": "false",
        })
        self.lake.attach_spark(self.spark)
        self.catalog = self.lake.config.catalog_name
        self.now = BASE_TIME_MS + 10**10

    def settle(self) -> None:
        """Start every timed figure from the same state: a full JVM garbage collection first.

        Without it a figure pays for the garbage of the one before (the naive job leaves the most), so the
        order of the figures biased them.
        """
        self.spark.sparkContext._jvm.System.gc()  # type: ignore[union-attr]
        time.sleep(0.2)

    def log(self, message: str) -> None:
        print(f"[bench] {message}", flush=True)

    def make_topic(self, name: str, workload: Workload) -> None:
        self.lake.catalog.create_namespace_if_not_exists("bench")
        topic = self.lake.create_topic(name, partitions=workload.partitions, config={"cleanup.policy": "compact"})
        started = time.perf_counter()
        append(topic, workload, workload.records, workload.seed)
        self.log(f"{name}: {workload.records:,} records written in {time.perf_counter() - started:.1f}s")

    # --- the figures ---------------------------------------------------------------------------------------

    def naive(self, raw: str) -> float:
        self.spark.sql(f"DROP TABLE IF EXISTS {self.catalog}.bench.naive PURGE")
        self.spark.sql(f"CREATE TABLE {self.catalog}.bench.naive USING iceberg PARTITIONED BY (partition) "
                       f"TBLPROPERTIES ('write.distribution-mode'='none') AS SELECT * FROM {self.catalog}.{raw} "
                       "WHERE false")
        query = (f"INSERT INTO {self.catalog}.bench.naive SELECT partition, offset, timestamp, key, value, headers "
                 f"FROM (SELECT *, row_number() OVER (PARTITION BY partition, key ORDER BY offset DESC) AS rn "
                 f"FROM {self.catalog}.{raw}) WHERE rn = 1")
        return timed(lambda: self.spark.sql(query))[0]

    def floor(self, raw: str, fraction: float) -> float:
        self.spark.sql(f"DROP TABLE IF EXISTS {self.catalog}.bench.floor PURGE")
        self.spark.sql(f"CREATE TABLE {self.catalog}.bench.floor USING iceberg PARTITIONED BY (partition) "
                       f"TBLPROPERTIES ('write.distribution-mode'='none') AS SELECT * FROM {self.catalog}.{raw} "
                       "WHERE false")
        query = (f"INSERT INTO {self.catalog}.bench.floor SELECT * FROM {self.catalog}.{raw} "
                 f"WHERE rand(7) < {fraction}")
        return timed(lambda: self.spark.sql(query))[0]

    def full(self, raw: str) -> tuple[float, dict[str, Any]]:
        compacted = f"{raw}__compacted"
        if self.lake.catalog.table_exists(compacted):
            self.lake.catalog.purge_table(compacted)
        seconds, result = timed(lambda: TwoPhaseCompactor(self.lake, raw, now_ms=self.now).run())
        assert result.committed
        return seconds, result.stats

    def incremental(self, raw: str, start_cursor: int) -> tuple[float, dict[str, Any]]:
        table = self.lake.catalog.load_table(f"{raw}__compacted")
        current = table.metadata.refs["main"].snapshot_id
        if current != start_cursor:  # start every repetition from the same cursor
            commit(self.lake.catalog, table, snapshot=None, moves=[RefMove("main", start_cursor)],
                   expect={"main": current}, what="resetting the benchmark cursor")
        seconds, result = timed(lambda: TwoPhaseCompactor(self.lake, raw, now_ms=self.now + 1).run())
        assert result.committed
        return seconds, result.stats

    # --- the run ---------------------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        a = self.args
        base = Workload(records=a.records, partitions=a.partitions, keys_per_partition=a.keys)
        raw = "bench.t1"
        self.make_topic(raw, base)
        self.log("warm-up (an untimed full compaction and scan floor, so the JVM has compiled their code paths)")
        _, full_stats = self.full(raw)
        fraction = full_stats["records_kept"] / full_stats["records_read"]
        self.floor(raw, fraction)
        figures: dict[str, list[float]] = {"naive": [], "floor": [], "full": [], "incremental": []}
        ratios: dict[str, list[float]] = {"full/floor": [], "full/naive": [], "incremental/full": []}
        steps: dict[str, Callable[[], float]] = {"full": lambda: self.full(raw)[0],
                                                 "floor": lambda: self.floor(raw, fraction)}
        if not a.skip_naive:
            steps["naive"] = lambda: self.naive(raw)
        order = list(steps)
        for rep in range(a.repeats):
            # rotate the order each repetition, so no figure always follows the same one
            for name in order[rep % len(order):] + order[:rep % len(order)]:
                self.settle()
                figures[name].append(steps[name]())
            self.log(f"rep {rep + 1}: " + " ".join(f"{name} {figures[name][-1]:.2f}s" for name in order))
        cursor = self.lake.catalog.load_table(f"{raw}__compacted").metadata.refs["main"].snapshot_id
        append(self.lake.topic(raw), base, int(a.records * a.append_share), seed=99)
        incremental_stats: dict[str, Any] = {}
        self.incremental(raw, cursor)  # warm-up
        for rep in range(a.repeats):
            self.settle()
            seconds, incremental_stats = self.incremental(raw, cursor)
            figures["incremental"].append(seconds)
            self.log(f"rep {rep + 1}: incremental {seconds:.2f}s")
        for rep in range(a.repeats):
            ratios["full/floor"].append(figures["full"][rep] / figures["floor"][rep])
            if figures["naive"]:
                ratios["full/naive"].append(figures["full"][rep] / figures["naive"][rep])
            ratios["incremental/full"].append(figures["incremental"][rep] / figures["full"][rep])
        history: dict[str, dict[str, Any]] = {"1x": summarise(figures["incremental"])}
        for multiplier in [m for m in a.history if m > 1]:
            name = f"bench.t{multiplier}"
            bigger = Workload(records=a.records * multiplier, partitions=a.partitions,
                              keys_per_partition=a.keys, seed=multiplier)
            self.make_topic(name, bigger)
            seconds, _ = self.full(name)
            self.log(f"{name}: first compaction {seconds:.1f}s")
            start = self.lake.catalog.load_table(f"{name}__compacted").metadata.refs["main"].snapshot_id
            append(self.lake.topic(name), bigger, int(a.records * a.append_share), seed=199)
            self.incremental(name, start)  # warm-up
            runs = []
            for _ in range(a.repeats):
                self.settle()
                runs.append(self.incremental(name, start)[0])
            history[f"{multiplier}x"] = {**summarise(runs), "first_compaction_seconds": round(seconds, 3)}
            self.log(f"{name}: incremental {statistics.median(runs):.2f}s (median)")
        return {
            "workload": base.__dict__,
            "append_share": a.append_share,
            "machine": {"cores": a.cores, "driver_memory": a.driver_memory},
            "seconds": {k: summarise(v) for k, v in figures.items() if v},
            "ratios": {k: summarise(v) for k, v in ratios.items() if v},
            "history_incremental_seconds": history,
            "full_stats": full_stats,
            "incremental_stats": incremental_stats,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description="compaction benchmark (see bench/README.md)")
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--keys", type=int, default=500_000, help="keys per partition")
    parser.add_argument("--append-share", type=float, default=0.01)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--history", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4])
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--shuffle-partitions", type=int, default=8)
    parser.add_argument("--skip-naive", action="store_true")
    parser.add_argument("--workdir", default="bench/data/compaction")
    parser.add_argument("--out", default="bench/results/compaction.json")
    args = parser.parse_args()
    result = Bench(args).run()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps({"seconds": result["seconds"], "ratios": result["ratios"],
                      "history_incremental_seconds": result["history_incremental_seconds"]}, indent=2))


if __name__ == "__main__":
    main()
