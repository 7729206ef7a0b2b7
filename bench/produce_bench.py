"""Producing benchmark (BENCHMARK.md, "Producing"): every producer path against a plain append of the same
rows to a plain Iceberg table by the same engine, CLI memory, and the cost of one small commit as a topic ages.

    .venv/bin/python -m bench.produce_bench                            # 1M records, 3 repetitions (~15 min)
    .venv/bin/python -m bench.produce_bench --records 200000 --repeats 1 --commits 300   # quick

Figures (records of 140-byte values, keys drawn from 100,000 per partition, 4 partitions):
  json_cli      ``compactor produce`` of a JSON Lines file, a subprocess (start-up included), records/s and MB/s
  parquet_cli   ``compactor produce --format parquet`` of the same records in a Parquet file, a subprocess, less
                its start-up (``compactor --help``: the interpreter and the command line's imports; the mean
                of one run just before and one just after the pair)  vs pyiceberg ``append`` of the same table
  arrow_api     ``produce_arrow`` of an Arrow table                  vs pyiceberg ``append`` of the same table
                (``--pairs`` pairs, the order alternated; before every timed operation ``processes.settle``)
  buffered      ``Producer.send`` from 4 threads, then ``flush``     vs the same pyiceberg append
  dataframe     ``produce_dataframe`` of a Spark DataFrame           vs Spark ``writeTo(...).append()``
                (at each ``--dataframe-records`` size, ``--dataframe-pairs`` pairs, the order alternated)
  cli_memory    peak RSS of ``compactor produce`` for two file sizes (it must not grow with the file)
  commit_cost   one one-record commit (with a batch id) at commit 1, 100, 1,000, 2,000 and 4,000 of one topic's
                life, one simulated second apart (median of the 11 commits around each point); with the raw
                snapshot window full and side by side with new topics: ``bench.commit_cost_bench``

MB/s counts logical bytes (key + value). The plain appends write the input's own columns (key, value) to an
unpartitioned table: the floor a user would get without offsets, partitions or atomic batches.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.compaction_bench import summarise
from bench.plain_mode import fresh_plain_appends, slow_mode
from bench.processes import children_cpu, peak_rss_kib, settle
from bench.produce_inputs import KEYS, VALUE_BYTES, logical_bytes, records_table, write_jsonl, write_parquet
from compactor.lake import Lake
from compactor.producing.buffered import Producer
from compactor.producing.dataframe import produce_dataframe
from compactor.producing.producer import produce_arrow

T0 = 1_800_000_000_000
PLAIN_MODE_MIN_RECORDS = 500_000


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.workdir = Path(args.workdir).resolve()
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir.mkdir(parents=True)
        self.lake = Lake(warehouse=str(self.workdir / "warehouse"))
        self.lake.open(create=True)  # a new lake
        self.lake.catalog.create_namespace_if_not_exists("bench")
        self.counter = 0

    def log(self, message: str) -> None:
        print(f"[bench] {message}", flush=True)

    def topic_name(self) -> str:
        self.counter += 1
        name = f"bench.t{self.counter}"
        self.lake.create_topic(name, partitions=self.args.partitions)
        return name

    def plain_table(self) -> Any:
        self.counter += 1
        return self.lake.catalog.create_table(f"bench.plain{self.counter}", schema=pa.schema(
            [("key", pa.large_binary()), ("value", pa.large_binary())]))

    # --- pyiceberg figures ---------------------------------------------------------------------------------

    def arrow_api(self, table: pa.Table, plain_first: bool) -> tuple[float, float]:
        """One pair: the product's append and the plain one (in the order given, alternated by the caller)."""
        topic = self.lake.topic(self.topic_name())
        plain = self.plain_table()
        columns = table.cast(pa.schema([("key", pa.large_binary()), ("value", pa.large_binary())]))
        timings: dict[str, float] = {}
        for which in (("plain", "product") if plain_first else ("product", "plain")):
            settle()
            started = time.perf_counter()
            if which == "product":
                produce_arrow(topic, table, now_ms=T0)
            else:
                plain.append(columns)
            timings[which] = time.perf_counter() - started
        return timings["product"], timings["plain"]

    def buffered(self, table: pa.Table) -> float:
        keys, values = table["key"].to_pylist(), table["value"].to_pylist()
        topic = self.lake.topic(self.topic_name())
        threads = 4
        started = time.perf_counter()
        with Producer(self.lake, topic, linger_ms=20, clock=lambda: T0) as producer:
            def work(part: int) -> None:
                send = producer.send
                for i in range(part, len(keys), threads):
                    send(values[i], keys[i])

            workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
            producer.flush()
        elapsed = time.perf_counter() - started
        assert sum(self.lake.topic(topic.name).offsets().next_offsets) == len(keys)
        return elapsed

    def cli_env(self) -> dict[str, str]:
        return {**os.environ, "COMPACTOR_WAREHOUSE": str(self.workdir / "warehouse"), "PYTHONPATH": os.getcwd()}

    def start_up(self) -> tuple[float, float]:
        """Wall and CPU time of ``compactor --help``: the interpreter and the command line's imports."""
        settle()  # as before the produce it is taken off: a flusher at work would inflate it, in the product's favour
        started, cpu = time.perf_counter(), children_cpu()
        subprocess.run([sys.executable, "-m", "compactor.cli.main", "--help"], env=self.cli_env(), check=True,
                       stdout=subprocess.DEVNULL)
        return time.perf_counter() - started, children_cpu() - cpu

    def parquet_cli(self, path: Path, table: pa.Table, plain_first: bool) -> dict[str, float]:
        """One pair: ``compactor produce --format parquet`` (wall and CPU time, start-up included) and pyiceberg's
        plain append of the same records as an in-memory table (order alternated by the caller)."""
        name = self.topic_name()
        plain = self.plain_table()
        columns = table.cast(pa.schema([("key", pa.large_binary()), ("value", pa.large_binary())]))
        timings: dict[str, float] = {}
        for which in (("plain", "product") if plain_first else ("product", "plain")):
            settle()
            started, cpu, child_cpu = time.perf_counter(), time.process_time(), children_cpu()
            if which == "product":
                subprocess.run([sys.executable, "-m", "compactor.cli.main", "--log-level", "WARNING", "produce", name,
                                "--file", str(path), "--format", "parquet"], env=self.cli_env(), check=True,
                               stdout=subprocess.DEVNULL)
            else:
                plain.append(columns)
            timings[which] = time.perf_counter() - started
            timings[f"{which}_cpu"] = (children_cpu() - child_cpu) if which == "product" else \
                time.process_time() - cpu
        return timings

    def json_cli(self, path: Path) -> tuple[float, int]:
        """Wall time and peak RSS (KiB) of one ``compactor produce`` subprocess."""
        name = self.topic_name()
        settle()
        started = time.perf_counter()
        peak = peak_rss_kib([sys.executable, "-m", "compactor.cli.main", "--log-level", "WARNING", "produce", name,
                             "--file", str(path)], self.cli_env())
        return time.perf_counter() - started, peak

    def commit_cost(self, commits: int) -> dict[str, Any]:
        topic = self.lake.topic(self.topic_name())
        times = []
        for i in range(commits):
            data = pa.table({"key": [f"k{i}".encode()], "value": [b"v" * VALUE_BYTES]})
            started = time.perf_counter()
            produce_arrow(topic, data, batch_id=f"commit-{i}", now_ms=T0 + i * 1000)
            times.append(time.perf_counter() - started)
            if (i + 1) % 500 == 0:
                self.log(f"commit cost: {i + 1} commits")
        out: dict[str, Any] = {}
        for at in (1, 100, 1000, 2000, 4000):
            if at <= commits:
                window = times[max(0, at - 6): at + 5]
                out[str(at)] = round(statistics.median(window) * 1000, 1)
        metadata = topic.table.metadata
        out["snapshots_in_metadata"] = len(metadata.snapshots)
        out["manifests"] = len(topic.table.current_snapshot().manifests(topic.table.io))  # type: ignore[union-attr]
        out["metadata_json_bytes"] = len(metadata.model_dump_json())
        return out

    # --- Spark figures -------------------------------------------------------------------------------------

    def dataframe(self, parquet: Path, plain_first: bool) -> tuple[float, float]:
        """One pair: ``produce_dataframe`` and Spark's plain append of the same DataFrame (order alternated)."""
        spark = self.lake.spark()
        df = spark.read.parquet(str(parquet))
        name = self.topic_name()
        self.counter += 1
        plain = f"`{self.lake.config.catalog_name}`.bench.plain{self.counter}"
        spark.sql(f"CREATE TABLE {plain} (key BINARY, value BINARY) USING iceberg")
        timings: dict[str, float] = {}
        for which in (("plain", "product") if plain_first else ("product", "plain")):
            spark.sparkContext._jvm.System.gc()  # type: ignore[union-attr]
            settle()
            started = time.perf_counter()
            if which == "product":
                produce_dataframe(self.lake, name, df, now_ms=T0)
            else:
                df.writeTo(plain).append()
            timings[which] = time.perf_counter() - started
        # untimed: drop both (a 10M-row pair is about 3 GB on disk; a run makes a dozen)
        self.lake.delete_topic(name)
        spark.sql(f"DROP TABLE {plain} PURGE")
        return timings["product"], timings["plain"]

    # --- the run -----------------------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        a = self.args
        table = records_table(a.records, 1, a.keys)
        mb = logical_bytes(table) / 1e6
        results: dict[str, Any] = {"records": a.records, "partitions": a.partitions, "logical_mb": round(mb, 1)}
        jsonl = self.workdir / "records.jsonl"
        write_jsonl(table, jsonl)
        small = self.workdir / "small.jsonl"
        write_jsonl(table.slice(0, a.records // 5), small)
        parquet = self.workdir / "records.parquet"
        pq.write_table(table, parquet)

        def rate(seconds: list[float], records: int = a.records, megabytes: float = mb) -> dict[str, Any]:
            median = statistics.median(seconds)
            return {"seconds": summarise(seconds), "records_per_s": round(records / median),
                    "mb_per_s": round(megabytes / median, 1)}

        figures: dict[str, list[float]] = {"json_cli": [], "arrow_api": [], "arrow_plain": [], "buffered": [],
                                           "dataframe": [], "dataframe_plain": []}
        memory: dict[str, list[int]] = {"small": [], "large": []}
        # untimed warm-up pairs at full size: the first appends of a process pay for page faults while the
        # allocator grows (the product copies each partition's rows, the plain append writes the input as is)
        for _ in range(2):
            self.arrow_api(table, False)
        for rep in range(a.repeats):
            seconds, rss = self.json_cli(jsonl)
            figures["json_cli"].append(seconds)
            memory["large"].append(rss)
            memory["small"].append(self.json_cli(small)[1])
            figures["buffered"].append(self.buffered(table.slice(0, a.buffered_records)))
            self.log(f"rep {rep + 1}: json cli {seconds:.2f}s ({rss // 1024} MiB), buffered "
                     f"{figures['buffered'][-1]:.2f}s")
        for rep in range(a.pairs):
            product, plain = self.arrow_api(table, plain_first=rep % 2 == 1)
            figures["arrow_api"].append(product)
            figures["arrow_plain"].append(plain)
            self.log(f"pair {rep + 1}: arrow {product:.2f}s vs plain {plain:.2f}s")
        buffered_mb = mb * a.buffered_records / a.records
        results["json_cli"] = rate(figures["json_cli"])
        results["arrow_api"] = {**rate(figures["arrow_api"]), "plain": rate(figures["arrow_plain"]),
                                "ratio_plain_over_product": summarise(
                                    [p / q for p, q in zip(figures["arrow_plain"], figures["arrow_api"],
                                                           strict=True)])}
        results["buffered"] = {**rate(figures["buffered"], a.buffered_records, buffered_mb),
                               "plain_arrow_append_same_rows": rate(
                                   [p * a.buffered_records / a.records for p in figures["arrow_plain"]],
                                   a.buffered_records, buffered_mb)}
        results["cli_memory_mib"] = {
            f"{a.records // 5}_records": round(statistics.median(memory["small"]) / 1024),
            f"{a.records}_records": round(statistics.median(memory["large"]) / 1024)}
        if a.cli_pairs:
            self.parquet_cli(parquet, table, False)  # warm-up: the page cache and the first subprocess
            # each pair's start-up is the mean of a ``--help`` just before and one just after it, so that a
            # drift over the run (another process, the page cache) reaches both terms of the difference
            pairs, start_ups = [], []
            after = self.start_up()
            for rep in range(a.cli_pairs):
                before = after
                pairs.append(self.parquet_cli(parquet, table, plain_first=rep % 2 == 1))
                after = self.start_up()
                start_ups.append(((before[0] + after[0]) / 2, (before[1] + after[1]) / 2))
                self.log(f"pair {rep + 1}: parquet cli {pairs[-1]['product']:.2f}s (start-up {start_ups[-1][0]:.2f}s) "
                         f"vs plain {pairs[-1]['plain']:.2f}s")
            net = [max(p["product"] - w, 1e-3) for p, (w, _) in zip(pairs, start_ups, strict=True)]
            net_cpu = [max(p["product_cpu"] - c, 1e-3) for p, (_, c) in zip(pairs, start_ups, strict=True)]
            plain_cli = [p["plain"] for p in pairs]
            # the slow mode shows at full size; a small run's plain append is all fixed costs
            fresh = fresh_plain_appends(parquet, self.workdir) if a.records >= PLAIN_MODE_MIN_RECORDS else []
            slow = slow_mode(statistics.median(plain_cli), fresh)
            if fresh:
                self.log(f"plain append: {statistics.median(plain_cli):.3f}s here, {min(fresh):.3f}s at best in "
                         f"fresh processes {fresh}" + (": THIS PROCESS IS IN THE SLOW MODE, its ratios flatter the "
                                                       "product (bench/plain_mode.py)" if slow else ""))
            results["parquet_cli"] = {
                "plain_fresh_processes_s": fresh, "plain_in_slow_mode": slow,
                **rate(net), "with_start_up": rate([p["product"] for p in pairs]),
                "start_up": summarise([w for w, _ in start_ups]), "plain": rate(plain_cli),
                "ratio_plain_over_product": summarise([p / q for p, q in zip(plain_cli, net, strict=True)]),
                "cpu_s": {"product_less_start_up": summarise(net_cpu), "start_up": summarise([c for _, c in start_ups]),
                          "plain": summarise([p["plain_cpu"] for p in pairs]),
                          "ratio_plain_over_product": summarise([p["plain_cpu"] / q for p, q in zip(pairs, net_cpu,
                                                                                                     strict=True)])}}
        if not a.skip_spark:
            results["dataframe"] = {}
            for size in a.dataframe_records or [a.records]:
                path = self.workdir / f"dataframe-{size}.parquet"
                write_parquet(path, size, a.keys)
                self.dataframe(path, False)  # warm-up: JIT and the session's first Iceberg write at this size
                product_df, plain_df = [], []
                for rep in range(a.dataframe_pairs or a.repeats):
                    product, plain = self.dataframe(path, plain_first=rep % 2 == 1)
                    product_df.append(product)
                    plain_df.append(plain)
                    self.log(f"{size} rows, pair {rep + 1}: dataframe {product:.2f}s vs plain {plain:.2f}s")
                size_mb = mb * size / a.records
                results["dataframe"][str(size)] = {
                    **rate(product_df, size, size_mb), "plain": rate(plain_df, size, size_mb),
                    "ratio_plain_over_product": summarise([p / q for p, q in zip(plain_df, product_df, strict=True)])}
                path.unlink()
        self.log(f"commit cost over {a.commits} commits")
        results["commit_cost_ms"] = self.commit_cost(a.commits)
        return results


def main() -> None:
    parser = argparse.ArgumentParser(description="producing benchmark (see bench/README.md)")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--buffered-records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=7, help="Arrow API / plain append pairs (cheap; noisy)")
    parser.add_argument("--commits", type=int, default=2000)
    parser.add_argument("--keys", type=int, default=KEYS * 4, help="distinct keys")
    parser.add_argument("--cli-pairs", type=int, default=5, help="Parquet command line / plain append pairs")
    parser.add_argument("--dataframe-records", type=int, nargs="+", help="DataFrame sizes (default: --records)")
    parser.add_argument("--dataframe-pairs", type=int, help="DataFrame / plain append pairs (default: --repeats)")
    parser.add_argument("--skip-spark", action="store_true")
    parser.add_argument("--workdir", default="bench/data/produce")
    parser.add_argument("--out", default="bench/results/produce.json")
    parser.add_argument("--arrow-pool", choices=["default", "system"], default="default",
                        help="Arrow's memory pool for the whole run (system: malloc; see bench/README.md)")
    args = parser.parse_args()
    if args.arrow_pool == "system":
        pa.set_memory_pool(pa.system_memory_pool())
    results = Bench(args).run()
    results["arrow_pool"] = pa.default_memory_pool().backend_name
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

