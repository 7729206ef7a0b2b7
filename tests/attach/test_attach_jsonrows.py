"""The JSON objects of an attached log's keys and values, built by Arrow kernels, are byte for byte what
``json.dumps`` writes (and so what the Python rendering and Spark's ``to_json`` write): nulls left out, strings
escaped, integers and booleans; other types and other control characters fall back to Python."""

from __future__ import annotations

import json
import random

import pyarrow as pa

from compactor.attach.jsonrows import json_objects

ALPHABET = ['a', 'é', '"', "\\", "\n", "\t", "\r", "\b", "\f", "/", "☃", "𝄞", " ", "\u2028", "'"]


def dumps(obj: dict[str, object]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def test_strings_integers_and_booleans_match_json_dumps() -> None:
    rng = random.Random(7)
    rows = 300
    text = [None if rng.random() < 0.2 else "".join(rng.choices(ALPHABET, k=rng.randint(0, 6))) for _ in range(rows)]
    number = [None if rng.random() < 0.2 else rng.randint(-2**63, 2**63 - 1) for _ in range(rows)]
    flag = [None if rng.random() < 0.3 else rng.random() < 0.5 for _ in range(rows)]
    small = pa.array([None if n is None else n % 100 for n in number], pa.int32())
    columns = [("id", pa.array(text, pa.string())), ("n", pa.chunked_array([pa.array(number, pa.int64())])),
               ("flag", pa.array(flag, pa.bool_())), ('we"ird', small)]
    built = json_objects(columns, rows)
    assert built is not None and built.type == pa.large_binary()
    expected = [dumps({name: values[i].as_py() for name, values in columns if values[i].as_py() is not None})
                for i in range(rows)]
    assert built.to_pylist() == expected
    assert all(isinstance(json.loads(b), dict) for b in built.to_pylist())  # valid JSON, every row
    assert json_objects([], 2).to_pylist() == [b"{}", b"{}"]  # type: ignore[union-attr]


def test_other_types_and_control_characters_are_left_to_python() -> None:
    assert json_objects([("v", pa.array([b"x"], pa.binary()))], 1) is None
    assert json_objects([("v", pa.array([1.5], pa.float64()))], 1) is None
    assert json_objects([("v", pa.array(["a\x01"], pa.string()))], 1) is None
