"""Structured metric lines: one JSON object per event on the ``compactor.metrics`` logger.

The figures users of Kafka's log cleaner and Pulsar's compactor watch (durations; records and bytes read,
written and removed; dirty ratio; max compaction delay; failures), as machine-readable lines
(``{"event": "compaction", "topic": ..., ...}``), so a log pipeline can chart them without parsing prose.
A compaction's and a retention's lines come from their summaries (``progress.Progress.summary``), so they are
logged however the operation was started; the cleaner logs its own events. ``status --json`` exposes the same
figures for the last run under ``metrics``.
"""

from __future__ import annotations

import json
import logging
from typing import Any

log = logging.getLogger("compactor.metrics")

COMPACTION_FIELDS = ("records_read", "records_kept", "records_removed", "tombstones_kept", "tombstones_dropped",
                     "bytes_read", "bytes_written", "duration_ms")


def emit(event: str, topic: str | None = None, **fields: Any) -> dict[str, Any]:
    """Log one metric line and return it."""
    line: dict[str, Any] = {"event": event}
    if topic is not None:
        line["topic"] = topic
    line.update(fields)
    log.info("%s", json.dumps(line, default=str, separators=(",", ":"), sort_keys=False), extra={"fields": line})
    return line


def compaction_metrics(stats: dict[str, Any]) -> dict[str, Any]:
    """The watched figures of one compaction run, from its cursor statistics."""
    return {name: stats.get(name) for name in COMPACTION_FIELDS if name in stats}
