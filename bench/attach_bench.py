"""Attached logs against native topics: the same records as a native topic and as a table in Kafka Connect's
Iceberg-sink layout (``_kafka_metadata_*`` columns, the key in a string column, unpartitioned, so files mix
partitions), each compacted in full, then again after a 1% append. One Spark application, its event log on,
several repetitions in alternating order; ratios attached / native per repetition, for 4 and 1 partitions.

    PYTHONPATH=$PWD .venv/bin/python -m bench.attach_bench --records 5000000 --partitions 4,1 --repeats 3
    PYTHONPATH=$PWD .venv/bin/python -m bench.eventlog bench/data/attach/events/local-* bench/results/attach.json \
        p4:attached_full:0 p4:native_full:0
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from bench.compaction_bench import Bench, summarise
from bench.eventlog import task_cpu_ms
from bench.workload import Workload, append
from compactor.attach.api import attach_table, compact_attached, detach_table
from compactor.iceberg.commits import RefMove, commit

SINK_COLUMNS = ("CAST(key AS STRING) AS id, CAST(value AS STRING) AS payload, partition AS _kafka_metadata_partition, "
                "offset AS _kafka_metadata_offset, unix_millis(timestamp) AS _kafka_metadata_timestamp")


class AttachBench(Bench):
    sink = ""

    def reset_main(self, identifier: str, snapshot_id: int) -> None:
        table = self.lake.catalog.load_table(identifier)
        current = table.metadata.refs["main"].snapshot_id
        if current != snapshot_id:
            commit(self.lake.catalog, table, snapshot=None, moves=[RefMove("main", snapshot_id)],
                   expect={"main": current}, what="resetting the benchmark cursor")

    def attached_full(self, view: str, label: str) -> float:
        if self.lake.catalog.table_exists(view):
            detach_table(self.lake, view)
        attach_table(self.lake, view, table=self.sink, layout="kafka-connect", key_columns=["id"],
                     config={"delete.retention.ms": "0"})
        seconds, result = self.timed(label, lambda: compact_attached(self.lake, view, now_ms=self.now))
        assert result.committed
        return seconds

    def attached_incremental(self, view: str, start: int, label: str) -> float:
        self.reset_main(view, start)
        seconds, result = self.timed(label, lambda: compact_attached(self.lake, view, now_ms=self.now + 1))
        assert result.committed and result.stats["records_read"] < self.args.records // 50
        return seconds

    def run_partitions(self, partitions: int) -> dict[str, Any]:
        a, cat, tag = self.args, self.catalog, f"p{partitions}"
        w = Workload(records=a.records, partitions=partitions, keys_per_partition=a.keys // partitions)
        raw, view, self.sink = f"bench.native{partitions}", f"bench.attached{partitions}", f"bench.sink{partitions}"
        self.make_topic(raw, w)
        select = f"SELECT {SINK_COLUMNS} FROM {cat}.{raw}"
        self.spark.sql(f"CREATE TABLE {cat}.{self.sink} USING iceberg AS {select}")
        self.log(f"{tag}: warm-up (an untimed full run of each)")
        self.full(raw, f"{tag}:warmup")
        self.attached_full(view, f"{tag}:warmup")
        steps = {"native_full": lambda rep: self.full(raw, f"{tag}:native_full:{rep}")[0],
                 "attached_full": lambda rep: self.attached_full(view, f"{tag}:attached_full:{rep}")}
        figures: dict[str, list[float]] = {name: [] for name in (*steps, "native_incremental", "attached_incremental")}
        for rep in range(a.repeats):
            for name in (list(steps) if rep % 2 == 0 else list(reversed(steps))):
                figures[name].append(steps[name](rep))
        native_start = self.cursor_of(raw)
        view_start = int(self.lake.catalog.load_table(view).metadata.refs["main"].snapshot_id)
        ends = self.lake.topic(raw).offsets().next_offsets
        append(self.lake.topic(raw), w, a.records // 100, w.seed + 1)
        since = " OR ".join(f"(partition = {p} AND offset >= {o})" for p, o in enumerate(ends))
        self.spark.sql(f"INSERT INTO {cat}.{self.sink} {select} WHERE {since}")
        steps = {"native_incremental": lambda rep: self.incremental(raw, native_start, f"{tag}:native_incremental:"
                                                                    f"{rep}")[0],
                 "attached_incremental": lambda rep: self.attached_incremental(view, view_start,
                                                                               f"{tag}:attached_incremental:{rep}")}
        self.log(f"{tag}: warm-up (an untimed incremental run of each)")
        steps["native_incremental"](-1)
        steps["attached_incremental"](-1)
        for rep in range(a.repeats):
            for name in (list(steps) if rep % 2 == 0 else list(reversed(steps))):
                figures[name].append(steps[name](rep))
            self.log(f"{tag} rep {rep + 1}: " + " ".join(f"{n} {v[-1]:.2f}s" for n, v in figures.items() if v))
        ratios = {kind: [figures[f"attached_{kind}"][r] / figures[f"native_{kind}"][r] for r in range(a.repeats)]
                  for kind in ("full", "incremental")}
        return {"workload": w.__dict__, "seconds": {k: summarise(v) for k, v in figures.items()},
                "ratios": {k: summarise(v) for k, v in ratios.items()}}

    def run(self) -> dict[str, Any]:
        results = {f"partitions={p}": self.run_partitions(p) for p in self.args.partitions}
        self.spark.stop()  # the event log is complete once the application ends
        stages, windows = self.stages(), {label: (start, end) for label, start, end in self.windows}
        for p in self.args.partitions:  # CPU ratios: the executors' task CPU (event log), and the processes' CPU
            tag, result = f"p{p}", results[f"partitions={p}"]
            for kind in ("full", "incremental"):
                labels = [(f"{tag}:attached_{kind}:{r}", f"{tag}:native_{kind}:{r}") for r in range(self.args.repeats)]
                result["ratios"][f"{kind} task cpu"] = summarise(
                    [task_cpu_ms(stages, *windows[a]) / max(task_cpu_ms(stages, *windows[n]), 1.0) for a, n in labels])
                result["ratios"][f"{kind} process cpu"] = summarise(
                    [self.process_cpu[a] / max(self.process_cpu[n], 1e-3) for a, n in labels])
        return {"results": results, "load_average": Path("/proc/loadavg").read_text().split()[:3],
                "windows": self.windows, "process_cpu_seconds": self.process_cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description="attached logs against native topics (see bench/README.md)")
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--partitions", type=lambda s: [int(x) for x in s.split(",")], default=[4, 1])
    parser.add_argument("--keys", type=int, default=2_000_000, help="distinct keys in all, spread over partitions")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--shuffle-partitions", type=int, default=8)
    parser.add_argument("--workdir", default="bench/data/attach")
    parser.add_argument("--out", default="bench/results/attach.json")
    args = parser.parse_args()
    result = AttachBench(args).run()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps({name: {"seconds": {k: v["median"] for k, v in r["seconds"].items()},
                             "ratios": r["ratios"]} for name, r in result["results"].items()}, indent=2))
    print("load average at the end:", result["load_average"], "medians of ratios:",
          json.dumps({name: {k: statistics.median(v["runs"]) for k, v in r["ratios"].items()}
                      for name, r in result["results"].items()}, indent=2))


if __name__ == "__main__":
    main()
