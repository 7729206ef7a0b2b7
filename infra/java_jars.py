"""Build the project's own Java code into jars with the JDK's ``javac`` and ``jar``.

* ``compactor-udf.jar``: the compiled Spark functions (``compactor/spark/java``: Kafka's murmur2 partitioner and
  the DataFrame producer's per-task row positions), compiled against PySpark's own jars and Iceberg's Spark
  runtime, for Java 8 bytecode as Spark's executors may run an older JVM;
* ``compactor-rest-catalog.jar``: the loopback launcher of Iceberg's REST catalog test server
  (``infra/rest/``), compiled against the ``rest`` jar set.

Each jar's manifest records the SHA-256 of its sources (``Compactor-Source-SHA256``): a run whose sources match
the installed jar does nothing, a changed source rebuilds it, and the Spark session factory refuses a UDF jar
built from other sources.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from compactor.spark.jars import SOURCE_HASH_ATTRIBUTE, jar_source_hash, udf_source_hash

UDF_JAR = "compactor-udf.jar"
REST_CATALOG_JAR = "compactor-rest-catalog.jar"
# the UDF sources compile against PySpark's own jars (pyspark/jars/*, Spark SQL's API and what it refers to)
SPARK_SQL_JAR = "spark-sql_2.12-3.5.9.jar"


def source_hash(source_dir: Path) -> str:
    """The sources' hash as the session factory computes it (``compactor.spark.jars``: the package is installed
    before the set-up builds jars), so a jar this builds is one the session accepts."""
    digest = udf_source_hash(source_dir)
    if digest is None:
        raise SystemExit(f"[setup] ERROR: no Java sources under {source_dir}")
    return digest


def _tool(name: str) -> str:
    home = os.environ.get("JAVA_HOME")
    candidate = Path(home) / "bin" / name if home else None
    found = str(candidate) if candidate and candidate.exists() else shutil.which(name)
    if not found:
        raise SystemExit(f"[setup] ERROR: the JDK's '{name}' is missing: apt-get install openjdk-17-jdk-headless "
                         "(or set JAVA_HOME to a JDK 17)")
    return found


def ensure_jar(jar: Path, source_dir: Path, classpath: Sequence[Path | str], *, release: str = "17") -> bool:
    """Compile ``source_dir``'s ``.java`` files against ``classpath`` and pack them as ``jar``, unless ``jar`` is
    already built from these sources; True if built. The jar is written under a temporary name and renamed."""
    want = source_hash(source_dir)
    if jar_source_hash(jar) == want:
        return False
    sources = sorted(str(p) for p in source_dir.rglob("*.java"))
    with tempfile.TemporaryDirectory() as tmp:
        classes = Path(tmp) / "classes"
        subprocess.run([_tool("javac"), "--release", release, "-Xlint:-options", "-nowarn", "-encoding", "UTF-8",
                        "-cp", os.pathsep.join(str(c) for c in classpath), "-d", str(classes), *sources], check=True)
        manifest = Path(tmp) / "MANIFEST.MF"
        manifest.write_text(f"{SOURCE_HASH_ATTRIBUTE}: {want}\n")
        built = Path(tmp) / jar.name
        subprocess.run([_tool("jar"), "--create", "--file", str(built), "--manifest", str(manifest),
                        "-C", str(classes), "."], check=True)
        jar.parent.mkdir(parents=True, exist_ok=True)
        fd, partial = tempfile.mkstemp(dir=jar.parent, prefix=f".{jar.name}.")
        os.close(fd)
        shutil.copyfile(built, partial)
        os.replace(partial, jar)
    print(f"[setup] built {jar.name} (sources {want[:12]})", file=sys.stderr, flush=True)
    return True


def ensure_udf_jar(dest: Path, source_dir: Path, pyspark_jars: Path, iceberg_jar: Path) -> bool:
    """The compiled Spark functions, against PySpark's jars and Iceberg's Spark runtime (the DataFrame producer's
    file writer uses Iceberg's own Parquet writer); True if built."""
    if not (pyspark_jars / SPARK_SQL_JAR).exists():
        raise SystemExit(f"[setup] ERROR: {pyspark_jars / SPARK_SQL_JAR} not found; is pyspark==3.5.9 installed?")
    if not iceberg_jar.exists():
        raise SystemExit(f"[setup] ERROR: {iceberg_jar} not found; the Iceberg runtime is installed before {UDF_JAR}")
    return ensure_jar(dest / UDF_JAR, source_dir, [pyspark_jars / "*", iceberg_jar], release="8")


def ensure_rest_catalog_jar(dest: Path, source_dir: Path, rest_jars: Path) -> bool:
    """The REST catalog server's loopback launcher, against the ``rest`` jar set; True if built."""
    return ensure_jar(dest / REST_CATALOG_JAR, source_dir, [rest_jars / "*"])
