"""Shared fixtures: isolated configuration, a fresh lake per test, one SparkSession per test process, and one of
each JVM server (Kafka broker, Kafka Connect worker, REST catalog) per test run.

Each test's lake gets its own warehouse directory and its own catalog name, registered at runtime on the
shared SparkSession (Iceberg caches catalogs by name, so a new name gives a fresh catalog on a new database).

Markers say what a test needs, and are kept true here (docs/architecture.md, "Tests"):

* ``spark``: the test starts or uses a JVM (the SparkSession, Spark in a subprocess, or a JVM server: the Kafka
  broker, the REST catalog). A test that requests the SparkSession without the marker is a collection error,
  and one that reaches Spark any other way (``Lake.spark()``, a subprocess that starts a JVM) fails: for
  unmarked tests the JVM entry points refuse and ``JAVA_HOME`` points nowhere;
* ``s3``: the test uses moto's S3 server; ``postgres``: the test needs the PostgreSQL server; ``kafka``: the
  Kafka broker; ``rest``: the REST catalog server. All four are added here from the fixtures a test requests
  (and the ``backend`` parameter of ``tests/backends.py``); ``kafka`` and ``rest`` add ``spark`` too;
* ``slow``: left out of the pre-commit loop ``pytest -m "not slow"``, which keeps at least one test of every
  route and of every section of docs/guarantees.md. Slow are: the longer randomised runs, tests that start
  JVMs of their own (CLI and ``spark-submit`` subprocesses) beyond one per route, the second layout or failure
  point of a rule already in the loop, the standalone cluster, and Spark tests on the S3 and PostgreSQL
  back-ends (added here from their ``s3`` and ``postgres`` markers; the local back-end keeps the routes in the
  loop, and JVM-free tests keep S3 and PostgreSQL in it). Marked in their modules, except that last rule.

Every JVM the tests start (the shared session, and the CLI and ``spark-submit`` subprocesses, which inherit
the environment) runs with ``TEST_JVM_OPTIONS`` through ``SPARK_SUBMIT_OPTS``; tests that build a clean
environment for a subprocess add them back with ``jvm_env()``.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, settings

from compactor.config import LakeConfig
from compactor.lake import Lake
from tests import jvm_archive

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# fixtures any test module may use
pytest_plugins = ["tests.s3_server", "tests.pg_server", "tests.servers", "tests.backends"]

# Property tests: no per-example deadline and no "too slow" health check (other jobs share the machine's two
# cores, so timings say nothing); a failure prints the blob that reproduces it.
settings.register_profile("compactor", deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("compactor")

_catalog_numbers = itertools.count()
ISOLATED_PREFIXES = ("COMPACTOR_", "AWS_", "PYICEBERG_")

# The tests' JVMs run small jobs: C1 only (no C2 compiles) halves their CPU. Measured: a CLI ``compact``
# subprocess's JVM 14 s -> 7.5 s of user time; the shared session over tests/compaction/test_compaction_rules.py
# 74 s -> 32-38 s of CPU. With the class-data-sharing archive ``infra/test.sh`` makes (tests/jvm_archive.py), a
# fresh Spark JVM also loads its classes from the archive: 7.1 s -> 4.7 s from start to a first job's result.
# The serial collector: the tests' heaps are small, and G1's concurrent threads cost a compaction test module
# about 10% more CPU (busy CPU over tests/compaction/test_compaction_rules.py: 45-55 s against 41-45 s).
TEST_JVM_OPTIONS = f"{jvm_archive.BASE_OPTIONS} {jvm_archive.options()}".strip()


def jvm_env() -> dict[str, str]:
    """The environment entry that gives a subprocess's JVMs the tests' options (spark-class reads it)."""
    return {"SPARK_SUBMIT_OPTS": TEST_JVM_OPTIONS}


if TEST_JVM_OPTIONS not in os.environ.get("SPARK_SUBMIT_OPTS", ""):
    os.environ["SPARK_SUBMIT_OPTS"] = f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} {TEST_JVM_OPTIONS}".strip()


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Keep the developer's own configuration out of every test."""
    for key in list(os.environ):
        if key.startswith(ISOLATED_PREFIXES) and key not in ("COMPACTOR_JARS_DIR",):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path / "pyiceberg-home"))


