"""Credentials never reach a process's command line, nor any output or log
(docs/guarantees.md#bad-input-and-credentials).

A compaction runs on moto's S3 server with a PostgreSQL catalog whose role needs a password (scram), through
the command line (local Spark) and through ``infra/cluster/submit.sh`` (``spark-submit``). While each job is
paused at a failure point, every process on the machine is read from the process table: neither the S3
secret key nor the catalog password may appear in any process's arguments. The run then goes on to its end
(one JVM per route), and its standard output, standard error and Spark event log must not contain them
either. The run succeeding at all shows the credentials did reach pyiceberg, Spark's catalog and S3A (the role
refuses a wrong password).

The same on an Iceberg REST catalog: its OAuth2 client secret, the token the server issues for it and
the value of a header the server requires (each refused when wrong), given in the environment and a properties
file, through the command line.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.conftest import jvm_env
from tests.pg_server import PostgresServer, postgres_server  # noqa: F401 - the session fixture
from tests.s3_server import S3Server, s3_server  # noqa: F401 - the session fixture
from tests.servers import RestCatalog

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]


def command_lines() -> dict[int, str]:
    """Every process's arguments, from the process table."""
    out: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            except OSError:
                continue  # the process ended meanwhile
    return out


def event_log_settings(tmp_path: Path) -> tuple[Path, Path]:
    """A Spark configuration directory whose defaults write every run's event log, and that log's directory."""
    events = tmp_path / "events"
    events.mkdir()
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    defaults = f"spark.eventLog.enabled true\nspark.eventLog.dir {events.as_uri()}\n"
    (conf_dir / "spark-defaults.conf").write_text(defaults)
    return conf_dir, events


def run_environment(conf_dir: Path, lake: dict[str, str]) -> dict[str, str]:
    """This machine's environment without any lake, credential or Spark setting, plus ``lake``'s variables and the
    Spark configuration directory ``conf_dir``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTOR_", "AWS_", "PYSPARK", "SPARK_"))}
    if os.environ.get("COMPACTOR_JARS_DIR"):
        env["COMPACTOR_JARS_DIR"] = os.environ["COMPACTOR_JARS_DIR"]
    env.update({**lake, "SPARK_CONF_DIR": str(conf_dir), "PYTHONPATH": str(ROOT),
                "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", **jvm_env()})
    return env


def topic_with_records(env: dict[str, str]) -> None:
    """Topic ``s.t`` (2 partitions, compact) with 40 records to compact, through the command line."""
    cli = [sys.executable, "-m", "compactor.cli.main"]
    subprocess.run([*cli, "topic", "create", "s.t", "--partitions", "2", "--config", "cleanup.policy=compact"],
                   env=env, check=True, capture_output=True, timeout=120)
    lines = "".join(json.dumps({"key": f"k{i % 5}", "value": f"v{i}"}) + "\n" for i in range(40))
    subprocess.run([*cli, "produce", "s.t"], input=lines, text=True, env=env, check=True, capture_output=True,
                   timeout=120)


def assert_nowhere(values: list[str], result: subprocess.CompletedProcess[str], events: Path) -> None:
    """None of ``values`` in the run's outputs nor in any Spark event log, and the run compacted."""
    assert result.returncode == 0, result.stderr[-3000:]
    for secret in values:
        assert secret not in result.stdout and secret not in result.stderr
    logs = [path for path in events.rglob("*") if path.is_file()]  # a rolling log is a folder of files
    if not logs:
        tree = sorted(str(path.relative_to(events.parent)) for path in events.parent.rglob("*"))
        pytest.fail(f"the runs should have written Spark event logs; the test's folder: {tree}\n"
                    f"{result.stderr[-3000:]}")
    for path in logs:
        text = path.read_text(errors="replace")
        assert all(secret not in text for secret in values), path
    assert '"committed": true' in result.stdout


