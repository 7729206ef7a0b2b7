"""The JVM jars: taken from Maven Central by coordinate, pinned by SHA-256 in infra/jars.lock, installed once."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from compactor.spark import jars as spark_jars

ROOT = Path(__file__).resolve().parents[2]


def infra_jars() -> ModuleType:
    sys.path.insert(0, str(ROOT / "infra"))  # infra/jars.py imports infra/java_jars.py as a sibling
    try:
        spec = importlib.util.spec_from_file_location("infra_jars", ROOT / "infra" / "jars.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "infra"))


def test_the_session_jars_are_the_pinned_ones() -> None:
    """The file names the Spark session asks for are those infra/jars.lock pins, and every pinned jar is named
    by a Maven coordinate with its SHA-256 (nothing taken from unrelated packages)."""
    lock = infra_jars().read_lock()
    assert {e.filename for e in lock["spark"]} == set(spark_jars.SPARK_JARS)
    assert {e.filename for e in lock["s3"]} == set(spark_jars.S3A_JARS)
    assert {e.filename for e in lock["aws"]} == set(spark_jars.ICEBERG_AWS_JARS)
    assert set(lock) == {"spark", "s3", "aws", "kafka", "rest", "connect", "iceberg-sink"}
    for entries in lock.values():
        for entry in entries:
            assert len(entry.coordinate.split(":")) in (3, 4) and len(entry.sha256) == 64
    coordinates = {e.coordinate for entries in lock.values() for e in entries}
    assert "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.1" in coordinates
    assert "org.apache.hadoop:hadoop-aws:3.3.4" in coordinates  # PySpark 3.5.9's Hadoop client version
    assert any(c.startswith("org.apache.kafka:kafka_2.13:4.") for c in coordinates)


def test_a_resolution_that_differs_from_the_lock_is_refused() -> None:
    module = infra_jars()
    locked = [module.Locked("spark", "g:a:1", "a-1.jar", "0" * 64),
              module.Locked("spark", "g:b:1", "b-1.jar", "1" * 64)]
    module.check_against_lock("spark", list(locked), locked)  # the same: accepted
    changed = [module.Locked("spark", "g:a:1", "a-1.jar", "2" * 64),
               module.Locked("spark", "g:c:1", "c-1.jar", "3" * 64)]
    with pytest.raises(SystemExit) as refused:
        module.check_against_lock("spark", changed, locked)
    message = str(refused.value)
    assert "unexpected c-1.jar (g:c:1)" in message and "missing b-1.jar (g:b:1)" in message
    assert "a-1.jar: SHA-256 " + "2" * 64 in message
    with pytest.raises(SystemExit, match="no 'kafka' jars"):
        module.check_against_lock("kafka", changed, [])


def test_a_set_is_installed_only_when_its_folder_differs_from_the_lock(tmp_path: Path) -> None:
    module = infra_jars()
    entries = [module.Locked("kafka", "g:a:1", "a-1.jar", "0" * 64)]
    folder = tmp_path / "kafka"
    folder.mkdir()
    assert not module.installed(folder, entries)  # no stamp yet
    (folder / "a-1.jar").write_bytes(b"jar")
    (folder / module.STAMP).write_text(module.stamp_of(entries) + "\n")
    assert module.installed(folder, entries)
    (folder / "stray-2.jar").write_bytes(b"jar")
    assert not module.installed(folder, entries)  # a jar the lock does not name
    (folder / "stray-2.jar").unlink()
    assert not module.installed(folder, [*entries, module.Locked("kafka", "g:b:1", "b-1.jar", "1" * 64)])


def test_a_second_set_up_run_does_nothing() -> None:
    """The installed sets match the lock: running the jar step again resolves nothing and builds nothing."""
    done = subprocess.run([sys.executable, str(ROOT / "infra" / "jars.py"), "--dest", str(spark_jars.jars_dir()),
                           "--cache", str(ROOT / ".cache" / "m2"), *(a for name in ("s3", "kafka", "rest", "connect",
                                                                             "iceberg-sink") for a in ("--set", name))],
                          check=False, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and done.stderr == ""
