"""One thread pool per process for producing's parallel work (hashing keys, writing partitions' files).

numpy and pyarrow release the GIL while they hash, copy, encode and compress, so threads use every core.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar, cast

T = TypeVar("T")
R = TypeVar("R")

_POOL: concurrent.futures.ThreadPoolExecutor | None = None
_LOCK = threading.Lock()


def cores() -> int:
    return os.cpu_count() or 1


def pool() -> concurrent.futures.ThreadPoolExecutor:
    """The shared pool (created on first use, one worker per core, at least two)."""
    global _POOL  # noqa: PLW0603
    with _LOCK:
        if _POOL is None:
            _POOL = concurrent.futures.ThreadPoolExecutor(max_workers=max(2, cores()),
                                                          thread_name_prefix="compactor-produce")
        return _POOL


def ahead(items: Iterable[T], prepare: Callable[[T], R], depth: int = 2) -> Iterator[R]:
    """``prepare(item)`` for each item in order, computed by one background thread up to ``depth`` items ahead
    of the consumer: reading and hashing chunk k+1 overlaps whatever the consumer does with chunk k (writing
    its files), and memory stays bounded by ``depth`` prepared items. An error (of the iteration or of
    ``prepare``) is raised where its item would have been yielded; items are taken from ``items`` one at a
    time by that one thread, so ``prepare`` may keep state that depends on order."""
    source = iter(items)
    end = object()

    def step() -> object:
        for item in source:
            return prepare(item)
        return end

    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="compactor-ahead") as reader:
        pending = deque(reader.submit(step) for _ in range(max(1, depth)))
        try:
            while True:
                result = pending.popleft().result()
                if result is end:
                    return
                pending.append(reader.submit(step))
                yield cast(R, result)
        finally:
            for future in pending:
                future.cancel()


__all__ = ["ahead", "cores", "pool"]