@pytest.fixture
def secrets(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    """An environment with a unique S3 secret key and catalog password, and a topic with records to compact."""
    s3: S3Server = request.getfixturevalue("s3_server")
    postgres: PostgresServer = request.getfixturevalue("postgres_server")
    tag = uuid.uuid4().hex[:10]
    s3_secret, pg_secret = f"s3-secret-{tag}", f"pg/secret@{tag}:%"  # the URI carries it percent-encoded
    bucket = f"creds-{tag}"
    s3.create_bucket(bucket)
    catalog_uri = postgres.create_login(f"compactor_{tag}", pg_secret, f"creds_{tag}")
    conf_dir, events = event_log_settings(tmp_path)  # the Spark event log of every run, to search it too
    lake = {**s3.env, "AWS_SECRET_ACCESS_KEY": s3_secret, "COMPACTOR_WAREHOUSE": f"s3://{bucket}/lake",
            "COMPACTOR_CATALOG_URI": catalog_uri}
    env = run_environment(conf_dir, lake)
    topic_with_records(env)
    yield {"s3": s3_secret, "pg": pg_secret, "events": str(events), **{f"env:{k}": v for k, v in env.items()}}


def environment(secrets: dict[str, str]) -> dict[str, str]:
    return {k[4:]: v for k, v in secrets.items() if k.startswith("env:")}


def paused_run(command: list[str], env: dict[str, str], out: Path,
               secret_values: list[str]) -> tuple[list[str], subprocess.CompletedProcess[str]]:
    """Run ``command`` with a pause at ``after-phase-1``: read every process's arguments there, then let the run
    go on to its end (one JVM for both checks). The leaking command lines, and the whole run's result."""
    marker = out / "paused"
    run_env = {**env, "COMPACTOR_FAILPOINTS": "after-phase-1=pause", "COMPACTOR_FAILPOINT_MARKER": str(marker)}
    with (out / "stdout").open("w") as stdout, (out / "stderr").open("w") as stderr:
        process = subprocess.Popen(command, env=run_env, stdout=stdout, stderr=stderr, start_new_session=True)
        try:
            deadline = time.monotonic() + 240
            while not marker.exists():
                assert process.poll() is None, (out / "stderr").read_text()[-3000:]
                assert time.monotonic() < deadline, "the job never reached phase 1"
                time.sleep(0.2)
            lines = command_lines()
            assert any("spark" in line.lower() for line in lines.values()), "a Spark JVM should be running"
            leaks = [f"{pid}: {line[:200]}" for pid, line in lines.items() if any(s in line for s in secret_values)]
            marker.unlink()  # the run goes on
            code = process.wait(timeout=600)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=60)
    result = subprocess.CompletedProcess(command, code, (out / "stdout").read_text(), (out / "stderr").read_text())
    return leaks, result


@pytest.mark.s3
@pytest.mark.postgres
@pytest.mark.parametrize("route", ["cli", "spark-submit"])
def test_credentials_stay_off_command_lines_outputs_and_logs(secrets: dict[str, str], tmp_path: Path,
                                                             route: str) -> None:
    env = environment(secrets)
    values = [secrets["s3"], secrets["pg"], quote(secrets["pg"], safe="")]
    if route == "cli":
        command = [sys.executable, "-m", "compactor.cli.main", "compact", "s.t"]
    else:
        env["SPARK_MASTER"] = "local[1]"
        command = [str(ROOT / "infra/cluster/submit.sh"), "compact", "s.t"]
    leaks, result = paused_run(command, env, tmp_path, values)
    assert leaks == []
    assert_nowhere(values, result, Path(secrets["events"]))


@pytest.mark.slow  # a JVM of its own, like the routes above
def test_rest_catalog_secrets_stay_off_command_lines_outputs_and_logs(rest_catalog: RestCatalog,
                                                                     tmp_path: Path) -> None:
    conf_dir, events = event_log_settings(tmp_path)
    env = run_environment(conf_dir, rest_catalog.lake_env(rest_catalog.create_warehouse()))
    topic_with_records(env)
    values = [rest_catalog.client_secret, rest_catalog.token, rest_catalog.header[1]]
    leaks, result = paused_run([sys.executable, "-m", "compactor.cli.main", "compact", "s.t"], env, tmp_path, values)
    assert leaks == []
    assert_nowhere(values, result, events)
