"""Named failure points, so tests can crash a run at an exact step (docs/guarantees.md#the-cursor-and-failures).

A point is enabled with the environment variable ``COMPACTOR_FAILPOINTS`` (for subprocesses) or the
``enabled`` context manager (in-process), as ``name=action[,name=action...]``. Actions:

* ``raise``: raise ``InjectedFailureError`` (the run fails like any error would),
* ``exit``: end the process at once with status 137, as if it had been killed (no cleanup runs),
* ``pause``: create the file named by ``COMPACTOR_FAILPOINT_MARKER`` and sleep while it exists, so a test can
  kill the process (and its JVM) from outside while it sits exactly at that point, or act there (run retention,
  say) and then delete the file to let the process go on,
* in-process only, a callable: called at that point (a test makes another writer act exactly there).

Points of a compaction run, in order: ``after-plan``, ``after-phase-1``, ``after-delete``, ``after-write``,
``before-commit``, ``after-commit``. Retention: ``retention-after-delete``, ``retention-before-expire``.
Producing: ``produce-after-chunk`` (a chunk of the batch is in its data files), ``produce-before-commit``,
``produce-after-commit``.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from compactor.errors import InjectedFailureError, InputError

ENV = "COMPACTOR_FAILPOINTS"
MARKER_ENV = "COMPACTOR_FAILPOINT_MARKER"
ACTIONS = ("raise", "exit", "pause")
Action = str | Callable[[], None]
_active: dict[str, Action] = {}


def parse(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, action = item.partition("=")
        action = action or "raise"
        if action not in ACTIONS:
            raise InputError(f"unknown failpoint action {action!r} for {name!r} (use {', '.join(ACTIONS)})")
        out[name] = action
    return out


def _configured() -> dict[str, Action]:
    return {**parse(os.environ.get(ENV, "")), **_active}


def hit(name: str) -> None:
    """Fail here if the point ``name`` is enabled; otherwise do nothing (cheap)."""
    if not _active and ENV not in os.environ:
        return
    action = _configured().get(name)
    if action is None:
        return
    if callable(action):
        action()
        return
    if action == "exit":
        os._exit(137)
    if action == "pause":
        marker = os.environ.get(MARKER_ENV)
        if marker:
            Path(marker).write_text(name)
        while not marker or Path(marker).exists():
            time.sleep(0.2)
        return
    raise InjectedFailureError(f"injected failure at '{name}'")


@contextlib.contextmanager
def enabled(points: Mapping[str, Action] | str) -> Iterator[None]:
    """Enable failure points for the duration of a ``with`` block (in this process)."""
    chosen: dict[str, Action] = dict(parse(points)) if isinstance(points, str) else dict(points)
    previous = dict(_active)
    _active.update(chosen)
    try:
        yield
    finally:
        _active.clear()
        _active.update(previous)
