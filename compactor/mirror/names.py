"""Which Kafka topics a mirror copies, and the lake topic each becomes: ``T`` into ``NS.T``, or a ``--rename``.

A Kafka topic name may hold what a lake name cannot: a ``.`` (the lake reads it as a namespace separator, so
``orders.v1`` would land in namespace ``NS.orders``), a leading ``-``, or ``__compacted``. Such a name is an
error naming ``--rename T=NS.NAME`` as the way out, never silently rewritten.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from compactor.errors import InvalidTopicNameError, UsageError
from compactor.topics.naming import TopicName

DEFAULT_NAMESPACE = "kafka"


def parse_renames(pairs: Iterable[str] | Mapping[str, str]) -> dict[str, TopicName]:
    """``T=NS.NAME`` pairs (or a mapping) as Kafka topic -> lake topic name."""
    items = list(pairs.items()) if isinstance(pairs, Mapping) else [p.partition("=")[::2] for p in pairs]
    out: dict[str, TopicName] = {}
    for source, target in items:
        if not source or not target:
            raise UsageError(f"--rename expects KAFKA_TOPIC=NAMESPACE.NAME, got {source}={target}")
        if source in out:
            raise UsageError(f"--rename: Kafka topic {source!r} is renamed twice")
        out[source] = TopicName.parse(target)
    return out


@dataclass(frozen=True)
class Selection:
    """The Kafka topics a mirror copies (named, or matching a pattern) and their lake names."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    namespace: str = DEFAULT_NAMESPACE
    renames: dict[str, TopicName] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if bool(self.topics) == (self.pattern is not None):
            raise UsageError("name the Kafka topics to mirror with --topic T ... or --pattern REGEX (one of them)")
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise UsageError(f"--pattern {self.pattern!r} is not a regular expression: {exc}") from None
        try:
            TopicName.parse(f"{self.namespace}.t")
        except InvalidTopicNameError:
            raise UsageError(f"--namespace {self.namespace!r} is not a lake namespace (letters, digits, '_', '-', "
                             "dotted levels)") from None

    def matches(self, source: str) -> bool:
        """Whether a Kafka topic is mirrored: named, or (a pattern, as Kafka's subscriptions match: the whole
        name) matching and not internal (``__consumer_offsets``, ``__transaction_state``, ...)."""
        if self.pattern is None:
            return source in self.topics
        return re.fullmatch(self.pattern, source) is not None and not source.startswith("__")

    def chosen(self, available: Sequence[str]) -> list[str]:
        """The mirrored topics among ``available`` (sorted)."""
        return sorted(t for t in available if self.matches(t))

    def lake_name(self, source: str) -> TopicName:
        """The lake topic of Kafka topic ``source`` (see the module docstring)."""
        if source in self.renames:
            return self.renames[source]
        hint = f"map it with --rename {source}={self.namespace}.NAME"
        if "." in source:
            raise InvalidTopicNameError(f"Kafka topic {source!r} has a '.', which a lake name reads as a namespace "
                                        f"separator: {hint}")
        try:
            return TopicName.parse(f"{self.namespace}.{source}")
        except InvalidTopicNameError as exc:
            raise InvalidTopicNameError(f"Kafka topic {source!r} cannot be a lake topic ({exc}): {hint}") from None


__all__ = ["DEFAULT_NAMESPACE", "Selection", "parse_renames"]
