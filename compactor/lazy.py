"""Lazy public names for the package roots (PEP 562): ``from compactor import Lake`` loads ``compactor.lake`` on
first use, so ``import compactor`` (and ``import readers``) loads neither Spark, pyiceberg nor pyarrow."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_attributes(package: str, modules: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports each name of ``modules`` (name -> module) on first
    use and keeps it in the package's namespace."""
    def get(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return get
