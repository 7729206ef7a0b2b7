"""Horizons and triggers from file statistics (docs/guarantees.md#compaction, "The horizon", and #retention, "When
compaction is due") as properties of their pure cores, over an in-memory raw snapshot (``tests/raw_views.py``):
``compute_horizons`` against the reference model, ``assess`` and the range figures it is built from against figures
computed directly from the records, and the due rule (``triggers.decide``) on its own.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compactor import properties as props
from compactor.compaction.horizons import bytes_at, compute_horizons, min_timestamp_ms, range_bytes
from compactor.compaction.triggers import assess, decide, start_bytes
from compactor.cursor import CompactionStats, Cursor, ViewStats
from compactor.errors import TopicCorruptError
from compactor.topics.records import Record
from compactor.topics.settings import TopicSettings
from compactor.topics.state import PartitionOffsets
from tests.model import ModelSettings, TopicModel
from tests.raw_views import FakeRawSnapshot, fake_snapshot, fake_task

HOUR = 3_600_000
NOW = 1_000 * HOUR
DEFAULTS = TopicSettings.defaults()


@dataclasses.dataclass(frozen=True)
class RawLog:
    """A topic's raw records per partition, and the same records cut into data files."""

    records: tuple[tuple[Record, ...], ...]
    raw: FakeRawSnapshot

    @property
    def next_offsets(self) -> list[int]:
        return [len(r) for r in self.records]

    def model(self) -> TopicModel:
        return TopicModel(len(self.records), [list(r) for r in self.records])


def size(record: Record) -> int:
    return (len(record.key or b"") + len(record.value or b"")
            + sum(len(k.encode()) + len(v or b"") for k, v in record.headers))


@st.composite
def raw_logs(draw: st.DrawFn) -> RawLog:
    partitions = draw(st.integers(1, 2))
    records: list[tuple[Record, ...]] = []
    files = []
    for p in range(partitions):
        stamps = draw(st.lists(st.integers(NOW - 3 * HOUR, NOW + HOUR), max_size=30))
        log = tuple(Record(p, o, stamp, draw(st.one_of(st.none(), st.sampled_from([b"a", b"bb", b"ccc"]))),
                           draw(st.one_of(st.none(), st.binary(max_size=6))),
                           tuple(draw(st.lists(st.tuples(st.sampled_from(["h", "hh"]),
                                                         st.one_of(st.none(), st.binary(max_size=3))),
                                               max_size=2))))
                    for o, stamp in enumerate(stamps))
        cuts = sorted(set(draw(st.lists(st.integers(1, max(len(log) - 1, 1)), max_size=5))))
        bounds = [0, *[c for c in cuts if c < len(log)], len(log)]
        files.append([fake_task(log[lo:hi], timestamp_stats=draw(st.booleans()), batch_rows=draw(st.integers(1, 5)))
                      for lo, hi in itertools.pairwise(bounds) if hi > lo])
        records.append(log)
    return RawLog(tuple(records), fake_snapshot(files))


@st.composite
def lags(draw: st.DrawFn, log: RawLog, now: int) -> int:
    """``min.compaction.lag.ms``: 0, random, or exactly the age of some record (the boundary)."""
    ages = [now - r.timestamp_ms for part in log.records for r in part if now - r.timestamp_ms > 0]
    value: int = draw(st.one_of(st.just(0), st.integers(1, 4 * HOUR), *([st.sampled_from(ages)] if ages else [])))
    return value


@st.composite
def horizon_cases(draw: st.DrawFn) -> tuple[RawLog, list[int], int, int]:
    log = draw(raw_logs())
    previous = [draw(st.integers(0, n)) for n in log.next_offsets]
    now = draw(st.integers(NOW - HOUR, NOW + 2 * HOUR))
    return log, previous, now, draw(lags(log, now))


@given(horizon_cases())
def test_horizons_match_the_reference_model(case: tuple[RawLog, list[int], int, int]) -> None:
    log, previous, now, lag = case
    horizons = compute_horizons(log.raw, previous, log.next_offsets, now, lag)
    assert horizons == log.model().horizons_at(now, ModelSettings(min_lag_ms=lag), previous)
    for h, prev, end in zip(horizons, previous, log.next_offsets, strict=True):
        assert prev <= h <= end, "a horizon below its previous one or past the log end"
        if lag == 0:
            assert h == end, "without a lag the horizon reaches the log end"
    later = compute_horizons(log.raw, previous, log.next_offsets, now + HOUR, lag)
    assert all(a <= b for a, b in zip(horizons, later, strict=True)), "a later clock gave a lower horizon"


def settings(policy: str, min_lag: int, max_lag: int, ratio: float) -> TopicSettings:
    return dataclasses.replace(DEFAULTS, cleanup_policy=frozenset(policy.split(",")), min_compaction_lag_ms=min_lag,
                               max_compaction_lag_ms=max_lag, min_cleanable_dirty_ratio=ratio)


def cursor_at(horizons: Sequence[int], bytes_at_horizon: Sequence[int], clean_bytes: int) -> Cursor:
    return Cursor(snapshot_id=7, horizons=tuple(horizons), compacted_start=tuple(0 for _ in horizons),
                  raw_snapshot_id=1, raw_next_offsets=tuple(horizons), now_ms=NOW - HOUR, settings={},
                  stats=CompactionStats(), view=ViewStats(clean_bytes=clean_bytes), previous=None, run_id="r",
                  bytes_at_horizon=tuple(bytes_at_horizon))


