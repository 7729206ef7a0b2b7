"""The Kafka side of a mirror: the cluster's topics, partition counts, topic ids, settings and offsets.

One ``AdminClient`` (librdkafka's, through ``confluent-kafka``) answers every question about the source; the
consumer that reads records is the mirror's own (``mirror.runner``). librdkafka's log lines go to the
``compactor.mirror.kafka`` logger (standard error under the command line), never straight to the terminal, and
its failures become the product's errors with the servers named and no setting shown.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from compactor.errors import KafkaAccessDeniedError, KafkaSourceError, KafkaTopicNotFoundError
from compactor.mirror.settings import ClientSettings

KAFKA_LOG = logging.getLogger("compactor.mirror.kafka")
REPEAT_QUIET_S = 30.0  # a librdkafka line said again within this long is left out (see ``RepeatFilter``)


class RepeatFilter(logging.Filter):
    """Leaves out a librdkafka log line already said within the last ``REPEAT_QUIET_S``: a broker that cannot be
    reached otherwise gets one "Connect ... failed" line per attempt from every client, dozens a second. Lines
    differing only in their numbers (milliseconds, counts) are the same line."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.clock = clock
        self.said: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = re.sub(r"\d+", "#", record.getMessage())
        now = self.clock()
        last = self.said.get(key)
        if last is not None and now - last < REPEAT_QUIET_S:
            return False
        if len(self.said) > 1000:
            self.said.clear()
        self.said[key] = now
        return True


KAFKA_LOG.addFilter(RepeatFilter())

# Kafka's codes for credentials the broker refused (librdkafka: SASL, SSL and authorization failures).
REFUSED = {"_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED", "TOPIC_AUTHORIZATION_FAILED",
           "GROUP_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED", "_SSL"}
# Settings the mirror copies into a lake topic it creates, from its source's (the same names in both).
COPIED_SETTINGS = ("cleanup.policy", "delete.retention.ms", "min.compaction.lag.ms", "max.compaction.lag.ms",
                   "min.cleanable.dirty.ratio", "max.message.bytes")


@dataclass(frozen=True)
class TopicInfo:
    """One Kafka topic as the cluster describes it."""

    name: str
    partitions: int
    topic_id: str | None


def describe_error(error: Any, servers: str) -> KafkaSourceError:
    """A librdkafka error (``KafkaError``) as the product's error, naming the servers."""
    name = error.name() if hasattr(error, "name") else ""
    text = error.str() if hasattr(error, "str") else str(error)
    if name in REFUSED:
        return KafkaAccessDeniedError(f"Kafka at {servers} refused the credentials ({name}: {text}); check the "
                                      "client settings (sasl.*, ssl.*) in the environment or "
                                      "COMPACTOR_KAFKA_CONFIG_FILE")
    if name == "UNKNOWN_TOPIC_OR_PART":
        return KafkaTopicNotFoundError(f"Kafka at {servers}: {text}")
    return KafkaSourceError(f"Kafka at {servers}: {text} ({name})")


@contextlib.contextmanager
def kafka_errors(servers: str, what: str) -> Iterator[None]:
    """Turn librdkafka's exceptions raised while doing ``what`` into the product's errors."""
    from confluent_kafka import KafkaException

    try:
        yield
    except KafkaException as exc:
        error = describe_error(exc.args[0] if exc.args else exc, servers)
        raise type(error)(f"{what}: {error}") from None


class Source:
    """The Kafka cluster a mirror copies from (see the module docstring)."""

    def __init__(self, servers: str, settings: ClientSettings, *, timeout_s: float = 30.0) -> None:
        from confluent_kafka.admin import AdminClient

        self.servers = servers
        self.settings = settings
        self.timeout_s = timeout_s
        self._errors: list[Any] = []
        config: dict[str, Any] = {**settings.admin(), "bootstrap.servers": servers, "error_cb": self._errors.append}
        self.admin = AdminClient(config, logger=KAFKA_LOG)

    def topic_names(self) -> list[str]:
        """Every topic of the cluster (internal ones included). Asked in rounds of a second, so that refused
        credentials (reported between rounds) end the wait at once instead of after the whole timeout."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                metadata = self.admin.list_topics(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
                return sorted(metadata.topics)
            except KafkaException as exc:
                self.admin.poll(0)  # serves the error callback
                refused = [e for e in self._errors if e.name() in REFUSED]
                if refused:
                    raise describe_error(refused[0], self.servers) from None
                if time.monotonic() >= deadline:
                    error = describe_error(exc.args[0] if exc.args else exc, self.servers)
                    raise type(error)(f"no answer from Kafka within {self.timeout_s:g} s (socket.timeout.ms) while "
                                      f"listing the topics: {error}; check --bootstrap-servers, that the brokers "
                                      "are up and reachable from here, and security.protocol") from None

    def describe(self, names: Sequence[str]) -> dict[str, TopicInfo]:
        """Partition counts and topic ids of ``names``; a topic the cluster lacks is left out."""
        from confluent_kafka import KafkaException, TopicCollection

        if not names:
            return {}
        out: dict[str, TopicInfo] = {}
        with kafka_errors(self.servers, "describing topics"):
            futures = self.admin.describe_topics(TopicCollection(list(names)), request_timeout=self.timeout_s)
        for name, future in futures.items():
            try:
                found = future.result()
            except KafkaException as exc:
                error = exc.args[0] if exc.args else exc
                if getattr(error, "name", lambda: "")() == "UNKNOWN_TOPIC_OR_PART":
                    continue
                raise describe_error(error, self.servers) from None
            out[name] = TopicInfo(name, len(found.partitions), str(found.topic_id) if found.topic_id else None)
        return out

    def settings_of(self, name: str) -> dict[str, str]:
        """The settings a lake topic copies from Kafka topic ``name`` (``COPIED_SETTINGS``)."""
        from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]

        resource = ConfigResource(ResourceType.TOPIC, name)
        with kafka_errors(self.servers, f"reading the settings of Kafka topic {name}"):
            entries = self.admin.describe_configs([resource], request_timeout=self.timeout_s)[resource].result()
        return {key: str(entries[key].value) for key in COPIED_SETTINGS
                if key in entries and entries[key].value is not None}

    def offsets(self, partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        """``(log start, log end)`` of each ``(topic, partition)``: the end is the last stable offset under
        ``read_committed`` (what such a consumer can reach), the high watermark otherwise."""
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

        if not partitions:
            return {}
        isolation = (IsolationLevel.READ_COMMITTED if self.settings.isolation_level == "read_committed"
                     else IsolationLevel.READ_UNCOMMITTED)
        found: dict[str, dict[tuple[str, int], int]] = {}
        with kafka_errors(self.servers, "listing offsets"):
            for kind, spec in (("start", OffsetSpec.earliest()), ("end", OffsetSpec.latest())):  # type: ignore[no-untyped-call]
                futures = self.admin.list_offsets({TopicPartition(t, p): spec for t, p in partitions},
                                                  isolation_level=isolation, request_timeout=self.timeout_s)
                found[kind] = {(tp.topic, tp.partition): int(f.result().offset) for tp, f in futures.items()}
        return {tp: (found["start"][tp], found["end"][tp]) for tp in partitions}


__all__ = ["COPIED_SETTINGS", "KAFKA_LOG", "RepeatFilter", "Source", "TopicInfo", "describe_error", "kafka_errors"]
