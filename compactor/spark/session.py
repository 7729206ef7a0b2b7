"""The SparkSession factory: Iceberg's SparkCatalog on the same JDBC catalog pyiceberg uses.

Two kinds of settings:

* **required** ones without which nothing works: the Iceberg SQL extensions, the catalog
  (``spark.sql.catalog.<name>.*``), the jars, and for S3 the S3A file system. These are always set (jars and
  extensions are appended to whatever is already there).
* **local-development defaults** (master ``local[*]``, driver memory, UTC, quiet UI). These are applied only
  when nothing else set them: under ``spark-submit`` the submitted configuration wins, and locally a key
  present in ``spark-defaults.conf`` or ``PYSPARK_SUBMIT_ARGS`` is left alone.

The session is shared: ``get_or_create_session`` returns the active one if it already exists.
"""

from __future__ import annotations

import logging
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from compactor.config import LakeConfig
from compactor.progress import parse_log_level
from compactor.spark.jars import required_jars
from compactor.spark.network import driver_address

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"

# The driver's log4j2 configuration: Spark's logging on standard error at WARN, its start-up noise at ERROR.
LOG4J2_CONFIG = Path(__file__).resolve().with_name("log4j2.properties")
_JVM_LEVELS = {"debug": "DEBUG", "info": "INFO", "warning": "WARN", "error": "ERROR"}


def spark_log_level(log_level: str | None) -> str:
    """The log4j level of Spark's own logging for ``--log-level`` (``None``: not given, WARN)."""
    return _JVM_LEVELS[parse_log_level(log_level)] if log_level else "WARN"


def driver_java_options(log_level: str | None) -> str:
    """Driver JVM options that load ``LOG4J2_CONFIG`` before Spark logs anything.

    ``spark.log.level`` applies only once the SparkContext is up, after the start-up warnings (loopback
    hostname, native Hadoop library) and, under ``spark-submit``, Spark's INFO defaults have been printed; a
    configuration file given to the JVM is in force from its first line. ``log_level`` is the command line's
    ``--log-level`` (or ``COMPACTOR_LOG_LEVEL``): ``None`` (a default run) keeps Spark at WARN with its
    start-up noise off; a level given explicitly applies to all of Spark's logging, start-up included.
    """
    level = spark_log_level(log_level)
    startup = level if log_level else "ERROR"
    return (f'-Dlog4j2.configurationFile="{LOG4J2_CONFIG}" '
            f"-Dcompactor.log.spark={level} -Dcompactor.log.startup={startup}")


def catalog_settings(config: LakeConfig) -> dict[str, str]:
    """The ``spark.sql.catalog.<name>.*`` settings (and S3A settings) for ``config``, without credentials.

    Credentials (``credential_settings``) are set on a running session only: a setting given at start-up goes
    on the command line of the JVM that PySpark or ``spark-submit`` launches, where any local user can read it.
    """
    name = config.catalog_name
    prefix = f"spark.sql.catalog.{name}"
    warehouse = config.warehouse
    settings = {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "jdbc",
        f"{prefix}.uri": config.catalog.jdbc_url,
        f"{prefix}.warehouse": warehouse,
        # pyiceberg creates the catalog tables; Java creating them would hold a SQLite read lock for the
        # life of the session and use the older layout (see README, "Facts found the hard way").
        f"{prefix}.jdbc.init-catalog-tables": "false",
        # pyiceberg commits while Spark runs; a cached table would hide them for 30 s.
        f"{prefix}.cache-enabled": "false",
    }
    if config.catalog.is_sqlite:
        # Several processes may commit to one SQLite file: wait for its write lock instead of failing after
        # sqlite-jdbc's default 3 s (pyiceberg's side uses the same 60 s, see catalog.py).
        settings[f"{prefix}.jdbc.busy_timeout"] = "60000"
    if config.catalog.jdbc_user:
        settings[f"{prefix}.jdbc.user"] = config.catalog.jdbc_user
    if config.is_s3:
        settings.update(s3a_settings(config))
    return settings


