"""Retention (docs/guarantees.md#retention): Kafka's cleanup policies on Iceberg, then snapshot expiry.

Public entry point: ``run_retention(lake, name, now_ms=None, dry_run=False) -> RetentionResult``.
"""

from compactor.retention.result import RetentionResult
from compactor.retention.run import run_retention

__all__ = ["RetentionResult", "run_retention"]