# --- markers that say what a test needs ---------------------------------------------------------------

NO_JVM_HOME = "/nonexistent/tests-without-the-spark-marker-must-not-start-a-JVM"
SPARK_FIXTURE = "spark_session"  # ``spark`` and every fixture built on it request this one
# fixture -> marker (tests/servers.py); the Connect worker runs on the broker
JVM_SERVER_FIXTURES = {"kafka_broker": "kafka", "kafka_connect": "kafka", "rest_catalog": "rest"}


SERVER_GROUP = "jvm-servers"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which reads the xdist_group markers added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Add ``s3`` and ``postgres`` from what each test uses; refuse a Spark fixture without ``spark``; keep every
    test of a JVM server in one pytest-xdist group, so that a parallel run (``-n 2``, ``--dist loadgroup`` from
    ``pyproject.toml``) starts one Kafka broker, one Connect worker and one REST catalog, on one worker.

    The Spark tests are spread over both workers, each with its own SparkSession (the session fixture is
    per process): measured, the tests of the shared session alone take longer than the suite's budget when
    run one after another, and two sessions keep both cores busy while one waits on its driver."""
    unmarked: list[str] = []
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        backend = callspec.params.get("backend") if callspec is not None else None
        if SPARK_FIXTURE in fixtures and item.get_closest_marker("spark") is None:
            unmarked.append(item.nodeid)
        if "s3_server" in fixtures or backend == "s3":
            item.add_marker(pytest.mark.s3)
        if "postgres_server" in fixtures or backend == "postgres":
            item.add_marker(pytest.mark.postgres)
        servers = [marker for fixture, marker in JVM_SERVER_FIXTURES.items() if fixture in fixtures]
        if backend == "rest" and "rest" not in servers:
            servers.append("rest")
        for marker in servers:
            item.add_marker(getattr(pytest.mark, marker))
        if servers and item.get_closest_marker("spark") is None:
            item.add_marker(pytest.mark.spark)
        if item.get_closest_marker("spark") is not None and (
                item.get_closest_marker("s3") is not None or item.get_closest_marker("postgres") is not None):
            item.add_marker(pytest.mark.slow)
        if servers:
            item.add_marker(pytest.mark.xdist_group(SERVER_GROUP))
    if unmarked:
        raise pytest.UsageError("these tests use the SparkSession but are not marked @pytest.mark.spark: "
                                + ", ".join(unmarked))
    # pytest-xdist hands tests out in collection order: a long test collected near the end would run alone while
    # the other worker idles, so the tests marked ``long`` go first (the rest keep their order)
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """On a pytest-xdist worker under ``--dist loadgroup``, refuse the run if xdist could not mark the groups
    (pytest 9.2 with pytest-xdist 3.8 ignores them; infra/constraints.txt): each worker would start its own
    JVM servers. The worker stops before any test runs; xdist's controller then reports an INTERNALERROR
    (``assert not '<test id>'``) and no test runs, instead of a run that silently loses its groups."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    lost = [item.nodeid for item in session.items
            if item.get_closest_marker("xdist_group") is not None and "@" not in item.nodeid.rsplit("]", 1)[-1]]
    if lost:
        raise pytest.UsageError(f"pytest-xdist's --dist loadgroup did not group {len(lost)} tests (e.g. {lost[0]}): "
                                "use the pytest of infra/constraints.txt")


