"""The raw snapshot window (docs/guarantees.md#the-raw-log): Iceberg's own incremental readers keep working on the raw
log within ``raw.snapshot.window.ms`` capped by ``raw.snapshot.window.count``, and past it fail with Iceberg's error.

pyiceberg's ``incremental_append_scan`` here; Spark Structured Streaming and ``VERSION AS OF`` in
``test_snapshot_window_spark.py``.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from compactor.errors import InvalidSettingError
from compactor.iceberg.commits import branch_history
from compactor.lake import Lake
from compactor.producing.producer import produce_arrow
from compactor.retention.run import run_retention
from compactor.topics.describe import describe_topic
from compactor.topics.topic import Topic

T0 = 1_800_000_000_000
MINUTE = 60_000


def one(i: int) -> pa.Table:
    return pa.table({"key": [f"k{i}".encode()], "value": [f"v{i}".encode()]})


def produce_many(topic: Topic, count: int, start: int = 0, step_ms: int = 1000) -> int | None:
    """``count`` one-record produces, ``step_ms`` apart on the recorded clock; the last snapshot id."""
    sid = None
    for i in range(start, start + count):
        sid = produce_arrow(topic, one(i), now_ms=T0 + i * step_ms).snapshot_id
    return sid


def ids(topic: Topic) -> list[int]:
    return [s.snapshot_id for s in branch_history(topic.refresh().table.metadata)]


def test_the_window_settings_have_defaults_are_validated_and_shown(lake: Lake) -> None:
    topic = lake.create_topic("w.cfg")
    assert (topic.settings.raw_snapshot_window_ms, topic.settings.raw_snapshot_window_count) == (3_600_000, 1000)
    for key, bad in (("raw.snapshot.window.ms", "-1"), ("raw.snapshot.window.count", "x"),
                     ("raw.snapshot.window.count", "100001")):
        with pytest.raises(InvalidSettingError, match=key.replace(".", r"\.")):
            topic.set_config({key: bad})
    assert topic.refresh().settings.raw_snapshot_window_count == 1000  # a refused change changes nothing
    topic.set_config({"raw.snapshot.window.count": "5"})
    assert topic.refresh().properties["compactor.raw.snapshot.window.count"] == "5"
    settings = describe_topic(topic).settings
    assert settings["raw.snapshot.window.count"] == "5" and settings["raw.snapshot.window.ms"] == "3600000"


def test_the_count_caps_the_window_and_keeps_its_newest_snapshots_contiguous(lake: Lake) -> None:
    topic = lake.create_topic("w.count", partitions=2, config={"raw.snapshot.window.count": "5"})
    produce_many(topic, 12)
    history = ids(topic)
    assert len(history) == 6 == len(topic.table.metadata.snapshots)  # the current one and 5 before it
    assert topic.table.metadata.snapshot_by_id(history[-1]).parent_snapshot_id is None  # type: ignore[union-attr]
    assert len(topic.table.scan().to_arrow()) == 12  # pruning entries never loses a record


def test_the_time_window_keeps_what_was_current_within_it(lake: Lake) -> None:
    topic = lake.create_topic("w.time", config={"raw.snapshot.window.ms": str(5 * MINUTE),
                                                "history.expire.max-snapshot-age-ms": "0",
                                                "compaction.cursor.retain-ms": "0"})
    produce_many(topic, 20, step_ms=MINUTE)  # commits at minutes 0..19
    history = ids(topic)
    assert len(history) == 20  # within the count, appends keep old snapshots too: they cost no more than young ones
    result = run_retention(lake, "w.time", now_ms=T0 + 19 * MINUTE)
    # expiry spares what was current within the last 5 minutes: the snapshots of minutes 14..18 and the current 19
    assert sorted(result.expiry.raw.expired_snapshots) == sorted(history[6:])
    assert ids(topic) == history[:6]
    # three minutes later only minutes 17, 18 and the current 19 are in the window
    result = run_retention(lake, "w.time", now_ms=T0 + 22 * MINUTE)
    assert sorted(result.expiry.raw.expired_snapshots) == sorted(history[3:6])
    assert ids(topic) == history[:3]


def test_expiry_spares_the_window_and_only_the_window(lake: Lake) -> None:
    topic = lake.create_topic("w.expiry", config={"raw.snapshot.window.count": "10",
                                                  "history.expire.max-snapshot-age-ms": "0",
                                                  "compaction.cursor.retain-ms": "0"})
    produce_many(topic, 15)
    kept = ids(topic)
    assert len(kept) == 11
    assert run_retention(lake, "w.expiry", now_ms=T0 + 10**5).expiry.raw.expired_snapshots == []
    assert ids(topic) == kept
    topic.set_config({"raw.snapshot.window.count": "3"})
    assert len(run_retention(lake, "w.expiry", now_ms=T0 + 10**5).expiry.raw.expired_snapshots) == 7
    assert ids(topic) == kept[:4]


def test_incremental_append_scan_works_within_the_window_and_fails_with_icebergs_error_past_it(lake: Lake) -> None:
    window = 20
    topic = lake.create_topic("w.scan", partitions=2, config={"raw.snapshot.window.count": str(window)})
    checkpoint = produce_many(topic, 1)
    produce_many(topic, window, start=1)  # more than the old limit of 16 snapshot entries, within the window
    scan = topic.refresh().table.incremental_append_scan(from_snapshot_id_exclusive=checkpoint)
    assert sorted(scan.to_arrow()["key"].to_pylist()) == sorted(f"k{i}".encode() for i in range(1, window + 1))
    produce_many(topic, 1, start=window + 1)  # one append too many: the checkpoint leaves the window
    with pytest.raises(ValueError, match="not a parent ancestor of end snapshot"):
        topic.refresh().table.incremental_append_scan(from_snapshot_id_exclusive=checkpoint).to_arrow()
