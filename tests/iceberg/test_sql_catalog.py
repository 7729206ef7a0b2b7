"""The catalog's cheaper commit (``compactor.iceberg.internals``) gives exactly what pyiceberg's own would."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table.update import (
    AssertRefSnapshotId,
    RemoveSnapshotsUpdate,
    SetPropertiesUpdate,
    update_table_metadata,
)

from compactor.iceberg.commits import branch_history
from compactor.iceberg.internals import LakeSqlCatalog, apply_updates
from compactor.lake import Lake
from compactor.producing.producer import produce_arrow

T0 = 1_800_000_000_000


def test_apply_updates_equals_pyicebergs_update_table_metadata(lake: Lake) -> None:
    topic = lake.create_topic("s.t", config={"raw.snapshot.window.count": "50"})
    for i in range(6):
        produce_arrow(topic, pa.table({"key": [b"k"], "value": [str(i).encode()]}), now_ms=T0 + i)
    table = topic.refresh().table
    oldest = branch_history(table.metadata)[-1].snapshot_id
    updates = (SetPropertiesUpdate(updates={"x": "1"}), RemoveSnapshotsUpdate(snapshot_ids=[oldest]))
    ours = apply_updates(table.metadata, updates, table.metadata_location)
    theirs = update_table_metadata(table.metadata, updates, metadata_location=table.metadata_location)
    assert ours.model_copy(update={"last_updated_ms": 0}) == theirs.model_copy(update={"last_updated_ms": 0})
    assert table.metadata.snapshot_by_id(oldest) is not None  # the base is left as it was


def test_the_catalog_commits_from_the_callers_version_and_still_refuses_a_stale_one(lake: Lake) -> None:
    assert isinstance(lake.catalog, LakeSqlCatalog)
    topic = lake.create_topic("s.c")
    produce_arrow(topic, pa.table({"key": [b"k"], "value": [b"v"]}), now_ms=T0)
    stale = lake.catalog.load_table("s.c")
    produce_arrow(topic, pa.table({"key": [b"k"], "value": [b"w"]}), now_ms=T0 + 1)
    head = stale.metadata.current_snapshot_id
    with pytest.raises(CommitFailedException):  # the requirement is checked on the catalog's current version
        lake.catalog.commit_table(stale, (AssertRefSnapshotId(ref="main", snapshot_id=head),),
                                  (SetPropertiesUpdate(updates={"x": "1"}),))
    current = lake.catalog.load_table("s.c")
    response = lake.catalog.commit_table(current, (), (SetPropertiesUpdate(updates={"x": "2"}),))
    reread = lake.catalog.load_table("s.c")
    assert reread.metadata_location == response.metadata_location
    assert reread.metadata == response.metadata and reread.properties["x"] == "2"
    assert len(reread.metadata.metadata_log) == len(current.metadata.metadata_log) + 1


def test_commits_delete_the_metadata_versions_they_drop_from_the_log(lake: Lake) -> None:
    """write.metadata.delete-after-commit.enabled (set on every topic) holds for the product's own commits."""
    from pathlib import Path

    topic = lake.create_topic("s.versions", config={"raw.snapshot.window.count": "5"})
    for i in range(60):
        produce_arrow(topic, pa.table({"key": [b"k"], "value": [str(i).encode()]}), now_ms=T0 + i)
    metadata = topic.refresh().table.metadata
    on_disk = set(Path(topic.table.metadata_location.removeprefix("file://")).parent.glob("*.metadata.json"))
    assert len(metadata.metadata_log) == 50  # write.metadata.previous-versions-max
    assert len(on_disk) == 51  # those and the current version
