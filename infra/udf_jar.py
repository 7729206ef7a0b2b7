"""Build the project's compiled Spark functions (``compactor/spark/java``) into ``compactor-udf.jar``.

Kafka's murmur2 partitioner and the DataFrame producer's per-task row positions are Java classes compiled with
the JDK's ``javac`` against PySpark's own jars (no Maven), then packed with ``jar``. The jar's manifest records
the SHA-256 of the sources (``Compactor-Source-SHA256``): a run whose sources match the installed jar does
nothing, a changed source rebuilds it, and the session factory refuses a jar built from other sources.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from compactor.spark.jars import ICEBERG_RUNTIME, SOURCE_HASH_ATTRIBUTE, jar_source_hash, udf_source_hash

UDF_JAR = "compactor-udf.jar"
# the sources compile against PySpark's own jars (pyspark/jars/*, Spark SQL's API and what it refers to)
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


def ensure_udf_jar(dest: Path, source_dir: Path, pyspark_jars: Path, iceberg_jar: Path | None = None) -> bool:
    """Compile and pack the jar into ``dest`` unless it is already built from these sources; True if built.

    The sources compile against PySpark's jars and Iceberg's Spark runtime (``iceberg_jar``, by default the one
    the set-up put in ``dest``): the DataFrame producer's file writer uses Iceberg's own Parquet writer."""
    want = source_hash(source_dir)
    jar = dest / UDF_JAR
    if jar_source_hash(jar) == want:
        return False
    sources = sorted(str(p) for p in source_dir.rglob("*.java"))
    if not sources:
        raise SystemExit(f"[setup] ERROR: no Java sources under {source_dir}")
    if not (pyspark_jars / SPARK_SQL_JAR).exists():
        raise SystemExit(f"[setup] ERROR: {pyspark_jars / SPARK_SQL_JAR} not found; is pyspark==3.5.9 installed?")
    iceberg = iceberg_jar or dest / ICEBERG_RUNTIME
    if not iceberg.exists():
        raise SystemExit(f"[setup] ERROR: {iceberg} not found; the Iceberg runtime is installed before {UDF_JAR}")
    with tempfile.TemporaryDirectory() as tmp:
        classes = Path(tmp) / "classes"
        subprocess.run([_tool("javac"), "--release", "8", "-Xlint:-options", "-nowarn", "-encoding", "UTF-8",
                        "-cp", os.pathsep.join((str(pyspark_jars / "*"), str(iceberg))), "-d", str(classes),
                        *sources], check=True)
        manifest = Path(tmp) / "MANIFEST.MF"
        manifest.write_text(f"{SOURCE_HASH_ATTRIBUTE}: {want}\n")
        built = Path(tmp) / UDF_JAR
        subprocess.run([_tool("jar"), "--create", "--file", str(built), "--manifest", str(manifest),
                        "-C", str(classes), "."], check=True)
        dest.mkdir(parents=True, exist_ok=True)
        fd, partial = tempfile.mkstemp(dir=dest, prefix=f".{UDF_JAR}.")
        os.close(fd)
        shutil.copyfile(built, partial)
        os.replace(partial, jar)
    print(f"[setup] built {UDF_JAR} (compiled Spark functions, sources {want[:12]})", file=sys.stderr, flush=True)
    return True
