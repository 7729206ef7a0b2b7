"""How the producing benchmark times and measures its processes: children's CPU and peak memory, and a quiet
start for every timed operation."""

from __future__ import annotations

import gc
import os
import resource
import subprocess
import sys

# A child's peak RSS counts the memory of the process it was forked from, so a small Python process starts the
# command and reports the peak of its own child.
_PEAK = ("import resource, subprocess, sys\n"
         "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
         "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if code == 0 else -code)")


def children_cpu() -> float:
    """User + system CPU seconds of this process's finished children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def peak_rss_kib(command: list[str], env: dict[str, str]) -> int:
    """Peak resident memory (KiB) of ``command``, which must exit 0."""
    out = subprocess.run([sys.executable, "-c", _PEAK, *command], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    if int(out) < 0:
        raise RuntimeError(f"{' '.join(command)} exited {-int(out)}")
    return int(out)


def settle() -> None:
    """Before each timed operation, untimed: a full collection, and every dirty page of the page cache written
    out (``os.sync``), so that no operation pays for the writeback of the ones before it. A run writes
    gigabytes (1.9 GB were still dirty after a few command-line runs); once the kernel's flusher starts on
    them it competes with the timed operation for the machine's 2 cores (``bench/README.md``, "Producing")."""
    gc.collect()
    os.sync()


__all__ = ["children_cpu", "peak_rss_kib", "settle"]
