"""CPU seconds of draining a topic with a group consumer (at 500 and 100,000 records a poll) and with
``TopicReader.batches()``, through the public API only, so that two versions of the code can drain the same
topic one after the other (issue 29: per-partition turns against the code before them):

    PYTHONPATH=/path/to/checkout .venv/bin/python bench/consumer_cpu.py WAREHOUSE [TOPIC] [REPEATS]

Prints one JSON object: per figure, a list of ``[records, cpu_s, wall_s]``.
"""

from __future__ import annotations

import json
import sys
import time

from compactor import Consumer
from compactor.lake import Lake
from readers import TopicReader


def consumer_drain(lake: Lake, topic: str, max_records: int) -> list[float]:
    consumer = Consumer(lake, topic, group=f"cpu-{time.time_ns()}")
    cpu, wall, got = time.process_time(), time.perf_counter(), 0
    while batches := consumer.poll_batches(max_records=max_records):
        got += sum(b.num_rows for b in batches)
    figures = [got, round(time.process_time() - cpu, 3), round(time.perf_counter() - wall, 3)]
    consumer.close()
    return figures


def reader_drain(lake: Lake, topic: str) -> list[float]:
    cpu, wall = time.process_time(), time.perf_counter()
    got = sum(b.num_rows for b in TopicReader(lake, topic).batches())
    return [got, round(time.process_time() - cpu, 3), round(time.perf_counter() - wall, 3)]


def main() -> None:
    lake = Lake(warehouse=sys.argv[1])
    topic = sys.argv[2] if len(sys.argv) > 2 else "bench.consume"
    out: dict[str, list[list[float]]] = {"reader": [], "consumer_500": [], "consumer_100k": []}
    for _ in range(int(sys.argv[3]) if len(sys.argv) > 3 else 2):
        out["reader"].append(reader_drain(lake, topic))
        out["consumer_500"].append(consumer_drain(lake, topic, 500))
        out["consumer_100k"].append(consumer_drain(lake, topic, 100_000))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
