"""Spark's own logging for the product's commands: quiet by default, on standard error, from its first line."""

from __future__ import annotations

from pathlib import Path

from compactor.progress import parse_log_level

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
