"""Is this process's pyiceberg plain append in a slow mode? (``bench/README.md``, "Producing")

On the machine these figures come from, pyiceberg's append of the same 1M-record table in a fresh process took
0.18-0.19 s or 0.33-0.37 s, and for a while which one depended only on the size of the process's environment
(one character more or less flipped it); an hour later every size gave 0.20-0.22 s. A process keeps its mode
for its whole life, so a benchmark whose own process lands in the slow mode compares the product with a plain
append 1.8x slower than it can be, and flatters the product. ``fresh_plain_appends`` times the plain append of
the same Parquet file in fresh processes whose environments differ by one character each; the benchmark flags
its run when its own plain append is well above the fastest of them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

SLOW_FACTOR = 1.25  # an in-process plain append this much slower than the fastest fresh one is the slow mode

_SCRIPT = """
import sys, time
import pyarrow as pa, pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog
path, warehouse = sys.argv[1], sys.argv[2]
catalog = SqlCatalog("plain", uri=f"sqlite:///{warehouse}/catalog.db", warehouse=f"file://{warehouse}")
catalog.create_namespace("bench")
table = pq.read_table(path).cast(pa.schema([("key", pa.large_binary()), ("value", pa.large_binary())]))
best = float("inf")
for i in range(3):
    plain = catalog.create_table(f"bench.plain{i}", schema=table.schema)
    started = time.perf_counter()
    plain.append(table)
    best = min(best, time.perf_counter() - started)
print(best)
"""


def fresh_plain_appends(parquet: Path, workdir: Path, paddings: Sequence[int] = (1, 2, 3, 4)) -> list[float]:
    """The best of three plain appends of ``parquet``'s rows in a fresh process, for each environment padding."""
    seconds = []
    for pad in paddings:
        warehouse = workdir / f"plain-mode-{pad}"
        shutil.rmtree(warehouse, ignore_errors=True)
        warehouse.mkdir(parents=True)
        try:
            done = subprocess.run([sys.executable, "-c", _SCRIPT, str(parquet), str(warehouse)], check=True,
                                  capture_output=True, text=True,
                                  env={**os.environ, "BENCH_ENVIRONMENT_PADDING": "x" * pad})
            seconds.append(round(float(done.stdout.strip()), 3))
        finally:
            shutil.rmtree(warehouse, ignore_errors=True)
    return seconds


def slow_mode(in_process_s: float, fresh_s: Sequence[float]) -> bool:
    return bool(fresh_s) and in_process_s > SLOW_FACTOR * min(fresh_s)


__all__ = ["SLOW_FACTOR", "fresh_plain_appends", "slow_mode"]