def credential_settings(config: LakeConfig) -> dict[str, str]:
    """The secrets among the session settings: the catalog password and the S3 keys (set at runtime only).

    Executors receive them without a command line either: Iceberg's file IO and Spark's file writers carry the
    driver's Hadoop configuration to their tasks.
    """
    out: dict[str, str] = {}
    if config.catalog.jdbc_password:
        out[f"spark.sql.catalog.{config.catalog_name}.jdbc.password"] = config.catalog.jdbc_password
    s3 = config.s3
    if config.is_s3 and s3.access_key_id:
        out["spark.hadoop.fs.s3a.access.key"] = s3.access_key_id
        out["spark.hadoop.fs.s3a.secret.key"] = s3.secret_access_key or ""
        if s3.session_token:
            out["spark.hadoop.fs.s3a.session.token"] = s3.session_token
    return out


def s3a_settings(config: LakeConfig) -> dict[str, str]:
    """Hadoop S3A settings: path-style access and explicit endpoint for MinIO and moto."""
    s3 = config.s3
    out = {
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.path.style.access": "true" if s3.path_style else "false",
        "spark.hadoop.fs.s3a.endpoint.region": s3.region,
        "spark.hadoop.fs.s3a.attempts.maximum": "3",
        "spark.hadoop.fs.s3a.retry.limit": "3",
        "spark.hadoop.fs.s3a.connection.establish.timeout": "10000",
        "spark.hadoop.fs.s3a.connection.timeout": "30000",
    }
    if s3.endpoint:
        parts = urlsplit(s3.endpoint)
        out["spark.hadoop.fs.s3a.endpoint"] = s3.endpoint
        out["spark.hadoop.fs.s3a.connection.ssl.enabled"] = "true" if parts.scheme == "https" else "false"
    if s3.access_key_id:  # the keys themselves are set at runtime (credential_settings)
        out["spark.hadoop.fs.s3a.aws.credentials.provider"] = (
            "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider" if s3.session_token
            else "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider")
    return out


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
                                          + driver_java_options(env.get("COMPACTOR_LOG_LEVEL"))),
    }


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
    flag_keys = {"--master": "spark.master", "--driver-memory": "spark.driver.memory", "--name": "spark.app.name"}
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


def register_catalog(spark: SparkSession, config: LakeConfig) -> None:
    """Point a running session at ``config``'s catalog (SQL settings at runtime, S3A via Hadoop's conf).

    Iceberg initialises a catalog on first use and caches it by name, so a running session can serve
    several lakes only under different catalog names (tests use one name per warehouse).

    The catalog password is a session setting only while the catalog initialises, then it is removed: Spark
    copies every SQL setting of a session into the properties of each job it runs, and writes those, unredacted
    (Spark redacts only its start-up settings), into the event log. The initialised catalog keeps it.
    """
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    secrets = credential_settings(config)
    for key, value in {**catalog_settings(config), **secrets}.items():
        if key.startswith("spark.hadoop."):
            hadoop.set(key[len("spark.hadoop."):], value)
        else:
            spark.conf.set(key, value)
    transient = [key for key in secrets if not key.startswith("spark.hadoop.")]
    if transient:
        _initialise_catalog(spark, config.catalog_name)
        for key in transient:
            spark.conf.unset(key)


def _initialise_catalog(spark: SparkSession, name: str) -> None:
    """Make ``spark``'s catalog ``name`` read its settings now (Spark reads them from the *active* session)."""
    jvm_sessions = spark.sparkContext._jvm.org.apache.spark.sql.SparkSession  # type: ignore[union-attr]
    previous = jvm_sessions.getActiveSession()
    jvm_sessions.setActiveSession(spark._jsparkSession)
    try:
        spark._jsparkSession.sessionState().catalogManager().catalog(name)
    finally:
        if previous.isDefined():
            jvm_sessions.setActiveSession(previous.get())
        else:
            jvm_sessions.clearActiveSession()


def private_session(parent: SparkSession, config: LakeConfig) -> SparkSession:
    """A new session on ``parent``'s SparkContext with ``config``'s catalog: settings changed on it stay there."""
    session = parent.newSession()
    register_catalog(session, config)
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
        jars = required_jars(s3=config.is_s3, postgres=not config.catalog.is_sqlite)
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
    if ICEBERG_EXTENSIONS not in extensions:
        extensions.append(ICEBERG_EXTENSIONS)
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
