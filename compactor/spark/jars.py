"""Where the Spark jars are: put in place by ``infra/setup.sh`` from Maven Central (one folder per jar set, pinned
by ``infra/jars.lock``), and the project's own compiled Spark functions (``compactor-udf.jar``, built by the
set-up from ``java/``)."""

from __future__ import annotations

import hashlib
import os
import sys
import zipfile
from pathlib import Path

from compactor.errors import MissingJarsError

# The jar sets a Spark session uses (folders of the jars directory) and their files, as infra/jars.lock pins them
# (tests/spark/test_jars.py keeps the two in step).
SPARK_SET = "spark"
S3_SET = "s3"
ICEBERG_AWS_SET = "aws"
ICEBERG_RUNTIME = "iceberg-spark-runtime-3.5_2.12-1.10.1.jar"
SQLITE_JDBC = "sqlite-jdbc-3.50.3.0.jar"
POSTGRES_JDBC = "postgresql-42.7.7.jar"
SPARK_JARS = (ICEBERG_RUNTIME, SQLITE_JDBC, POSTGRES_JDBC)
S3A_JARS = ("hadoop-aws-3.3.4.jar", "aws-java-sdk-bundle-1.12.262.jar", "wildfly-openssl-1.0.7.Final.jar")
ICEBERG_AWS_JARS = ("iceberg-aws-bundle-1.10.1.jar",)  # Iceberg's S3FileIO: a REST catalog's vended credentials
UDF_JAR = "compactor-udf.jar"
UDF_SOURCES = Path(__file__).resolve().parent / "java"
SOURCE_HASH_ATTRIBUTE = "Compactor-Source-SHA256"


def jars_dir() -> Path:
    """``COMPACTOR_JARS_DIR`` or ``<venv>/share/compactor/jars``."""
    override = os.environ.get("COMPACTOR_JARS_DIR")
    return Path(override) if override else Path(sys.prefix) / "share" / "compactor" / "jars"


def s3_jars_installed(directory: Path | None = None) -> bool:
    """Whether ``infra/setup.sh --s3`` installed the S3 jars (S3A, and Iceberg's AWS bundle)."""
    base = directory or jars_dir()
    return all((base / S3_SET / name).exists() for name in S3A_JARS) and all(
        (base / ICEBERG_AWS_SET / name).exists() for name in ICEBERG_AWS_JARS)


def required_jars(*, s3: bool, directory: Path | None = None, check: bool = True, rest: bool = False) -> list[str]:
    """Absolute paths of every jar a session needs: Iceberg's runtime, the project's functions, for S3 the S3A
    jars (and on a REST catalog Iceberg's AWS bundle, for the credentials it vends), and the SQL catalogs' JDBC
    drivers (SQLite and PostgreSQL; ``COMPACTOR_JDBC_JAR`` names another).

    ``check`` (a local session) raises a clear error naming what is missing; a ``spark-submit`` command is
    built with ``check=False`` and the jar directory of the machine that will submit it.
    """
    base = directory or jars_dir()
    override = os.environ.get("COMPACTOR_JDBC_JAR")
    drivers = [Path(override)] if override else [base / SPARK_SET / SQLITE_JDBC, base / SPARK_SET / POSTGRES_JDBC]
    wanted = [base / SPARK_SET / ICEBERG_RUNTIME, base / UDF_JAR]
    if s3:
        wanted += [base / S3_SET / name for name in S3A_JARS]
        if rest:
            wanted += [base / ICEBERG_AWS_SET / name for name in ICEBERG_AWS_JARS]
    wanted += drivers
    missing = [str(p) for p in wanted if not p.exists()]
    if check and missing:
        hint = "infra/setup.sh --s3" if s3 else "infra/setup.sh"
        raise MissingJarsError(f"Spark jars missing: {', '.join(missing)}. Run {hint} (or set COMPACTOR_JARS_DIR).")
    if check:
        check_udf_jar(base / UDF_JAR)
    return [str(p) for p in wanted]


def udf_source_hash(source_dir: Path = UDF_SOURCES) -> str | None:
    """SHA-256 over the ``.java`` files under ``source_dir`` (relative path and content, in path order), as
    ``infra/java_jars.py`` records it in the jar; ``None`` where the sources are not installed."""
    sources = sorted(source_dir.rglob("*.java"))
    if not sources:
        return None
    digest = hashlib.sha256()
    for path in sources:
        digest.update(path.relative_to(source_dir).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def jar_source_hash(jar: Path) -> str | None:
    """The source hash in ``jar``'s manifest (``None``: no jar, or none recorded)."""
    try:
        with zipfile.ZipFile(jar) as archive:
            manifest = archive.read("META-INF/MANIFEST.MF").decode("utf-8")
    except (OSError, KeyError, zipfile.BadZipFile):
        return None
    for line in manifest.replace("\r\n", "\n").replace("\n ", "").splitlines():  # unfold 72-byte lines
        name, _, value = line.partition(":")
        if name.strip() == SOURCE_HASH_ATTRIBUTE:
            return value.strip()
    return None


def check_udf_jar(jar: Path, source_dir: Path = UDF_SOURCES) -> None:
    """Refuse a ``compactor-udf.jar`` built from other sources than these (a set-up not re-run after a change):
    its functions could disagree with this code. Without installed sources there is nothing to compare."""
    want = udf_source_hash(source_dir)
    if want is not None and jar_source_hash(jar) != want:
        raise MissingJarsError(f"{jar} was built from other sources than {source_dir}: run infra/setup.sh to "
                               "rebuild it (or set COMPACTOR_JARS_DIR)")
