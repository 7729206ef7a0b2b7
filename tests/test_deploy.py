"""The real-deployment files (infra/cluster) and the spark-submit generator: what can be checked without a
Docker engine or a cluster."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from compactor.config import LakeConfig
from compactor.deploy import main as deploy_main
from compactor.deploy import submit_command
from compactor.lake import Lake
from compactor.topics.producer import produce
from compactor.topics.records import ProducerRecord

ROOT = Path(__file__).resolve().parent.parent
S3_ENV = {"AWS_ENDPOINT_URL": "http://minio:9000", "AWS_ACCESS_KEY_ID": "AKIA-REAL-LOOKING",
          "AWS_SECRET_ACCESS_KEY": "very-secret", "AWS_REGION": "eu-west-1"}


def test_submit_command_for_s3_and_postgres_never_contains_secrets() -> None:
    config = LakeConfig.resolve(warehouse="s3://lake/warehouse",
                                catalog_uri="postgresql://compactor:pg-secret@postgres:5432/catalog", env=S3_ENV)
    command = submit_command(config, ["compact", "shop.orders"], master="spark://spark-master:7077",
                             warehouse="s3://lake/warehouse",
                             catalog_uri="postgresql://compactor:pg-secret@postgres:5432/catalog")
    text = " ".join(command)
    assert "very-secret" not in text and "AKIA-REAL-LOOKING" not in text and "pg-secret" not in text
    assert "secret.key" not in text and "access.key" not in text and "jdbc.password" not in text  # set at runtime
    assert "spark.hadoop.fs.s3a.endpoint=http://minio:9000" in command
    assert "spark.hadoop.fs.s3a.path.style.access=true" in command
    jars = command[command.index("--jars") + 1].split(",")
    assert [Path(j).name for j in jars] == ["iceberg-spark-runtime-3.5_2.12-1.10.2.jar",
                                             "iceberg-shaded-jackson-2.15.2.jar", "hadoop-aws-3.3.1.jar",
                                             "aws-java-sdk-bundle-1.11.901.jar", "postgresql.jar"]
    assert command[command.index("--master") + 1] == "spark://spark-master:7077"
    assert command[-2:] == ["compact", "shop.orders"]
    assert command[-4:-2] == ["--catalog-uri", "postgresql://compactor@postgres:5432/catalog"]
    assert command[-7].endswith("compactor/cli/submit.py")


def test_deploy_cli_requires_a_verb(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        deploy_main(["--master", "local", "--warehouse", "/tmp/w"])
    assert exit_info.value.code == 2 and "verb" in capsys.readouterr().err
    assert deploy_main(["--master", "local[1]", "--warehouse", "/tmp/w", "--conf", "spark.executor.memory=2g",
                        "--conf", "spark.executor.cores=2", "--", "compact", "a.b"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("spark-submit") and "sqlite-jdbc.jar" in out and "hadoop-aws" not in out
    assert "--conf spark.executor.memory=2g" in out and "--conf spark.executor.cores=2" in out
    with pytest.raises(SystemExit):
        deploy_main(["--master", "local", "--warehouse", "/tmp/w", "--conf", "no-equals-sign", "--", "compact", "a.b"])
    assert "KEY=VALUE" in capsys.readouterr().err


def test_compose_file_describes_the_deployment() -> None:
    compose = yaml.safe_load((ROOT / "infra/cluster/docker-compose.yml").read_text())
    services = compose["services"]
    assert {"minio", "create-bucket", "postgres", "spark-master", "spark-worker", "cleaner"} <= set(services)
    env = services["cleaner"]["environment"]
    bucket = env["COMPACTOR_WAREHOUSE"].removeprefix("s3://").split("/")[0]
    assert f"lake/{bucket}" in services["create-bucket"]["entrypoint"][-1], "the bucket the warehouse names"
    assert env["AWS_ACCESS_KEY_ID"] == services["minio"]["environment"]["MINIO_ROOT_USER"]
    assert env["AWS_SECRET_ACCESS_KEY"] == services["minio"]["environment"]["MINIO_ROOT_PASSWORD"]
    pg = services["postgres"]["environment"]
    assert env["COMPACTOR_CATALOG_URI"] == (f"postgresql://{pg['POSTGRES_USER']}:{pg['POSTGRES_PASSWORD']}@postgres:5432/"
                                            f"{pg['POSTGRES_DB']}")
    assert services["cleaner"]["command"][0] == "infra/cluster/submit.sh"
    assert (ROOT / services["cleaner"]["build"]["dockerfile"]).exists()
    # the settings the cleaner gets resolve to a valid lake configuration
    config = LakeConfig.resolve(env=env)
    assert config.is_s3 and not config.catalog.is_sqlite and config.s3.endpoint == "http://minio:9000"


@pytest.mark.spark
def test_submit_script_runs_a_verb_through_spark_submit(tmp_path: Path) -> None:
    """The same generated command, with a local master: spark-submit, the jars and the entry point work."""
    warehouse = tmp_path / "wh"
    lake = Lake(warehouse=str(warehouse))
    topic = lake.create_topic("sub.t", config={"cleanup.policy": "compact"})
    produce(topic, [ProducerRecord(b"k", b"1"), ProducerRecord(b"k", b"2")])
    lake.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTOR_", "PYSPARK", "AWS_", "SPARK_"))}
    env.update({"SPARK_MASTER": "local[1]", "COMPACTOR_WAREHOUSE": str(warehouse)})
    result = subprocess.run([str(ROOT / "infra/cluster/submit.sh"), "compact", "sub.t"], capture_output=True,
                            text=True, env=env, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    # `submit.sh compact T 2>/dev/null | jq .`: standard output is the result alone, although spark-submit
    # merges the Python driver's standard error into its standard output (Spark's PythonRunner)
    out = json.loads(result.stdout)
    assert out["committed"] is True and out["horizons"] == {"0": 2}
    # progress goes to standard error, with Spark's own logging at WARN from its first line (no INFO flood)
    assert "compact sub.t: summary:" in result.stderr
    spark_lines = re.findall(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (?:INFO|WARN) .*$", result.stderr, re.MULTILINE)
    assert spark_lines == [], spark_lines[:10]
