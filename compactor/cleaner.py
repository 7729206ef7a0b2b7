"""The cleaner (Kafka's log cleaner, over every topic): compact the due topics filthiest first, then apply
retention to every topic; one topic's failure never stops the others.

One pass:

1. assess every topic (metadata only, ``status.assess_topic``);
2. compact the due ones in order of dirty ratio, highest first (ties: more dirty bytes first, then name);
3. run retention on every topic (retention applies whether a topic compacts or not);
4. remove consumer groups empty for ``offsets.retention.ms`` (KIP-211: counted from when the last member left,
   or from the last commit of a group that never had members; ``groups``);
5. report the pass (JSON) and log metric lines (``compactor.metrics``: each compaction and retention logs its own,
   as it does when run alone; the cleaner adds its failures, its passes and the groups it expired).

A topic whose step fails is logged (``event=topic-failed``) and reported in the pass. What happens next
depends on the failure (``errors.is_transient``):

* **transient** (a race, an outage, an unknown commit outcome): the next pass tries the topic again, with no
  back-off, up to ``transient_limit`` consecutive failing passes; from then on each further failure backs it
  off too, until a pass in which the topic succeeds;
* **terminal** (bad settings, a corrupt topic or cursor, refused credentials, and any failure the product did
  not classify): later passes skip the topic for ``backoff_s`` (Kafka marks such partitions uncleanable).

A stop request (SIGTERM or SIGINT under ``run_forever``) is honoured between steps: the step in progress
finishes (a compaction is never abandoned half-published), then the cleaner returns.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

from compactor import metrics
from compactor.clock import resolve_now_ms
from compactor.errors import is_transient
from compactor.iceberg.catalog import first_line
from compactor.results import JsonResult
from compactor.retention import RetentionResult

if TYPE_CHECKING:
    from compactor.attach.status import AttachedRetention
    from compactor.lake import Lake

log = logging.getLogger("compactor.cleaner")


class CompactionOutcome(Protocol):
    """What the cleaner uses of a compaction run's result (``compaction.job.CompactionResult``)."""

    @property
    def committed(self) -> bool: ...

    def as_json(self) -> dict[str, Any]: ...


CompactFn = Callable[["Lake", str, int], CompactionOutcome]
RetainFn = Callable[["Lake", str, int], RetentionResult]


def _compact(lake: Lake, name: str, now_ms: int) -> CompactionOutcome:
    from compactor.compaction.job import TwoPhaseCompactor

    return TwoPhaseCompactor(lake, name, now_ms=now_ms).run()


def _retain(lake: Lake, name: str, now_ms: int) -> RetentionResult:
    from compactor.retention import run_retention

    return run_retention(lake, name, now_ms=now_ms)


def _compact_attached(lake: Lake, name: str, now_ms: int) -> CompactionOutcome:
    from compactor.attach.compaction import compact_attached

    return compact_attached(lake, name, now_ms=now_ms)


def _retain_attached(lake: Lake, name: str, now_ms: int) -> AttachedRetention:
    from compactor.attach.status import retain_attached

    return retain_attached(lake, name, now_ms)


@dataclass
class StepFailure(JsonResult):
    """One failed step of one topic in a pass, and what the cleaner does about it."""

    step: str
    error: str
    transient: bool = False
    backoff_s: float = 0.0  # 0: the next pass tries again


@dataclass
class TopicOutcome(JsonResult):
    """What one pass did to one topic."""

    topic: str
    dirty_ratio: float | None = None
    due: bool | None = None
    due_reason: str = ""
    compaction: CompactionOutcome | None = None
    retention: RetentionResult | AttachedRetention | None = None
    errors: list[StepFailure] = field(default_factory=list)
    skipped: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "dirty_ratio": self.dirty_ratio, "due": self.due, "due_reason": self.due_reason,
                "compaction": self.compaction.as_json() if self.compaction is not None else None,
                "retention": self.retention.as_json() if self.retention is not None else None,
                "errors": [e.as_json() for e in self.errors], "skipped": self.skipped}


@dataclass
class PassResult(JsonResult):
    """One cleaner pass over every topic."""

    now_ms: int
    compaction_order: list[str] = field(default_factory=list)
    topics: dict[str, TopicOutcome] = field(default_factory=dict)
    duration_ms: int = 0
    stopped: bool = False
    expired_groups: list[str] = field(default_factory=list)  # consumer groups past offsets.retention.ms

    @property
    def failed(self) -> list[str]:
        return sorted(name for name, outcome in self.topics.items() if outcome.errors)

    def as_json(self) -> dict[str, Any]:
        return {"now_ms": self.now_ms, "compaction_order": self.compaction_order, "failed": self.failed,
                "stopped": self.stopped, "duration_ms": self.duration_ms, "expired_groups": self.expired_groups,
                "topics": {name: o.as_json() for name, o in sorted(self.topics.items())}}


