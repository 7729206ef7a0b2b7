"""The compiled Spark functions' jar: built by the set-up with javac from ``compactor/spark/java``,
rebuilt only when the sources change, and refused by the session factory when built from other sources."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

from compactor.errors import MissingJarsError
from compactor.spark import jars

ROOT = Path(__file__).resolve().parents[2]


def infra_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("java_jars", ROOT / "infra" / "java_jars.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["java_jars"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # javac twice (two JVMs); the jar the set-up built is checked by every Spark test's session
@pytest.mark.skipif(shutil.which("javac") is None, reason="needs the JDK's javac (infra/setup.sh installs it)")
def test_the_jar_is_built_once_and_again_when_a_source_changes(tmp_path: Path) -> None:
    udf_jar = infra_module()
    import pyspark

    sources = tmp_path / "java"
    shutil.copytree(jars.UDF_SOURCES, sources)
    spark_jars = Path(pyspark.__file__).parent / "jars"
    dest = tmp_path / "jars"
    iceberg = jars.jars_dir() / jars.SPARK_SET / jars.ICEBERG_RUNTIME  # the writer compiles against Iceberg's
    assert udf_jar.source_hash(sources) == jars.udf_source_hash(sources) == jars.udf_source_hash()
    assert udf_jar.ensure_udf_jar(dest, sources, spark_jars, iceberg) is True
    built = dest / jars.UDF_JAR
    assert jars.jar_source_hash(built) == jars.udf_source_hash(sources)
    stamp = built.stat().st_mtime_ns
    assert udf_jar.ensure_udf_jar(dest, sources, spark_jars, iceberg) is False  # a second run builds nothing
    assert built.stat().st_mtime_ns == stamp
    jars.check_udf_jar(built, sources)
    changed = sources / "compactor" / "udf" / "Murmur2Partition.java"
    changed.write_text(changed.read_text() + "\n// changed\n")
    with pytest.raises(MissingJarsError, match=r"run infra/setup\.sh to rebuild it"):
        jars.check_udf_jar(built, sources)  # built from other sources than these
    assert udf_jar.ensure_udf_jar(dest, sources, spark_jars, iceberg) is True
    jars.check_udf_jar(built, sources)


def test_a_session_needs_the_jar(tmp_path: Path) -> None:
    required = jars.required_jars(s3=False, directory=tmp_path, check=False)
    assert str(tmp_path / jars.UDF_JAR) in required
    with pytest.raises(MissingJarsError, match=r"compactor-udf\.jar.*infra/setup\.sh"):
        jars.required_jars(s3=False, directory=tmp_path)
