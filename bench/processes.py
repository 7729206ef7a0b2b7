"""How the producing benchmark times and measures its processes: children's CPU and peak memory, and a quiet
start for every timed operation."""

from __future__ import annotations

import gc
import os
import resource

from tests.measure import peak_rss_kib


def children_cpu() -> float:
    """User + system CPU seconds of this process's finished children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def settle() -> None:
    """Before each timed operation, untimed: a full collection, and every dirty page of the page cache written
    out (``os.sync``), so that no operation pays for the writeback of the ones before it. A run writes
    gigabytes (1.9 GB were still dirty after a few command-line runs); once the kernel's flusher starts on
    them it competes with the timed operation for the machine's 2 cores (``bench/README.md``, "Producing")."""
    gc.collect()
    os.sync()


__all__ = ["children_cpu", "peak_rss_kib", "settle"]
