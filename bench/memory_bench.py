"""Memory bounded per task (issue 11, point 2): one partition with a key space larger than the executor's
memory, compacted with a 1 GB executor (local mode: the driver is the executor), and checked against reference
counts computed independently with pyarrow from the raw log.

    .venv/bin/python -m bench.memory_bench                                   # 20M records, 10M keys, 1 GB
    .venv/bin/python -m bench.memory_bench --records 4000000 --keys 2000000  # quicker

The reference: with ``delete.retention.ms`` far in the future, the first compaction keeps exactly one row per
distinct non-null key (its latest record, tombstones included) and drops keyless records; so the view's rows,
its tombstones and the run's statistics must equal the counts pyarrow finds by grouping the raw log by key.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from bench.workload import BASE_TIME_MS, Workload, append
from compactor.compaction.job import TwoPhaseCompactor
from compactor.lake import Lake
from compactor.spark.session import get_or_create_session
from readers.reader import TopicReader


def reference_counts(lake: Lake, name: str) -> dict[str, int]:
    """Distinct non-null keys, and how many of them end with a tombstone, from the raw log (pyarrow only)."""
    batches = list(TopicReader(lake, name).batches())
    table = pa.Table.from_batches(batches).select(["offset", "key", "value"])
    keyed = table.filter(pc.is_valid(table["key"]))
    latest = keyed.group_by("key").aggregate([("offset", "max")])
    tombstone_offsets = keyed.filter(pc.is_null(keyed["value"]))["offset"]
    tombstones = int(pc.sum(pc.is_in(latest["offset_max"], value_set=tombstone_offsets)).as_py() or 0)
    return {"records": table.num_rows, "keys": latest.num_rows, "latest_tombstones": tombstones}


def spilled(events: Path) -> dict[str, int]:
    """Bytes the run's tasks spilled (memory and disk), from Spark's event log: proof the keys outgrew memory."""
    totals = {"memory": 0, "disk": 0}
    for log in events.iterdir():
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event.get("Event") == "SparkListenerTaskEnd":
                metrics = event.get("Task Metrics") or {}
                totals["memory"] += int(metrics.get("Memory Bytes Spilled", 0))
                totals["disk"] += int(metrics.get("Disk Bytes Spilled", 0))
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description="memory-bounded compaction (see bench/README.md)")
    parser.add_argument("--records", type=int, default=20_000_000)
    parser.add_argument("--keys", type=int, default=10_000_000)
    parser.add_argument("--memory", default="1g", help="the executor's (local mode: the driver's) memory")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--workdir", default="bench/data/memory")
    parser.add_argument("--out", default="bench/results/memory.json")
    args = parser.parse_args()
    workdir = Path(args.workdir).resolve()
    shutil.rmtree(workdir, ignore_errors=True)
    lake = Lake(warehouse=str(workdir / "warehouse"))
    lake.open(create=True)  # a new lake
    lake.catalog.create_namespace_if_not_exists("bench")
    topic = lake.create_topic("bench.mem", config={"cleanup.policy": "compact"})
    started = time.perf_counter()
    append(topic, Workload(records=args.records, partitions=1, keys_per_partition=args.keys), args.records, 1)
    written = time.perf_counter() - started
    events = workdir / "events"
    events.mkdir()
    spark = get_or_create_session(lake.config, extra={
        "spark.master": f"local[{args.cores}]", "spark.driver.memory": args.memory, "spark.ui.enabled": "false",
        "spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri()})
    lake.attach_spark(spark)
    started = time.perf_counter()
    result = TwoPhaseCompactor(lake, "bench.mem", now_ms=BASE_TIME_MS + 10**10).run()
    seconds = time.perf_counter() - started
    spark.stop()
    reference = reference_counts(lake, "bench.mem")
    stats = result.stats
    checks = {"records_read == records": stats.records_read == reference["records"],
              "records_kept == distinct keys": stats.records_kept == reference["keys"],
              "tombstones_kept == keys ending with a tombstone":
                  stats.tombstones_kept == reference["latest_tombstones"]}
    view_rows = sum(b.num_rows for b in TopicReader(lake, "bench.mem", read_compacted=True).batches())
    checks["compacted read == distinct keys"] = view_rows == reference["keys"]
    out: dict[str, Any] = {"records": args.records, "keys": args.keys, "memory": args.memory, "cores": args.cores,
                           "write_seconds": round(written, 1), "compaction_seconds": round(seconds, 1),
                           "layout": stats.layout, "durations_ms": stats.durations_ms, "reference": reference,
                           "stats": stats.as_json(), "checks": checks, "spilled_bytes": spilled(events),
                           "python_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))
    if not all(checks.values()):
        raise SystemExit("the compacted view does not match the reference counts")


if __name__ == "__main__":
    main()
