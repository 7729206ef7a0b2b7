"""Which SparkSession the JVM treats as active, set for the length of a block and then put back.

Spark resolves some things on the thread's *active* session rather than on the session a call was made on:
Iceberg's ``IcebergSource`` (``spark.read.format("iceberg").load(...)``) finds its catalog there, Iceberg's
``SparkTable`` reads its ``spark.sql.iceberg.*`` settings there, and a catalog reads its configuration from it
when first used. The product's jobs run on a private session (``Lake.job_spark()``), so every Spark step of a
job must run with that session active, or a step resolves against the caller's session (for example, a compaction
with no new records failed with "Catalog 'default_iceberg' plugin class not found", because nothing had yet
made the job session active). PySpark's ``createDataFrame`` also makes its session active and never puts the
old one back; ``active_session`` restores the caller's active session on exit, so nothing a job did stays
active in the caller's thread.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from compactor.spark import internals

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

T = TypeVar("T")


@contextlib.contextmanager
def active_session(spark: SparkSession) -> Iterator[SparkSession]:
    """Make ``spark`` the active session of this thread (JVM and PySpark) inside the block, then restore the
    previous one (or none). The JVM keeps one active session per thread; PySpark pins each Python thread to
    one JVM thread, so set and restore happen on the same thread."""
    jvm_sessions = internals.java_class("org.apache.spark.sql.SparkSession", spark)
    previous = jvm_sessions.getActiveSession()
    previous_py = internals.python_active_session()
    jvm_sessions.setActiveSession(internals.java_session(spark))
    internals.set_python_active_session(spark)
    try:
        yield spark
    finally:
        if previous.isDefined():
            jvm_sessions.setActiveSession(previous.get())
        else:
            jvm_sessions.clearActiveSession()
        internals.set_python_active_session(previous_py)


def call_active(spark: SparkSession, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` with ``spark`` active: for Spark work submitted to a thread pool, whose threads start with
    no active session of their own (the JVM's is per thread)."""
    with active_session(spark):
        return fn(*args)
