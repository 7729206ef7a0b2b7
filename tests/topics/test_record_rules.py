"""The record rules in one place (``topics.record_rules``): the per-record and columnar forms agree."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from compactor.clock import MAX_TIMESTAMP_MS
from compactor.producing.arrow_input import HEADERS_TYPE
from compactor.topics.record_rules import (
    column_problems,
    record_problem,
    record_size,
    record_sizes,
)

blobs = st.one_of(st.none(), st.binary(max_size=20))
headers = st.lists(st.tuples(st.text(max_size=5), blobs), max_size=3)
records = st.tuples(blobs, blobs, headers)


@given(st.lists(records, max_size=8))
def test_a_records_bytes_are_the_same_one_at_a_time_and_in_columns(
        rows: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]) -> None:
    keys = pa.array([k for k, _, _ in rows], pa.large_binary())
    values = pa.array([v for _, v, _ in rows], pa.large_binary())
    lists = pa.array([[{"key": n, "value": x} for n, x in h] or None for _, _, h in rows], HEADERS_TYPE)
    assert record_sizes(keys, values, lists).tolist() == [record_size(k, v, h) for k, v, h in rows]


@given(st.lists(st.tuples(st.one_of(st.none(), st.integers(-3, 5)), st.integers(0, 30),
                          st.one_of(st.none(), st.integers(-2, MAX_TIMESTAMP_MS + 2))), max_size=8))
def test_a_bad_record_is_found_by_both_forms_with_the_same_message(
        rows: list[tuple[int | None, int, int | None]]) -> None:
    partitions, max_bytes = 3, 20
    one_by_one = [record_problem(p, s, t, partitions, max_bytes) for p, s, t in rows]
    columns = column_problems(pa.array([p for p, _, _ in rows], pa.int64()),
                              pa.array([s for _, s, _ in rows], pa.int64()).to_numpy(),
                              pa.array([t for _, _, t in rows], pa.int64()), partitions, max_bytes)
    first_bad = next((i for i, problem in enumerate(one_by_one) if problem is not None), None)
    if first_bad is None:
        assert columns == []
    else:
        index, message = min(columns, key=lambda item: item[0])  # as producing.validation reports it
        assert index == first_bad and message == one_by_one[first_bad]


def test_a_record_problem_names_the_rule_it_breaks() -> None:
    assert record_problem(True, 1, None, 3, 10) == "partition True is out of range: the topic has 3 partition(s) (0..2)"
    assert record_problem(None, 11, None, 3, 10) == (
        "record of 11 bytes exceeds max.message.bytes (10); to accept it, raise the topic's limit: "
        "compactor topic config NAME --set max.message.bytes=11")
    assert record_problem(None, 1, -1, 3, 10) == f"timestamp_ms must be between 0 and {MAX_TIMESTAMP_MS}, got -1"
    assert record_problem(2, 10, MAX_TIMESTAMP_MS, 3, 10) is None
