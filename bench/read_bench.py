"""Read benchmark (issue 4): throughput of the compacted and raw readers on the compaction benchmark's data,
side by side with plain Iceberg reads of the same records, in one process, several repetitions.

    .venv/bin/python -m bench.read_bench                                   # standard workload, 3 repetitions
    .venv/bin/python -m bench.read_bench --records 500000 --keys 50000 --repeats 1   # quick

Figures (each a full pass over Arrow batches; no per-record Python work):
  compacted        TopicReader(read_compacted=True): the cursor's rows below each horizon, then the raw tail,
                   in partition and offset order
  raw              TopicReader(read_compacted=False): the whole raw log, in order
  plain_compacted  pyiceberg by hand: the compacted table at the cursor snapshot plus the raw tail
                   (offset >= horizon per partition), streamed with to_arrow_batch_reader(), no order
  plain_raw        pyiceberg by hand: the whole raw table, streamed, no order
  records          TopicReader(read_compacted=True).records() over the first --records-sample records
                   (Python objects per record)
The data: the standard workload compacted once, then 1% more records appended (the tail), and the position
deletes of one incremental run on the view (so the compacted read applies delete files, as in production).
Throughput is reported in records/s and in MB/s of logical bytes (key + value + headers, from metadata).
Peak Arrow memory during each read is sampled (pyarrow's allocator), to show the readers stream.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.expressions import AlwaysFalse, BooleanExpression, Or

from bench.workload import BASE_TIME_MS, Workload, append
from compactor.compaction.job import TwoPhaseCompactor
from compactor.cursor import load_compacted
from compactor.iceberg.expressions import at_least, equal
from compactor.lake import Lake
from compactor.spark.session import get_or_create_session
from readers.reader import TopicReader


class PeakArrowMemory:
    """Samples ``pa.total_allocated_bytes()`` every few milliseconds while active."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, pa.total_allocated_bytes())
            time.sleep(0.005)

    def __enter__(self) -> PeakArrowMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def drain(batches: Iterator[pa.RecordBatch] | Any) -> int:
    rows = 0
    for batch in batches:
        rows += batch.num_rows
    return rows


def timed(fn: Callable[[], int]) -> tuple[float, int, int]:
    with PeakArrowMemory() as memory:
        started = time.perf_counter()
        rows = fn()
        seconds = time.perf_counter() - started
    return seconds, rows, memory.peak