@st.composite
def trigger_cases(draw: st.DrawFn) -> tuple[RawLog, TopicSettings, list[int] | None, int, int]:
    log = draw(raw_logs())
    now = draw(st.integers(NOW - HOUR, NOW + 2 * HOUR))
    config = settings(draw(st.sampled_from(["compact", "delete,compact", "delete"])), draw(lags(log, now)),
                      draw(st.one_of(st.integers(4 * HOUR, 8 * HOUR), st.integers(0, 4 * HOUR))),
                      draw(st.sampled_from([0.0, 0.3, 0.5, 0.9])))
    if config.min_compaction_lag_ms > config.max_compaction_lag_ms:
        config = dataclasses.replace(config, max_compaction_lag_ms=config.min_compaction_lag_ms)
    cursor = draw(st.one_of(st.none(), st.just([draw(st.integers(0, n)) for n in log.next_offsets])))
    return log, config, cursor, draw(st.integers(0, 500)), now


@given(trigger_cases())
def test_assessment_is_the_cleanable_records_figures(case: tuple[RawLog, TopicSettings, list[int] | None, int,
                                                                 int]) -> None:
    """Dirty bytes, cleanable records and the oldest cleanable timestamp are those of raw offsets
    ``[H_p(C), H'_p)``; the ratio is dirty / (clean + dirty); due follows Kafka's rule."""
    log, config, cursor_horizons, clean, now = case
    cumulative = [sum(size(r) for r in part) for part in log.records]
    offsets = PartitionOffsets(tuple(log.next_offsets), tuple(0 for _ in log.records), tuple(cumulative))
    cursor = None
    previous = [0] * len(log.records)
    if cursor_horizons is not None:
        previous = cursor_horizons
        cursor = cursor_at(cursor_horizons, [sum(size(r) for r in part[:h])
                                             for part, h in zip(log.records, cursor_horizons, strict=True)], clean)
    else:
        clean = 0
    result = assess(log.raw, offsets, {}, config, cursor, now)
    expected = log.model().horizons_at(now, ModelSettings(min_lag_ms=config.min_compaction_lag_ms), previous)
    cleanable = [r for part, lo, hi in zip(log.records, previous, expected, strict=True) for r in part[lo:hi]]
    dirty = sum(size(r) for r in cleanable)
    assert (result.horizons, result.next_horizons) == (previous, expected)
    assert result.cleanable_records == len(cleanable)
    assert result.dirty_bytes == dirty and result.clean_bytes == clean
    assert result.dirty_ratio == (dirty / (clean + dirty) if dirty else 0.0)
    oldest = min((r.timestamp_ms for r in cleanable), default=None)
    assert result.min_cleanable_timestamp_ms == oldest
    due = config.compacts and dirty > 0 and (
        dirty / (clean + dirty) > config.min_cleanable_dirty_ratio
        or (oldest is not None and oldest < now - config.max_compaction_lag_ms))
    assert result.due == due, result.due_reason


@st.composite
def decisions(draw: st.DrawFn) -> tuple[TopicSettings, int, float, int | None, int]:
    """Inputs of the due rule, often exactly on its boundaries (ratio = the minimum, oldest = the deadline)."""
    now, max_lag, min_ratio = draw(st.integers(0, 10 * HOUR)), draw(st.integers(0, 10 * HOUR)), draw(st.floats(0, 1))
    ratio = draw(st.one_of(st.floats(0, 1), st.just(min_ratio)))
    oldest = draw(st.one_of(st.none(), st.integers(0, 10 * HOUR), st.just(now - max_lag)))
    config = settings(draw(st.sampled_from(["compact", "delete", "delete,compact"])), 0, max_lag, min_ratio)
    return config, draw(st.integers(-5, 1000)), ratio, oldest, now


@given(decisions())
def test_due_iff_dirty_and_the_ratio_or_the_max_lag_says_so(case: tuple[TopicSettings, int, float, int | None,
                                                                         int]) -> None:
    config, dirty, ratio, oldest, now = case
    due, reason = decide(config, dirty, ratio, oldest, now)
    by_ratio = ratio > config.min_cleanable_dirty_ratio
    by_lag = oldest is not None and oldest < now - config.max_compaction_lag_ms
    assert due == (config.compacts and dirty > 0 and (by_ratio or by_lag))
    if due:
        assert ("dirty ratio" in reason) if by_ratio else ("max.compaction.lag.ms" in reason), reason


@st.composite
def ranges(draw: st.DrawFn) -> tuple[RawLog, int, int, int]:
    log = draw(raw_logs())
    p = draw(st.integers(0, len(log.records) - 1))
    end = draw(st.integers(0, log.next_offsets[p]))
    return log, p, draw(st.integers(0, end)), end


@given(ranges())
def test_range_figures_are_those_of_the_records_in_the_range(case: tuple[RawLog, int, int, int]) -> None:
    """The smallest timestamp and the logical bytes of raw offsets ``[start, end)``, from statistics where a file
    lies wholly inside and from the rows of the files that straddle an end."""
    log, p, start, end = case
    inside = log.records[p][start:end]
    assert min_timestamp_ms(log.raw, p, start, end) == min((r.timestamp_ms for r in inside), default=None)
    assert range_bytes(log.raw, p, start, end) == sum(size(r) for r in inside)
    total = sum(size(r) for r in log.records[p])
    assert bytes_at(log.raw, p, start, log.next_offsets[p], total) == sum(size(r) for r in log.records[p][:start])


def test_a_corrupt_log_start_bytes_property_is_a_clear_error() -> None:
    assert start_bytes({}, 2) == [0, 0]
    assert start_bytes({props.LOG_START_BYTES_PROPERTY: "[5, 7]"}, 2) == [5, 7]
    with pytest.raises(TopicCorruptError, match="log-start-bytes"):
        start_bytes({props.LOG_START_BYTES_PROPERTY: "{not json"}, 2)
