"""Kafka's default partitioner: ``(murmur2(key) & 0x7fffffff) % partitions``; keyless records round-robin.

``murmur2`` is the 32-bit MurmurHash2 variant Kafka's ``Utils.murmur2`` computes (seed ``0x9747b28c``),
so a key lands in the same partition it would in Kafka with the same partition count.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from compactor.workers import cores, pool

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of ``data`` as a signed 32-bit integer (Java ``int`` semantics)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    for i in range(0, whole, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length & 3
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


# --- the vectorised form: one numpy pass per 4-byte block position, no Python object per key -------------

_M32 = np.uint32(_M)


def _binary_parts(keys: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(starts, lengths, data)`` of a binary Arrow array (null entries get length 0)."""
    if not (pa.types.is_binary(keys.type) or pa.types.is_large_binary(keys.type)):
        keys = keys.cast(pa.large_binary())
    count = len(keys)
    offset_type = np.int64 if pa.types.is_large_binary(keys.type) else np.int32
    buffers = keys.buffers()
    offsets = np.frombuffer(buffers[1], offset_type)[keys.offset: keys.offset + count + 1].astype(np.int64)
    data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    if keys.null_count:
        lengths = np.where(keys.is_valid().to_numpy(zero_copy_only=False), lengths, 0)
    return offsets[:-1], lengths, data


def _words(data: np.ndarray) -> np.ndarray:
    """Every little-endian uint32 of ``data`` starting at each byte (an unaligned, overlapping view, no copy);
    data shorter than 4 bytes is padded first."""
    if len(data) < 4:
        data = np.concatenate([data, np.zeros(4 - len(data), np.uint8)])
    return np.ndarray(shape=(len(data) - 3,), dtype="<u4", buffer=data, offset=0, strides=(1,))


def murmur2_array(keys: pa.Array) -> np.ndarray:
    """Kafka's murmur2 of every value of a binary Arrow array, as signed 32-bit integers (nulls hash as ``b""``).

    Keys are processed block position by block position, each 4-byte block read with one gather from an
    unaligned uint32 view of the data. Block positions every key has are whole-array operations; past the
    shortest key, only the keys that still have a block at that position are gathered and updated.
    """
    if len(keys) == 0:
        return np.zeros(0, np.int32)
    starts, lengths, data = _binary_parts(keys)
    words = _words(data)
    last_word = len(words) - 1
    with np.errstate(over="ignore"):
        h = np.uint32(_SEED) ^ lengths.astype(np.uint32)
        blocks = lengths >> 2
        shortest, longest = int(blocks.min()), int(blocks.max())
        for j in range(longest):
            active = None if j < shortest else np.flatnonzero(blocks > j)  # None: every key has block j
            k = words[(starts if active is None else starts[active]) + 4 * j]
            k *= _M32
            k ^= k >> np.uint32(24)
            k *= _M32
            if active is None:
                h *= _M32
                h ^= k
            else:
                h[active] = (h[active] * _M32) ^ k
        # the last 1-3 bytes: the low ``rest`` bytes of the word at the tail (read earlier, then shifted, where
        # the word would run past the data's end)
        rest = lengths & 3
        tail = starts + (blocks << 2)
        at = np.minimum(tail, last_word)
        word = words[np.maximum(at, 0)] >> ((tail - at).astype(np.uint32) << np.uint32(3))
        word &= _TAIL_MASKS[rest]
        h ^= word
        h = np.where(rest > 0, h * _M32, h)
        h ^= h >> np.uint32(13)
        h *= _M32
        h ^= h >> np.uint32(15)
    return h.view(np.int32)


_TAIL_MASKS = np.array([0, 0xFF, 0xFFFF, 0xFFFFFF], np.uint32)


def partitions_for_keys(keys: pa.Array, partitions: int) -> np.ndarray:
    """``partition_for_key`` of every value of a binary Arrow array (int32; nulls get the partition of ``b""``).

    Large arrays are hashed in slices side by side (numpy releases the GIL while it works).
    """
    if len(keys) < PARALLEL_KEYS or cores() < 2:
        hashes = murmur2_array(keys)
    else:
        step = -(-len(keys) // cores())
        hashes = np.concatenate(list(pool().map(murmur2_array, [keys.slice(i, step)
                                                                for i in range(0, len(keys), step)])))
    return ((hashes & np.int32(0x7FFFFFFF)) % np.int32(partitions)).astype(np.int32)


PARALLEL_KEYS = 200_000
