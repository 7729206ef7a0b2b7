"""The real-deployment files (infra/cluster) and the spark-submit generator: what can be checked without a
Docker engine, a cluster or a JVM. (Running the generated command: test_deploy_submit.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from compactor.config import LakeConfig
from compactor.deploy import main as deploy_main
from compactor.deploy import submit_command

ROOT = Path(__file__).resolve().parents[2]
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
    assert [Path(j).name for j in jars] == ["iceberg-spark-runtime-3.5_2.12-1.10.1.jar", "compactor-udf.jar",
                                             "hadoop-aws-3.3.4.jar", "aws-java-sdk-bundle-1.12.262.jar",
                                             "wildfly-openssl-1.0.7.Final.jar", "sqlite-jdbc-3.50.3.0.jar",
                                             "postgresql-42.7.7.jar"]
    assert command[command.index("--master") + 1] == "spark://spark-master:7077"
    assert command[-2:] == ["compact", "shop.orders"]
    assert command[-4:-2] == ["--catalog-uri", "postgresql://compactor@postgres:5432/catalog"]
    assert command[-7].endswith("compactor/cli/submit.py")


def test_submit_command_for_a_rest_catalog_never_contains_its_secrets(tmp_path: Path) -> None:
    headers = tmp_path / "rest.properties"
    headers.write_text("header.X-Api-Key=key-secret\nscope=PRINCIPAL_ROLE:ALL\n")
    headers.chmod(0o600)
    env = {**S3_ENV, "COMPACTOR_REST_CREDENTIAL": "client:client-secret", "COMPACTOR_REST_WAREHOUSE": "prod",
           "COMPACTOR_REST_PROPERTIES_FILE": str(headers)}
    config = LakeConfig.resolve(catalog_uri="https://polaris.example/api/catalog", env=env)
    command = submit_command(config, ["compact", "shop.orders"], master="spark://spark-master:7077", warehouse=None,
                             catalog_uri="https://polaris.example/api/catalog")
    text = " ".join(command)
    assert "client-secret" not in text and "key-secret" not in text and "very-secret" not in text
    assert "spark.sql.catalog.lake.type=rest" in command and "spark.sql.catalog.lake.warehouse=prod" in command
    assert "spark.sql.catalog.lake.scope=PRINCIPAL_ROLE:ALL" in command
    assert "--warehouse" not in command  # the catalog places the tables
    assert command[-4:] == ["--catalog-uri", "https://polaris.example/api/catalog", "compact", "shop.orders"]


def test_deploy_cli_requires_a_verb(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        deploy_main(["--master", "local", "--warehouse", "/tmp/w"])
    assert exit_info.value.code == 2 and "verb" in capsys.readouterr().err
    assert deploy_main(["--master", "local[1]", "--warehouse", "/tmp/w", "--conf", "spark.executor.memory=2g",
                        "--conf", "spark.executor.cores=2", "--", "compact", "a.b"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("spark-submit") and "sqlite-jdbc-3.50.3.0.jar" in out and "hadoop-aws" not in out
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


