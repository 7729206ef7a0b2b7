"""Kafka as the oracle of compaction (docs/guarantees.md#mirrors): for every key, the last record Kafka's own log
cleaner keeps and the last record the compacted view keeps have the same offset and bytes; tombstones agree within and
after ``delete.retention.ms``.

The source topics have time-rolled segments (``segment.ms``) and a low dirty ratio, and the broker's cleaner
looks for work every 200 ms (tests/servers.py); a test waits until the cleaner's checkpoint has passed every
closed segment, as the broker records it in its log directory."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest

from compactor import Mirror, TwoPhaseCompactor
from compactor.clock import wall_clock_ms
from compactor.lake import Lake
from readers import TopicReader
from tests.kafka_helpers import (
    Sent,
    consume_all,
    create_topic,
    in_transaction,
    produce,
    set_config,
    transactional,
    wait_for,
)
from tests.servers import KafkaBroker

pytestmark = pytest.mark.spark

DELETE_RETENTION_MS = 1000
ROLL_S = 0.15  # more than segment.ms: the next append to a partition rolls its segment
COMPACTED = {"segment.ms": "100", "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0",
             "delete.retention.ms": str(DELETE_RETENTION_MS)}


def cleaned(broker: KafkaBroker, topic: str, partitions: int) -> bool:
    """Whether Kafka's cleaner has cleaned every closed segment of every partition: its checkpoint (the first
    dirty offset per partition) has reached the base offset of the active segment."""
    data = broker.directory / "data"
    checkpoint = data / "cleaner-offset-checkpoint"
    if not checkpoint.exists():
        return False
    dirty = {(parts[0], int(parts[1])): int(parts[2]) for parts in
             (line.split() for line in checkpoint.read_text().splitlines()[2:]) if len(parts) == 3}
    for partition in range(partitions):
        bases = [int(path.name.split(".")[0]) for path in Path(data / f"{topic}-{partition}").glob("*.log")]
        if not bases or dirty.get((topic, partition), -1) < max(bases):
            return False
    return True


def last_per_key(records: list[tuple[Any, ...]]) -> dict[tuple[int, bytes], tuple[Any, ...]]:
    """The last record of every (partition, key): its offset, value, headers and timestamp."""
    out: dict[tuple[int, bytes], tuple[Any, ...]] = {}
    for partition, offset, key, value, headers, timestamp in sorted(records, key=lambda r: (r[0], r[1])):
        if key is not None:
            out[(partition, key)] = (offset, value, list(headers), timestamp)
    return out


def lake_view(lake: Lake, name: str, *, compacted: bool) -> list[tuple[Any, ...]]:
    return [(r.partition, r.offset, r.key, r.value, list(r.headers), r.timestamp_ms)
            for r in TopicReader(lake, name, read_compacted=compacted)]


def wave(rng: random.Random, size: int, keys: int) -> list[Sent]:
    """Overwrites and tombstones over a few keys, some records with headers (a null and an empty value too)."""
    out: list[Sent] = []
    for _ in range(size):
        key = f"k{rng.randrange(keys)}".encode()
        value = None if rng.random() < 0.2 else rng.choice([b"", f"v{rng.randrange(1000)}".encode()])
        headers = rng.choice([None, [("h", b"1"), ("h", None)], [("e", b"")]])
        out.append((rng.randrange(2), key, value, headers))
    return out


def write_waves(broker: KafkaBroker, topic: str, rng: random.Random, count: int) -> None:
    """``count`` waves, each in its own segment: plain records, a committed and an aborted transaction."""
    producer = transactional(broker)
    for _ in range(count):
        time.sleep(ROLL_S)
        produce(broker, topic, wave(rng, 6, 8))
        in_transaction(producer, topic, wave(rng, 4, 8), commit=True)
        in_transaction(producer, topic, wave(rng, 4, 8), commit=False)


def close_segments(broker: KafkaBroker, topic: str, tag: str) -> None:
    """Close every partition's segment: one record to each, under a key of its own (the active segments)."""
    time.sleep(ROLL_S)
    produce(broker, topic, [(p, f"{tag}-{p}".encode(), b"last", None) for p in range(2)])


