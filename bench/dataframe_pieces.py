"""Where the DataFrame producer's time goes (bench/README.md, "Producing"): its pieces timed side by side with
Spark's plain append of the same rows, interleaved, a JVM garbage collection before each, at one or more input
sizes in one run, with Spark's event log read back for the product's stages.

    .venv/bin/python -m bench.dataframe_pieces                                   # 1M rows, 5 repetitions
    .venv/bin/python -m bench.dataframe_pieces --records 1000000 10000000        # both sizes in one run

Pieces go to Spark's ``noop`` sink (everything computed, nothing written) unless they are the real thing:
  scan           the input's key and value
  murmur2        the scan plus Kafka's murmur2 partition column only (the compiled function)
  prepare        the producer's typed columns, positions, topic partitions and record sizes
  prepare+number the same plus each row's offset (the write's numbering in its task, no sort)
  count pass     the producer's counting pass (one stage, a line per task to the driver): reading the keys only
                 (what a file scan gets) and reading every column (what other plans get)
  plain append   ``writeTo(...).append()`` of the input to a plain (key, value) Iceberg table
  product        ``produce_dataframe`` into a fresh 4-partition topic

The input is ``bench.produce_bench``'s records (140 distinct letters per value, ``--keys`` keys) in Parquet.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.eventlog import read_stages
from bench.produce_inputs import write_parquet
from compactor.lake import Lake
from compactor.producing.dataframe import _count, _prepare, produce_dataframe
from compactor.spark.session import get_or_create_session
from compactor.spark.udf import murmur2_partition, task_offset

NOW_MS = 1_700_000_000_000


def stage_times(log_dir: Path, windows: list[tuple[float, float]]) -> list[dict[str, Any]]:
    """For each (start, end) wall-clock window, the stages submitted in it: name, tasks, wall and task seconds."""
    stages = sorted((s for log in log_dir.iterdir() if log.is_file() for s in read_stages(log)),
                    key=lambda s: s.submitted_ms)
    out = []
    for start, end in windows:
        inside = [s for s in stages if start <= s.submitted_ms / 1000 <= end]
        out.append({"window_s": round(end - start, 3), "stages": [
            {"stage": s.stage, "name": s.name.split(" at ")[0], "tasks": s.planned_tasks,
             "wall_s": round((s.completed_ms - s.submitted_ms) / 1000, 3), "task_s": round(s.run_ms / 1000, 3),
             "starts_at_s": round(s.submitted_ms / 1000 - start, 3)} for s in inside]})
    return out


def run_size(lake: Lake, work: Path, records: int, keys: int, repeats: int) -> dict[str, Any]:
    spark = lake.spark()
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    path = work / f"input-{records}.parquet"
    write_parquet(path, records, keys)
    df = spark.read.parquet(str(path))
    catalog = lake.config.catalog_name
    made = [0]
    product_windows: list[tuple[float, float]] = []

    def noop(frame: DataFrame) -> Callable[[], None]:
        return lambda: frame.write.format("noop").mode("overwrite").save()

    def plain() -> Callable[[], None]:
        made[0] += 1
        table = f"`{catalog}`.bench.plain{records}_{made[0]}"
        spark.sql(f"CREATE TABLE {table} (key BINARY, value BINARY) USING iceberg")
        return lambda: df.writeTo(table).append()

    def product() -> Callable[[], None]:
        made[0] += 1
        name = f"bench.topic{records}_{made[0]}"
        lake.create_topic(name, partitions=4)

        def run() -> None:
            started = time.time()
            produce_dataframe(lake, name, df, now_ms=NOW_MS)
            product_windows.append((started, time.time()))
        return run

    def count_pass(values: bool) -> Callable[[], None]:
        def run() -> None:
            _count(_prepare(df, 4, 0), 4, 1 << 20, headers=False, values=values)
        return run

    pieces: dict[str, Callable[[], Callable[[], None]]] = {
        "scan": lambda: noop(df.select("key", "value")),
        "murmur2": lambda: noop(df.withColumn("_p", murmur2_partition(F.col("key"), 4))),
        "prepare": lambda: noop(_prepare(df, 4, 0)),
        "prepare+number": lambda: noop(_prepare(df, 4, 0).withColumn(
            "_i", task_offset(F.col("_pid"), F.col("_p"), {(pid, p): (0, 1 << 40) for pid in range(1024)
                                                            for p in range(4)}, 4))),
        "count pass (keys)": lambda: count_pass(False),
        "count pass (all columns)": lambda: count_pass(True),
        "plain append": plain,
        "product": product,
    }
    seconds: dict[str, list[float]] = {name: [] for name in pieces}
    order = list(pieces)
    for rep in range(repeats + 1):  # the first round warms the JVM up and is not counted
        for name in order if rep % 2 else order[::-1]:  # alternate the order, so neither side always goes first
            run = pieces[name]()
            spark.sparkContext._jvm.System.gc()  # type: ignore[union-attr]
            time.sleep(0.2)
            started = time.perf_counter()
            run()
            if rep:
                seconds[name].append(round(time.perf_counter() - started, 3))
        print(f"[pieces] {records} rows, round {rep}: " + ", ".join(f"{n} {s[-1]:.2f}" for n, s in seconds.items()
                                                                    if s), flush=True)
    plain_median = statistics.median(seconds["plain append"])
    result: dict[str, Any] = {name: {"median": statistics.median(runs), "runs": runs,
                                     "vs_plain_append": round(statistics.median(runs) / plain_median, 2)}
                              for name, runs in seconds.items()}
    result["plain_over_product_pairs"] = [round(p / q, 2) for p, q in zip(seconds["plain append"], seconds["product"],
                                                                          strict=True)]
    result["plain_over_product_median"] = round(statistics.median(result["plain_over_product_pairs"]), 2)
    result["input_spark_partitions"] = df.rdd.getNumPartitions()
    result["product_windows"] = product_windows[1:]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--out", default="bench/results/dataframe_pieces.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dataframe-pieces-"))
    lake = Lake(warehouse=str(work / "warehouse"))
    lake.open(create=True)  # a new lake (Spark's catalog opens only on a lake that exists)
    try:
        events = work / "events"
        events.mkdir()
        lake.attach_spark(get_or_create_session(lake.config, extra={
            "spark.driver.memory": args.driver_memory, "spark.ui.enabled": "false",
            "spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri()}))
        lake.catalog.create_namespace_if_not_exists("bench")
        results: dict[str, Any] = {}
        for records in args.records:
            results[str(records)] = run_size(lake, work, records, args.keys, args.repeats)
        lake.spark().sparkContext._jvm.System.gc()  # type: ignore[union-attr]
        for figures in results.values():
            figures["product_stages"] = stage_times(events, figures.pop("product_windows"))
    finally:
        lake.spark().stop()  # before its event log's directory goes
        shutil.rmtree(work, ignore_errors=True)  # its inputs and tables: gigabytes at 10M rows
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
