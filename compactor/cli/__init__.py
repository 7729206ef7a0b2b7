"""The ``compactor`` command line: ``cli.main`` parses and dispatches, one module per group of verbs.

A command is a short-lived process, so this package, imported before any verb module loads pyarrow, turns
off transparent huge pages in Arrow's bundled allocator (mimalloc, ``MIMALLOC_ALLOW_THP``) unless the
environment already chose. A fresh process must fault in every page it touches, and with huge pages each first
touch zeroes 2 MB: a 1M-record ``produce --format parquet`` zeroed 180 MB of huge pages for a pool that
peaked at 74 MB. Without them, the run's system time fell from 0.25 to 0.18 s and its wall time from 0.40 to
0.35 s (median of 10 interleaved runs each, 2026-11-24; ``bench/README.md``). JSON Lines did not change. Only
processes that load pyarrow after this import see it: the command line and the processes it starts.
"""

from __future__ import annotations

import os

os.environ.setdefault("MIMALLOC_ALLOW_THP", "0")
