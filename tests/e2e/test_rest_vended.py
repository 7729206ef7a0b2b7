"""A REST catalog that vends storage credentials: the product, given no S3 credentials of its own, works
with those the catalog hands out with each table, in pyiceberg (the table's file IO, and the product's own
listing and deleting of files) and in Spark (Iceberg's S3FileIO for the tables, S3A for the files the product
reads and writes by path).

The server is Iceberg's REST catalog server on an S3 warehouse (moto's server), configured with the S3 keys and
``include-credentials=true``; the client's environment has the S3 endpoint and region only. moto accepts unsigned
requests, so pyiceberg's side is checked by the credentials its file IO carries; the JVM's S3 clients refuse to
run without credentials, so a Spark job that succeeds in a fresh process used the vended ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from compactor.iceberg.storage import filesystem
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.topics.records import ProducerRecord
from readers.reader import TopicReader
from tests.conftest import jvm_env, new_lake_config
from tests.s3_server import ACCESS_KEY, REGION, SECRET_KEY, S3Server
from tests.servers import start_server, stop_server

pytestmark = [pytest.mark.spark, pytest.mark.slow]  # a REST server and a Spark process of their own
ROOT = Path(__file__).resolve().parents[2]
JOB = """
import json
from compactor.compaction.job import compact_topic
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.retention import run_retention
from compactor.topics.records import ProducerRecord
from readers import read_topic_dataframe

lake = Lake()
first = compact_topic(lake, "s.t", now_ms=2_000)
produce(lake.topic("s.t"), [ProducerRecord(b"k%d" % i, b"w%d" % i) for i in range(5)], now_ms=3_000)
second = compact_topic(lake, "s.t", now_ms=4_000)  # supersedes compacted rows: position deletes through S3A
raw = read_topic_dataframe(lake, "s.t").count()  # raw files read by path, through S3A
compacted = read_topic_dataframe(lake, "s.t", read_compacted=True).count()
retention = run_retention(lake, "s.t", now_ms=4_000).as_json()
print(json.dumps({"first": first.committed, "second": second.committed, "deletes":
                  second.stats.as_json()["records_removed"], "raw": raw, "compacted": compacted}))
"""


@pytest.mark.long
def test_a_catalog_that_vends_credentials_is_all_the_product_needs(s3_server: S3Server, tmp_path: Path) -> None:
    bucket = f"vended-{uuid.uuid4().hex[:8]}"
    s3_server.create_bucket(bucket)
    token = f"token-{uuid.uuid4().hex}"
    uri, pid = start_server("rest-catalog-server.sh", tmp_path / "rest", "--warehouse", f"s3://{bucket}/wh",
                            key="uri", env={**s3_server.env, "REST_CATALOG_TOKEN": token,
                                            "CATALOG_INCLUDE__CREDENTIALS": "true"})
    try:
        # the client: the catalog, its token, and where S3 is; no S3 credentials
        env = {"COMPACTOR_CATALOG_URI": uri, "COMPACTOR_REST_TOKEN": token,
               "AWS_ENDPOINT_URL": s3_server.endpoint, "AWS_REGION": REGION}
        lake = Lake(new_lake_config("", uri, **env))
        assert lake.config.s3.access_key_id is None
        lake.create_topic("s.t", partitions=2, config={"cleanup.policy": "compact"})
        produce(lake.topic("s.t"), [ProducerRecord(b"k%d" % (i % 8), b"v%d" % i) for i in range(20)], now_ms=1_000)
        table = lake.topic("s.t").table
        assert table.metadata.location.startswith(f"s3://{bucket}/wh/")
        assert table.io.properties["s3.access-key-id"] == ACCESS_KEY  # vended with the table
        assert table.io.properties["s3.secret-access-key"] == SECRET_KEY
        # the product's own listing and deleting of a table's files uses that table's IO, so its credentials
        reduced = filesystem(lake.config, table.metadata.location, table.io).__reduce__()
        assert ACCESS_KEY in repr(reduced)
        assert len(list(TopicReader(lake, "s.t").records())) == 20

        process_env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTOR_", "AWS_", "PYSPARK"))}
        process_env.update({**env, "PYTHONPATH": str(ROOT), **jvm_env()})
        if os.environ.get("COMPACTOR_JARS_DIR"):
            process_env["COMPACTOR_JARS_DIR"] = os.environ["COMPACTOR_JARS_DIR"]
        done = subprocess.run([sys.executable, "-c", JOB], env=process_env, capture_output=True, text=True,
                              timeout=600, check=False)
        assert done.returncode == 0, done.stderr[-4000:]
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result == {"first": True, "second": True, "deletes": 5, "raw": 25, "compacted": 8}
        view = {r.key: r.value for r in TopicReader(lake, "s.t", read_compacted=True).records()}
        # keys k0..k7 had v16..v19 (k0..k3) and v12..v15 (k4..k7); k0..k4 were replaced by w0..w4
        assert view == {**{b"k%d" % i: b"w%d" % i for i in range(5)}, **{b"k%d" % i: b"v%d" % (i + 8)
                                                                          for i in range(5, 8)}}
    finally:
        stop_server(pid)
