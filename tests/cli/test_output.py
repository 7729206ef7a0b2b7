"""Quiet, scriptable output (docs/reference.md): the result alone on standard output, progress and logs on standard
error, Spark's start-up noise off a default run and back with ``--log-level``; also under ``spark-submit``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from compactor.cli.main import build_parser
from compactor.cli.main import main as cli_main
from compactor.cli.submit import DriverStderr
from compactor.config import LakeConfig
from compactor.deploy import submit_command
from compactor.errors import UsageError
from compactor.lake import Lake
from compactor.producing.producer import produce
from compactor.progress import parse_log_level
from compactor.spark.logs import LOG4J2_CONFIG, driver_java_options
from compactor.spark.session import LOCAL_COLLECTOR, local_defaults
from compactor.topics.records import ProducerRecord
from tests.conftest import jvm_env

ROOT = Path(__file__).resolve().parents[2]
# A line of Spark's (log4j) logging, in Spark's default layout and in compactor/spark/log4j2.properties's
SPARK_LOG_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN|ERROR|FATAL) ", re.MULTILINE)
STARTUP_NOISE = ("Setting default log level", "To adjust logging level", "Setting Spark log level",
                 "loopback address", "SPARK_LOCAL_IP", "native-hadoop")


def test_log_levels_are_accepted_in_any_case() -> None:
    assert [parse_log_level(t) for t in ("DEBUG", "info", "Warning", "WARN", "error")] == [
        "debug", "info", "warning", "warning", "error"]
    with pytest.raises(UsageError, match="not one of debug, info, warning, error"):
        parse_log_level("loud")
    parser = build_parser()
    for given, level in (("WARNING", "warning"), ("warning", "warning"), ("INFO", "info"), ("debug", "debug")):
        assert parser.parse_args(["--log-level", given, "topic", "list"]).log_level == level
    assert parser.parse_args(["topic", "list"]).log_level is None  # the default run: resolved by main()


def test_an_unknown_log_level_is_a_usage_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["--log-level", "loud", "topic", "list"])
    assert exit_info.value.code == 2 and "--log-level" in capsys.readouterr().err
    monkeypatch.setenv("COMPACTOR_LOG_LEVEL", "loud")
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["--warehouse", str(tmp_path / "wh"), "topic", "list"])
    assert exit_info.value.code == 2 and "COMPACTOR_LOG_LEVEL" in capsys.readouterr().err


def test_the_driver_jvm_loads_the_product_log4j2_configuration() -> None:
    default = driver_java_options(None)
    assert f'-Dlog4j2.configurationFile="{LOG4J2_CONFIG}"' in default and LOG4J2_CONFIG.is_file()
    assert "-Dcompactor.log.spark=WARN" in default and "-Dcompactor.log.startup=ERROR" in default
    # a level given explicitly applies to start-up messages too
    assert driver_java_options("warning").endswith("-Dcompactor.log.spark=WARN -Dcompactor.log.startup=WARN")
    assert driver_java_options("INFO").endswith("-Dcompactor.log.spark=INFO -Dcompactor.log.startup=INFO")
    config = LOG4J2_CONFIG.read_text()
    assert "target = SYSTEM_ERR" in config and "SYSTEM_OUT" not in config
    assert "${sys:compactor.log.spark:-WARN}" in config and "${sys:compactor.log.startup:-ERROR}" in config
    local = local_defaults({})
    assert "-Dderby.system.home=" in local["spark.driver.extraJavaOptions"]
    assert local["spark.driver.extraJavaOptions"].endswith(default) and local["spark.log.level"] == "WARN"
    debug = local_defaults({"COMPACTOR_LOG_LEVEL": "debug"})
    assert debug["spark.log.level"] == "DEBUG" and "-Dcompactor.log.startup=DEBUG" in debug[
        "spark.driver.extraJavaOptions"]
    assert local_defaults({"COMPACTOR_SPARK_LOG_LEVEL": "ERROR"})["spark.log.level"] == "ERROR"


def test_the_spark_submit_command_configures_the_driver_logging(monkeypatch: pytest.MonkeyPatch) -> None:
    config = LakeConfig.resolve(warehouse="/tmp/w", env={})

    def java_options(verb: list[str]) -> str:
        command = submit_command(config, verb, master="local[1]", warehouse="/tmp/w", catalog_uri=None, jars=["x"])
        [option] = [c for c in command if c.startswith("spark.driver.extraJavaOptions=")]
        return option

    assert java_options(["compact", "a.b"]).endswith(driver_java_options(None))
    assert java_options(["--log-level", "info", "compact", "a.b"]).endswith(driver_java_options("info"))
    monkeypatch.setenv("COMPACTOR_LOG_LEVEL", "warning")
    assert java_options(["compact", "a.b"]).endswith(driver_java_options("warning"))
    # a local master's driver runs the tasks: the local sessions' collector, unless the environment chose one
    monkeypatch.delenv("SPARK_SUBMIT_OPTS", raising=False)
    assert LOCAL_COLLECTOR in java_options(["compact", "a.b"]).split("=", 1)[1].split()
    cluster = submit_command(config, ["compact", "a.b"], master="spark://m:7077", warehouse="/tmp/w",
                             catalog_uri=None, jars=["x"])
    assert not [c for c in cluster if LOCAL_COLLECTOR in c]
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-XX:+UseSerialGC")
    assert LOCAL_COLLECTOR not in java_options(["compact", "a.b"])


class _JvmPrintStream:
    def __init__(self, fail: bool = False) -> None:
        self.text: list[str] = []
        self.flushes = 0
        self.fail = fail

    def print(self, text: str) -> None:  # java.io.PrintStream's name
        if self.fail:
            raise ConnectionError("gateway closed")
        self.text.append(text)

    def flush(self) -> None:
        self.flushes += 1


class _Fallback:
    def __init__(self) -> None:
        self.text: list[str] = []

    def write(self, text: str) -> int:
        self.text.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_under_spark_submit_python_stderr_goes_to_the_driver_jvm_stderr() -> None:
    jvm, fallback = _JvmPrintStream(), _Fallback()
    stream: Any = DriverStderr(jvm, fallback)  # type: ignore[arg-type]
    print("progress line", file=stream, flush=True)
    assert "".join(jvm.text) == "progress line\n" and jvm.flushes >= 1 and fallback.text == []
    broken, fallback = _JvmPrintStream(fail=True), _Fallback()
    stream = DriverStderr(broken, fallback)  # type: ignore[arg-type]
    print("still written", file=stream)
    print("and again", file=stream)
    assert "".join(fallback.text) == "still written\nand again\n"


# --- whole runs: a JVM each --------------------------------------------------------------------------------


def _seed(warehouse: Path) -> None:
    lake = Lake(warehouse=str(warehouse))
    topic = lake.create_topic("out.t", config={"cleanup.policy": "compact"})
    produce(topic, [ProducerRecord(b"k", b"1"), ProducerRecord(b"k", b"2"), ProducerRecord(b"j", b"3")])
    lake.close()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTOR_", "PYSPARK", "AWS_", "SPARK_"))}
    env.update(PYTHONPATH=str(ROOT), COMPACTOR_DRIVER_MEMORY="768m", COMPACTOR_SPARK_CORES="1",
               COMPACTOR_SHUFFLE_PARTITIONS="2", **jvm_env(), **extra)
    return env


def _run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)


@pytest.mark.slow  # two JVMs; the fresh-process compact route stays in the loop (test_compaction_quiet_runs)
@pytest.mark.spark
def test_a_default_compact_prints_only_the_result_and_no_spark_warning(tmp_path: Path) -> None:
    """``compactor compact T 2>/dev/null | jq .`` works, and a terminal sees progress but no Spark noise;
    ``--log-level warning`` shows Spark's warnings again (and leaves progress out)."""
    _seed(tmp_path / "wh")
    cli = [sys.executable, "-m", "compactor.cli.main", "--warehouse", str(tmp_path / "wh")]
    result = _run([*cli, "compact", "out.t"], _env())
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout)  # the whole of standard output is the one JSON document
    assert out["committed"] is True and out["horizons"] == {"0": 3}
    assert "compact out.t: summary:" in result.stderr  # progress, on standard error
    assert not SPARK_LOG_LINE.search(result.stderr), result.stderr
    assert not [n for n in STARTUP_NOISE if n in result.stderr], result.stderr

    with (tmp_path / "more.jsonl").open("w") as more:
        more.write('{"key": "k", "value": "4"}\n')
    assert _run([*cli, "produce", "out.t", "--file", str(tmp_path / "more.jsonl")], _env()).returncode == 0
    loud = _run([*cli, "--log-level", "WARNING", "compact", "out.t"], _env())
    assert loud.returncode == 0, loud.stderr[-3000:]
    assert json.loads(loud.stdout)["committed"] is True
    warnings = [m.group(0) for m in SPARK_LOG_LINE.finditer(loud.stderr)]
    assert warnings and any(n in loud.stderr for n in ("native-hadoop", "loopback address")), loud.stderr
    assert "compact out.t: summary:" not in loud.stderr  # progress is at info, below warning


@pytest.mark.slow  # a JVM; the spark-submit route stays in the loop (tests/e2e/test_deploy_submit.py)
@pytest.mark.spark
def test_spark_submit_keeps_progress_and_errors_off_standard_output(tmp_path: Path) -> None:
    """Through ``infra/cluster/submit.sh`` (spark-submit, local master): a failing verb's error line goes to
    standard error, and nothing else reaches standard output."""
    (tmp_path / "wh").mkdir()
    env = _env(SPARK_MASTER="local[1]", COMPACTOR_WAREHOUSE=str(tmp_path / "wh"))
    result = _run([str(ROOT / "infra/cluster/submit.sh"), "compact", "no.such"], env)
    assert result.returncode == 1
    assert result.stdout == ""
    assert "compactor: error:" in result.stderr and "no.such" in result.stderr
