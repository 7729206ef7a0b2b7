"""Pulsar-style two-phase topic compaction on Apache Iceberg.

The public names are importable from here (INTERFACE.md "Python API"); they load lazily (PEP 562), so that
``import compactor.errors`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Consumer": "compactor.consumer.consumer",
    "TopicPartition": "compactor.groups.model",
}

__all__ = ["Consumer", "TopicPartition"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'compactor' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
