"""Following a call through the product: which modules it enters, in order (for the tests that check that a
compaction run and a produce pass through their steps once)."""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")


def _is_data_access(frame: FrameType) -> bool:
    """Whether the frame runs a property getter (or code nested in one) or a generated dunder (``__init__``,
    ``__eq__``...): reading a step's result is not entering the step."""
    code = frame.f_code
    if code.co_name.startswith("__") or code.co_filename.startswith("<"):
        return True
    owner, _, name = code.co_qualname.split(".<locals>.")[0].rpartition(".")
    cls = frame.f_globals.get(owner) if owner and "<" not in owner else None
    return inspect.isclass(cls) and isinstance(inspect.getattr_static(cls, name, None), property)


def modules_entered(fn: Callable[[], T], prefix: str) -> tuple[T, list[str]]:
    """``fn()``, and the modules under ``prefix`` whose functions it called, in call order, in every thread."""
    entered: list[str] = []
    lock = threading.Lock()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if module.startswith(prefix) and not _is_data_access(frame):
            with lock:
                entered.append(module)

    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        result = fn()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return result, entered


def step_path(modules: list[str], steps: Mapping[str, str]) -> list[str]:
    """The steps ``modules`` pass through, each consecutive run once (``steps``: module prefix -> step; modules
    of no step, the services every step uses, are left out)."""
    path: list[str] = []
    for module in modules:
        step = next((s for prefix, s in steps.items() if module == prefix or module.startswith(prefix + ".")), None)
        if step is not None and (not path or path[-1] != step):
            path.append(step)
    return path
