"""The SparkSession factory: Iceberg's SparkCatalog on the same JDBC catalog pyiceberg uses.

Two kinds of settings:

* **required** ones without which nothing works: the Iceberg SQL extensions, the catalog
  (``spark.sql.catalog.<name>.*``), the jars, and for S3 the S3A file system. These are always set (jars and
  extensions are appended to whatever is already there).
* **local-development defaults** (master ``local[*]``, driver memory, UTC, quiet UI, the JVM's garbage
  collector). These are applied only when nothing else set them: under ``spark-submit`` the submitted
  configuration wins, and locally a key present in ``spark-defaults.conf`` or ``PYSPARK_SUBMIT_ARGS`` is left
  alone.

The session is shared: ``get_or_create_session`` returns the active one if it already exists.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from compactor.config import LakeConfig
from compactor.spark.catalog import catalog_settings, register_catalog, uses_s3
from compactor.spark.internals import import_sql_functions
from compactor.spark.jars import required_jars
from compactor.spark.logs import driver_java_options, spark_log_level
from compactor.spark.network import driver_address

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
# The product's own (compactor-udf.jar): a physical-plan rule that runs a grouped aggregation whose input is already
# clustered on its keys in one hash table instead of two (compactor/spark/java/compactor/udf/OnePassAggregates.java)
PRODUCT_EXTENSIONS = "compactor.udf.SessionExtensions"
SESSION_EXTENSIONS = (ICEBERG_EXTENSIONS, PRODUCT_EXTENSIONS)
# the session setting that turns that rule off (``false``); its Java twin is ``OnePassAggregates.ENABLED``
ONE_PASS_AGGREGATES = "spark.compactor.onePassAggregates"
# The garbage collector of a local session's JVM, which runs the driver and every task: the throughput collector.
# JDK 17 picks G1 on a machine with 2 cores, whose concurrent threads and write barriers cost a compaction's
# short, allocation-heavy tasks more than they save (bench/findings.md, "The JVM's collector": on the standard
# workload the incremental run took 0.77 s instead of 1.32 s, the first run 5.5 s instead of 6.4 s).
LOCAL_COLLECTOR = "-XX:+UseParallelGC"
# where a JVM's options may already name a collector (a second one stops the JVM: "conflicting collector
# combinations"); spark-class passes SPARK_SUBMIT_OPTS, the JVM reads the others itself
JVM_OPTION_VARIABLES = ("SPARK_SUBMIT_OPTS", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS")
_COLLECTOR = re.compile(r"-XX:\+Use\w*GC\b")


def local_defaults(env: Mapping[str, str]) -> dict[str, str]:
    """Settings for a local run; each is skipped if the user's Spark configuration already has it."""
    cores = env.get("COMPACTOR_SPARK_CORES", "*")
    shuffle = env.get("COMPACTOR_SHUFFLE_PARTITIONS") or str(max(2, 2 * (os.cpu_count() or 2)))
    return {
        "spark.master": f"local[{cores}]",
        "spark.app.name": "iceberg-topic-compactor",
        "spark.driver.memory": env.get("COMPACTOR_DRIVER_MEMORY", "2g"),
        "spark.ui.enabled": "true" if env.get("COMPACTOR_SPARK_UI") == "1" else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": shuffle,
        "spark.sql.adaptive.enabled": "true",
        "spark.log.level": env.get("COMPACTOR_SPARK_LOG_LEVEL") or spark_log_level(env.get("COMPACTOR_LOG_LEVEL")),
        "spark.driver.extraJavaOptions": ("-Dderby.system.home=/tmp/compactor-derby "
                                          + local_driver_java_options(env, env.get("COMPACTOR_LOG_LEVEL"))),
    }


def local_driver_java_options(env: Mapping[str, str], log_level: str | None) -> str:
    """The Java options of a driver that runs its tasks itself (a local master, in a local session or under
    ``spark-submit``): the collector (``collector_option``) and the logging configuration (``driver_java_options``
    for ``log_level``)."""
    return " ".join(filter(None, (collector_option(env), driver_java_options(log_level))))


def collector_option(env: Mapping[str, str]) -> str:
    """``LOCAL_COLLECTOR``, or nothing when the JVM options in the environment (``JVM_OPTION_VARIABLES``) already
    choose a collector: two would keep the JVM from starting."""
    if any(_COLLECTOR.search(env.get(name, "")) for name in JVM_OPTION_VARIABLES):
        return ""
    return LOCAL_COLLECTOR


