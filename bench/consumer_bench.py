"""Consumer benchmark (issues 20 and 29): consumer throughput against ``TopicReader.batches()``, produce-to-poll
latency, an idle consumer's reads, and group commit cost over a group's life, in one process.

    .venv/bin/python -m bench.consumer_bench                                  # 1M records, 3 repetitions
    .venv/bin/python -m bench.consumer_bench --records 200000 --repeats 3 --commits 10000   # modest
    .venv/bin/python -m bench.consumer_bench --compacted                      # also the compacted view (Spark)

Figures:
  throughput        a group consumer draining the topic with ``poll_batches`` (max_records 500, Kafka's
                    default, and 100,000) against ``TopicReader.batches()`` over the same records, same run,
                    interleaved; raw, and with ``--compacted`` the compacted view after an incremental run.
                    Records/s of the polls (the reader's figure includes opening it; the consumer's first
                    poll opens its reader too); the consumer's fixed costs (join, commit, leave) apart
  latency           from a one-record produce's commit to the ``poll`` (default settings) that returns it
  idle              catalog loads and heartbeats per second of a consumer with nothing new
  group commit      one ``commit`` of a member (2 partitions) at commit 100 and at ``--commits`` of a group's
                    life, for each group store (``--stores``; ``bench.group_store_bench``), and the alternative
                    design, a one-record append to a topic of our own (Kafka's ``__consumer_offsets``), at
                    append 100 and ``--topic-commits``
  tail poll         the poll that returns a one-record append, at ``--tail-files`` raw files (``bench.consumer_tail``)
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from bench.consumer_tail import tail_figures
from bench.group_store_bench import old_against_new, store_commits
from bench.workload import BASE_TIME_MS, Workload, append
from compactor import Consumer
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.topics.records import ProducerRecord
from readers.reader import TopicReader


def median_range(values: list[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4), "runs": len(values)}


def drain_reader(lake: Lake, name: str, compacted: bool) -> tuple[int, float, float, float]:
    """(records, seconds, CPU seconds of the process, seconds of fixed costs: none)."""
    started, cpu = time.perf_counter(), time.process_time()
    count = sum(b.num_rows for b in TopicReader(lake, name, read_compacted=compacted).batches())
    return count, time.perf_counter() - started, time.process_time() - cpu, 0.0


def drain_consumer(lake: Lake, name: str, compacted: bool, max_records: int,
                   group: str) -> tuple[int, float, float, float]:
    """(records, seconds of polling, CPU seconds of polling, seconds of the fixed costs: joining, committing and
    leaving)."""
    total = 0
    started = time.perf_counter()
    consumer = Consumer(lake, name, group=group, read_compacted=compacted)
    joined, cpu = time.perf_counter(), time.process_time()
    while batches := consumer.poll_batches(max_records=max_records):
        total += sum(b.num_rows for b in batches)
    drained, cpu = time.perf_counter(), time.process_time() - cpu
    consumer.commit()
    consumer.close()
    return total, drained - joined, cpu, (joined - started) + (time.perf_counter() - drained)


def throughput(lake: Lake, name: str, compacted: bool, repeats: int) -> dict[str, Any]:
    """Records/s of each way to drain the topic, interleaved run by run, and the ratios of the medians; also
    the CPU seconds each took (all threads of the process: a figure a busy machine disturbs less)."""
    runs: dict[str, list[float]] = {"reader": [], "consumer_500": [], "consumer_100k": []}
    cpu: dict[str, list[float]] = {label: [] for label in runs}
    fixed: list[float] = []
    counts: dict[str, int] = {}
    for repeat in range(repeats):  # interleaved, so machine noise hits all alike
        figures: dict[str, Callable[[], tuple[int, float, float, float]]] = {
            "reader": partial(drain_reader, lake, name, compacted),
            "consumer_500": partial(drain_consumer, lake, name, compacted, 500, f"t500-{compacted}-{repeat}"),
            "consumer_100k": partial(drain_consumer, lake, name, compacted, 100_000, f"t100k-{compacted}-{repeat}"),
        }
        for label, fn in figures.items():
            counts[label], seconds, cpu_seconds, overhead = fn()
            runs[label].append(counts[label] / seconds)
            cpu[label].append(cpu_seconds)
            if label != "reader":
                fixed.append(overhead)
    assert len(set(counts.values())) == 1, f"the drains returned different counts: {counts}"
    reader, reader_cpu = statistics.median(runs["reader"]), statistics.median(cpu["reader"])
    return {"records": counts["reader"], **{f"{k}_records_per_s": median_range(v) for k, v in runs.items()},
            "ratio_500": round(statistics.median(runs["consumer_500"]) / reader, 3),
            "ratio_100k": round(statistics.median(runs["consumer_100k"]) / reader, 3),
            **{f"{k}_cpu_s": median_range(v) for k, v in cpu.items()},
            "cpu_ratio_500": round(reader_cpu / statistics.median(cpu["consumer_500"]), 3),
            "cpu_ratio_100k": round(reader_cpu / statistics.median(cpu["consumer_100k"]), 3),
            "join_commit_close_ms": median_range([f * 1000 for f in fixed])}


def latency(lake: Lake, samples: int) -> dict[str, Any]:
    lake.create_topic("bench.latency")
    topic = lake.topic("bench.latency")
    committed_at: dict[int, float] = {}
    seen: list[float] = []
    consumer = Consumer(lake, "bench.latency", group="latency")  # default settings
    stop = threading.Event()

    def producer() -> None:
        for i in range(samples):
            if stop.wait(0.3):
                return
            produce(topic.refresh(), [ProducerRecord(b"k", str(i).encode())])
            committed_at[i] = time.perf_counter()

    thread = threading.Thread(target=producer)
    thread.start()
    while len(seen) < samples:
        for record in consumer.poll(timeout_ms=1000):
            now = time.perf_counter()
            index = int(record.value or b"0")
            while index not in committed_at and thread.is_alive():
                time.sleep(0.0005)  # produce() returns just after its commit; the poll may see it first
            seen.append(max(0.0, now - committed_at[index]))
    stop.set()
    thread.join()
    consumer.close()
    ordered = sorted(seen)
    return {"samples": len(seen), "p50_s": round(ordered[len(ordered) // 2], 4),
            "p99_s": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 4),
            "max_s": round(ordered[-1], 4)}


def idle(lake: Lake, seconds: float) -> dict[str, Any]:
    consumer = Consumer(lake, "bench.latency", group="idle")
    while consumer.poll():
        pass
    assert consumer.member is not None
    beats, loads, opens = consumer.member.beats, consumer.fetcher.loads, consumer.fetcher.opens
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        assert consumer.poll(timeout_ms=1000) == []
    elapsed = time.perf_counter() - started
    result = {"seconds": round(elapsed, 1),
              "catalog_loads_per_s": round((consumer.fetcher.loads - loads) / elapsed, 2),
              "heartbeats_per_s": round((consumer.member.beats - beats) / elapsed, 2),
              "fetches_opened": consumer.fetcher.opens - opens}
    consumer.close()
    return result


def offsets_topic_commits(lake: Lake, topic_commits: int) -> dict[str, Any]:
    """The alternative design for a group store: a one-record append per commit to a compacted topic of our own
    (Kafka's ``__consumer_offsets``)."""
    def offsets_topic(label: str) -> Callable[[int], object]:
        lake.create_topic(f"bench.offsets_{label}", config={"cleanup.policy": "compact"})
        topic = lake.topic(f"bench.offsets_{label}")
        return lambda i: produce(topic.refresh(), [ProducerRecord(b"commits/bench.commits/0", str(i).encode())])

    return old_against_new(offsets_topic, topic_commits)


def main() -> None:
    parser = argparse.ArgumentParser(description="consumer benchmark (see bench/README.md)")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--keys", type=int, default=100_000, help="keys per partition")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compacted", action="store_true", help="also the compacted view (runs Spark)")
    parser.add_argument("--latency-samples", type=int, default=40)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--commits", type=int, default=10_000, help="group commits per group store")
    parser.add_argument("--stores", default="sqlite",
                        help="group stores to measure (all: sqlite,postgres,s3,directory; or bench.group_store_bench)")
    parser.add_argument("--topic-commits", type=int, default=1_000)
    parser.add_argument("--tail-files", default="",
                        help="raw files of the tail-poll figure, e.g. 100,10000 (or bench.consumer_tail)")
    parser.add_argument("--tail-samples", type=int, default=40)
    parser.add_argument("--throughput-only", action="store_true", help="skip latency, idle and commit figures")
    parser.add_argument("--workdir", default="bench/data/consumer")
    parser.add_argument("--out", default="bench/results/consumer.json")
    args = parser.parse_args()

    workdir = Path(args.workdir).resolve()
    if workdir.exists():
        shutil.rmtree(workdir)
    lake = Lake(warehouse=str(workdir / "warehouse"))
    name = "bench.consume"
    topic = lake.create_topic(name, partitions=args.partitions, config={"cleanup.policy": "compact"})
    workload = Workload(records=args.records, partitions=args.partitions, keys_per_partition=args.keys,
                        batch_records=max(1, min(500_000, args.records // args.partitions // 4)))
    append(topic, workload, workload.records, workload.seed)
    result: dict[str, Any] = {"records": args.records, "partitions": args.partitions}
    result["throughput_raw"] = throughput(lake, name, False, args.repeats)
    print(json.dumps(result, indent=2), flush=True)
    if args.compacted:
        from compactor.compaction.job import TwoPhaseCompactor
        from compactor.spark.session import get_or_create_session

        spark = get_or_create_session(lake.config, extra={"spark.master": "local[2]", "spark.ui.enabled": "false",
                                                          "spark.sql.shuffle.partitions": "4"})
        lake.attach_spark(spark)
        now = BASE_TIME_MS + 10**10
        TwoPhaseCompactor(lake, name, now_ms=now).run()
        append(lake.topic(name), workload, args.records // 100, seed=98)
        TwoPhaseCompactor(lake, name, now_ms=now + 1).run()
        append(lake.topic(name), workload, args.records // 100, seed=99)
        result["throughput_compacted"] = throughput(lake, name, True, args.repeats)
    if not args.throughput_only:
        result["latency"] = latency(lake, args.latency_samples)
        result["idle"] = idle(lake, args.idle_seconds)
        result["group_commit"] = [store_commits(kind, args.commits, workdir / "group-stores")
                                  for kind in args.stores.split(",")]
        result["offsets_topic_append"] = offsets_topic_commits(lake, args.topic_commits)
        if args.tail_files:
            result["tail_poll"] = tail_figures(lake, [int(f) for f in args.tail_files.split(",")],
                                               args.tail_samples)
    print(json.dumps(result, indent=2), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
