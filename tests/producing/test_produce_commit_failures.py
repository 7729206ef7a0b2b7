"""A committed batch keeps its files whatever fails after the commit (compactor.producing.commit)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from compactor import failpoints
from compactor.errors import StorageUnavailableError
from compactor.lake import Lake
from compactor.producing.producer import produce_arrow
from compactor.topics.topic import Topic
from tests.helpers import topic_rows


def values(topic: Topic) -> list[bytes]:
    return [bytes(r["value"]) for r in topic_rows(topic)]


def batch(n: int) -> pa.Table:
    return pa.table({"key": [f"k{i}".encode() for i in range(n)], "value": [f"v{i}".encode() for i in range(n)]})


def test_a_failure_after_the_commit_keeps_the_committed_files(lake: Lake) -> None:
    lake.create_topic("c.after", partitions=2)

    def outage() -> None:
        raise StorageUnavailableError("injected: the catalog went away right after the commit")

    with failpoints.enabled({"produce-after-commit": outage}), pytest.raises(StorageUnavailableError):
        produce_arrow(lake.topic("c.after"), batch(6), batch_id="b-1")
    topic = lake.topic("c.after")
    assert sorted(values(topic)) == sorted(f"v{i}".encode() for i in range(6))  # every file is still there
    again = produce_arrow(topic, batch(6), batch_id="b-1")  # the retry finds its batch id
    assert again.duplicate and len(values(topic)) == 6


def test_an_interrupt_during_the_catalog_commit_deletes_nothing(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    lake.create_topic("c.interrupt", partitions=2)
    topic = lake.topic("c.interrupt")
    real_commit = topic.catalog.commit_table

    def commit_then_interrupt(*args: Any, **kwargs: Any) -> Any:
        real_commit(*args, **kwargs)  # the catalog committed, then Ctrl-C arrived before the reply
        raise KeyboardInterrupt

    monkeypatch.setattr(topic.catalog, "commit_table", commit_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        produce_arrow(topic, batch(4), batch_id="b-2")
    monkeypatch.undo()
    assert sorted(values(lake.topic("c.interrupt"))) == sorted(f"v{i}".encode() for i in range(4))
