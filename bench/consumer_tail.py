"""What waiting costs a consumer as its topic grows (issue 29): a tail poll at 100 and at 10,000 raw files.

A topic of ``files`` raw files is built by appends of one record to each partition (one file each; ``--partitions``,
default 1, builds a large topic that many times faster), and a group consumer with default settings reads it to
its end. Then, ``samples`` times, one record is appended and the poll that returns it is
timed: it finds the change (a catalog load), re-opens its fetch (planning) and reads the new file. The same
consumer's poll with nothing new is timed too (the idle cost). Both topics keep the same number of snapshots in
their metadata (``raw.snapshot.window.count``, ``--tail-window``), so the figures compare file counts alone; a
second pair at the default window (1,000 snapshots) shows what a full snapshot window adds (a metadata.json of
1,000 snapshots parsed at each change).

    .venv/bin/python -m bench.consumer_tail --files 100,10000 --samples 40 [--partitions 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from compactor import Consumer
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.topics.records import ProducerRecord


def build(lake: Lake, name: str, files: int, window: int | None, partitions: int = 1) -> None:
    """A topic of ``files`` raw files, unless it exists with them already: appends of one record to each of its
    ``partitions`` (each record one file), so that a large topic builds ``partitions`` times faster."""
    if name not in lake.list_topics():
        config = {"raw.snapshot.window.count": str(window)} if window is not None else {}
        lake.create_topic(name, partitions=partitions, config=config)
    topic = lake.topic(name)
    have = sum(topic.offsets().next_offsets)
    started = time.perf_counter()
    for i in range(have // partitions, files // partitions):
        produce(topic, [ProducerRecord(b"k", f"{i}".encode(), partition=p) for p in range(partitions)])
        if (i + 1) * partitions % 1000 == 0:
            print(f"  {name}: {(i + 1) * partitions} files, {time.perf_counter() - started:.0f} s", flush=True)


def tail_polls(lake: Lake, name: str, samples: int) -> dict[str, Any]:
    consumer = Consumer(lake, name, group=f"tail-{time.time_ns()}")
    while consumer.poll(max_records=100_000):
        pass
    topic = lake.topic(name)
    fetcher = getattr(consumer, "fetcher", None)  # (earlier versions had no fetcher to ask)
    entries_before = fetcher.manifest_entries_read() if fetcher is not None else 0
    polls, idles = [], []
    for i in range(samples):
        produce(topic, [ProducerRecord(b"k", f"tail-{i}".encode(), partition=0)])
        started = time.perf_counter()
        got = consumer.poll(timeout_ms=5_000)
        polls.append(time.perf_counter() - started)
        assert [r.value for r in got] == [f"tail-{i}".encode()], got
        started = time.perf_counter()
        assert consumer.poll(timeout_ms=0) == []
        idles.append(time.perf_counter() - started)
    entries = fetcher.manifest_entries_read() - entries_before if fetcher is not None else None
    consumer.close()
    ordered = sorted(polls)
    return {"files": sum(lake.topic(name).offsets().next_offsets) - samples, "samples": samples,
            "tail_poll_ms_median": round(statistics.median(polls) * 1000, 2),
            "tail_poll_ms_p90": round(ordered[int(len(ordered) * 0.9)] * 1000, 2),
            "idle_poll_ms_median": round(statistics.median(idles) * 1000, 3),
            "manifest_entries_read_per_poll": round(entries / samples, 1) if entries is not None else None}


def tail_figures(lake: Lake, sizes: list[int], samples: int, window: int | None = 20,
                 repeats: int = 3, partitions: int = 1) -> dict[str, Any]:
    """The tail-poll figures of topics of ``sizes`` raw files at one snapshot window (None: the default)."""
    label = f"window_{window}" if window is not None else "window_default"
    label += f"_p{partitions}" if partitions != 1 else ""
    for files in sizes:
        build(lake, f"bench.tail_{label}_{files}", files, window, partitions)
    runs: dict[int, list[dict[str, Any]]] = {files: [] for files in sizes}
    for _ in range(repeats):  # interleaved: machine noise hits both sizes alike
        for files in sizes:
            runs[files].append(tail_polls(lake, f"bench.tail_{label}_{files}", samples))
    figures: dict[str, Any] = {
        str(f): {"tail_poll_ms_median": statistics.median(r["tail_poll_ms_median"] for r in rs),
                 "tail_poll_ms_runs": [r["tail_poll_ms_median"] for r in rs],
                 "idle_poll_ms_median": statistics.median(r["idle_poll_ms_median"] for r in rs),
                 "manifest_entries_read_per_poll": [r["manifest_entries_read_per_poll"] for r in rs]}
        for f, rs in runs.items()}
    small, large = (figures[str(s)]["tail_poll_ms_median"] for s in (sizes[0], sizes[-1]))
    return {"window": window, "partitions": partitions, **figures, "ratio": round(large / small, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description="tail-poll cost at a growing number of raw files")
    parser.add_argument("--files", default="100,10000")
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--tail-window", type=int, default=20, help="raw.snapshot.window.count of the topics")
    parser.add_argument("--default-window", action="store_true", help="also the topics at the default window")
    parser.add_argument("--warehouse", default="bench/data/consumer-tail/warehouse")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=1,
                        help="partitions of the topics (the tail appends go to partition 0; the consumer owns all)")
    args = parser.parse_args()
    lake = Lake(warehouse=args.warehouse)
    lake.open(create=True)
    sizes = [int(f) for f in args.files.split(",")]
    for window in [args.tail_window, *([None] if args.default_window else [])]:
        print(json.dumps(tail_figures(lake, sizes, args.samples, window, args.repeats,
                                                args.partitions), indent=2), flush=True)


if __name__ == "__main__":
    main()
