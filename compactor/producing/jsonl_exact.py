"""The exact JSON Lines parser of producer input (docs/reference.md#record-json): one record per line, every rule
of the format, and an error naming the line of the first bad record. ``producing.jsonl`` reads most input faster
with Arrow's JSON reader and hands this parser every block it has any doubt about.

Input: ``partition`` optional, ``timestamp_ms`` optional, ``headers`` optional (a list of ``[key, value]``
pairs, or an object whose pairs are taken in order), ``offset`` ignored, any other field an error.
``key``, ``value`` and header values are UTF-8 text, ``null``, or ``{"base64": "..."}`` for other bytes.
(The output form is ``topics.records``.)
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Iterator
from typing import Any

from compactor.errors import InvalidRecordError
from compactor.topics.record_rules import timestamp_ok, timestamp_out_of_range
from compactor.topics.records import Header, ProducerRecord

INPUT_FIELDS = frozenset({"partition", "offset", "timestamp_ms", "key", "value", "headers"})


def _pairs_hook(pairs: list[tuple[str, Any]]) -> Any:
    """JSON object hook: keep every pair in order (headers objects may repeat keys; records may not)."""
    return _Pairs(pairs)


class _Pairs(list[tuple[str, Any]]):
    """An ordered list of a JSON object's pairs (so headers objects keep their order and duplicates)."""


def _bytes_field(name: str, value: Any, line: int | None) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidRecordError(f"{name} is not valid Unicode text", line) from None
    if isinstance(value, _Pairs):
        obj = dict(value)
        if len(value) == 1 and "base64" in obj:
            encoded = obj["base64"]
            if not isinstance(encoded, str):
                raise InvalidRecordError(f"{name}.base64 must be a string", line)
            try:
                return base64.b64decode(encoded.encode("ascii"), validate=True)
            except (binascii.Error, ValueError, UnicodeEncodeError):
                raise InvalidRecordError(f"{name}.base64 is not valid base64", line) from None
        raise InvalidRecordError(f"{name} must be a string, null or {{\"base64\": ...}}", line)
    raise InvalidRecordError(f"{name} must be a string, null or {{\"base64\": ...}}, got {_kind(value)}", line)


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, _Pairs):
        return "an object"
    return type(value).__name__


def _int_field(name: str, value: Any, line: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRecordError(f"{name} must be an integer, got {_kind(value)}", line)
    return value


def _headers(value: Any, line: int | None) -> tuple[Header, ...]:
    if value is None:
        return ()
    pairs: list[tuple[Any, Any]]
    if isinstance(value, _Pairs):
        pairs = list(value)
    elif isinstance(value, list):
        pairs = []
        for i, item in enumerate(value):
            if not isinstance(item, list) or len(item) != 2:
                raise InvalidRecordError(f"headers[{i}] must be a [key, value] pair", line)
            pairs.append((item[0], item[1]))
    else:
        raise InvalidRecordError(f"headers must be a list of [key, value] pairs or an object, got {_kind(value)}",
                                 line)
    out: list[Header] = []
    for i, (name, header_value) in enumerate(pairs):
        if not isinstance(name, str):
            raise InvalidRecordError(f"headers[{i}] key must be a string", line)
        out.append((name, _bytes_field(f"headers[{i}] value", header_value, line)))
    return tuple(out)


def parse_record(text: str, line: int | None = None) -> ProducerRecord:
    """Decode one JSON line into a ``ProducerRecord`` (without partition-range or size checks)."""
    try:
        data = json.loads(text, object_pairs_hook=_pairs_hook, parse_constant=_no_constant)
    except (json.JSONDecodeError, ValueError) as exc:
        raise InvalidRecordError(f"not valid JSON: {exc}", line) from None
    if not isinstance(data, _Pairs):
        raise InvalidRecordError(f"a record must be a JSON object, got {_kind(data)}", line)
    names = [k for k, _ in data]
    duplicates = sorted({k for k in names if names.count(k) > 1})
    if duplicates:
        raise InvalidRecordError(f"duplicate field(s): {', '.join(duplicates)}", line)
    obj = dict(data)
    unknown = sorted(set(obj) - INPUT_FIELDS)
    if unknown:
        raise InvalidRecordError(
            f"unknown field(s): {', '.join(unknown)} (allowed: {', '.join(sorted(INPUT_FIELDS))})", line
        )
    partition = obj.get("partition")
    if partition is not None:
        partition = _int_field("partition", partition, line)  # its range is the batch's check (validation.py)
    timestamp = obj.get("timestamp_ms")
    if timestamp is not None:
        timestamp = _int_field("timestamp_ms", timestamp, line)
        if not timestamp_ok(timestamp):
            raise InvalidRecordError(timestamp_out_of_range(timestamp), line)
    if "offset" in obj and obj["offset"] is not None:
        _int_field("offset", obj["offset"], line)
    return ProducerRecord(
        key=_bytes_field("key", obj.get("key"), line),
        value=_bytes_field("value", obj.get("value"), line),
        headers=_headers(obj.get("headers"), line),
        partition=partition,
        timestamp_ms=timestamp,
    )


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def parse_lines(lines: Iterable[str], first_line: int = 1) -> Iterator[tuple[int, ProducerRecord]]:
    """Decode JSON Lines numbered from ``first_line``; blank lines are skipped; yields ``(line_number, record)``."""
    for number, text in enumerate(lines, start=first_line):
        if not text.strip():
            continue
        yield number, parse_record(text, number)


__all__ = ["INPUT_FIELDS", "parse_lines", "parse_record"]