class Cleaner:
    """Runs cleaner passes over every topic of a lake (see the module docstring)."""

    def __init__(self, lake: Lake, *, backoff_s: float = 300.0, transient_limit: int = 3,
                 compact: CompactFn = _compact, retain: RetainFn = _retain) -> None:
        self.lake = lake
        self.backoff_s = backoff_s
        self.transient_limit = transient_limit
        self._compact = compact
        self._retain = retain
        self.uncleanable: dict[str, tuple[float, str]] = {}  # topic -> (retry after, monotonic; error)
        self.transient_failures: dict[str, int] = {}  # topic -> consecutive passes failing only transiently
        self.stop_requested = threading.Event()

    def request_stop(self) -> None:
        self.stop_requested.set()

    def _fail(self, outcome: TopicOutcome, step: str, exc: BaseException) -> None:
        topic, message = outcome.topic, f"{type(exc).__name__}: {first_line(exc)}"
        transient = is_transient(exc)
        backoff = self.backoff_s
        if transient:
            if not any(e.transient for e in outcome.errors):  # one count per pass
                self.transient_failures[topic] = self.transient_failures.get(topic, 0) + 1
            if self.transient_failures[topic] < self.transient_limit:
                backoff = 0.0
        outcome.errors.append(StepFailure(step, message, transient, backoff))
        if backoff > 0:
            self.uncleanable[topic] = (time.monotonic() + backoff, message)
        metrics.emit("topic-failed", topic, step=step, error=message, transient=transient, backoff_s=backoff)
        log.warning("cleaner: %s of %s failed (%s): %s", step, topic,
                    f"skipped for {backoff:.0f}s" if backoff > 0 else "retried at the next pass", message)

    def run_once(self, now_ms: int | None = None) -> PassResult:
        """One pass at ``now_ms`` (default: the clock)."""
        from compactor.attach.status import assess_attached
        from compactor.status import assess_topic

        started = time.monotonic()
        now = resolve_now_ms(now_ms)
        result = PassResult(now_ms=now)
        # attached logs (docs/guarantees.md#attached-logs) take their own steps
        topics, attached_logs = self.lake.list_logs()
        attached = set(attached_logs)
        names = topics + attached_logs
        ranked: list[tuple[float, int, str]] = []
        for name in names:
            outcome = result.topics.setdefault(name, TopicOutcome(name))
            held = self.uncleanable.get(name)
            if held is not None and held[0] > time.monotonic():
                outcome.skipped = f"uncleanable until its back-off ends (last error: {held[1]})"
                continue
            self.uncleanable.pop(name, None)
            try:
                assessment = assess_attached(self.lake, name, now) if name in attached \
                    else assess_topic(self.lake, name, now)[0]
            except Exception as exc:  # one topic's failure never stops the others
                self._fail(outcome, "assess", exc)
                continue
            outcome.dirty_ratio, outcome.due, outcome.due_reason = (assessment.dirty_ratio, assessment.due,
                                                                    assessment.due_reason)
            if assessment.due:
                ranked.append((-assessment.dirty_ratio, -assessment.dirty_bytes, name))
        for _, _, name in sorted(ranked):  # filthiest first
            if self.stop_requested.is_set():
                result.stopped = True
                break
            outcome = result.topics[name]
            result.compaction_order.append(name)
            try:
                compact = _compact_attached if name in attached else self._compact
                outcome.compaction = compact(self.lake, name, now)  # logs its own metric line
            except Exception as exc:
                self._fail(outcome, "compact", exc)
        for name in names:
            outcome = result.topics[name]
            if self.stop_requested.is_set():
                result.stopped = True
                break
            if outcome.skipped or any(e.step == "assess" for e in outcome.errors):
                continue
            try:
                retain = _retain_attached if name in attached else self._retain
                outcome.retention = retain(self.lake, name, now)  # logs its own metric line
            except Exception as exc:
                self._fail(outcome, "retention", exc)
            else:
                if not outcome.errors:
                    self.transient_failures.pop(name, None)  # a clean pass ends a run of transient failures
        self._expire_groups(result, now_ms)
        result.duration_ms = int((time.monotonic() - started) * 1000)
        metrics.emit("cleaner-pass", None, topics=len(names), compacted=len(result.compaction_order),
                     failed=len(result.failed), duration_ms=result.duration_ms, stopped=result.stopped)
        return result

    def _expire_groups(self, result: PassResult, now_ms: int | None) -> None:
        """Remove consumer groups that have had no live member (or, never having had one, no commit) for
        ``offsets.retention.ms`` (KIP-211), on the group store's clock unless the pass was given ``now_ms``."""
        from compactor.groups import GroupStore, offsets_retention_ms

        try:
            store = GroupStore.if_any(self.lake)
            if store is None:
                return
            result.expired_groups = store.expire(offsets_retention_ms(), now_ms)
        except Exception as exc:  # never stops the pass; logged like a topic's failure
            log.warning("cleaner: expiring consumer groups failed: %s: %s", type(exc).__name__, first_line(exc))
        for group in result.expired_groups:
            metrics.emit("group-expired", None, group=group)

    def run_forever(self, interval_s: float, on_pass: Callable[[PassResult], None] | None = None,
                    now_ms: int | None = None) -> int:
        """Pass after pass, ``interval_s`` apart, until a stop is requested; returns the number of passes."""
        passes = 0
        while not self.stop_requested.is_set():
            result = self.run_once(now_ms)
            passes += 1
            if on_pass is not None:
                on_pass(result)
            self.stop_requested.wait(interval_s)
        return passes


class Stoppable(Protocol):
    """A long-running loop that stops cleanly when asked (the cleaner, a mirror)."""

    def request_stop(self) -> None: ...


@contextmanager
def stop_on_signals(cleaner: Stoppable) -> Iterator[None]:
    """Turn SIGTERM and SIGINT into a clean stop request while the block runs (main thread only)."""
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def handler(signum: int, frame: FrameType | None) -> None:
        log.info("%s: signal %s received; stopping after the current step", type(cleaner).__name__.lower(), signum)
        cleaner.request_stop()

    for sig in previous:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
