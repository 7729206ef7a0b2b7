"""Progress and summaries of long operations: structured log lines (one per phase, one summary).

Every line goes to the ``compactor`` logger with its fields both in the text (for people) and as
``extra={"fields": {...}}`` (for log pipelines). A callback can also receive each event (tests, UIs). An
operation's summary is also its metric line (``metrics.emit``), from the same fields, whoever ran it: the command
line, the cleaner or a Python caller.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from compactor import metrics
from compactor.errors import UsageError

Listener = Callable[[str, dict[str, Any]], None]


LOG_LEVELS = ("debug", "info", "warning", "error")


def parse_log_level(text: str) -> str:
    """A ``--log-level`` / ``COMPACTOR_LOG_LEVEL`` value as one of ``LOG_LEVELS`` (any case; ``warn`` is
    ``warning``), so the command line, the Spark session and the spark-submit command agree on one vocabulary."""
    level = text.strip().lower()
    level = "warning" if level == "warn" else level
    if level not in LOG_LEVELS:
        raise UsageError(f"log level {text!r} is not one of {', '.join(LOG_LEVELS)} (any case)")
    return level


@dataclass
class Progress:
    """Reports the phases of one operation on one topic, with elapsed time."""

    operation: str
    topic: str
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("compactor.progress"))
    listener: Listener | None = None
    started: float = field(default_factory=time.monotonic)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)

    def phase(self, name: str, message: str = "", **fields: Any) -> None:
        """Announce a phase (or a step within one) with its figures."""
        data = {"operation": self.operation, "topic": self.topic, "phase": name, "elapsed_ms": self.elapsed_ms(),
                **fields}
        self.events.append((name, data))
        text = f"{self.operation} {self.topic}: {name}" + (f": {message}" if message else "")
        if fields:
            text += " " + json.dumps(fields, default=str, separators=(",", ":"))
        self.logger.info("%s (%.1fs)", text, data["elapsed_ms"] / 1000, extra={"fields": data})
        if self.listener is not None:
            self.listener(name, data)

    def summary(self, message: str, *, metric: str | None = None, **fields: Any) -> None:
        """The operation's one summary line and, if ``metric`` names its event, its metric line with the same
        fields (``metrics.emit``)."""
        self.phase("summary", message, **fields)
        if metric is not None:
            metrics.emit(metric, self.topic, **fields)
