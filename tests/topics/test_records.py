"""Records and their JSON output form. (The input side, every bad-input case and the round trip:
tests/producing/test_jsonl_exact.py.)"""

from __future__ import annotations

from compactor.topics.records import ProducerRecord, Record, encode_bytes, record_to_json


def test_unicode_text_is_written_as_text() -> None:
    assert encode_bytes("héllo ☃".encode()) == "héllo ☃"
    assert "☃" in record_to_json(Record(0, 0, 0, "☃".encode(), None))


def test_size_counts_key_value_and_headers() -> None:
    r = ProducerRecord(b"ab", b"cde", (("hk", b"v"), ("x", None)))
    assert r.size == 2 + 3 + 2 + 1 + 1
