"""The record JSON format's input side (``producing.jsonl_exact``): every bad-input case, and the round trip
through the output form (base64, tombstones, headers)."""

from __future__ import annotations

import io
import json

import pytest

from compactor.errors import InvalidRecordError
from compactor.producing.jsonl_exact import parse_lines, parse_record
from compactor.topics.records import ProducerRecord, Record, write_jsonl


def test_minimal_record_defaults() -> None:
    r = parse_record('{"key": "k", "value": "v"}')
    assert r == ProducerRecord(key=b"k", value=b"v", headers=(), partition=None, timestamp_ms=None)


def test_tombstone_and_empty_value_are_different() -> None:
    tombstone = parse_record('{"key": "k", "value": null}')
    empty = parse_record('{"key": "k", "value": ""}')
    assert tombstone.value is None
    assert empty.value == b""
    assert Record(0, 0, 0, b"k", None).is_tombstone
    assert not Record(0, 0, 0, b"k", b"").is_tombstone
    assert not Record(0, 0, 0, None, None).is_tombstone


def test_base64_everywhere() -> None:
    r = parse_record('{"key": {"base64": "AAEC"}, "value": {"base64": "/w=="}, '
                     '"headers": [["h", {"base64": "gA=="}], ["n", null]]}')
    assert r.key == b"\x00\x01\x02"
    assert r.value == b"\xff"
    assert r.headers == (("h", b"\x80"), ("n", None))


def test_headers_object_keeps_order_and_duplicates() -> None:
    r = parse_record('{"key": "k", "value": "v", "headers": {"b": "1", "a": "2", "b": "3"}}')
    assert r.headers == (("b", b"1"), ("a", b"2"), ("b", b"3"))


def test_offset_is_ignored() -> None:
    assert parse_record('{"key": "k", "value": "v", "offset": 99}').partition is None


# Every rule a single record can break, with the words of its error (tests/producing/test_jsonl_paths.py runs each
# through both JSON Lines paths as well).
BAD_RECORDS = [
    ("not json", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"key": 5, "value": "v"}', "key must be a string"),
    ('{"key": "k", "value": true}', "value must be a string"),
    ('{"key": "k", "value": [1]}', "value must be a string"),
    ('{"key": {"base64": "!!"}, "value": "v"}', "not valid base64"),
    ('{"key": {"base64": 5}, "value": "v"}', "base64 must be a string"),
    ('{"key": {"hex": "00"}, "value": "v"}', "key must be a string"),
    ('{"key": "k", "value": "v", "colour": "red"}', "unknown field"),
    ('{"key": "k", "value": "v", "partition": "1"}', "partition must be an integer"),
    ('{"key": "k", "value": "v", "partition": 1.0}', "partition must be an integer"),
    ('{"key": "k", "value": "v", "partition": true}', "partition must be an integer"),
    ('{"key": "k", "value": "v", "timestamp_ms": -1}', "timestamp_ms must be between"),
    ('{"key": "k", "value": "v", "timestamp_ms": 253402300800000}', "timestamp_ms must be between"),
    ('{"key": "k", "value": "v", "timestamp_ms": "now"}', "timestamp_ms must be an integer"),
    ('{"key": "k", "value": "v", "headers": [["a"]]}', "pair"),
    ('{"key": "k", "value": "v", "headers": [[1, "x"]]}', "key must be a string"),
    ('{"key": "k", "value": "v", "headers": "a=b"}', "headers must be"),
    ('{"key": "k", "key": "j"}', "duplicate field"),
    ('{"key": "\\ud800", "value": "v"}', "not valid Unicode"),
    ('{"key": "k", "value": NaN}', "not valid JSON"),
]


@pytest.mark.parametrize("line, message", BAD_RECORDS)
def test_bad_records_name_their_problem_and_line(line: str, message: str) -> None:
    with pytest.raises(InvalidRecordError, match=message) as info:
        parse_record(line, 7)
    assert info.value.line == 7
    assert str(info.value).startswith("line 7:")


def test_line_numbers_count_blank_lines() -> None:
    text = '{"key": "a", "value": "1"}\n\n{"key": "b", "valu": "2"}\n'
    with pytest.raises(InvalidRecordError, match="line 3"):
        list(parse_lines(io.StringIO(text)))


def test_output_has_every_field_and_round_trips() -> None:
    records = [
        Record(0, 0, 1767225600000, b"user-1", b'{"n":1}', (("trace", b"abc"),)),
        Record(0, 1, 5, b"user-1", None),
        Record(1, 0, 0, None, b""),
        Record(2, 3, 253402300799999, b"\xff\x00", b"\xc3\x28", (("h", None), ("h", b"\xfe"))),
    ]
    out = io.StringIO()
    assert write_jsonl(records, out) == 4
    lines = out.getvalue().splitlines()
    first = json.loads(lines[0])
    assert first == {"partition": 0, "offset": 17 - 17, "timestamp_ms": 1767225600000, "key": "user-1",
                     "value": '{"n":1}', "headers": [["trace", "abc"]]}
    assert json.loads(lines[1])["value"] is None and json.loads(lines[1])["headers"] == []
    assert json.loads(lines[3])["key"] == {"base64": "/wA="}
    # decoding the output as input gives back the same bytes
    for record, line in zip(records, lines, strict=True):
        parsed = parse_record(line)
        assert (parsed.key, parsed.value, parsed.headers) == (record.key, record.value, record.headers)
        assert parsed.partition == record.partition and parsed.timestamp_ms == record.timestamp_ms
