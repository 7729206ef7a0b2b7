"""Phase 1 under the strategies other than ``offset`` (``compaction.phase1.ranking``): the Spark form of the rank
checked against the pure-Python rules of ``topics.strategy`` on random rows."""

from __future__ import annotations

import random
import struct

import pytest
from pyspark.sql import SparkSession

from compactor.topics.strategy import Strategy, header_value, last_header


def _random_headers(rng: random.Random) -> list[tuple[str, bytes | None]]:
    choices: list[bytes | None] = [None, b"junk", b"", struct.pack(">q", rng.randrange(-3, 4)),
                                   str(rng.randrange(-3, 4)).encode(), b"99999999999999999999",
                                   struct.pack(">q", -(1 << 63)), str((1 << 63) - 1).encode()]
    return [(rng.choice(["v", "w"]), rng.choice(choices)) for _ in range(rng.randrange(0, 4))]


@pytest.mark.spark
@pytest.mark.parametrize("kind, packed", [("timestamp", False), ("timestamp", True), ("header", False)])
def test_spark_winners_match_the_python_rank(spark: SparkSession, kind: str, packed: bool) -> None:
    """Phase 1's ranking (``compaction.phase1.ranking``) picks, per key, the record of highest Python rank (with the
    decimal score, and with the 64-bit one packed from the timestamp bounds), decodes its value, and counts
    exactly the records whose last strategy header holds no number."""
    from datetime import UTC, datetime

    from compactor.compaction.phase1 import ranking

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
