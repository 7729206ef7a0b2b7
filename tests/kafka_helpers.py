"""Kafka for the mirror's tests: topics on the test broker (``servers.kafka_broker``), records produced plainly or in
transactions, and mirrored lake topics made without a broker (for the rules on offsets with gaps)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from compactor.lake import Lake
from compactor.mirror.source import TopicInfo
from compactor.mirror.target import open_lake_topic
from compactor.topics.naming import TopicName
from compactor.topics.topic import Topic
from readers import TopicReader
from tests.servers import KafkaBroker

# One Kafka record to produce: (partition, key, value, headers: a list of (name, bytes or None), or None)
Sent = tuple[int, bytes | None, bytes | None, Any]


def mirrored_topic(lake: Lake, name: str, partitions: int = 1, source: str = "src") -> Topic:
    """A lake topic marked as the mirror of Kafka topic ``source`` (no broker involved): its offsets may have gaps."""
    return open_lake_topic(lake, TopicName.parse(name), TopicInfo(source, partitions, None), {})


def admin(broker: KafkaBroker) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create_topic(broker: KafkaBroker, partitions: int = 1, prefix: str = "t",
                 config: Mapping[str, str] | None = None) -> str:
    """A new Kafka topic with a unique name (letters, digits and '-', so the lake can hold it) and ``config``."""
    from confluent_kafka.cimpl import NewTopic

    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    client = admin(broker)  # held until the answer came: a client dropped earlier cancels its requests
    client.create_topics([NewTopic(name, partitions, 1, config=dict(config or {}))])[name].result(timeout=60)
    return name


def produce(broker: KafkaBroker, topic: str, records: Iterable[Sent]) -> list[tuple[int, int]]:
    """Produce ``records`` (idempotently, in order per partition); their ``(partition, offset)``."""
    from confluent_kafka import Producer

    landed: list[tuple[int, int]] = []

    def report(error: Any, message: Any) -> None:
        assert error is None, error
        landed.append((message.partition(), message.offset()))

    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for partition, key, value, headers in records:
        producer.produce(topic, key=key, value=value, partition=partition, headers=headers, on_delivery=report)
    assert producer.flush(60) == 0
    return landed


def transactional(broker: KafkaBroker, name: str | None = None) -> Any:
    """A transactional producer, its transactions initialised."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                         "transactional.id": name or f"tx-{uuid.uuid4().hex[:10]}"})
    producer.init_transactions(60)
    return producer


def in_transaction(producer: Any, topic: str, records: Sequence[Sent], *, commit: bool) -> None:
    """Produce ``records`` in one transaction, committed or aborted (flushed first, so aborted records reach the
    log and leave their offsets there)."""
    producer.begin_transaction()
    for partition, key, value, headers in records:
        producer.produce(topic, key=key, value=value, partition=partition, headers=headers)
    assert producer.flush(60) == 0
    if commit:
        producer.commit_transaction(60)
    else:
        producer.abort_transaction(60)


def offsets(broker: KafkaBroker, topic: str, partition: int = 0) -> tuple[int, int]:
    """``(log start, last stable offset)`` of one partition."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

    client = admin(broker)
    out = []
    for spec in (OffsetSpec.earliest(), OffsetSpec.latest()):  # type: ignore[no-untyped-call]
        futures = client.list_offsets({TopicPartition(topic, partition): spec},
                                      isolation_level=IsolationLevel.READ_COMMITTED)
        out.append(next(iter(futures.values())).result().offset)
    return out[0], out[1]


def set_config(broker: KafkaBroker, topic: str, **config: str) -> None:
    """Change topic settings at the broker (incrementally)."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
               for k, v in config.items()]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    client = admin(broker)
    for future in client.incremental_alter_configs([resource]).values():
        future.result(timeout=60)


def consume_all(broker: KafkaBroker, topic: str, partitions: int = 1) -> list[Any]:
    """Every record Kafka still holds in ``topic`` (read_committed), as ``(partition, offset, key, value,
    headers, timestamp)`` in partition, offset order."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                         "enable.partition.eof": True, "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, -2) for p in range(partitions)])  # -2: the beginning
    out: list[Any] = []
    ended: set[int] = set()
    deadline = time.monotonic() + 60
    while len(ended) < partitions and time.monotonic() < deadline:
        for message in consumer.consume(1000, 0.5):
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    ended.add(int(message.partition() or 0))
                continue
            out.append((message.partition(), message.offset(), message.key(), message.value(),
                        message.headers() or [], message.timestamp()[1]))
    consumer.close()
    assert len(ended) == partitions, "Kafka did not deliver every partition's end"
    return sorted(out, key=lambda r: (r[0], r[1]))


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    """Wait until ``condition()`` holds (the broker's own background work: its cleaner, its retention)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def mirror_once(lake: Lake, broker: KafkaBroker, topic: str) -> None:
    """Mirror ``topic`` into ``kafka.<topic>`` up to its current end."""
    from compactor.mirror import Mirror

    Mirror(lake, broker.bootstrap, [topic], once=True).run()


def gapped(lake: Lake, broker: KafkaBroker, **config: str) -> tuple[str, str]:
    """A Kafka topic with committed and aborted transactions, mirrored: offsets 0, 1, 5, 6, 8 hold records (the
    others are markers and aborted records) and N_p = 10, past the trailing marker."""
    topic = create_topic(broker, config=config)
    producer = transactional(broker)
    in_transaction(producer, topic, [(0, b"a", b"1", None), (0, b"b", b"2", None)], commit=True)  # 0 1 (2)
    in_transaction(producer, topic, [(0, b"a", b"x", None)], commit=False)  # 3 (4)
    produce(broker, topic, [(0, b"c", b"3", None)])  # 5
    in_transaction(producer, topic, [(0, b"a", b"4", None)], commit=True)  # 6 (7)
    in_transaction(producer, topic, [(0, b"b", None, None)], commit=True)  # 8 (9)
    mirror_once(lake, broker, topic)
    name = f"kafka.{topic}"
    assert [r.offset for r in TopicReader(lake, name)] == [0, 1, 5, 6, 8]
    assert lake.topic(name).offsets().next_offsets == (10,)
    return topic, name
