"""Entry point for ``spark-submit``: the whole command line, run inside the submitted Spark application.

    spark-submit --master spark://host:7077 --jars <iceberg runtime, jackson, jdbc, s3a jars> \\
        --py-files compactor.zip compactor/cli/submit.py \\
        --warehouse s3://bucket/lake --catalog-uri postgresql://... compact events.orders

The arguments are exactly those of ``compactor`` (global options, then the verb). The session factory sees
that it runs under ``spark-submit`` and uses the submitted configuration (master, memory, jars) unchanged.
Also runnable as ``python -m compactor.cli.submit ...`` (same as the ``compactor`` command).

Standard output carries only the verb's result here too. ``spark-submit`` runs this script as a child of the
driver JVM with the child's standard error merged into its standard output (Spark's ``PythonRunner``), and
copies both to the JVM's standard output. So under ``spark-submit`` Python's ``sys.stderr`` (progress, logs,
error lines) is written to the driver JVM's ``System.err`` through the Py4J gateway instead: it reaches the
same standard error as Spark's own log4j output, and Python's standard output stays the result alone.
"""

from __future__ import annotations

import io
import os
import sys
from typing import Any, TextIO

from compactor.cli.main import run


class DriverStderr(io.TextIOBase):
    """A text stream writing to the driver JVM's ``System.err`` (``fallback`` if the gateway fails)."""

    def __init__(self, jvm_stderr: Any, fallback: TextIO) -> None:
        super().__init__()
        self._jvm_stderr: Any = jvm_stderr
        self._fallback = fallback

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self._jvm_stderr is not None:
            try:
                self._jvm_stderr.print(text)
                return len(text)
            except Exception:  # the gateway is gone (shutting down): keep writing, to Python's own stderr
                self._jvm_stderr = None
        return self._fallback.write(text)

    def flush(self) -> None:
        if self._jvm_stderr is not None:
            try:
                self._jvm_stderr.flush()
                return
            except Exception:
                self._jvm_stderr = None
        self._fallback.flush()


def route_stderr_to_driver() -> bool:
    """Under ``spark-submit``, point ``sys.stderr`` at the driver JVM's standard error (see the module
    docstring); returns whether it did. Elsewhere (no Py4J gateway to join) it changes nothing."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return False
    from compactor.spark.internals import submit_gateway_jvm

    jvm = submit_gateway_jvm()  # joins spark-submit's gateway; the SparkContext is not created yet
    if jvm is None:
        return False
    sys.stderr = DriverStderr(jvm.System.err, sys.stderr)
    return True


if __name__ == "__main__":
    route_stderr_to_driver()
    sys.exit(run())
