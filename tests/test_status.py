"""Triggers and status (docs/guarantees.md#retention, "When compaction is due"; ``status --json`` of
docs/reference.md#json-results): Kafka's cleaner rules computed from metadata, without Spark. (After a compaction:
test_status_after_compaction.py.)"""

from __future__ import annotations

import json

import pytest

from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.status import topic_status
from compactor.topics.records import ProducerRecord

HOUR = 3_600_000
T0 = 50 * 24 * HOUR
INTERFACE_FIELDS = ("next_offsets", "log_start_offsets", "horizons", "cursor", "retained_cursors", "clean_bytes",
                    "dirty_bytes", "dirty_ratio", "due", "due_reason")


def records(n: int, stamp: int, prefix: str = "k", size: int = 10) -> list[ProducerRecord]:
    return [ProducerRecord(f"{prefix}{i}".encode(), b"x" * size, timestamp_ms=stamp) for i in range(n)]


def test_status_without_a_cursor(lake: Lake) -> None:
    lake.create_topic("s.t", partitions=2, config={"cleanup.policy": "compact"})
    empty = topic_status(lake, "s.t", now_ms=T0)
    assert list(empty.as_json()) == [  # the names status --json has always printed, in order
        "topic", "now_ms", "policy", "next_offsets", "log_start_offsets", "horizons", "next_horizons", "cursor",
        "retained_cursors", "clean_bytes", "dirty_bytes", "dirty_ratio", "cleanable_records",
        "oldest_dirty_timestamp_ms", "oldest_dirty_age_ms", "max_compaction_delay_ms", "compaction_lag_ms", "due",
        "due_reason", "per_partition", "settings", "metrics", "groups", "mirror"]
    assert set(INTERFACE_FIELDS) <= set(empty.as_json())
    assert list(empty.as_json()["metrics"]) == ["last_compaction", "last_run_time_ms", "dirty_ratio"]
    assert empty.due is False and "nothing cleanable" in empty.due_reason
    assert empty.cursor is None and empty.retained_cursors == []
    produce(lake.topic("s.t"), records(4, T0), now_ms=T0)  # keys k0..k3: 2 + 10 bytes each
    status = topic_status(lake, "s.t", now_ms=T0)
    assert status.dirty_bytes == 4 * 12 and status.clean_bytes == 0 and status.dirty_ratio == 1.0
    assert status.due is True and "dirty ratio" in status.due_reason
    assert status.horizons == status.log_start_offsets == {"0": 0, "1": 0}
    assert status.oldest_dirty_timestamp_ms == T0
    json.dumps(status.as_json())  # serialisable as printed


def test_a_policy_without_compact_is_never_due(lake: Lake) -> None:
    lake.create_topic("s.d", config={"cleanup.policy": "delete"})
    produce(lake.topic("s.d"), records(3, T0), now_ms=T0)
    status = topic_status(lake, "s.d", now_ms=T0)
    assert status.due is False and "does not compact" in status.due_reason


def test_min_compaction_lag_holds_young_records_back(lake: Lake) -> None:
    lake.create_topic("s.l", config={"cleanup.policy": "compact", "min.compaction.lag.ms": str(HOUR)})
    produce(lake.topic("s.l"), records(2, T0, "old"), now_ms=T0)
    produce(lake.topic("s.l"), records(2, T0 + HOUR, "new"), now_ms=T0 + HOUR)
    status = topic_status(lake, "s.l", now_ms=T0 + HOUR + 1)
    assert status.next_horizons == {"0": 2} and status.cleanable_records == 2
    assert status.dirty_bytes == 2 * 14
    young = topic_status(lake, "s.l", now_ms=T0 + HOUR // 2)
    assert young.due is False and young.dirty_bytes == 0


def test_status_cli_prints_json_and_text(lake: Lake, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from compactor.cli.main import main

    lake.create_topic("s.c", config={"cleanup.policy": "compact"})
    monkeypatch.setenv("COMPACTOR_CATALOG_NAME", lake.config.catalog_name)
    assert main(["--warehouse", lake.config.warehouse, "status", "s.c", "--json", "--now-ms", str(T0)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert all(field in out for field in INTERFACE_FIELDS) and out["now_ms"] == T0
    assert main(["--warehouse", lake.config.warehouse, "status", "s.c"]) == 0
    assert "due" in capsys.readouterr().out
    assert main(["--warehouse", lake.config.warehouse, "status", "no.such"]) != 0