def roll(broker: KafkaBroker, topic: str, tag: str) -> None:
    """Close every partition's segment and wait until Kafka's cleaner has cleaned them."""
    close_segments(broker, topic, tag)
    wait_for(lambda: cleaned(broker, topic, 2), "Kafka's cleaner")


def compare(lake: Lake, broker: KafkaBroker, topic: str) -> dict[tuple[int, bytes], tuple[Any, ...]]:
    """Kafka's last record per key against the compacted view's; returns Kafka's."""
    kafka = last_per_key(consume_all(broker, topic, partitions=2))
    view = lake_view(lake, f"kafka.{topic}", compacted=True)
    assert last_per_key(view) == kafka
    return kafka


def test_compaction_keeps_what_kafkas_cleaner_keeps(lake: Lake, kafka_broker: KafkaBroker, spark: Any) -> None:
    rng = random.Random(3)
    # The whole sequence is written while the policy is delete (Kafka accepts keyless records only then), its
    # segments closed, and mirrored before any cleaning: the lake compacts the full history, Kafka's cleaner the
    # same log, in ONE pass once the policy is compact (the first pass sets every tombstone's delete horizon; only
    # a later pass past it may drop one, and none comes until more records close another segment)
    topic = create_topic(kafka_broker, partitions=2, config={**COMPACTED, "cleanup.policy": "delete"})
    produce(kafka_broker, topic, [(p, None, b"keyless", None) for p in range(2)] + wave(rng, 6, 8))
    write_waves(kafka_broker, topic, rng, 4)
    close_segments(kafka_broker, topic, "first")
    mirror = Mirror(lake, kafka_broker.bootstrap, [topic], once=True, topic_config={"cleanup.policy": "compact"})
    mirror.run()
    name = f"kafka.{topic}"
    history = lake_view(lake, name, compacted=False)
    assert any(r[2] is None for r in history) and any(r[3] is None for r in history)
    set_config(kafka_broker, topic, **{"cleanup.policy": "compact"})
    wait_for(lambda: cleaned(kafka_broker, topic, 2), "Kafka's cleaner")
    assert len(consume_all(kafka_broker, topic, partitions=2)) < len(history), "Kafka's cleaner removed records"

    first = TwoPhaseCompactor(lake, name, now_ms=wall_clock_ms()).run()  # the lake copied compact, 1000 ms
    kafka = compare(lake, kafka_broker, topic)
    tombstones = {key for key, (_, value, _, _) in kafka.items() if value is None}
    assert tombstones, "the sequence leaves tombstones as some keys' last records"

    # after delete.retention.ms: the next cleaning drops them, in Kafka as here
    time.sleep(DELETE_RETENTION_MS / 1000 + 0.2)
    produce(kafka_broker, topic, [(p, f"later-{p}".encode(), b"x", None) for p in range(2)])
    roll(kafka_broker, topic, "second")
    Mirror(lake, kafka_broker.bootstrap, [topic], once=True).run()
    later = max(wall_clock_ms(), first.run_time_ms + DELETE_RETENTION_MS)
    assert TwoPhaseCompactor(lake, name, now_ms=later).run().stats.tombstones_dropped == len(tombstones)
    after = compare(lake, kafka_broker, topic)
    assert not any(value is None for _, value, _, _ in after.values())
    assert set(kafka) - set(after) == tombstones


def test_a_source_kafka_already_compacted_is_compacted_again(lake: Lake, kafka_broker: KafkaBroker,
                                                             spark: Any) -> None:
    rng = random.Random(4)
    topic = create_topic(kafka_broker, partitions=2, config={**COMPACTED, "cleanup.policy": "compact"})
    write_waves(kafka_broker, topic, rng, 3)
    roll(kafka_broker, topic, "roll")
    summary = Mirror(lake, kafka_broker.bootstrap, [topic], once=True).run()
    name = f"kafka.{topic}"
    source = consume_all(kafka_broker, topic, partitions=2)
    assert lake_view(lake, name, compacted=False) == source  # Kafka's cleaned log, holes and all
    assert summary.records_copied == len(source) < sum(p.position for p in summary.partitions)
    TwoPhaseCompactor(lake, name, now_ms=wall_clock_ms()).run()
    kept = compare(lake, kafka_broker, topic)
    assert len(lake_view(lake, name, compacted=True)) == len(kept)  # the view holds exactly the last records
