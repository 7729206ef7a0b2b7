"""Mirror benchmark (issue 30): ``compactor mirror`` throughput from a local Kafka broker against a plain consumer of
the same client (librdkafka's ``confluent-kafka``) draining the same topic into memory, in the same run; and the
latency from a Kafka produce to the poll of a ``compactor consume`` that reads the mirror, at default settings.

    .venv/bin/python -m bench.mirror_bench                                   # 1M records, 1 and 4 partitions
    .venv/bin/python -m bench.mirror_bench --records 200000 --repeats 3 --latency-records 200   # quick
    .venv/bin/python -m bench.mirror_bench --bootstrap-servers 127.0.0.1:9092   # an existing broker

Without ``--bootstrap-servers`` it starts a broker of its own (``infra/kafka-server.sh`` in a temporary
directory, as the tests do: ``tests/servers.py``; ``infra/setup.sh --kafka`` installs its jars) and stops it by
its process id at the end.

Figures, per partition count (1 and 4), each the median of ``--repeats`` runs interleaved:
  plain        a ``Consumer`` assigned every partition from the start, ``consume(10000)`` until each partition's
               end, keeping every message (the messages are the memory the records are drained into)
  plain_bytes  the same, keeping each record's key and value bytes instead
  mirror       ``Mirror(..., once=True)`` with default settings (commit every 5 s or 100,000 records) into a
               lake topic of its own: records/s and MB/s of key and value bytes, commits included
  ratio        mirror / plain (the target: at least 0.5), and mirror / plain_bytes
Latency: ``compactor mirror --topic T`` and ``compactor consume kafka.T --group G --raw --follow`` run as
processes with default settings; a producer sends one 140-byte record every ``--latency-interval-ms``, carrying
its send time; the latency is the time the consume process printed the record minus that send time.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VALUE_BYTES = 140
KEY_SPACE = 500_000


def create_topic(bootstrap: str, partitions: int) -> str:
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    name = f"bench-{partitions}p-{uuid.uuid4().hex[:8]}"
    client = AdminClient({"bootstrap.servers": bootstrap})
    client.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=60)
    return name


def fill(bootstrap: str, topic: str, records: int, partitions: int) -> int:
    """``records`` records with 140-byte values, keys from a fixed space, spread over the partitions; their bytes."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 1_000_000})
    value = os.urandom(VALUE_BYTES // 2).hex().encode()
    total = 0
    for i in range(records):
        key = b"key-%07d" % (i % KEY_SPACE)
        total += len(key) + len(value)
        while True:
            try:
                producer.produce(topic, key=key, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    return total


def drain(bootstrap: str, topic: str, partitions: int, keep: Callable[[list[Any], list[Any]], None]) -> float:
    """Seconds for a plain consumer to drain ``topic`` from the start, ``keep`` putting each batch in memory."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"plain-{uuid.uuid4().hex[:6]}",
                         "enable.partition.eof": True, "enable.auto.commit": False})
    started = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    memory: list[Any] = []
    ended: set[int] = set()
    while len(ended) < partitions:
        messages = consumer.consume(10_000, 1.0)
        data = []
        for message in messages:
            error = message.error()
            if error is None:
                data.append(message)
            elif error.code() == KafkaError._PARTITION_EOF:
                ended.add(int(message.partition() or 0))
        keep(memory, data)
    seconds = time.perf_counter() - started
    consumer.close()
    return seconds


def mirror_once(bootstrap: str, topic: str, warehouse: Path, namespace: str) -> tuple[float, int, int]:
    from compactor import Mirror
    from compactor.lake import Lake

    lake = Lake(warehouse=str(warehouse))
    started = time.perf_counter()
    summary = Mirror(lake, bootstrap, [topic], namespace=namespace, once=True).run()
    return time.perf_counter() - started, summary.records_copied, summary.commits


def median_range(values: list[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "runs": len(values)}


def throughput(bootstrap: str, records: int, partitions: int, repeats: int, work: Path) -> dict[str, Any]:
    topic = create_topic(bootstrap, partitions)
    total_bytes = fill(bootstrap, topic, records, partitions)
    runs: dict[str, list[float]] = {"plain": [], "plain_bytes": [], "mirror": []}
    commits: list[int] = []
    for repeat in range(repeats):  # interleaved: the machine's noise hits all three alike
        runs["plain"].append(records / drain(bootstrap, topic, partitions, lambda memory, batch: memory.extend(batch)))
        runs["plain_bytes"].append(records / drain(bootstrap, topic, partitions, lambda memory, batch: memory.extend(
            [(m.key(), m.value()) for m in batch])))
        seconds, copied, count = mirror_once(bootstrap, topic, work / "warehouse", f"bench{partitions}r{repeat}")
        assert copied == records, (copied, records)
        runs["mirror"].append(records / seconds)
        commits.append(count)
    out: dict[str, Any] = {label: {"records_per_s": median_range(values),
                                   "mb_per_s": median_range([v * total_bytes / records / 1e6 for v in values])}
                           for label, values in runs.items()}
    out["ratio_mirror_to_plain"] = median_range([m / p for m, p in zip(runs["mirror"], runs["plain"], strict=True)])
    out["ratio_mirror_to_plain_bytes"] = median_range(
        [m / p for m, p in zip(runs["mirror"], runs["plain_bytes"], strict=True)])
    out["mirror_commits"] = commits
    out["records"], out["bytes"] = records, total_bytes
    return out


def latency(bootstrap: str, samples: int, interval_ms: int, work: Path) -> dict[str, Any]:
    """Produce-to-poll latency through a mirror and a ``compactor consume`` (processes, default settings)."""
    from confluent_kafka import Producer

    topic = create_topic(bootstrap, 1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTOR_")}
    env.update(COMPACTOR_WAREHOUSE=str(work / "latency"), PYTHONPATH=str(ROOT))
    cli = [sys.executable, "-m", "compactor.cli.main"]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})

    def send(index: int) -> None:
        body = json.dumps({"i": index, "sent": time.time()})
        producer.produce(topic, key=b"k", value=body.ljust(VALUE_BYTES).encode())
        producer.flush(30)

    mirror = subprocess.Popen([*cli, "mirror", "--bootstrap-servers", bootstrap, "--topic", topic], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    consume: subprocess.Popen[str] | None = None
    try:
        send(-1)  # the mirror creates the lake topic with its first commit
        from compactor.lake import Lake

        lake = Lake(warehouse=str(work / "latency"))
        deadline = time.monotonic() + 120
        while not lake.catalog.table_exists(f"kafka.{topic}"):
            assert time.monotonic() < deadline, "the mirror made no lake topic"
            time.sleep(0.2)
        consume = subprocess.Popen([*cli, "consume", f"kafka.{topic}", "--group", "latency", "--raw", "--follow"],
                                   env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        seen: list[float] = []

        def read() -> None:
            assert consume is not None and consume.stdout is not None
            for line in consume.stdout:
                arrived = time.time()
                body = json.loads(json.loads(line)["value"])
                if body["i"] >= 0:
                    seen.append(arrived - body["sent"])
                if len(seen) >= samples:
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        for index in range(samples):
            send(index)
            time.sleep(interval_ms / 1000)
        reader.join(120)
    finally:
        for process in (consume, mirror):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(60)
                except subprocess.TimeoutExpired:
                    process.kill()
    ordered = sorted(seen)
    return {"samples": len(ordered), "interval_ms": interval_ms, "p50_s": round(ordered[len(ordered) // 2], 3),
            "p99_s": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 3),
            "max_s": round(ordered[-1], 3), "min_s": round(ordered[0], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency-records", type=int, default=300)
    parser.add_argument("--latency-interval-ms", type=int, default=100)
    parser.add_argument("--bootstrap-servers", help="an existing broker (default: start one)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "mirror.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mirror-bench-") as temp:
        work = Path(temp)
        from tests.servers import start_server, stop_server  # the broker the tests use, started the same way

        bootstrap, pid = ((args.bootstrap_servers, None) if args.bootstrap_servers
                          else start_server("kafka-server.sh", work / "kafka", key="bootstrap"))
        try:
            results: dict[str, Any] = {"records": args.records, "repeats": args.repeats, "throughput": {}}
            for partitions in args.partitions:
                results["throughput"][f"{partitions}p"] = throughput(bootstrap, args.records, partitions,
                                                                     args.repeats, work)
                print(json.dumps({f"{partitions}p": results["throughput"][f"{partitions}p"]}), flush=True)
            if args.latency_records:
                results["latency"] = latency(bootstrap, args.latency_records, args.latency_interval_ms, work)
                print(json.dumps({"latency": results["latency"]}), flush=True)
        finally:
            if pid is not None:
                stop_server(pid)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
