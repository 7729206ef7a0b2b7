"""The records of an attached log made without Spark agree with Spark: the JSON objects of keys and values, built
by Arrow kernels, are byte for byte what ``json.dumps`` writes (nulls left out, strings escaped, integers and
booleans; other types and other control characters fall back to Python), and tombstone conditions give the flags
Spark SQL gives."""

from __future__ import annotations

import json
import random
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import BooleanType, LongType, NestedField, StringType, StructType

from compactor.attach.jsonrows import json_objects
from compactor.attach.mapping import Mapping
from compactor.attach.records import RecordMaker

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


CONDITIONS = ["op = 'D'", "op != 'D'", "NOT (op = 'D')", "op IN ('d', 'D')", "op IS NULL", "op IS NOT NULL",
              "n > 3 AND flag = true", "n <= 2 OR op LIKE 'x%'", "_cdc.op = 'D'", "OP = 'D'",
              "NOT (n < 3 OR flag = false)", "op NOT IN ('D')", "op NOT LIKE 'x%'"]


@pytest.mark.spark
def test_the_readers_evaluate_tombstone_conditions_as_spark_does(spark: Any) -> None:
    """The compaction run evaluates the condition with Spark SQL, the readers with pyarrow: on rows with nulls
    everywhere, every allowed form gives the same flags (a null result is false in both)."""
    from pyspark.sql import functions as F

    schema = Schema(NestedField(1, "op", StringType()), NestedField(2, "n", LongType()),
                    NestedField(3, "flag", BooleanType()),
                    NestedField(4, "_cdc", StructType(NestedField(5, "op", StringType()))))
    rng = random.Random(3)
    structs = [None, {"op": None}, {"op": "D"}, {"op": "U"}]
    rows = [{"op": rng.choice([None, "D", "d", "U", "xD"]), "n": rng.choice([None, 1, 2, 3, 4, 5]),
             "flag": rng.choice([None, True, False]), "_cdc": rng.choice(structs)} for _ in range(60)]
    table = pa.Table.from_pylist(rows, schema=schema.as_arrow())
    frame = spark.createDataFrame(rows, "op STRING, n BIGINT, flag BOOLEAN, _cdc STRUCT<op: STRING>")
    flags = frame.select(*[F.coalesce(F.expr(c), F.lit(False)) for c in CONDITIONS]).collect()  # one Spark job
    for i, condition in enumerate(CONDITIONS):
        mapping = Mapping("columns", "src", "n", "n", "n", ("n",), tombstone=condition, metadata=("n",))
        by_pyarrow = RecordMaker(mapping, schema).tombstones(table).to_pylist()
        assert by_pyarrow == [row[i] for row in flags], condition