def user_spark_keys(env: Mapping[str, str]) -> set[str]:
    """Keys already set by ``spark-defaults.conf`` or ``PYSPARK_SUBMIT_ARGS`` (which we must not override)."""
    keys: set[str] = set()
    conf_dir = env.get("SPARK_CONF_DIR") or (str(Path(env["SPARK_HOME"]) / "conf") if env.get("SPARK_HOME") else None)
    if conf_dir:
        defaults = Path(conf_dir) / "spark-defaults.conf"
        if defaults.exists():
            for line in defaults.read_text().splitlines():
                stripped = line.strip()
                if stripped and not stripped.startswith("#"):
                    keys.add(stripped.split(None, 1)[0])
    args = shlex.split(env.get("PYSPARK_SUBMIT_ARGS", ""))
    flag_keys = {"--master": "spark.master", "--driver-memory": "spark.driver.memory", "--name": "spark.app.name",
                 "--driver-java-options": "spark.driver.extraJavaOptions"}
    for i, arg in enumerate(args):
        if arg in flag_keys:
            keys.add(flag_keys[arg])
        elif arg == "--conf" and i + 1 < len(args):
            keys.add(args[i + 1].split("=", 1)[0])
    return keys


def _jar_file(jar: str) -> str:
    """The real file a ``spark.jars`` entry (a path or a ``file:`` URI) names; other URIs as given."""
    parts = urlsplit(jar)
    if parts.scheme not in ("", "file"):
        return jar
    return os.path.realpath(parts.path)


def private_session(parent: SparkSession, config: LakeConfig) -> SparkSession:
    """A new session on ``parent``'s SparkContext with ``config``'s catalog: settings changed on it stay there."""
    session = parent.newSession()
    register_catalog(session, config)
    import_sql_functions(session)  # the product's jobs build their columns with many function calls
    return session


def get_or_create_session(config: LakeConfig, extra: Mapping[str, str] | None = None) -> SparkSession:
    """Return a SparkSession configured for ``config`` (the active one if there is one)."""
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        register_catalog(active, config)
        return active

    env = os.environ
    under_submit = "PYSPARK_GATEWAY_PORT" in env
    extra = dict(extra or {})
    master: str | None
    if under_submit:
        submitted = SparkConf()  # the JVM is already up: this reads the submitted configuration
        existing = {k for k, _ in submitted.getAll()}
        existing_jars = submitted.get("spark.jars", "") or ""
        existing_ext = submitted.get("spark.sql.extensions", "") or ""
        master = submitted.get("spark.master")
    else:
        existing = user_spark_keys(env)
        existing_jars = ""
        existing_ext = ""
        master = None if "spark.master" in existing else local_defaults(env)["spark.master"]
    master = extra.get("spark.master", master)

    builder = SparkSession.builder
    if not under_submit:
        for key, value in local_defaults(env).items():
            if key not in existing:
                builder = builder.config(key, value)
    try:
        jars = required_jars(s3=uses_s3(config), rest=config.is_rest)
    except Exception:
        if not under_submit:
            raise
        jars = []  # on a cluster the jars come with spark-submit --jars
    submitted_jars = [j for j in existing_jars.split(",") if j]
    known = {_jar_file(j) for j in submitted_jars}  # spark-submit resolves symlinks: compare real files
    all_jars = submitted_jars + [j for j in jars if _jar_file(j) not in known]
    if all_jars:
        builder = builder.config("spark.jars", ",".join(all_jars))
    extensions = [e for e in existing_ext.split(",") if e]
    extensions += [e for e in SESSION_EXTENSIONS if e not in extensions]
    builder = builder.config("spark.sql.extensions", ",".join(extensions))
    for key, value in catalog_settings(config).items():
        builder = builder.config(key, value)
    for key, value in extra.items():
        builder = builder.config(key, value)
    driver_keys = {"spark.driver.host", "spark.driver.bindAddress"}
    address = driver_address(master) if master is not None else None  # None: a master we do not know
    if address is not None and not (existing | extra.keys()) & driver_keys:
        builder = builder.config("spark.driver.host", address).config("spark.driver.bindAddress", address)
    log.info("starting Spark (%s)", "spark-submit" if under_submit else "local")
    session = builder.getOrCreate()
    register_catalog(session, config)  # the credentials, at runtime only (see catalog_settings)
    return session
