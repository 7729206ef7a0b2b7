"""Compaction on a real Spark standalone cluster: a master and two workers of one core each, on
loopback, run ``infra/cluster/submit.sh compact`` against moto's S3 server with a shared catalog. Spark's event
log shows the tasks of the stages that read the raw log spread over both workers' executors, and the compacted
read is right. The driver binds to an address the executors reach without ``SPARK_LOCAL_IP`` being set.

On the same cluster, ``submit.sh produce --engine spark`` appends a Parquet input through
``produce_dataframe``: the stages whose plan holds the compiled ``kafka_partition`` run on both workers (so the
jar ``spark-submit --jars`` shipped is loaded there), and every record's partition is the one the Python
producer gives the same key (random binary, empty and non-UTF-8 keys included)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from compactor.config import LakeConfig
from compactor.lake import Lake
from compactor.producing.producer import produce, produce_arrow
from compactor.topics.partitioner import partition_for_key
from compactor.topics.records import ProducerRecord
from readers.reader import TopicReader
from tests.conftest import TEST_JVM_OPTIONS, jvm_env
from tests.measure import read_stages
from tests.s3_server import S3Server, s3_server  # noqa: F401 - the session fixture
from tests.standalone_cluster import standalone_cluster

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
BATCHES, PER_BATCH, KEYS = 8, 25_000, 30_000
EXECUTOR_CONF = ("--conf", "spark.executor.memory=512m", "--conf", "spark.executor.cores=1",
                 "--conf", f"spark.executor.extraJavaOptions={TEST_JVM_OPTIONS}")


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


def stages_running(log: Path, function: str) -> set[int]:
    """The stages of the jobs whose SQL execution's physical plan names ``function``."""
    plans: dict[int, str] = {}
    stages_of: dict[int, list[int]] = {}
    for line in log.read_text().splitlines():
        event = json.loads(line)
        kind = event.get("Event", "")
        if kind.endswith("SparkListenerSQLExecutionStart"):
            plans[int(event["executionId"])] = event.get("physicalPlanDescription", "")
        elif kind == "SparkListenerJobStart":
            execution = (event.get("Properties") or {}).get("spark.sql.execution.id")
            if execution is not None:
                stages_of.setdefault(int(execution), []).extend(event["Stage IDs"])
    return {stage for execution, stages in stages_of.items() if function in plans.get(execution, "")
            for stage in stages}


def dataframe_input(directory: Path) -> pa.Table:
    """Four Parquet files (two Spark tasks' worth): text, empty, random binary and non-UTF-8 keys."""
    rng = random.Random(22)
    keys = [b"user-%d" % i for i in range(3000)] + [b"", b"\xff", b"\xc0\x80", b"\xed\xa0\x80"]
    keys += [rng.randbytes(rng.randrange(1, 40)) for _ in range(3000)]
    rng.shuffle(keys)
    table = pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array([b"v%d" % i for i in range(len(keys))])})
    directory.mkdir()
    step = -(-len(keys) // 4)
    for part in range(4):
        pq.write_table(table.slice(part * step, step), directory / f"part-{part}.parquet")
    return table


def check_dataframe_produce(lake: Lake, env: dict[str, str], tmp_path: Path) -> None:
    """``produce --engine spark`` on the cluster: compiled partitioner on both workers, Python's partitions."""
    table = dataframe_input(tmp_path / "input")
    lake.create_topic("c.df", partitions=4)
    python_topic = lake.create_topic("c.py", partitions=4)
    events = tmp_path / "produce-events"
    events.mkdir()
    command = [str(ROOT / "infra/cluster/submit.sh"), *EXECUTOR_CONF, "--conf", "spark.eventLog.enabled=true",
               "--conf", f"spark.eventLog.dir={events.as_uri()}", "produce", "c.df", "--file", str(tmp_path / "input"),
               "--format", "parquet", "--engine", "spark"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    assert json.loads(result.stdout)["records"] == table.num_rows
    log = next(path for path in events.iterdir() if path.is_file())
    workers = executors_by_worker(log)
    compiled = stages_running(log, "kafka_partition")
    ran_on = {workers[e] for s in read_stages(log) if s.stage in compiled for e in s.executors}
    assert len(ran_on) == 2, (ran_on, workers)  # the compiled function ran in both workers' executors
    produce_arrow(python_topic, table)
    by_spark = {bytes(k): p for k, p in zip(*_columns(lake, "c.df"), strict=True)}
    by_python = {bytes(k): p for k, p in zip(*_columns(lake, "c.py"), strict=True)}
    assert by_spark == by_python == {k: partition_for_key(k, 4) for k in table["key"].to_pylist()}
    stored = lake.topic("c.df").table.scan().to_arrow()
    for p in range(4):
        offsets = sorted(o for o, q in zip(stored["offset"].to_pylist(), stored["partition"].to_pylist(),
                                           strict=True) if q == p)
        assert offsets == list(range(len(offsets)))


def _columns(lake: Lake, name: str) -> tuple[list[bytes], list[int]]:
    stored = lake.topic(name).table.scan(selected_fields=("key", "partition")).to_arrow()
    return stored["key"].to_pylist(), stored["partition"].to_pylist()


@pytest.mark.long
def test_compaction_spreads_over_both_workers(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    server: S3Server = request.getfixturevalue("s3_server")
    server.create_bucket("cluster-lake")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("COMPACTOR_", "AWS_", "PYSPARK", "SPARK_")) or k == "COMPACTOR_JARS_DIR"}
    env.update({**server.env, "COMPACTOR_WAREHOUSE": "s3://cluster-lake/warehouse",
                "COMPACTOR_CATALOG_URI": str(tmp_path / "catalog.db"), "PYTHONPATH": str(ROOT),
                "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", **jvm_env()})
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
        command = [str(ROOT / "infra/cluster/submit.sh"), *EXECUTOR_CONF, "--conf", "spark.eventLog.enabled=true",
                   "--conf", f"spark.eventLog.dir={events.as_uri()}", "compact", "c.t", "--now-ms", "2000",
                   "--layout", "sliced"]  # one partition: only slices can spread (the automatic choice keeps a
        # first run of this size partitioned, its winners inline, on a machine of 2 slots)
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
        if result.returncode == 0:  # the same cluster (a second start would double the test's time)
            check_dataframe_produce(lake, env, tmp_path)
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
