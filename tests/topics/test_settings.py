"""Topic settings: Kafka names and defaults, stored as compactor.<name>, validated before any change."""

from __future__ import annotations

import pytest

from compactor.errors import InvalidSettingError
from compactor.topics.settings import SETTINGS, TopicSettings, parse_assignments, validate_updates


def test_defaults_are_kafkas() -> None:
    s = TopicSettings.defaults()
    assert s.cleanup_policy == frozenset({"delete"})
    assert s.retention_ms == 604800000
    assert s.retention_bytes == -1
    assert s.delete_retention_ms == 86400000
    assert s.min_compaction_lag_ms == 0
    assert s.max_compaction_lag_ms == 9223372036854775807
    assert s.min_cleanable_dirty_ratio == 0.5
    assert s.max_message_bytes == 1048588
    assert s.compaction_null_key == "drop"
    assert s.cursor_retain_ms == 3600000
    assert s.orphan_min_age_ms == 3 * 24 * 3600 * 1000


def test_stored_names() -> None:
    stored = {spec.name: spec.stored_as for spec in SETTINGS}
    assert stored["retention.ms"] == "compactor.retention.ms"
    assert stored["cleanup.policy"] == "compactor.cleanup.policy"
    assert stored["history.expire.max-snapshot-age-ms"] == "history.expire.max-snapshot-age-ms"
    assert stored["history.expire.min-snapshots-to-keep"] == "history.expire.min-snapshots-to-keep"


@pytest.mark.parametrize("policy, expected", [
    ("delete", {"delete"}), ("compact", {"compact"}), ("delete,compact", {"delete", "compact"}),
    ("compact, delete", {"delete", "compact"}), ("COMPACT", {"compact"}),
])
def test_policies(policy: str, expected: set[str]) -> None:
    _, _, result = validate_updates({}, {"cleanup.policy": policy})
    assert result.cleanup_policy == frozenset(expected)


@pytest.mark.parametrize("key, value, message", [
    ("cleanup.policy", "purge", "unknown policy"),
    ("cleanup.policy", "", "must be"),
    ("cleanup.policy", "delete,", "must be"),
    ("retention.ms", "abc", "integer"),
    ("retention.ms", "-2", ">= -1"),
    ("retention.bytes", "1.5", "integer"),
    ("delete.retention.ms", "-1", ">= 0"),
    ("min.compaction.lag.ms", "-5", ">= 0"),
    ("max.compaction.lag.ms", "0", ">= 1"),
    ("min.cleanable.dirty.ratio", "1.5", "between 0 and 1"),
    ("min.cleanable.dirty.ratio", "x", "number"),
    ("max.message.bytes", "-1", "between"),
    ("compaction.null-key", "keep", "drop' or 'retain"),
    ("compaction.cursor.retain-ms", "-1", ">= 0"),
    ("history.expire.min-snapshots-to-keep", "0", ">= 1"),
    ("no.such.setting", "1", "unknown setting"),
])
def test_bad_values_are_rejected(key: str, value: str, message: str) -> None:
    with pytest.raises(InvalidSettingError, match=message):
        validate_updates({}, {key: value})


def test_min_lag_above_max_lag_is_rejected_even_across_updates() -> None:
    current = {"compactor.max.compaction.lag.ms": "1000"}
    with pytest.raises(InvalidSettingError, match="must not exceed"):
        validate_updates(current, {"min.compaction.lag.ms": "2000"})
    with pytest.raises(InvalidSettingError, match="must not exceed"):
        validate_updates({"compactor.min.compaction.lag.ms": "2000"}, {"max.compaction.lag.ms": "10"})


def test_unset_restores_default_and_unknown_unset_is_rejected() -> None:
    current = {"compactor.retention.ms": "5"}
    to_set, to_remove, result = validate_updates(current, {}, ["retention.ms"])
    assert to_set == {} and to_remove == ["compactor.retention.ms"]
    assert result.retention_ms == 604800000
    with pytest.raises(InvalidSettingError, match="unknown setting"):
        validate_updates(current, {}, ["bogus"])


def test_assignments_parse() -> None:
    assert parse_assignments(["a=1", "b=x=y"]) == {"a": "1", "b": "x=y"}
    with pytest.raises(InvalidSettingError, match="KEY=VALUE"):
        parse_assignments(["novalue"])


def test_corrupt_stored_setting_is_reported() -> None:
    with pytest.raises(InvalidSettingError, match=r"retention\.ms"):
        TopicSettings.from_properties({"compactor.retention.ms": "soon"})


def test_json_round_trip() -> None:
    _, _, s = validate_updates({}, {"cleanup.policy": "delete,compact", "min.cleanable.dirty.ratio": "0.25"})
    assert TopicSettings.from_json(s.to_json()) == s
