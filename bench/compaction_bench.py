"""Compaction benchmark (BENCHMARK.md): full and incremental runs, side by side with the naive job and the scan
floor, for 1 and 4 topic partitions with the same records and keys, in one Spark application, several
repetitions, medians and ranges, and the parallelism of every stage that reads the raw log or the view, from
Spark's event log.

    .venv/bin/python -m bench.compaction_bench                 # the standard workload, partitions 1 and 4
    .venv/bin/python -m bench.compaction_bench --records 500000 --keys 200000 --repeats 1 --history 1   # quick

Figures, per partition count:
  naive        row_number() OVER (PARTITION BY partition, key ORDER BY offset DESC) = 1 over the whole raw
               table, written to an Iceberg table (the caller's session, Spark's defaults)
  floor        read the raw table once and write as many rows as compaction keeps, no shuffle
  full         the product's first compaction of the workload (layout chosen by cost)
  incremental  the product's run after appending 0.25%, 1% and 5% more records (``--append-shares``), each from
               the same cursor every repetition, side by side with the `MERGE INTO` a user would keep instead,
               copy-on-write and merge-on-read, each from the same snapshot (bench.merge_anchor)
  history      incremental after the same 1% append on 2x and 4x the history (should stay flat)
  layouts      (--compare-layouts) the full run forced to each layout, to measure their relative cost
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.eventlog import StageFigures, read_stages, reading_stages, task_cpu_ms
from bench.merge_anchor import cpu_figures, incremental_figures
from bench.workload import BASE_TIME_MS, Workload, append
from compactor.compaction.job import TwoPhaseCompactor
from compactor.iceberg.commits import RefMove, commit
from compactor.lake import Lake
from compactor.spark.session import get_or_create_session

STANDARD_PARTITIONS = 4
STANDARD_SHARE = 0.01  # BENCHMARK.md's incremental run: 1% more records


def process_cpu_seconds(jvm_pid: int) -> float:
    """CPU seconds so far of the Spark driver's JVM (in local mode, the executors too: every task, the planning,
    the commits, the garbage collector) plus this Python process: the work of a figure whatever other processes
    do to its wall time."""
    ticks = os.sysconf("SC_CLK_TCK")
    fields = Path(f"/proc/{jvm_pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / ticks + time.process_time()


def summarise(values: list[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "runs": [round(v, 3) for v in values]}


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.workdir = Path(args.workdir).resolve()
        if self.workdir.exists():
            shutil.rmtree(self.workdir)
        events = self.workdir / "events"
        events.mkdir(parents=True)
        self.lake = Lake(warehouse=str(self.workdir / "warehouse"))
        self.lake.open(create=True)  # a new lake (its Spark catalog opens only on a lake that exists)
        self.spark = get_or_create_session(self.lake.config, extra={
            "spark.master": f"local[{args.cores}]",
            "spark.driver.memory": args.driver_memory,
            "spark.sql.shuffle.partitions": str(args.shuffle_partitions),
            "spark.ui.enabled": "false",
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": events.as_uri(),
        })
        self.lake.attach_spark(self.spark)
        self.events = events
        self.catalog = self.lake.config.catalog_name
        self.now = BASE_TIME_MS + 10**10
        self.windows: list[tuple[str, int, int]] = []  # (figure, start ms, end ms): stages are matched by time
        self.process_cpu: dict[str, float] = {}  # figure -> CPU seconds of the JVM and this process
        self.jvm_pid = int(self.spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[union-attr]

    def timed(self, label: str, fn: Callable[[], Any]) -> tuple[float, Any]:
        """Run ``fn`` after a JVM garbage collection (so no figure pays for the last one's garbage); its process
        CPU time (the driver's JVM, executors included in local mode, and this Python process) goes into
        ``self.process_cpu``."""
        self.spark.sparkContext._jvm.System.gc()  # type: ignore[union-attr]
        time.sleep(0.2)
        start_ms = int(time.time() * 1000)
        cpu = process_cpu_seconds(self.jvm_pid)
        started = time.perf_counter()
        result = fn()
        seconds = time.perf_counter() - started
        self.process_cpu[label] = process_cpu_seconds(self.jvm_pid) - cpu
        self.windows.append((label, start_ms, int(time.time() * 1000)))
        return seconds, result

    def log(self, message: str) -> None:
        print(f"[bench] {message}", flush=True)

    def make_topic(self, name: str, workload: Workload) -> None:
        self.lake.catalog.create_namespace_if_not_exists("bench")
        # delete.retention.ms=0: tombstones go in the run that meets them, as the `MERGE INTO` anchor deletes them
        topic = self.lake.create_topic(name, partitions=workload.partitions,
                                       config={"cleanup.policy": "compact", "delete.retention.ms": "0"})
        started = time.perf_counter()
        append(topic, workload, workload.records, workload.seed)
        self.log(f"{name}: {workload.records:,} records in {workload.partitions} partition(s), "
                 f"{workload.keys_per_partition * workload.partitions:,} keys, written in "
                 f"{time.perf_counter() - started:.1f}s")

    # --- the figures ---------------------------------------------------------------------------------------

    def _fresh(self, table: str, raw: str) -> None:
        self.spark.sql(f"DROP TABLE IF EXISTS {self.catalog}.bench.{table} PURGE")
        self.spark.sql(f"CREATE TABLE {self.catalog}.bench.{table} USING iceberg PARTITIONED BY (partition) "
                       f"TBLPROPERTIES ('write.distribution-mode'='none') AS SELECT * FROM {self.catalog}.{raw} "
                       "WHERE false")

    def naive(self, raw: str, label: str) -> float:
        self._fresh("naive", raw)
        query = (f"INSERT INTO {self.catalog}.bench.naive SELECT partition, offset, timestamp, key, value, headers "
                 f"FROM (SELECT *, row_number() OVER (PARTITION BY partition, key ORDER BY offset DESC) AS rn "
                 f"FROM {self.catalog}.{raw}) WHERE rn = 1")
        return self.timed(label, lambda: self.spark.sql(query))[0]

    def floor(self, raw: str, fraction: float, label: str) -> float:
        self._fresh("floor", raw)
        query = (f"INSERT INTO {self.catalog}.bench.floor SELECT * FROM {self.catalog}.{raw} "
                 f"WHERE rand(7) < {fraction}")
        return self.timed(label, lambda: self.spark.sql(query))[0]

    def full(self, raw: str, label: str, layout: str | None = None) -> tuple[float, dict[str, Any]]:
        compacted = f"{raw}__compacted"
        if self.lake.catalog.table_exists(compacted):
            self.lake.catalog.purge_table(compacted)
        seconds, result = self.timed(label, lambda: TwoPhaseCompactor(self.lake, raw, now_ms=self.now,
                                                                      layout=layout).run())
        assert result.committed
        return seconds, result.stats.as_json()

    def incremental(self, raw: str, start_cursor: int, label: str) -> tuple[float, dict[str, Any]]:
        table = self.lake.catalog.load_table(f"{raw}__compacted")
        current = table.metadata.refs["main"].snapshot_id
        if current != start_cursor:  # start every repetition from the same cursor
            commit(self.lake.catalog, table, snapshot=None, moves=[RefMove("main", start_cursor)],
                   expect={"main": current}, what="resetting the benchmark cursor")
        seconds, result = self.timed(label, lambda: TwoPhaseCompactor(self.lake, raw, now_ms=self.now + 1).run())
        assert result.committed
        return seconds, result.stats.as_json()

    def cursor_of(self, raw: str) -> int:
        return int(self.lake.catalog.load_table(f"{raw}__compacted").metadata.refs["main"].snapshot_id)

    # --- one partition count --------------------------------------------------------------------------------

    def run_partitions(self, partitions: int) -> dict[str, Any]:
        a = self.args
        base = Workload(records=a.records, partitions=partitions, keys_per_partition=a.keys // partitions)
        raw = f"bench.p{partitions}x1"
        self.make_topic(raw, base)
        tag = f"p{partitions}"
        self.log(f"{tag}: warm-up (an untimed full compaction and scan floor)")
        _, full_stats = self.full(raw, f"{tag}:warmup")
        fraction = full_stats["records_kept"] / full_stats["records_read"]
        self.floor(raw, fraction, f"{tag}:warmup")
        figures: dict[str, list[float]] = {"naive": [], "floor": [], "full": []}
        steps: dict[str, Callable[[int], float]] = {
            "full": lambda rep: self.full(raw, f"{tag}:full:{rep}")[0],
            "floor": lambda rep: self.floor(raw, fraction, f"{tag}:floor:{rep}")}
        if not a.skip_naive:
            steps["naive"] = lambda rep: self.naive(raw, f"{tag}:naive:{rep}")
        order = list(steps)
        for rep in range(a.repeats):
            for name in order[rep % len(order):] + order[:rep % len(order)]:  # rotate: no fixed predecessor
                figures[name].append(steps[name](rep))
            self.log(f"{tag} rep {rep + 1}: " + " ".join(f"{n} {figures[n][-1]:.2f}s" for n in order))
        layouts: dict[str, Any] = {}
        if a.compare_layouts:
            for layout in ("partitioned", "sliced"):
                runs = [self.full(raw, f"{tag}:layout-{layout}:{rep}", layout)[0] for rep in range(a.repeats)]
                layouts[layout] = summarise(runs)
                self.log(f"{tag} full run forced {layout}: {statistics.median(runs):.2f}s")
            self.full(raw, f"{tag}:restore")
        ratios: dict[str, list[float]] = {"full/floor": [], "full/naive": []}
        for rep in range(a.repeats):
            ratios["full/floor"].append(figures["full"][rep] / figures["floor"][rep])
            if figures["naive"]:
                ratios["full/naive"].append(figures["full"][rep] / figures["naive"][rep])
        incremental = incremental_figures(self, raw, base, tag)
        standard = incremental.get(f"{STANDARD_SHARE:g}")
        history: dict[str, Any] = {"1x": standard["seconds"]["incremental"]} if standard else {}
        for multiplier in [m for m in a.history if m > 1]:
            history[f"{multiplier}x"] = self.history(partitions, multiplier)
        return {"workload": base.__dict__, "seconds": {k: summarise(v) for k, v in figures.items() if v},
                "ratios": {k: summarise(v) for k, v in ratios.items() if v}, "history_incremental_seconds": history,
                "incremental": incremental, "forced_layouts_full_seconds": layouts, "full_stats": full_stats}

    def history(self, partitions: int, multiplier: int) -> dict[str, Any]:
        a = self.args
        name = f"bench.p{partitions}x{multiplier}"
        bigger = Workload(records=a.records * multiplier, partitions=partitions,
                          keys_per_partition=a.keys // partitions, seed=multiplier)
        self.make_topic(name, bigger)
        seconds, _ = self.full(name, f"p{partitions}:history{multiplier}:first")
        start = self.cursor_of(name)
        append(self.lake.topic(name), bigger, int(a.records * STANDARD_SHARE), seed=199)
        self.incremental(name, start, f"p{partitions}:history{multiplier}:warmup")
        runs = [self.incremental(name, start, f"p{partitions}:history{multiplier}:{rep}")[0]
                for rep in range(a.repeats)]
        self.log(f"{name}: first compaction {seconds:.1f}s, incremental {statistics.median(runs):.2f}s (median)")
        return {**summarise(runs), "first_compaction_seconds": round(seconds, 3)}

    def stages(self) -> list[StageFigures]:
        """Every stage of the application, from its event log (complete once the application stopped)."""
        logs = [p for p in self.events.iterdir() if not p.name.endswith(".inprogress")]
        return read_stages(logs[0]) if logs else []

    def parallelism(self, stages: list[StageFigures]) -> dict[str, Any]:
        """Per figure (its last repetition): the stages that read data, from the event log."""
        out: dict[str, Any] = {}
        last = {label.rsplit(":", 1)[0]: (start, end) for label, start, end in self.windows
                if label.rsplit(":", 1)[-1].isdigit() and any(
                    figure in label for figure in ("full", "incremental", "naive", "merge"))}
        for figure, (start, end) in sorted(last.items()):
            found = reading_stages(stages, start, end)
            out[figure] = {"stages": [s.as_json() for s in found],
                           "largest_task_share": round(max((s.largest_share for s in found), default=0.0), 3)}
        return out

    def run(self) -> dict[str, Any]:
        machine = {"cores": self.args.cores, "driver_memory": self.args.driver_memory}
        if self.args.strategy:
            from bench.strategy_bench import cpu_ratios, run_strategy

            results = {f"partitions={p}": run_strategy(self, p, self.args.strategy) for p in self.args.partitions}
            self.spark.stop()
            for p in self.args.partitions:
                results[f"partitions={p}"]["cpu_ratios"] = cpu_ratios(self, p, self.args.strategy)
            return {"machine": machine, "results": results, "parallelism": self.parallelism(self.stages())}
        results = {}
        for p in self.args.partitions:
            results[f"partitions={p}"] = self.run_partitions(p)
            # so far, with the windows and process CPU: a run stopped later still has these figures
            partial = Path(f"{self.args.out}.partial")
            partial.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps(
                {"results": results, "windows": self.windows, "process_cpu_seconds": self.process_cpu}, indent=2))
        self.spark.stop()  # the event log is complete once the application ends
        stages = self.stages()
        cpu = {"cpu_seconds": {label: task_cpu_ms(stages, start, end) / 1000 for label, start, end in self.windows},
               "process_cpu_seconds": self.process_cpu}
        reps = range(self.args.repeats)
        for p in self.args.partitions:
            tag, result = f"p{p}", results[f"partitions={p}"]
            for kind, seconds in cpu.items():
                result[kind] = {figure: summarise([seconds.get(f"{tag}:{figure}:{rep}", 0.0) for rep in reps])
                                for figure in result["seconds"]}
            for share, figures in cpu_figures(self, tag, cpu).items():
                result["incremental"][share].update(figures)
        return {"machine": machine, "results": results, "parallelism": self.parallelism(stages),
                "windows": self.windows}  # each figure's time window, for ``python -m bench.eventlog``


def main() -> None:
    parser = argparse.ArgumentParser(description="compaction benchmark (see bench/README.md)")
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--partitions", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4])
    parser.add_argument("--keys", type=int, default=2_000_000, help="distinct keys in all, spread over partitions")
    parser.add_argument("--append-shares", type=lambda s: [float(x) for x in s.split(",")],
                        default=[0.0025, STANDARD_SHARE, 0.05], help="appended records per incremental figure, "
                        "as shares of --records, appended in this order")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmups", type=int, default=1, help="untimed runs of each side per append share before "
                        "the repetitions (more: the figures of a process whose JIT compilers have settled)")
    parser.add_argument("--history", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4])
    parser.add_argument("--compare-layouts", action="store_true", help="also time full runs forced to each layout")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--shuffle-partitions", type=int, default=8)
    parser.add_argument("--skip-naive", action="store_true")
    parser.add_argument("--strategy", choices=["timestamp", "header"],
                        help="compare this compaction.strategy with offset on the same records (bench.strategy_bench)")
    parser.add_argument("--workdir", default="bench/data/compaction")
    parser.add_argument("--out", default="bench/results/compaction.json")
    args = parser.parse_args()
    result = Bench(args).run()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    summary = {name: {"seconds": r["seconds"], "ratios": r["ratios"], "cpu_seconds": r.get("cpu_seconds"),
                      "process_cpu_seconds": r.get("process_cpu_seconds"),
                      "history": r.get("history_incremental_seconds"), "cpu_ratios": r.get("cpu_ratios"),
                      "forced_layouts": r.get("forced_layouts_full_seconds"),
                      "incremental": {share: {k: v for k, v in figures.items() if k != "records"}
                                      for share, figures in r.get("incremental", {}).items()}}
               for name, r in result["results"].items()}
    print(json.dumps({"summary": summary, "parallelism": {k: v["largest_task_share"] for k, v in
                                                          result["parallelism"].items()}}, indent=2))


if __name__ == "__main__":
    main()
