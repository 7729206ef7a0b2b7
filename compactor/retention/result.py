"""What a retention pass removed (or would remove, in a dry run), as printed by ``compactor retention``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from compactor.results import JsonResult


@dataclass
class RetentionResult(JsonResult):
    """Totals of one retention pass over one topic (INTERFACE.md ``retention`` fields, plus detail)."""

    topic: str
    dry_run: bool
    now_ms: int
    removed_records: int = 0
    removed_files: int = 0
    removed_bytes: int = 0
    expired_snapshots: int = 0
    log_start_offsets: dict[str, int] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "dry_run": self.dry_run,
            "now_ms": self.now_ms,
            "removed_records": self.removed_records,
            "removed_files": self.removed_files,
            "removed_bytes": self.removed_bytes,
            "expired_snapshots": self.expired_snapshots,
            "log_start_offsets": self.log_start_offsets,
            **self.detail,
        }