def summarise(values: list[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "runs": [round(v, 3) for v in values]}


def main() -> None:
    parser = argparse.ArgumentParser(description="read benchmark (see bench/README.md)")
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--keys", type=int, default=500_000, help="keys per partition")
    parser.add_argument("--append-share", type=float, default=0.01)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--records-sample", type=int, default=200_000)
    parser.add_argument("--workdir", default="bench/data/read")
    parser.add_argument("--out", default="bench/results/read.json")
    args = parser.parse_args()

    workdir = Path(args.workdir).resolve()
    if workdir.exists():
        shutil.rmtree(workdir)
    lake = Lake(warehouse=str(workdir / "warehouse"))
    lake.open(create=True)  # a new lake (Spark's catalog opens only on a lake that exists)
    spark = get_or_create_session(lake.config, extra={"spark.master": "local[2]", "spark.driver.memory": "4g",
                                                      "spark.sql.shuffle.partitions": "8", "spark.ui.enabled": "false"})
    lake.attach_spark(spark)
    name = "bench.reads"
    lake.catalog.create_namespace_if_not_exists("bench")
    topic = lake.create_topic(name, partitions=args.partitions, config={"cleanup.policy": "compact"})
    workload = Workload(records=args.records, partitions=args.partitions, keys_per_partition=args.keys)
    append(topic, workload, workload.records, workload.seed)
    now = BASE_TIME_MS + 10**10
    TwoPhaseCompactor(lake, name, now_ms=now).run()
    append(lake.topic(name), workload, int(args.records * args.append_share), seed=98)
    TwoPhaseCompactor(lake, name, now_ms=now + 1).run()   # incremental: position deletes on the view
    append(lake.topic(name), workload, int(args.records * args.append_share), seed=99)  # the raw tail
    spark.stop()

    state = load_compacted(lake.catalog, lake.topic(name).name)
    assert state is not None and state.cursor is not None
    cursor = state.cursor
    raw_topic = lake.topic(name)
    offsets = raw_topic.offsets()
    compacted_bytes = cursor.view.clean_bytes + sum(n - h for n, h in zip(offsets.logical_bytes,
                                                                          cursor.bytes_at_horizon, strict=True))
    raw_bytes = sum(offsets.logical_bytes)
    snapshot = raw_topic.snapshot
    assert snapshot is not None

    def tail_filter() -> BooleanExpression:
        per = [_and(equal("partition", p), at_least("offset", h)) for p, h in enumerate(cursor.horizons)]
        return Or(*per) if len(per) > 1 else (per[0] if per else AlwaysFalse())

    def compacted() -> int:
        return drain(TopicReader(lake, name, read_compacted=True).batches())

    def raw() -> int:
        return drain(TopicReader(lake, name).batches())

    def plain_compacted() -> int:
        view = lake.catalog.load_table(f"{name}__compacted")
        table = lake.topic(name).table
        rows = drain(view.scan(snapshot_id=cursor.snapshot_id,
                               selected_fields=("partition", "offset", "timestamp", "key", "value", "headers"))
                     .to_arrow_batch_reader())
        return rows + drain(table.scan(row_filter=tail_filter(), snapshot_id=snapshot.snapshot_id)
                            .to_arrow_batch_reader())

    def plain_raw() -> int:
        return drain(lake.topic(name).table.scan(snapshot_id=snapshot.snapshot_id).to_arrow_batch_reader())

    def records_sample() -> int:
        return sum(1 for _ in itertools.islice(TopicReader(lake, name, read_compacted=True).records(),
                                               args.records_sample))

    figures: dict[str, list[float]] = {k: [] for k in ("compacted", "plain_compacted", "raw", "plain_raw",
                                                        "records")}
    rows: dict[str, int] = {}
    peaks: dict[str, int] = {}
    functions = {"compacted": compacted, "plain_compacted": plain_compacted, "raw": raw, "plain_raw": plain_raw,
                 "records": records_sample}
    compacted()  # warm-up (file system cache, imports)
    for rep in range(args.repeats):
        for key, fn in functions.items():
            seconds, count, peak = timed(fn)
            figures[key].append(seconds)
            rows[key] = count
            peaks[key] = max(peaks.get(key, 0), peak)
        print(f"[read-bench] rep {rep + 1}: " + " ".join(f"{k} {v[-1]:.2f}s" for k, v in figures.items()),
              flush=True)
    assert rows["compacted"] == rows["plain_compacted"], rows
    logical = {"compacted": compacted_bytes, "plain_compacted": compacted_bytes, "raw": raw_bytes,
               "plain_raw": raw_bytes}
    result: dict[str, Any] = {"workload": workload.__dict__, "rows": rows, "logical_bytes": logical,
                              "seconds": {k: summarise(v) for k, v in figures.items()},
                              "peak_arrow_bytes": peaks}
    throughput: dict[str, dict[str, float]] = {}
    for key, values in figures.items():
        median = statistics.median(values)
        entry: dict[str, float] = {"records_per_s": round(rows[key] / median)}
        if key in logical:
            entry["mb_per_s"] = round(logical[key] / median / 1e6, 1)
        throughput[key] = entry
    result["throughput"] = throughput
    result["ratios"] = {
        "compacted/plain_compacted": summarise([a / b for a, b in zip(figures["compacted"],
                                                                       figures["plain_compacted"], strict=True)]),
        "raw/plain_raw": summarise([a / b for a, b in zip(figures["raw"], figures["plain_raw"], strict=True)]),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: result[k] for k in ("rows", "seconds", "throughput", "ratios", "peak_arrow_bytes")},
                     indent=2))


def _and(a: BooleanExpression, b: BooleanExpression) -> BooleanExpression:
    from pyiceberg.expressions import And

    return And(a, b)


if __name__ == "__main__":
    main()
