"""The cursor's conditional commit on an Iceberg REST catalog (docs/guarantees.md#the-cursor-and-failures): the publish
asks the server for ``assert-ref-snapshot-id`` on the cursor ref, the server refuses a commit whose condition no longer
holds, and a publish whose answer never comes while the table cannot be re-read exits 75 ("outcome unknown"), after
which re-running is safe. Against Iceberg's own REST catalog server (``tests/servers.py``)."""

from __future__ import annotations

import json
import time

import pytest
from pyspark.sql import SparkSession

from compactor import failpoints
from compactor.cli.main import main
from compactor.compaction.job import compact_topic
from compactor.cursor import MAIN
from compactor.errors import CommitConflictError
from compactor.iceberg.commits import RefMove, commit
from compactor.iceberg.snapshots import build_snapshot
from compactor.lake import Lake
from compactor.topics.records import ProducerRecord
from tests.backends import attach_spark
from tests.conftest import new_lake_config
from tests.helpers import compacted_rows, current_cursor, produce_both
from tests.model import ModelSettings, TopicModel
from tests.servers import RestCatalog

pytestmark = pytest.mark.spark
SETTINGS = ModelSettings()


def seeded_rest_lake(rest: RestCatalog, spark: SparkSession, **properties: str) -> tuple[Lake, TopicModel,
                                                                                        dict[str, str]]:
    """A lake on a warehouse of its own, with a topic that has a cursor and records waiting to be compacted."""
    env = rest.lake_env(rest.create_warehouse(), **properties)
    lake = attach_spark(Lake(new_lake_config("", rest.uri, **env)), spark)
    lake.create_topic("s.t", partitions=2, config={"cleanup.policy": "compact"})
    model = TopicModel(2)
    produce_both(lake, "s.t", model, [ProducerRecord(b"k%d" % (i % 5), b"v%d" % i) for i in range(20)], 1000)
    assert compact_topic(lake, "s.t", now_ms=2000).committed
    model.compact(2000, SETTINGS)
    produce_both(lake, "s.t", model, [ProducerRecord(b"k%d" % (i % 7), b"w%d" % i) for i in range(10)], 3000)
    return lake, model, env


def test_the_cursor_commit_asks_the_server_for_its_ref_and_a_stale_one_is_refused(
        rest_catalog: RestCatalog, spark_session: SparkSession) -> None:
    lake, model, _ = seeded_rest_lake(rest_catalog, spark_session)
    before = current_cursor(lake, "s.t")
    assert before is not None
    with rest_catalog.requests_logged(r"/v1/[^/]+/namespaces/s/tables/t__compacted") as logged:
        result = compact_topic(lake, "s.t", now_ms=4000)
    assert result.committed
    model.compact(4000, SETTINGS)
    assert compacted_rows(lake, "s.t") == model.compacted_rows()
    publish = [json.loads(line.split(" ", 2)[2]) for line in logged
               if any(u.get("action") == "set-snapshot-ref" and u.get("ref-name") == MAIN
                      for u in json.loads(line.split(" ", 2)[2])["updates"])]
    assert len(publish) == 1, logged
    assert {"type": "assert-ref-snapshot-id", "ref": MAIN, "snapshot-id": before.snapshot_id} in \
        publish[0]["requirements"]
    # a commit built on the replaced cursor: the server checks the condition and refuses it; nothing changes
    table = lake.catalog.load_table("s.t__compacted")
    stale = build_snapshot(table, table.metadata.snapshot_by_id(before.snapshot_id), {"note": "stale"})
    with pytest.raises(CommitConflictError):
        commit(lake.catalog, table, snapshot=stale, moves=[RefMove(MAIN, None)],
               expect={MAIN: before.snapshot_id}, what="publishing on a replaced cursor")
    after = current_cursor(lake, "s.t")
    assert after is not None and after.snapshot_id == result.compacted_snapshot_id


@pytest.mark.slow  # the REST commit still in flight (exit 75) stays in the loop without a JVM (test_rest_catalog.py)
def test_a_publish_whose_answer_never_comes_exits_75_and_rerunning_is_safe(
        rest_catalog: RestCatalog, spark_session: SparkSession, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    lake, model, env = seeded_rest_lake(rest_catalog, spark_session, **{"rest.client.socket-timeout-ms": "1000"})
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("COMPACTOR_CATALOG_NAME", lake.config.catalog_name)  # the shared session's catalog
    compacted = r"/v1/[^/]+/namespaces/s/tables/t__compacted"

    def answer_never_comes() -> None:  # the publish's own load passes; its commit's answer is held past the
        # client's timeout while the server applies it, and the table cannot be re-read after
        rest_catalog.inject(f"POST {compacted} delay-after=2500", f"GET {compacted} status=503 skip=1")

    try:
        with failpoints.enabled({"before-commit": answer_never_comes}):
            code = main(["compact", "s.t", "--now-ms", "4000"])
        err = capsys.readouterr().err
        assert code == 75 and "outcome unknown" in err, err
        time.sleep(2)  # the held answer goes out
    finally:
        rest_catalog.inject()
    landed = current_cursor(lake, "s.t")
    model.compact(4000, SETTINGS)
    assert landed is not None and compacted_rows(lake, "s.t") == model.compacted_rows()  # it had landed
    again = compact_topic(lake, "s.t", now_ms=4000)  # re-running: nothing left to do, the chain is intact
    assert not again.committed
    assert current_cursor(lake, "s.t") == landed
