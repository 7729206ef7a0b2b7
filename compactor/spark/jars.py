"""Where the Spark jars are: put in place by ``infra/setup.sh`` (from PyPI artifacts; Maven is unreachable)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from compactor.errors import MissingJarsError

ICEBERG_RUNTIME = "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
SHADED_JACKSON = "iceberg-shaded-jackson-2.15.2.jar"
S3A_JARS = ("hadoop-aws-3.3.1.jar", "aws-java-sdk-bundle-1.11.901.jar")
SQLITE_JDBC = "/usr/share/java/sqlite-jdbc.jar"
POSTGRES_JDBC = "/usr/share/java/postgresql.jar"


def jars_dir() -> Path:
    """``COMPACTOR_JARS_DIR`` or ``<venv>/share/compactor/jars``."""
    override = os.environ.get("COMPACTOR_JARS_DIR")
    return Path(override) if override else Path(sys.prefix) / "share" / "compactor" / "jars"


def required_jars(*, s3: bool, postgres: bool, directory: Path | None = None, check: bool = True) -> list[str]:
    """Absolute paths of every jar a session needs: Iceberg's runtime and its relocated Jackson, the JDBC
    driver of the catalog, and for S3 the S3A jars.

    ``check`` (a local session) raises a clear error naming what is missing; a ``spark-submit`` command is
    built with ``check=False`` and the jar directory of the machine that will submit it.
    """
    base = directory or jars_dir()
    wanted = [base / ICEBERG_RUNTIME, base / SHADED_JACKSON]
    if s3:
        wanted += [base / name for name in S3A_JARS]
    wanted.append(Path(os.environ.get("COMPACTOR_JDBC_JAR", POSTGRES_JDBC if postgres else SQLITE_JDBC)))
    missing = [str(p) for p in wanted if not p.exists()]
    if check and missing:
        hint = "infra/setup.sh --s3" if s3 else "infra/setup.sh"
        raise MissingJarsError(f"Spark jars missing: {', '.join(missing)}. Run {hint} (or set COMPACTOR_JARS_DIR).")
    return [str(p) for p in wanted]
