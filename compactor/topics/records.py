"""Records (``ProducerRecord`` to append, ``Record`` as stored) and their JSON Lines output form (docs/reference.md,
"Record JSON"): every field present, ``headers`` as ``[]`` when there are none, bytes that are not UTF-8 as
``{"base64": ...}``. (The input side, with every rule of the format, is ``producing.jsonl_exact``.)
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO

from compactor.topics.record_rules import record_size

Header = tuple[str, bytes | None]


@dataclass(frozen=True)
class ProducerRecord:
    """A record to append: partition and timestamp are optional (partitioner and batch clock fill them)."""

    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    partition: int | None = None
    timestamp_ms: int | None = None

    @property
    def size(self) -> int:
        """Bytes that count against ``max.message.bytes`` (``record_rules.record_size``)."""
        return record_size(self.key, self.value, self.headers)


@dataclass(frozen=True)
class Record:
    """A record as stored in a topic."""

    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = field(default=())

    @property
    def is_tombstone(self) -> bool:
        return self.key is not None and self.value is None


def encode_bytes(value: bytes | None) -> Any:
    """UTF-8 text when the bytes decode, otherwise ``{"base64": ...}``; ``None`` stays ``None``."""
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(value).decode("ascii")}


def record_to_json_obj(record: Record) -> dict[str, Any]:
    return {
        "partition": record.partition,
        "offset": record.offset,
        "timestamp_ms": record.timestamp_ms,
        "key": encode_bytes(record.key),
        "value": encode_bytes(record.value),
        "headers": [[name, encode_bytes(value)] for name, value in record.headers],
    }


def record_to_json(record: Record) -> str:
    return json.dumps(record_to_json_obj(record), ensure_ascii=False, separators=(", ", ": "))


def write_jsonl(records: Iterable[Record], out: TextIO) -> int:
    """Write records as JSON Lines; returns how many were written."""
    count = 0
    for record in records:
        out.write(record_to_json(record))
        out.write("\n")
        count += 1
    return count
