"""Kafka's partitioner as a Spark column expression: JVM-only work on the executors.

``murmur2_partition`` computes Kafka's murmur2 (``topics.partitioner``) in the JVM. Keys that are valid UTF-8
(the common case) go to ``org.apache.commons.codec.digest.MurmurHash2.hash32(String)`` through Spark's
``java_method``: the same algorithm with Kafka's seed, over the string's UTF-8 bytes, which are the key's own
bytes exactly when the key is valid UTF-8 (commons-codec ships with Spark). Any other key is hashed by Spark
SQL expressions, evaluated for those keys only: the key's hex digits give its bytes, a higher-order
``aggregate`` mixes its 4-byte blocks (interpreted, about 100 times slower per key), and every 32-bit
multiplication is split into 16-bit halves on ``bigint`` values, so nothing overflows whether or not ANSI mode
is on. No Python runs on the executors. Tests check both paths against the scalar function.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from compactor.topics.partitioner import _M, _SEED

if TYPE_CHECKING:
    from pyspark.sql import Column

_TWO_32 = 1 << 32
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
    """One round of murmur2 over the little-endian 4-byte block ``i``."""
    from pyspark.sql import functions as F

    k = _mul(_little_endian(_bytes_at(key, i * 4, 4)))
    k = _mul(_xor(k, F.shiftright(k, 24)))
    return _xor(_mul(h), k)


def _finish(key: Column, length: Column, h: Column) -> Column:
    """The last 1-3 bytes and the final mix (``h`` is a lambda variable, so its many uses cost nothing)."""
    from pyspark.sql import functions as F

    rest = length % 4
    tail = length - rest
    # the last bytes as one big-endian number, shifted so that byte j lands where murmur2 xors it in
    last = F.when(rest > 0, _bytes_at(key, tail, 3)).otherwise(F.lit(0).cast("bigint"))
    last = F.when(rest == 1, F.shiftleft(last, 16)).when(rest == 2, F.shiftleft(last, 8)).otherwise(last)
    h = _xor(h, F.shiftright(_little_endian(last), 8))
    h = F.when(rest >= 1, _mul(h)).otherwise(h)
    return F.aggregate(F.array(_mul(_xor(h, F.shiftright(h, 13)))), F.lit(0).cast("bigint"),
                       lambda _, m: _xor(m, F.shiftright(m, 15)))


def murmur2_partition(key: Column, partitions: int) -> Column:
    """``(murmur2(key) & 0x7fffffff) % partitions`` for a binary column (null for a null key)."""
    from pyspark.sql import functions as F

    text = F.decode(key, "UTF-8")
    codec = F.call_function("java_method", F.lit("org.apache.commons.codec.digest.MurmurHash2"),
                            F.lit("hash32"), text).cast("bigint")
    length = F.length(key).cast("bigint")
    blocks = F.floor(length / 4).cast("int")
    positions = F.when(blocks > 0, F.sequence(F.lit(0), blocks - 1)).otherwise(F.array().cast("array<int>"))
    exact = F.aggregate(positions, _xor(F.lit(_SEED).cast("bigint"), length), lambda h, i: _block(key, h, i),
                        lambda h: _finish(key, length, h))
    h = F.when(F.encode(text, "UTF-8") == key, codec).otherwise(exact)
    return F.when(key.isNotNull(), (h.bitwiseAND(F.lit(0x7FFFFFFF)) % partitions).cast("int"))


def headers_type() -> str:
    return "array<struct<key:string,value:binary>>"


__all__ = ["headers_type", "murmur2_partition"]
