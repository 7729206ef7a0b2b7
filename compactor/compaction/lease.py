"""Run leases: how retention, and the next run of a topic, tell a live compaction from one that died.

A run leaves things behind only if it dies: its phase-1 scratch table, its staging branch on the compacted
table, and files it wrote but never committed. Retention and the next run remove them once they are older than
``compaction.orphan-min-age-ms`` by the run clock in their names. That setting alone cannot tell a dead run from
a slow one: at 0 (or with ``--now-ms`` far ahead of the run's own clock) retention used to drop a live run's
scratch table, and the run then failed.

So a run holds a **lease** for as long as it lives: a small JSON object at
``<compacted table location>/leases/<run id>.json`` holding the wall-clock times it started and was last
renewed. A daemon thread renews it every ``RENEW_INTERVAL_S``; the run deletes it when it ends, whatever the
outcome. A lease renewed within ``LEASE_TTL_MS`` (by the reader's wall clock, never ``--now-ms``) is live, and
whatever carries its run id is spared whatever the setting says; files under the compacted table are spared
from orphan removal once written after the earliest live run started (or after retention read the leases).
Leases are read after the tables and refs they protect were listed: a run writes its lease before it creates
them. A killed run's lease stops being renewed and lapses after ``LEASE_TTL_MS``; retention deletes lapsed
lease files. Writers and readers on several machines must have clocks that agree to well within
``LEASE_TTL_MS``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from pyiceberg.io import FileIO

from compactor.clock import wall_clock_ms
from compactor.config import LakeConfig
from compactor.iceberg.storage import delete_files, filesystem, fs_path, is_s3_location, list_files

log = logging.getLogger(__name__)

LEASES_DIR = "leases"
RENEW_INTERVAL_S = 15.0
LEASE_TTL_MS = 120_000


@dataclass(frozen=True)
class LiveRuns:
    """The runs of one topic that hold a live lease: their run ids, and when the earliest of them started."""

    run_ids: frozenset[str] = frozenset()
    earliest_start_ms: int | None = None


def lease_location(view_location: str, run_id: str) -> str:
    return f"{view_location.rstrip('/')}/{LEASES_DIR}/{run_id}.json"


class RunLease:
    """Holds a run's lease while the ``with`` block runs (module docstring).

    ``clock`` gives the wall-clock times written into the lease; ``wait`` is how the renewal thread waits between
    renewals (it receives ``renew_interval_s`` and returns True once the lease is released; default: the lease's
    stop event). Tests inject both instead of sleeping.
    """

    def __init__(self, config: LakeConfig, view_location: str, run_id: str,
                 renew_interval_s: float = RENEW_INTERVAL_S, *, clock: Callable[[], int] = wall_clock_ms,
                 wait: Callable[[float], bool] | None = None, io: FileIO | None = None) -> None:
        self.config = config
        self.io = io  # the compacted table's file IO (a REST catalog's vended credentials)
        self.location = lease_location(view_location, run_id)
        self.run_id = run_id
        self.clock = clock
        self.started_ms = clock()
        self.renew_interval_s = renew_interval_s
        self._stop = threading.Event()
        self._wait = wait or self._stop.wait
        self._thread = threading.Thread(target=self._renewals, name=f"lease-{run_id}", daemon=True)

    def __enter__(self) -> RunLease:
        self.renew()  # before anything the lease protects exists: a failure here fails the run at its start
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        with contextlib.suppress(Exception):  # a leftover lapses and retention deletes it
            delete_files(self.config, [self.location], self.io)

    def renew(self) -> None:
        """Write the lease, renewed now."""
        body = json.dumps({"run_id": self.run_id, "started_ms": self.started_ms, "renewed_ms": self.clock()})
        fs = filesystem(self.config, self.location, self.io)
        path = fs_path(self.location)
        if not is_s3_location(self.location):
            fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with fs.open_output_stream(path) as out:
            out.write(body.encode())

    def _renewals(self) -> None:
        while not self._wait(self.renew_interval_s):
            try:
                self.renew()
            except Exception as exc:  # the run goes on; if the lease lapses, retention may fail it later
                log.warning("could not renew the lease of run %s: %s", self.run_id, exc)


def live_runs(config: LakeConfig, view_location: str, *, delete_lapsed: bool = False,
              now_ms: int | None = None, io: FileIO | None = None) -> LiveRuns:
    """The runs whose leases under ``view_location`` are live at ``now_ms`` (default: the wall clock, never a
    command's ``--now-ms``); lapsed leases are deleted if ``delete_lapsed``. Unreadable lease files count as live
    until they are older than ``LEASE_TTL_MS``. ``io``: the compacted table's file IO (a REST catalog's vended
    credentials)."""
    now = wall_clock_ms() if now_ms is None else now_ms
    live: dict[str, int] = {}
    lapsed: list[str] = []
    fs = filesystem(config, view_location, io)
    for stored in list_files(config, f"{view_location.rstrip('/')}/{LEASES_DIR}/", io):
        run_id = stored.location.rsplit("/", 1)[-1].removesuffix(".json")
        try:
            with fs.open_input_stream(fs_path(stored.location)) as source:
                lease = json.loads(source.read())
            renewed, started = int(lease["renewed_ms"]), int(lease["started_ms"])
        except Exception:  # being written, or damaged: judge it by the file's own age (none known: lapsed)
            renewed = started = stored.mtime_ms if stored.mtime_ms is not None else now - LEASE_TTL_MS
        if renewed + LEASE_TTL_MS > now:
            live[run_id] = started
        else:
            lapsed.append(stored.location)
    if delete_lapsed and lapsed:
        with contextlib.suppress(Exception):
            delete_files(config, lapsed, io)
    return LiveRuns(frozenset(live), min(live.values()) if live else None)


@dataclass(frozen=True)
class RunMark:
    """What a run's leftover carries in its name (``<prefix><clock><separator><run id>``): the run clock it
    started at and its run id. Its staging branch (``staging.stage_branch``) and its scratch table
    (``scratch.scratch_identifier``) are named so."""

    clock_ms: int
    run_id: str

    def name(self, prefix: str, separator: str) -> str:
        return f"{prefix}{self.clock_ms}{separator}{self.run_id}"

    @classmethod
    def parse(cls, name: str, prefix: str, separator: str) -> RunMark | None:
        """The mark in ``name`` (the last ``prefix`` in it), or ``None`` if it carries none."""
        if prefix not in name:
            return None
        clock, _, run_id = name.rpartition(prefix)[2].partition(separator)
        return cls(int(clock), run_id) if clock.isdigit() and run_id else None


def is_stale(mark: RunMark | None, live: LiveRuns, now_ms: int, min_age_ms: int) -> bool:
    """Whether a leftover marked ``mark`` is a dead run's to remove: its run holds no live lease and started
    more than ``min_age_ms`` (``compaction.orphan-min-age-ms``) before ``now_ms``."""
    return mark is not None and mark.run_id not in live.run_ids and mark.clock_ms + min_age_ms < now_ms


__all__ = ["LEASES_DIR", "LEASE_TTL_MS", "LiveRuns", "RunLease", "RunMark", "is_stale", "lease_location",
           "live_runs", "wall_clock_ms"]
