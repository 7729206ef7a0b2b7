"""The demo behind ``infra/demo.sh``: produce a topic, compact it with the Spark job, read it both ways.

It uses the embedded default (a warehouse directory with a SQLite catalog inside, local Spark) and prints
what it does at each step, with raw versus compacted counts and sizes at the end.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import time
from pathlib import Path
from typing import Any

from compactor.compaction.job import TwoPhaseCompactor
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.topics.records import ProducerRecord
from readers.reader import TopicReader

TOPIC = "demo.orders"
SHOWN = ("records_read", "records_kept", "records_removed", "tombstones_kept", "duration_ms")


def say(message: str) -> None:
    print(f"[demo] {message}", flush=True)


def make_batch(rng: random.Random, keys: int, size: int, start_ms: int) -> list[ProducerRecord]:
    """Orders keyed by customer: mostly updates, some deletions (tombstones), a few keyless events."""
    out = []
    for i in range(size):
        roll = rng.random()
        key = f"customer-{rng.randrange(keys):05d}".encode()
        if roll < 0.03:
            out.append(ProducerRecord(None, b'{"event":"heartbeat"}', timestamp_ms=start_ms + i))
        elif roll < 0.08:
            out.append(ProducerRecord(key, None, timestamp_ms=start_ms + i))
        else:
            value = json.dumps({"order": rng.randrange(10**6), "amount": round(rng.random() * 100, 2)}).encode()
            out.append(ProducerRecord(key, value, (("source", b"demo"),), timestamp_ms=start_ms + i))
    return out


def summarise(reader: TopicReader) -> dict[str, int]:
    count = tombstones = size = 0
    for batch in reader.batches():
        count += batch.num_rows
        tombstones += sum(1 for k, v in zip(batch.column("key").to_pylist(), batch.column("value").to_pylist(),
                                            strict=True) if k is not None and v is None)
        size += batch.nbytes
    return {"records": count, "tombstones": tombstones, "arrow_bytes": size}


def run(warehouse: Path, batches: int, batch_size: int, keys: int) -> dict[str, Any]:
    if warehouse.exists():
        shutil.rmtree(warehouse)
    lake = Lake(warehouse=str(warehouse))
    rng = random.Random(7)
    say(f"warehouse {warehouse} (SQLite catalog inside), topic {TOPIC} with 4 partitions, cleanup.policy=compact")
    topic = lake.create_topic(TOPIC, partitions=4, config={"cleanup.policy": "compact",
                                                           "delete.retention.ms": "3600000"})
    start = time.time()
    base_ms = 1_767_225_600_000
    for b in range(batches):
        produce(topic, make_batch(rng, keys, batch_size, base_ms + b * batch_size))
    topic.refresh()
    say(f"produced {batches} batches of {batch_size} records over {keys} keys in {time.time() - start:.1f}s; "
        f"next offsets {dict(enumerate(topic.offsets().next_offsets))}")

    report: dict[str, Any] = {"raw": summarise(TopicReader(lake, TOPIC))}
    say(f"raw view: {report['raw']}")

    say("compacting with the two-phase Spark job (starting Spark takes a few seconds)...")
    first = TwoPhaseCompactor(lake, TOPIC, now_ms=base_ms + 60_000).run()
    say(f"first run: committed={first.committed} cursor={first.compacted_snapshot_id} "
        f"horizons={first.horizons} stats={ {k: first.stats.as_json()[k] for k in SHOWN} }")

    produce(topic.refresh(), make_batch(rng, keys, batch_size // 10, base_ms + 70_000))
    second = TwoPhaseCompactor(lake, TOPIC, now_ms=base_ms + 120_000).run()
    say(f"incremental run over {second.stats.records_read} new records: committed={second.committed} "
        f"stats={ {k: second.stats.as_json()[k] for k in SHOWN} }")
    again = TwoPhaseCompactor(lake, TOPIC, now_ms=base_ms + 130_000).run()
    say(f"run with nothing new: committed={again.committed} ({again.reason})")

    report["raw"] = summarise(TopicReader(lake, TOPIC))
    report["compacted"] = summarise(TopicReader(lake, TOPIC, read_compacted=True))
    report["runs"] = [first.as_json(), second.as_json()]
    raw, compacted = report["raw"], report["compacted"]
    say(f"raw view:       {raw['records']:>7} records {raw['arrow_bytes'] / 1e6:7.2f} MB")
    say(f"compacted view: {compacted['records']:>7} records {compacted['arrow_bytes'] / 1e6:7.2f} MB "
        f"({100 * compacted['records'] / max(raw['records'], 1):.1f}% of the records, "
        f"{compacted['tombstones']} tombstones kept for delete.retention.ms)")
    sample = next(TopicReader(lake, TOPIC, read_compacted=True).records(), None)
    if sample is not None:
        say(f"first compacted record: partition {sample.partition} offset {sample.offset} key {sample.key!r}")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--warehouse", default="./demo-warehouse", help="recreated on every run")
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=4000)
    parser.add_argument("--keys", type=int, default=2000)
    args = parser.parse_args()
    report = run(Path(args.warehouse).resolve(), args.batches, args.batch_size, args.keys)
    print(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
