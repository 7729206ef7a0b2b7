"""Topic names: ``namespace.topic`` (the namespace may itself be dotted), and the compacted sibling's name."""

from __future__ import annotations

import re
from dataclasses import dataclass

from compactor.errors import InvalidTopicNameError
from compactor.schema import COMPACTED_SUFFIX

_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]*$")
MAX_NAME_LENGTH = 249  # Kafka's limit


@dataclass(frozen=True)
class TopicName:
    """A validated topic name."""

    namespace: tuple[str, ...]
    topic: str

    @classmethod
    def parse(cls, text: str) -> TopicName:
        name = text.strip()
        parts = name.split(".")
        if len(parts) < 2 or any(not p for p in parts):
            raise InvalidTopicNameError(
                f"topic name {text!r} must be of the form namespace.topic (for example 'events.orders')"
            )
        for part in parts:
            if not _PART.match(part):
                raise InvalidTopicNameError(
                    f"topic name {text!r}: '{part}' may only use letters, digits, '_' and '-' "
                    "and must not start with '-'"
                )
        if len(name) > MAX_NAME_LENGTH:
            raise InvalidTopicNameError(f"topic name {text!r} is longer than {MAX_NAME_LENGTH} characters")
        if COMPACTED_SUFFIX in parts[-1]:
            raise InvalidTopicNameError(
                f"topic name {text!r} must not contain '{COMPACTED_SUFFIX}' (reserved for compacted views and "
                "the tables of compaction runs)"
            )
        return cls(tuple(parts[:-1]), parts[-1])

    @property
    def identifier(self) -> str:
        return ".".join((*self.namespace, self.topic))

    @property
    def compacted_identifier(self) -> str:
        return ".".join((*self.namespace, self.topic + COMPACTED_SUFFIX))

    def spark_identifier(self, catalog: str, compacted: bool = False, branch: str | None = None) -> str:
        """The back-quoted Spark SQL identifier, optionally of a branch (``branch_<name>``)."""
        parts = [catalog, *self.namespace, self.topic + (COMPACTED_SUFFIX if compacted else "")]
        if branch is not None:
            parts.append(f"branch_{branch}")
        return spark_quoted(*parts)

    def __str__(self) -> str:
        return self.identifier


def spark_quoted(*parts: str) -> str:
    """The Spark SQL identifier of ``parts`` (catalog, namespace levels, table...), each part back-quoted (a
    back-quote inside a part doubled), so that names with dots or dashes stay single parts."""
    return ".".join("`" + part.replace("`", "``") + "`" for part in parts)
