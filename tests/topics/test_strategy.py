"""compaction.strategy (KIP-280, PIP-352): the settings, the header format and the rank. (Phase 1's Spark form of
the rules, checked against these on random rows: tests/compaction/phase1/test_ranking.py; a cursor's strategy:
tests/cursor/test_model.py.)"""

from __future__ import annotations

import struct

import pytest

from compactor.errors import InvalidSettingError
from compactor.topics.settings import TopicSettings, validate_updates
from compactor.topics.strategy import Strategy, header_value, parse_value


def test_settings_default_to_offset_and_validate_together() -> None:
    defaults = TopicSettings.defaults()
    assert defaults.strategy == Strategy("offset", "")
    assert defaults.as_kafka_dict()["compaction.strategy"] == "offset"
    to_set, _, settings = validate_updates({}, {"compaction.strategy": "Header", "compaction.strategy.header": "v"})
    assert to_set == {"compactor.compaction.strategy": "header", "compactor.compaction.strategy.header": "v"}
    assert settings.strategy.label == "header:v"
    with pytest.raises(InvalidSettingError, match=r"needs compaction\.strategy\.header"):
        validate_updates({}, {"compaction.strategy": "header"})
    with pytest.raises(InvalidSettingError, match=r"only used with compaction\.strategy=header"):
        validate_updates({}, {"compaction.strategy.header": "v"})
    with pytest.raises(InvalidSettingError, match="'offset', 'timestamp' or 'header'"):
        validate_updates({}, {"compaction.strategy": "latest"})
    # leaving header: the name must go in the same change
    stored = {"compactor.compaction.strategy": "header", "compactor.compaction.strategy.header": "v"}
    _, removed, back = validate_updates(stored, {"compaction.strategy": "timestamp"}, ["compaction.strategy.header"])
    assert removed == ["compactor.compaction.strategy.header"] and back.strategy == Strategy("timestamp", "")


@pytest.mark.parametrize("raw, expected", [
    (struct.pack(">q", 5), 5),
    (struct.pack(">q", -(1 << 63)), -(1 << 63)),
    (struct.pack(">q", -2), -2),
    (b"12345678", struct.unpack(">q", b"12345678")[0]),  # 8 bytes are always the binary form
    (b"42", 42), (b"-7", -7), (b"+9", 9), (b"007", 7), (b"9223372036854775807", (1 << 63) - 1),
    (b"9223372036854775808", None), (b" 4", None), (b"4\n", None), (b"4.0", None), (b"", None),
    (b"\xff\xfe", None), (b"x1", None), (None, None), (b"1234567", 1234567), (b"123456789", 123456789),
])
def test_header_values(raw: bytes | None, expected: int | None) -> None:
    assert parse_value(raw) == expected


def test_last_header_counts_and_rank_order() -> None:
    headers = (("v", b"9"), ("other", b"100"), ("v", b"3"))
    assert header_value(headers, "v") == 3  # the last occurrence counts
    assert header_value((("v", b"9"), ("v", b"junk")), "v") is None  # even when unreadable
    strategy = Strategy("header", "v")
    assert strategy.rank(1, 0, (("v", b"1"),)) > strategy.rank(9, 0, ())  # a value beats none
    assert strategy.rank(9, 0, ()) > strategy.rank(1, 0, ())  # neither: offset
    assert strategy.rank(9, 0, (("v", b"1"),)) > strategy.rank(1, 0, (("v", b"1"),))  # equal: offset
    by_time = Strategy("timestamp", "")
    assert by_time.rank(1, 50, ()) > by_time.rank(9, 49, ()) and by_time.rank(9, 50, ()) > by_time.rank(1, 50, ())
