"""Compaction on a real Spark standalone cluster (issue 11): a master and two workers of one core each, on
loopback, run ``infra/cluster/submit.sh compact`` against moto's S3 server with a shared catalog. Spark's event
log shows the tasks of the stages that read the raw log spread over both workers' executors, and the compacted
read is right. The driver binds to an address the executors reach without ``SPARK_LOCAL_IP`` being set."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from bench.eventlog import read_stages
from compactor.config import LakeConfig
from compactor.lake import Lake
from compactor.topics.producer import produce
from compactor.topics.records import ProducerRecord
from readers.reader import TopicReader
from tests.s3_server import S3Server, s3_server  # noqa: F401 - the session fixture
from tests.standalone_cluster import standalone_cluster

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.slow]
ROOT = Path(__file__).resolve().parent.parent
BATCHES, PER_BATCH, KEYS = 8, 25_000, 30_000


def executors_by_worker(log: Path) -> dict[str, str]:
    """Executor id -> the web UI port of the worker that launched it (from its log URLs in the event log)."""
    out: dict[str, str] = {}
    for line in log.read_text().splitlines():
        event = json.loads(line)
        if event.get("Event") == "SparkListenerExecutorAdded":
            urls = event["Executor Info"].get("Log Urls", {})
            out[str(event["Executor ID"])] = next(iter(urls.values())).split("/")[2] if urls else "?"
    return out


def driver_host(log: Path) -> str | None:
    for line in log.read_text().splitlines():
        event = json.loads(line)
        if event.get("Event") == "SparkListenerEnvironmentUpdate":
            return str(event["Spark Properties"].get("spark.driver.host"))
    return None


def test_compaction_spreads_over_both_workers(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    server: S3Server = request.getfixturevalue("s3_server")
    server.create_bucket("cluster-lake")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTOR_", "AWS_", "PYSPARK", "SPARK_"))}
    env.update({**server.env, "COMPACTOR_WAREHOUSE": "s3://cluster-lake/warehouse",
                "COMPACTOR_CATALOG_URI": str(tmp_path / "catalog.db"), "PYTHONPATH": str(ROOT),
                "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
    # the default catalog name "lake", as the submitted job uses (the name is stored in every catalog row)
    lake = Lake(LakeConfig.resolve(env["COMPACTOR_WAREHOUSE"], env["COMPACTOR_CATALOG_URI"], env=server.env))
    topic = lake.create_topic("c.t", config={"cleanup.policy": "compact"})
    latest: dict[bytes, bytes] = {}
    rng = random.Random(11)
    for batch in range(BATCHES):  # one partition, several files: fewer partitions than the cluster's slots
        records = [ProducerRecord(b"key-%d" % ((batch * PER_BATCH + i) * 7919 % KEYS), rng.randbytes(100))
                   for i in range(PER_BATCH)]  # incompressible values: about 22 MB in all, several slices
        produce(topic.refresh(), records, now_ms=1_000)
        latest.update((r.key, r.value) for r in records if r.key is not None and r.value is not None)
    events = tmp_path / "events"
    events.mkdir()
    with standalone_cluster(tmp_path) as cluster:
        env["SPARK_MASTER"] = cluster.master_url
        command = [str(ROOT / "infra/cluster/submit.sh"), "--conf", "spark.executor.memory=512m", "--conf",
                   "spark.executor.cores=1", "--conf", "spark.eventLog.enabled=true", "--conf",
                   f"spark.eventLog.dir={events.as_uri()}", "compact", "c.t", "--now-ms", "2000"]
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    outcome = json.loads(result.stdout)
    assert outcome["committed"] and outcome["stats"]["layout"] == "sliced", outcome["stats"]
    log = next(path for path in events.iterdir() if path.is_file())
    assert driver_host(log) == "127.0.0.1"  # chosen by the session factory: the address that routes to the master
    workers = executors_by_worker(log)
    assert len(set(workers.values())) == 2, workers  # one executor on each worker
    reading = [s for s in read_stages(log) if s.total_input > 0]
    assert reading
    used: dict[int, set[str]] = defaultdict(set)
    for stage in reading:
        used[stage.stage] = {workers[e] for e in stage.executors}
    assert any(len(ports) == 2 for ports in used.values()), used  # a stage that read data ran on both workers
    assert max(s.largest_share for s in reading) <= 0.6, [s.as_json() for s in reading]
    view = {r.key: r.value for r in TopicReader(lake, "c.t", read_compacted=True).records()}
    assert view == latest
