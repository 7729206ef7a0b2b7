"""One thread pool per process for producing's parallel work (hashing keys, writing partitions' files).

numpy and pyarrow release the GIL while they hash, copy, encode and compress, so threads use every core.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading

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


__all__ = ["cores", "pool"]