@pytest.fixture(autouse=True)
def _jvm_only_under_the_spark_marker(request: pytest.FixtureRequest,
                                     monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A test without the ``spark`` marker that reaches a JVM fails, even if the code under test catches the
    refusal: Spark's entry points refuse in this process, and ``JAVA_HOME`` points nowhere for subprocesses."""
    if request.node.get_closest_marker("spark") is not None:
        yield
        return
    from pyspark import context
    from pyspark.sql import SparkSession

    attempts: list[str] = []

    def refuse(what: str) -> Any:
        def refused(*args: Any, **kwargs: Any) -> Any:
            attempts.append(what)
            pytest.fail(f"{request.node.nodeid} {what} but is not marked @pytest.mark.spark: mark it (it needs a "
                        "JVM) or keep it JVM-free")
        return refused

    monkeypatch.setenv("JAVA_HOME", NO_JVM_HOME)
    monkeypatch.setattr(context, "launch_gateway", refuse("started a JVM"))
    monkeypatch.setattr(SparkSession, "getActiveSession", refuse("asked for the active SparkSession"))
    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", refuse("asked for a SparkSession"))
    yield
    if attempts:
        pytest.fail(f"{request.node.nodeid} is not marked @pytest.mark.spark but " + " and ".join(attempts))


def new_lake_config(warehouse: str | Path, catalog_uri: str | None = None, **env: str) -> LakeConfig:
    """A lake configuration with a catalog name unique within this test session."""
    config = LakeConfig.resolve(warehouse=str(warehouse), catalog_uri=catalog_uri, env=env or {})
    return dataclasses.replace(config, catalog_name=f"lake{next(_catalog_numbers)}")


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[Lake]:
    """A fresh local lake (pyiceberg only; no Spark), created: opening a lake never creates one
    (tests/test_lake_opening.py), and tests on this one start from an empty lake."""
    instance = Lake(new_lake_config(tmp_path / "warehouse"))
    instance.open(create=True)
    yield instance
    instance.close()


@pytest.fixture(scope="session")
def spark_session() -> Iterator[SparkSession]:
    """The SparkSession of this test process (small, local, quiet; one per pytest-xdist worker)."""
    from compactor.spark.jars import ICEBERG_AWS_JARS, ICEBERG_AWS_SET, S3_SET, S3A_JARS, jars_dir
    from compactor.spark.session import get_or_create_session

    extra = {
        "spark.master": "local[2]",
        "spark.driver.memory": "1g",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        # Catalyst's generated code off (interpreted rows, the same results by Spark's contract): a test's queries
        # are new to Spark each time (their horizons and clocks are literals in the code), so each one would be
        # compiled by Janino and then by the JIT for a few rows. Fresh-process tests run with Spark's defaults.
        "spark.sql.codegen.wholeStage": "false",
        "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    }
    have_s3 = all((jars_dir() / S3_SET / name).exists() for name in S3A_JARS)
    bootstrap = new_lake_config(Path(os.environ.get("TMPDIR", "/tmp")) / "compactor-test-bootstrap")
    if have_s3:
        # Load the S3A jars at start so S3 tests can share this session.
        from compactor.spark.jars import required_jars

        # and Iceberg's AWS bundle, for a REST catalog's vended credentials
        have_aws = all((jars_dir() / ICEBERG_AWS_SET / name).exists() for name in ICEBERG_AWS_JARS)
        extra["spark.jars"] = ",".join(required_jars(s3=True, rest=have_aws))
    session = get_or_create_session(bootstrap, extra=extra)
    yield session
    session.stop()


@pytest.fixture
def spark(spark_session: SparkSession, lake: Lake) -> SparkSession:
    """The shared SparkSession, pointed at this test's lake."""
    from compactor.spark.catalog import register_catalog

    register_catalog(spark_session, lake.config)
    lake.attach_spark(spark_session)
    return spark_session


def records_of(rows: list[dict[str, Any]]) -> list[Any]:
    from compactor.topics.records import ProducerRecord

    return [ProducerRecord(**row) for row in rows]
