"""Kafka's partitioner and the record size as Spark column expressions: JVM-only work on the executors.

``murmur2_partition`` builds Kafka's murmur2 (``topics.partitioner``) from Spark SQL functions: the key's hex
digits give its bytes, one projection per 4-byte block mixes them, and every 32-bit multiplication is split
into 16-bit halves on ``bigint`` values, so nothing overflows whether or not ANSI mode is on. No Python runs
on the executors. Tests check it against the scalar function on random keys.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from compactor.topics.partitioner import _M, _SEED

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

_TWO_32 = 1 << 32
UNROLLED_BLOCKS = 16
_M_LO, _M_HI = _M & 0xFFFF, _M >> 16


def _mul(value: Column) -> Column:
    """``(value * M) mod 2**32`` for ``0 <= value < 2**32`` (bigint), without overflow."""
    return (value * _M_LO + ((value * _M_HI) % 65536) * 65536) % _TWO_32


def _xor(a: Column, b: Column) -> Column:
    return a.bitwiseXOR(b)


def _bytes_at(key: Column, position: Column, count: int) -> Column:
    """The ``count`` bytes of ``key`` from 0-based ``position`` as a big-endian unsigned integer (bigint)."""
    from pyspark.sql import functions as F

    return F.conv(F.hex(key.substr(position + 1, F.lit(count))), 16, 10).cast("bigint")


def _little_endian(big_endian: Column) -> Column:
    from pyspark.sql import functions as F

    return (F.shiftleft(big_endian.bitwiseAND(F.lit(0xFF)), 24)
            .bitwiseOR(F.shiftleft(F.shiftright(big_endian, 8).bitwiseAND(F.lit(0xFF)), 16))
            .bitwiseOR(F.shiftleft(F.shiftright(big_endian, 16).bitwiseAND(F.lit(0xFF)), 8))
            .bitwiseOR(F.shiftright(big_endian, 24)))


def _block(key: Column, h: Column, i: Column) -> Column:
    """One round of murmur2 over the little-endian 4-byte block ``i`` (as one expression: for ``aggregate``)."""
    from pyspark.sql import functions as F

    k = _mul(_little_endian(_bytes_at(key, i * 4, 4)))
    k = _mul(_xor(k, F.shiftright(k, 24)))
    return _xor(_mul(h), k)


def murmur2_partition(frame: DataFrame, key: str, partitions: int, out: str) -> DataFrame:
    """``frame`` with column ``out`` = ``(murmur2(key) & 0x7fffffff) % partitions`` (null for a null key).

    The first ``UNROLLED_BLOCKS`` 4-byte blocks are mixed by one projection each (each references the previous
    hash by name, so the plan grows linearly and Spark compiles it); longer keys continue in a higher-order
    ``aggregate`` (interpreted, slower), evaluated only for them.
    """
    from pyspark.sql import functions as F

    column = F.col(key)
    length = F.length(column).cast("bigint")
    blocks = F.floor(length / 4).cast("int")
    h_name = f"{out}__h"
    frame = frame.withColumn(h_name, _xor(F.lit(_SEED).cast("bigint"), length))
    word, mixed = f"{out}__k", f"{out}__m"
    for j in range(UNROLLED_BLOCKS):
        # Each intermediate is its own projection, evaluated once (Spark eliminates no common subexpressions
        # inside a conditional branch, and each 32-bit multiplication references its operand twice).
        frame = frame.withColumn(word, F.when(blocks > j, _bytes_at(column, F.lit(4 * j), 4)))
        frame = frame.withColumn(word, _mul(_little_endian(F.col(word))))
        frame = frame.withColumn(mixed, _mul(_xor(F.col(word), F.shiftright(F.col(word), 24))))
        frame = frame.withColumn(h_name, F.when(blocks > j, _xor(_mul(F.col(h_name)), F.col(mixed)))
                                 .otherwise(F.col(h_name)))
    rest_positions = F.sequence(F.lit(UNROLLED_BLOCKS), blocks - 1)
    frame = frame.withColumn(h_name, F.when(blocks > UNROLLED_BLOCKS,
                                            F.aggregate(rest_positions, F.col(h_name),
                                                        lambda h, i: _block(column, h, i)))
                             .otherwise(F.col(h_name)))
    rest = length % 4
    tail = blocks.cast("bigint") * 4
    zero = F.lit(0).cast("bigint")
    # the last 1-3 bytes, big-endian as one number, then spread as murmur2 xors them in (little-endian)
    frame = frame.withColumn(word, F.when(rest > 0, _bytes_at(column, tail, 3)).otherwise(zero))
    frame = frame.withColumn(word, F.when(rest == 1, F.shiftleft(F.col(word), 16))
                             .when(rest == 2, F.shiftleft(F.col(word), 8)).otherwise(F.col(word)))
    frame = frame.withColumn(word, _little_endian(F.col(word)))
    frame = frame.withColumn(h_name, _xor(F.col(h_name), F.shiftright(F.col(word), 8)))
    frame = frame.withColumn(h_name, F.when(rest >= 1, _mul(F.col(h_name))).otherwise(F.col(h_name)))
    frame = frame.withColumn(h_name, _mul(_xor(F.col(h_name), F.shiftright(F.col(h_name), 13))))
    h = _xor(F.col(h_name), F.shiftright(F.col(h_name), 15))
    frame = frame.withColumn(out, F.when(F.col(key).isNotNull(),
                                         (h.bitwiseAND(F.lit(0x7FFFFFFF)) % partitions).cast("int")))
    return frame.drop(h_name, word, mixed)


def record_size(key: Column, value: Column, headers: Column) -> Column:
    """Key + value + header keys and values, in bytes (what counts against ``max.message.bytes``)."""
    from pyspark.sql import functions as F

    header_bytes = F.aggregate(F.coalesce(headers, F.array().cast(headers_type())), F.lit(0).cast("bigint"),
                               lambda total, h: total + F.coalesce(F.octet_length(h.getField("key")), F.lit(0))
                               + F.coalesce(F.length(h.getField("value")), F.lit(0)))
    return (F.coalesce(F.length(key), F.lit(0)) + F.coalesce(F.length(value), F.lit(0))).cast("bigint") + header_bytes


def headers_type() -> str:
    return "array<struct<key:string,value:binary>>"


__all__ = ["headers_type", "murmur2_partition", "record_size"]
