"""Topic settings: Kafka's names and defaults, stored as Iceberg table properties, validated.

Settings keep Kafka's names on the command line and in the API (``retention.ms``), and are stored as table
properties named ``compactor.<kafka-name>``; Iceberg's own ``history.expire.*`` keep their Iceberg names.
Unknown keys, malformed values, values out of range and ``min.compaction.lag.ms > max.compaction.lag.ms``
are rejected with a message naming the key. A command reads the settings once, at its start.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from compactor.errors import InvalidSettingError
from compactor.topics.strategy import HEADER_SETTING, STRATEGY_SETTING, Strategy, parse_header_name, parse_strategy

LONG_MAX = 9223372036854775807

DELETE = "delete"
COMPACT = "compact"
NULL_KEY_DROP = "drop"
NULL_KEY_RETAIN = "retain"


def _parse_long(key: str, text: str, minimum: int, maximum: int = LONG_MAX) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise InvalidSettingError(f"{key} must be an integer, got {text!r}") from None
    if not minimum <= value <= maximum:
        bound = f">= {minimum}" if maximum == LONG_MAX else f"between {minimum} and {maximum}"
        raise InvalidSettingError(f"{key} must be {bound}, got {value}")
    return value


def _parse_ratio(key: str, text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise InvalidSettingError(f"{key} must be a number between 0 and 1, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise InvalidSettingError(f"{key} must be between 0 and 1, got {text!r}")
    return value


def _parse_policy(key: str, text: str) -> frozenset[str]:
    parts = [p.strip().lower() for p in text.split(",")]
    if not text.strip() or any(not p for p in parts):
        raise InvalidSettingError(f"{key} must be 'delete', 'compact' or 'delete,compact', got {text!r}")
    unknown = sorted(set(parts) - {DELETE, COMPACT})
    if unknown:
        raise InvalidSettingError(
            f"{key}: unknown policy {', '.join(unknown)!s}; use 'delete', 'compact' or 'delete,compact'"
        )
    return frozenset(parts)


def _parse_null_key(key: str, text: str) -> str:
    value = text.strip().lower()
    if value not in (NULL_KEY_DROP, NULL_KEY_RETAIN):
        raise InvalidSettingError(f"{key} must be 'drop' or 'retain', got {text!r}")
    return value


@dataclass(frozen=True)
class SettingSpec:
    """One setting: its Kafka name, the property that stores it, default, parser and a help line."""

    name: str
    attr: str
    default: str
    parse: Callable[[str, str], Any]
    help: str
    property_name: str = ""

    @property
    def stored_as(self) -> str:
        return self.property_name or f"compactor.{self.name}"


def _long(minimum: int, maximum: int = LONG_MAX) -> Callable[[str, str], int]:
    return lambda key, text: _parse_long(key, text, minimum, maximum)


SETTINGS: tuple[SettingSpec, ...] = (
    SettingSpec("cleanup.policy", "cleanup_policy", DELETE, _parse_policy,
                "a set of 'delete' and 'compact' (Kafka's cleanup.policy)"),
    SettingSpec("retention.ms", "retention_ms", "604800000", _long(-1),
                "records older than this (by record timestamp) may be removed; -1 keeps them forever"),
    SettingSpec("retention.bytes", "retention_bytes", "-1", _long(-1),
                "per-partition size limit of the raw log; -1 means unlimited"),
    SettingSpec("delete.retention.ms", "delete_retention_ms", "86400000", _long(0),
                "how long a compacted tombstone is kept after the run that first compacted it"),
    SettingSpec("min.compaction.lag.ms", "min_compaction_lag_ms", "0", _long(0),
                "a record stays uncompacted for at least this long after its timestamp"),
    SettingSpec("max.compaction.lag.ms", "max_compaction_lag_ms", str(LONG_MAX), _long(1),
                "a record becomes due for compaction at most this long after its timestamp"),
    SettingSpec("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", "0.5", _parse_ratio,
                "compaction is due when dirty / (clean + dirty) exceeds this"),
    SettingSpec("max.message.bytes", "max_message_bytes", "1048588", _long(0, 2147483647),
                "the largest record accepted (key + value + headers)"),
    SettingSpec("producer.id.expiration.ms", "producer_id_expiration_ms", "86400000", _long(0),
                "how long a committed batch id is remembered: re-sending it within this window appends nothing"),
    SettingSpec("compaction.null-key", "compaction_null_key", NULL_KEY_DROP, _parse_null_key,
                "'drop' removes keyless records from the compacted view (Kafka); 'retain' keeps them (Pulsar)"),
    SettingSpec("compaction.cursor.retain-ms", "cursor_retain_ms", "3600000", _long(0),
                "how long a replaced cursor (and a reader's pinned snapshots) stay readable"),
    SettingSpec("compaction.orphan-min-age-ms", "orphan_min_age_ms", "259200000", _long(0),
                "files no metadata references are removed only when older than this"),
    SettingSpec("history.expire.max-snapshot-age-ms", "expire_max_snapshot_age_ms", "432000000", _long(0),
                "Iceberg snapshots older than this may be expired", property_name="history.expire.max-snapshot-age-ms"),
    SettingSpec("history.expire.min-snapshots-to-keep", "expire_min_snapshots_to_keep", "1", _long(1),
                "Iceberg keeps at least this many snapshots of each table",
                property_name="history.expire.min-snapshots-to-keep"),
    SettingSpec("raw.snapshot.window.ms", "raw_snapshot_window_ms", "3600000", _long(0),
                "a raw snapshot stays readable by Iceberg's own readers (streaming, VERSION AS OF) while it was "
                "current within this long, capped by raw.snapshot.window.count"),
    SettingSpec("raw.snapshot.window.count", "raw_snapshot_window_count", "1000", _long(0, 100_000),
                "at most this many raw snapshots before the current one stay readable by Iceberg's own readers"),
    SettingSpec(STRATEGY_SETTING, "compaction_strategy", "offset", parse_strategy,
                "which record of a key wins: 'offset' (latest), 'timestamp' or 'header' (KIP-280)"),
    SettingSpec(HEADER_SETTING, "compaction_strategy_header", "", parse_header_name,
                "under compaction.strategy=header: the header whose value (8-byte big-endian or decimal) wins"),
)
SPECS_BY_NAME: dict[str, SettingSpec] = {spec.name: spec for spec in SETTINGS}
SPECS_BY_PROPERTY: dict[str, SettingSpec] = {spec.stored_as: spec for spec in SETTINGS}


@dataclass(frozen=True)
class TopicSettings:
    """The validated settings of one topic, as read once at the start of a command."""

    cleanup_policy: frozenset[str]
    retention_ms: int
    retention_bytes: int
    delete_retention_ms: int
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    min_cleanable_dirty_ratio: float
    max_message_bytes: int
    producer_id_expiration_ms: int
    compaction_null_key: str
    cursor_retain_ms: int
    orphan_min_age_ms: int
    expire_max_snapshot_age_ms: int
    expire_min_snapshots_to_keep: int
    raw_snapshot_window_ms: int
    raw_snapshot_window_count: int
    compaction_strategy: str = "offset"
    compaction_strategy_header: str = ""

    @property
    def compacts(self) -> bool:
        return COMPACT in self.cleanup_policy

    @property
    def deletes(self) -> bool:
        return DELETE in self.cleanup_policy

    @property
    def policy_text(self) -> str:
        return ",".join(p for p in (DELETE, COMPACT) if p in self.cleanup_policy)

    @property
    def retain_null_keys(self) -> bool:
        return self.compaction_null_key == NULL_KEY_RETAIN

    @property
    def strategy(self) -> Strategy:
        """Which record of a key wins (``topics.strategy``)."""
        return Strategy(self.compaction_strategy, self.compaction_strategy_header)

    @classmethod
    def defaults(cls) -> TopicSettings:
        return cls.from_properties({})

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> TopicSettings:
        """Read settings from a table's properties; a stored value that no longer validates is an error."""
        values: dict[str, Any] = {}
        for spec in SETTINGS:
            text = properties.get(spec.stored_as, spec.default)
            values[spec.attr] = spec.parse(spec.name, text)
        settings = cls(**values)
        settings.check_consistency()
        return settings

    def check_consistency(self) -> None:
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise InvalidSettingError(
                f"min.compaction.lag.ms ({self.min_compaction_lag_ms}) must not exceed "
                f"max.compaction.lag.ms ({self.max_compaction_lag_ms})"
            )
        Strategy.of(self.compaction_strategy, self.compaction_strategy_header)

    def as_kafka_dict(self) -> dict[str, str]:
        """Every setting under its Kafka name, rendered as it would be stored."""
        out: dict[str, str] = {}
        for spec in SETTINGS:
            value = getattr(self, spec.attr)
            out[spec.name] = render(spec.name, value)
        return out

    def to_json(self) -> str:
        return json.dumps(self.as_kafka_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TopicSettings:
        data = json.loads(text)
        return cls.from_properties({SPECS_BY_NAME[k].stored_as: v for k, v in data.items() if k in SPECS_BY_NAME})


def render(name: str, value: Any) -> str:
    if name == "cleanup.policy":
        return ",".join(p for p in (DELETE, COMPACT) if p in value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


def parse_assignments(pairs: Iterable[str]) -> dict[str, str]:
    """Parse ``KEY=VALUE`` strings from the command line (a later key wins)."""
    out: dict[str, str] = {}
    for pair in pairs:
        if "=" not in pair:
            raise InvalidSettingError(f"expected KEY=VALUE, got {pair!r}")
        key, value = pair.split("=", 1)
        out[key.strip()] = value
    return out


def validate_updates(
    current: Mapping[str, str], updates: Mapping[str, str], removals: Iterable[str] = ()
) -> tuple[dict[str, str], list[str], TopicSettings]:
    """Validate a change of settings; return the properties to set, to remove, and the result.

    Every key is checked before anything is changed, so a bad key leaves the topic untouched.
    """
    to_set: dict[str, str] = {}
    to_remove: list[str] = []
    for key in list(updates) + list(removals):
        if key not in SPECS_BY_NAME:
            known = ", ".join(sorted(SPECS_BY_NAME))
            raise InvalidSettingError(f"unknown setting '{key}'; known settings: {known}")
    for key, text in updates.items():
        spec = SPECS_BY_NAME[key]
        parsed = spec.parse(key, text)
        to_set[spec.stored_as] = render(key, parsed)
    for key in removals:
        spec = SPECS_BY_NAME[key]
        if key in updates:
            raise InvalidSettingError(f"'{key}' is both set and unset")
        if spec.stored_as in current:
            to_remove.append(spec.stored_as)
    merged = {k: v for k, v in current.items() if k not in to_remove}
    merged.update(to_set)
    result = TopicSettings.from_properties(merged)
    return to_set, to_remove, result


__all__ = ["SETTINGS", "TopicSettings", "parse_assignments", "validate_updates"]
