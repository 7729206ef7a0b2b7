"""Every use of PySpark's and py4j's private API in the product, in this one module, each with why (checked against
pyspark 3.5.9, the pinned version: re-check each on an upgrade; ``tests/test_layering.py`` fails if another module
uses a private PySpark or py4j name).

PySpark has no public way to reach the JVM objects behind its Python ones, and the product needs them in a few
places: to make its job session the thread's active session (``spark.active``), to register a catalog on a
running session (``spark.catalog``), to call its compiled Spark functions (``spark.functions``), to read a
DataFrame's optimised plan (``producing.spark_plan``), to read the runs' observed metrics cheaply (the compaction
and attached-log passes) and, under ``spark-submit``, to write to the driver JVM's standard error (``cli.submit``).

* ``active_context``: ``SparkContext._active_spark_context``, the running SparkContext (``None`` if none).
* ``jvm``: ``SparkContext._jvm``, the py4j view of the JVM's classes.
* ``java_session`` and ``java_frame``: ``SparkSession._jsparkSession`` and ``DataFrame._jdf``, the JVM objects.
* ``hadoop_configuration``: ``SparkContext._jsc.hadoopConfiguration()``, where S3A settings take effect on a
  running session (Spark copies ``spark.hadoop.*`` there only at start-up).
* ``python_active_session`` and ``set_python_active_session``: ``SparkSession._activeSession``, which PySpark's
  ``getActiveSession`` consults and ``createDataFrame`` sets without restoring it.
* ``java_call``: ``pyspark.sql.column._to_seq`` and ``_to_java_column``, to apply a JVM ``UserDefinedFunction``
  to columns (what PySpark's own functions do).
* ``import_sql_functions``: adds ``org.apache.spark.sql.functions`` and ``org.apache.spark.api.python.PythonUtils``
  to the py4j view ``SparkContext._jvm`` as single-type imports. Each ``pyspark.sql.functions`` call looks
  ``functions`` up in that view, and each list of columns PySpark passes on looks up ``PythonUtils``; PySpark sets
  the view up with wildcard imports only (``org.apache.spark.api.java.*`` and the others before the class's
  package), so py4j first tries the bare name and then the name in each earlier package, and each miss is a
  ``Class.forName`` that searches every jar on the class path. py4j tries single-type imports first: the name then
  resolves at once, to the same class.
* ``java_class``: a JVM class by its full name as a single-type import of that view, for the same reason: walking
  ``jvm.org.apache...`` costs a failed class lookup per package, and the first (``org``) one per wildcard import
  too, a dozen misses for each class the product calls (3-4 ms a class on the 2-core machine). py4j keeps the
  first class imported under a simple name, so a name another class holds is walked as before.
* ``observed_metrics``: ``Observation._jo``, the JVM ``Observation``, to read its metrics as an array of keys and a
  lookup per key. PySpark's ``Observation.get`` iterates the JVM's map with py4j's iterator, which learns that the
  map has no more entries from a Java exception; PySpark converts every Java exception it sees (a dozen
  ``isInstanceOf`` checks, each a few failed class lookups over every jar), so each ``get`` cost 12-35 ms where
  the same figures take 1-3 ms (measured on the 2-core machine), a few times in every compaction run.
* ``submit_gateway_jvm``: ``SparkContext._ensure_initialized()`` joins ``spark-submit``'s py4j gateway before any
  SparkContext exists, so that standard error can go to the driver JVM's from the first line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from compactor.errors import CompactorError

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import Column, DataFrame, Observation, SparkSession


def active_context() -> SparkContext | None:
    """The running SparkContext of this process, or ``None``."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context


def jvm(spark: SparkSession | None = None) -> Any:
    """The py4j view of the JVM (``spark``'s, else the running context's); ``None`` without a running context."""
    context = spark.sparkContext if spark is not None else active_context()
    return None if context is None else context._jvm


def java_session(spark: SparkSession) -> Any:
    """The JVM ``SparkSession`` behind ``spark``."""
    return spark._jsparkSession


def java_frame(df: DataFrame) -> Any:
    """The JVM ``Dataset`` behind ``df``."""
    return df._jdf


def hadoop_configuration(spark: SparkSession) -> Any:
    """The running context's Hadoop configuration (S3A reads its settings there)."""
    return spark.sparkContext._jsc.hadoopConfiguration()


def python_active_session() -> SparkSession | None:
    """The session PySpark treats as this process's active one."""
    from pyspark.sql import SparkSession

    return SparkSession._activeSession


def set_python_active_session(spark: SparkSession | None) -> None:
    """Make ``spark`` (or none) the session PySpark treats as active."""
    from pyspark.sql import SparkSession

    SparkSession._activeSession = spark


def java_call(function: Any, *columns: Column) -> Column:
    """The column of the JVM ``UserDefinedFunction`` ``function`` applied to ``columns``."""
    from pyspark.sql.column import Column, _to_java_column, _to_seq

    context = active_context()
    if context is None:
        raise CompactorError("a compiled Spark function needs a running SparkContext: start Spark (Lake.spark()) "
                             "before building the column")
    return Column(function.apply(_to_seq(context, list(columns), _to_java_column)))


def import_sql_functions(spark: SparkSession) -> None:
    """Make the lookups behind ``pyspark.sql.functions`` one class lookup each (see the module docstring)."""
    from py4j.java_gateway import java_import

    for name in ("org.apache.spark.sql.functions", "org.apache.spark.api.python.PythonUtils"):
        java_import(spark.sparkContext._jvm, name)


def java_class(name: str, spark: SparkSession | None = None) -> Any:
    """The JVM class of full name ``name`` in the py4j view of ``spark``'s JVM (else the running context's), found
    with one class lookup (see the module docstring): a py4j ``JavaClass``, or a ``JavaPackage`` if no such class
    is on the class path."""
    from py4j.java_gateway import java_import

    view = jvm(spark)
    if view is None:
        raise CompactorError(f"{name} needs a running SparkSession")
    java_import(view, name)
    found = getattr(view, name.rsplit(".", 1)[-1])
    if getattr(found, "_fqn", None) == name:
        return found
    # another class took the simple name in this view first (py4j keeps the first), or there is no such class:
    # walk the packages instead
    for part in name.split("."):
        view = getattr(view, part)
    return view


def observed_metrics(observation: Observation) -> dict[str, Any]:
    """The metrics of ``observation``, as ``Observation.get`` returns them (waiting, as it does, until the observed
    query has run), read without iterating a JVM map (see the module docstring)."""
    java = observation._jo
    if java is None:
        raise CompactorError("an observation is read only after DataFrame.observe was called with it")
    metrics = java.getAsJava()
    return {key: metrics.get(key) for key in metrics.keySet().toArray()}


def submit_gateway_jvm() -> Any:
    """Under ``spark-submit``: join its py4j gateway (no SparkContext is created) and return the JVM view."""
    from pyspark import SparkContext

    SparkContext._ensure_initialized()
    return SparkContext._jvm


__all__ = ["active_context", "hadoop_configuration", "import_sql_functions", "java_call", "java_class", "java_frame",
           "java_session", "jvm", "observed_metrics", "python_active_session", "set_python_active_session",
           "submit_gateway_jvm"]
