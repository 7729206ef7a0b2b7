"""compaction.strategy (KIP-280, PIP-352): the settings, the header format, the rank, and phase 1's Spark form of
the rules checked against the pure-Python one on random rows."""

from __future__ import annotations

import random
import struct

import pytest
from pyspark.sql import SparkSession

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


def test_a_cursor_without_a_strategy_was_built_by_offset() -> None:
    """A cursor written before strategies existed carries no strategy setting: it was built by offset."""
    from compactor.cursor import CompactionStats, Cursor, ViewStats

    old = Cursor(1, (0,), (0,), None, (0,), 0, {"cleanup.policy": "compact"}, CompactionStats(), ViewStats(), None, "")
    assert old.strategy == Strategy() and old.as_json()["strategy"] == "offset"
    new = Cursor(1, (0,), (0,), None, (0,), 0, TopicSettings.from_properties({
        "compactor.compaction.strategy": "header", "compactor.compaction.strategy.header": "ver"}).as_kafka_dict(),
        CompactionStats(), ViewStats(), None, "")
    assert new.strategy == Strategy("header", "ver") and new.as_json()["strategy"] == "header:ver"


def _random_headers(rng: random.Random) -> list[tuple[str, bytes | None]]:
    choices: list[bytes | None] = [None, b"junk", b"", struct.pack(">q", rng.randrange(-3, 4)),
                                   str(rng.randrange(-3, 4)).encode(), b"99999999999999999999",
                                   struct.pack(">q", -(1 << 63)), str((1 << 63) - 1).encode()]
    return [(rng.choice(["v", "w"]), rng.choice(choices)) for _ in range(rng.randrange(0, 4))]


@pytest.mark.spark
@pytest.mark.parametrize("kind, packed", [("timestamp", False), ("timestamp", True), ("header", False)])
def test_spark_winners_match_the_python_rank(spark: SparkSession, kind: str, packed: bool) -> None:
    """Phase 1's ranking (``compaction.ranking``) picks, per key, the record of highest Python rank (with the
    decimal score, and with the 64-bit one packed from the timestamp bounds), decodes its value, and counts
    exactly the records whose last strategy header holds no number."""
    from datetime import UTC, datetime

    from compactor.compaction import ranking
    from compactor.topics.strategy import last_header

    rng = random.Random(7)
    strategy = Strategy(kind, "v" if kind == "header" else "")
    rows = []
    for offset in range(400):
        ts_ms = rng.choice([0, 1, 2, 1_700_000_000_000, 1_700_000_000_001])
        rows.append((rng.randrange(2), offset, datetime.fromtimestamp(ts_ms / 1000, UTC),
                     f"k{rng.randrange(12)}".encode(), _random_headers(rng)))
    df = spark.createDataFrame(rows, "partition int, offset long, timestamp timestamp, key binary, "
                                     "headers array<struct<key:string,value:binary>>")
    micros = [int(ts.timestamp() * 1_000_000) for _, _, ts, _, _ in rows]
    pack = ranking.packing(strategy, (min(micros), max(micros)) if packed else None, {0: (0, 400), 1: (0, 400)})
    assert pack.long == packed
    ranked = ranking.with_rank(df, strategy, pack, unparsable=ranking.UNPARSABLE)
    latest = ranking.ranked_latest(ranked, pack, count_unparsable=True, always_ranked=kind == "timestamp").collect()
    unparsable = sum(r[ranking.UNPARSABLE] for r in latest)
    winners = {(r["partition"], bytes(r["key"])): r["offset"] for r in latest}
    values = {(r["partition"], bytes(r["key"])): (r[ranking.RANKED], r[ranking.VALUE]) for r in latest}
    expected: dict[tuple[int, bytes], tuple[bool, int, int]] = {}
    for p, offset, ts, key, headers in rows:
        rank = strategy.rank(offset, int(ts.timestamp() * 1000), headers)
        expected[(p, key)] = max(expected.get((p, key), rank), rank)
    assert winners == {k: rank[2] for k, rank in expected.items()}
    scale = 1000 if kind == "timestamp" else 1  # Spark ranks timestamps in microseconds
    assert values == {k: (has, value * scale if has else None) for k, (has, value, _) in expected.items()}
    bad = sum(1 for *_, headers in rows if last_header(headers, "v")[0] and header_value(headers, "v") is None)
    assert unparsable == (bad if kind == "header" else 0)
    if kind == "header":
        assert 0 < bad < len(rows)
