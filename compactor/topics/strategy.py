"""Which record of a key wins compaction: ``compaction.strategy`` (KIP-280's names, PIP-352's event time).

* ``offset`` (default): the highest offset wins (Kafka's and Pulsar's rule).
* ``timestamp``: the highest record timestamp wins; equal timestamps: the highest offset.
* ``header`` with ``compaction.strategy.header=NAME``: the highest value of the record's LAST header ``NAME``
  wins. A value of exactly 8 bytes is a big-endian signed 64-bit integer (what Kafka's ``LongSerializer``
  writes); any other value is read as decimal UTF-8 text (``[+-]?[0-9]+``, within the signed 64-bit range).
  Anything else (a null value, other text, a number out of range) is *no value*, and is counted as an
  unparsable strategy value. A record with a value beats one without; equal values: the highest offset;
  neither has one: the highest offset. The last occurrence counts even when an earlier one is readable.

So every strategy orders a key's records by ``(has value, value, offset)``: the *rank* of a record. Tombstones
rank like any record. This module is pure Python (the settings, the readers and the reference tests use it);
the Spark form of the same rules is ``compaction.phase1.ranking``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from compactor.errors import InvalidSettingError

OFFSET_STRATEGY = "offset"
TIMESTAMP_STRATEGY = "timestamp"
HEADER_STRATEGY = "header"
STRATEGIES = (OFFSET_STRATEGY, TIMESTAMP_STRATEGY, HEADER_STRATEGY)
STRATEGY_SETTING = "compaction.strategy"
HEADER_SETTING = "compaction.strategy.header"
LONG_BYTES = 8
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
DECIMAL_TEXT = re.compile(rb"[+-]?[0-9]+")
# The rank of a record: (has a value, the value or 0, offset); tuples compare as the rules above say.
Rank = tuple[bool, int, int]


def parse_strategy(key: str, text: str) -> str:
    """The ``compaction.strategy`` setting's parser (``InvalidSettingError`` names the choices)."""
    value = text.strip().lower()
    if value not in STRATEGIES:
        raise InvalidSettingError(f"{key} must be 'offset', 'timestamp' or 'header', got {text!r}")
    return value


def parse_header_name(key: str, text: str) -> str:
    """The ``compaction.strategy.header`` setting's parser: a header key, kept as given (header keys are text
    and compare exactly); empty means unset."""
    return text


@dataclass(frozen=True)
class Strategy:
    """A compaction strategy: ``kind`` is one of ``STRATEGIES``; ``header`` the header name under ``header``."""

    kind: str = OFFSET_STRATEGY
    header: str = ""

    @property
    def by_offset(self) -> bool:
        return self.kind == OFFSET_STRATEGY

    @property
    def label(self) -> str:
        """``offset``, ``timestamp`` or ``header:NAME``: how results and errors name it."""
        return f"{HEADER_STRATEGY}:{self.header}" if self.kind == HEADER_STRATEGY else self.kind

    @classmethod
    def of(cls, kind: str, header: str) -> Strategy:
        """A strategy from the two settings, checked together: the header name is required iff ``header``."""
        if kind == HEADER_STRATEGY and not header:
            raise InvalidSettingError(f"{STRATEGY_SETTING}=header needs {HEADER_SETTING}=NAME, the header whose "
                                      "value orders a key's records")
        if kind != HEADER_STRATEGY and header:
            raise InvalidSettingError(f"{HEADER_SETTING} is only used with {STRATEGY_SETTING}=header (it is "
                                      f"{kind}); set the strategy to header, or --unset {HEADER_SETTING}")
        return cls(kind, header)

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> Strategy:
        """The strategy recorded in a cursor's settings (Kafka names); a cursor without one was built by offset."""
        return cls(settings.get(STRATEGY_SETTING, OFFSET_STRATEGY) or OFFSET_STRATEGY,
                   settings.get(HEADER_SETTING, "") or "")

    def rank(self, offset: int, timestamp_ms: int, headers: Sequence[tuple[str, bytes | None]]) -> Rank:
        """The rank of one record under this strategy (higher wins)."""
        if self.kind == TIMESTAMP_STRATEGY:
            return (True, timestamp_ms, offset)
        if self.kind == HEADER_STRATEGY:
            value = header_value(headers, self.header)
            return (value is not None, value or 0, offset)
        return (True, 0, offset)


def last_header(headers: Sequence[tuple[str, bytes | None]], name: str) -> tuple[bool, bytes | None]:
    """Whether ``name`` occurs among ``headers``, and the value of its last occurrence."""
    found, value = False, None
    for key, candidate in headers:
        if key == name:
            found, value = True, candidate
    return found, value


def parse_value(value: bytes | None) -> int | None:
    """A header value as a signed 64-bit integer (8 bytes big-endian, else decimal text), or ``None``."""
    if value is None:
        return None
    if len(value) == LONG_BYTES:
        return int.from_bytes(value, "big", signed=True)
    if DECIMAL_TEXT.fullmatch(value) is None:
        return None
    number = int(value)
    return number if LONG_MIN <= number <= LONG_MAX else None


def header_value(headers: Sequence[tuple[str, bytes | None]], name: str) -> int | None:
    """The strategy value of a record's headers under ``header`` with ``name`` (``None``: no value)."""
    return parse_value(last_header(headers, name)[1])


__all__ = ["HEADER_STRATEGY", "OFFSET_STRATEGY", "STRATEGIES", "TIMESTAMP_STRATEGY", "Strategy", "header_value",
           "parse_value"]
