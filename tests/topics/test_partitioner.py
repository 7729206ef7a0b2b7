"""Kafka's default partitioner, checked against Kafka's own murmur2 test vectors."""

from __future__ import annotations

import pytest

from compactor.producing.producer import assign_partitions
from compactor.topics.partitioner import murmur2, partition_for_key
from compactor.topics.records import ProducerRecord


@pytest.mark.parametrize("data, expected", [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
])
def test_murmur2_matches_kafka(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_partition_is_positive_hash_modulo() -> None:
    for key in (b"", b"a", b"\xff\xfe", b"user-17"):
        assert partition_for_key(key, 7) == (murmur2(key) & 0x7FFFFFFF) % 7


def test_keyless_records_round_robin_and_explicit_partitions_win() -> None:
    records = [ProducerRecord(None, b"v")] * 5 + [ProducerRecord(b"k", b"v", partition=2),
                                                 ProducerRecord(b"k", b"v")]
    assigned = assign_partitions(records, 3, rr_start=1)
    assert assigned[:5] == [1, 2, 0, 1, 2]
    assert assigned[5] == 2
    assert assigned[6] == partition_for_key(b"k", 3)
