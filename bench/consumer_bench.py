"""Consumer benchmark (issue 20): consumer throughput against ``TopicReader.batches()``, produce-to-poll
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
  idle              catalog queries and heartbeat writes per second of a consumer with nothing new
  group commit      one ``commit`` of a member (2 partitions) at commit 100 and at ``--commits`` of a group's
                    life, against the alternative store, a one-record append to a topic of our own (Kafka's
                    ``__consumer_offsets`` design), at append 100 and ``--topic-commits``
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

from bench.workload import BASE_TIME_MS, Workload, append
from compactor import Consumer
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.topics.records import ProducerRecord
from readers.reader import TopicReader


def median_range(values: list[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4), "runs": len(values)}


def drain_reader(lake: Lake, name: str, compacted: bool) -> tuple[int, float, float]:
    started = time.perf_counter()
    count = sum(b.num_rows for b in TopicReader(lake, name, read_compacted=compacted).batches())
    return count, time.perf_counter() - started, 0.0


def drain_consumer(lake: Lake, name: str, compacted: bool, max_records: int, group: str) -> tuple[int, float, float]:
    """(records, seconds of polling, seconds of the fixed costs: joining, committing and leaving)."""
    total = 0
    started = time.perf_counter()
    consumer = Consumer(lake, name, group=group, read_compacted=compacted)
    joined = time.perf_counter()
    while batches := consumer.poll_batches(max_records=max_records):
        total += sum(b.num_rows for b in batches)
    drained = time.perf_counter()
    consumer.commit()
    consumer.close()
    return total, drained - joined, (joined - started) + (time.perf_counter() - drained)


def throughput(lake: Lake, name: str, compacted: bool, repeats: int) -> dict[str, Any]:
    runs: dict[str, list[float]] = {"reader": [], "consumer_500": [], "consumer_100k": []}
    fixed: list[float] = []
    counts: dict[str, int] = {}
    for repeat in range(repeats):  # interleaved, so machine noise hits all alike
        figures: dict[str, Callable[[], tuple[int, float, float]]] = {
            "reader": partial(drain_reader, lake, name, compacted),
            "consumer_500": partial(drain_consumer, lake, name, compacted, 500, f"t500-{compacted}-{repeat}"),
            "consumer_100k": partial(drain_consumer, lake, name, compacted, 100_000, f"t100k-{compacted}-{repeat}"),
        }
        for label, fn in figures.items():
            counts[label], seconds, overhead = fn()
            runs[label].append(counts[label] / seconds)
            if label != "reader":
                fixed.append(overhead)
    assert len(set(counts.values())) == 1, f"the drains returned different counts: {counts}"
    reader = statistics.median(runs["reader"])
    return {"records": counts["reader"], **{f"{k}_records_per_s": median_range(v) for k, v in runs.items()},
            "ratio_500": round(statistics.median(runs["consumer_500"]) / reader, 3),
            "ratio_100k": round(statistics.median(runs["consumer_100k"]) / reader, 3),
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
    beats = consumer.membership
    assert beats is not None
    counted = {"heartbeats": 0}
    real = beats.heartbeat

    def counting(now_ms: int) -> Any:
        counted["heartbeats"] += 1
        return real(now_ms)

    beats.heartbeat = counting  # type: ignore[method-assign]  # count the heartbeats an idle poll makes
    before = consumer.watch.reads
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        assert consumer.poll(timeout_ms=1000) == []
    elapsed = time.perf_counter() - started
    consumer.close()
    return {"seconds": round(elapsed, 1), "catalog_queries_per_s": round((consumer.watch.reads - before) / elapsed, 2),
            "heartbeat_writes_per_s": round(counted["heartbeats"] / elapsed, 2),
            "data_or_table_metadata_reads": 0}


def _timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _old_against_new(make: Callable[[str], Callable[[int], object]], total: int) -> dict[str, Any]:
    """Commit ``total`` times to an old store object; over its last 100, alternate with the first 100 commits
    of a new one, so both figures come from the same minutes of a shared machine. Medians of the last 50."""
    old = make("old")
    for i in range(total - 100):
        old(i)
    new = make("new")
    old_times, new_times = [], []
    for i in range(100):
        old_times.append(_timed(partial(old, total - 100 + i)))
        new_times.append(_timed(partial(new, i)))
    at_new, at_old = statistics.median(new_times[50:]), statistics.median(old_times[50:])
    return {"commits": total, "at_100_ms": round(at_new * 1000, 2), f"at_{total}_ms": round(at_old * 1000, 2),
            "ratio": round(at_old / at_new, 3)}


def group_commits(lake: Lake, commits: int, topic_commits: int) -> dict[str, Any]:
    lake.create_topic("bench.commits", partitions=2)
    produce(lake.topic("bench.commits"), [ProducerRecord(b"a", b"1", partition=p) for p in (0, 1)])

    def member(group: str) -> Callable[[int], object]:
        consumer = Consumer(lake, "bench.commits", group=f"commits-{group}")
        return lambda i: consumer.commit({0: i % 2, 1: (i + 1) % 2})

    def offsets_topic(label: str) -> Callable[[int], object]:
        lake.create_topic(f"bench.offsets_{label}", config={"cleanup.policy": "compact"})
        topic = lake.topic(f"bench.offsets_{label}")
        return lambda i: produce(topic.refresh(), [ProducerRecord(b"commits/bench.commits/0", str(i).encode())])

    return {"sql_table": _old_against_new(member, commits),
            "topic_append": _old_against_new(offsets_topic, topic_commits)}


def main() -> None:
    parser = argparse.ArgumentParser(description="consumer benchmark (see bench/README.md)")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--keys", type=int, default=100_000, help="keys per partition")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compacted", action="store_true", help="also the compacted view (runs Spark)")
    parser.add_argument("--latency-samples", type=int, default=40)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--commits", type=int, default=10_000)
    parser.add_argument("--topic-commits", type=int, default=1_000)
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
        result["group_commit"] = group_commits(lake, args.commits, args.topic_commits)
    print(json.dumps(result, indent=2), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
