"""A class-data-sharing archive for the tests' Spark JVMs: ``python -m tests.jvm_archive`` (``infra/test.sh`` runs it
before pytest) makes it once, and ``TEST_JVM_OPTIONS`` (tests/conftest.py) points every test JVM at it.

Most of a fresh Spark JVM's start is loading and verifying classes: about 7 s from ``python`` to the first job's
result in a new process, of which the archive saves about 2.4 s (measured on the 2-core machine, C1 only). The
suite starts dozens of such JVMs (CLI and ``spark-submit`` subprocesses, the two workers' sessions), so the
archive is made by running the product once in a JVM that writes the classes it loaded at exit
(``-XX:ArchiveClassesAtExit``): a small topic produced, compacted twice and read back through Spark.

The archive holds the classes of one JVM build and class path. A JVM whose build or class path differs (the Kafka
broker, the standalone cluster's daemons, a test's own ``SPARK_CONF_DIR``) ignores it and starts as it would
without; ``-Xlog:cds=off`` keeps that silent, so no test output changes. It changes speed only: nothing a test
checks depends on it, and the tests run the same without it (the options are added only when it exists).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHIVE = ROOT / ".venv" / "share" / "compactor" / "jvm" / "test-classes.jsa"
KEY_FILE = ARCHIVE.with_suffix(".key")
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # a JVM that cannot use the archive says so on standard output
BASE_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"  # the tests' JVM options without the archive

WORKLOAD = """
import sys
import pyarrow as pa
from compactor.compaction.job import TwoPhaseCompactor
from compactor.lake import Lake
from compactor.producing.producer import produce_arrow
from readers.spark import read_topic_dataframe

lake = Lake(warehouse=sys.argv[1])
lake.open(create=True)
topic = lake.create_topic("archive.t", partitions=2, config={"cleanup.policy": "compact"})
for n in range(2):
    produce_arrow(topic, pa.table({"key": [f"k{i % 7}".encode() for i in range(50)],
                                   "value": [f"v{n}-{i}".encode() for i in range(50)]}))
    TwoPhaseCompactor(lake, "archive.t", now_ms=1_800_000_000_000 + n).run()
read_topic_dataframe(lake, "archive.t", read_compacted=True).collect()
lake.spark().stop()
"""


def key() -> str:
    """What the archive depends on: the JVM build, Spark's jars (the driver's class path) and the product's jars
    (``spark.jars``: loaded by Spark's own class loader, so not archived, but part of what the JVM loads)."""
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=True).stderr
    import pyspark

    jars = sorted(Path(pyspark.__file__).parent.joinpath("jars").glob("*.jar"))
    extra = sorted(Path(os.environ.get("COMPACTOR_JARS_DIR", ROOT / ".venv" / "share" / "compactor" / "jars"))
                   .rglob("*.jar"))  # the product's jars, in subfolders per set
    text = "\n".join([java, sys.executable, *(f"{j.name} {j.stat().st_size}" for j in [*jars, *extra])])
    return hashlib.sha256(text.encode()).hexdigest()


def options() -> str:
    """The JVM options that use the archive, if it has been made; else none."""
    return f"-XX:SharedArchiveFile={ARCHIVE} {QUIET}" if ARCHIVE.is_file() else ""


def make() -> None:
    """Make the archive unless one for this JVM and these jars exists (then do nothing)."""
    wanted = key()
    if ARCHIVE.is_file() and KEY_FILE.is_file() and KEY_FILE.read_text() == wanted:
        print(f"[jvm-archive] up to date: {ARCHIVE}", file=sys.stderr)
        return
    ARCHIVE.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    partial = ARCHIVE.with_suffix(".partial")  # beside the archive: replaced by a rename on one file system
    with tempfile.TemporaryDirectory(prefix="jvm-archive-") as work:
        env = {**os.environ, "PYTHONPATH": str(ROOT),
               "SPARK_SUBMIT_OPTS": f"{BASE_OPTIONS} -XX:ArchiveClassesAtExit={partial} {QUIET}"}
        for name in [k for k in env if k.startswith(("COMPACTOR_", "PYICEBERG_")) and k != "COMPACTOR_JARS_DIR"]:
            del env[name]
        done = subprocess.run([sys.executable, "-c", WORKLOAD, str(Path(work) / "warehouse")], env=env,
                              capture_output=True, text=True, check=False)
        if done.returncode != 0 or not partial.is_file():
            print(f"[jvm-archive] not made (the tests run without it, slower): exit {done.returncode}\n"
                  f"{done.stderr[-2000:]}", file=sys.stderr)
            return
    os.replace(partial, ARCHIVE)
    KEY_FILE.write_text(wanted)
    print(f"[jvm-archive] made {ARCHIVE} ({ARCHIVE.stat().st_size / 1e6:.0f} MB) in "
          f"{time.monotonic() - started:.0f}s", file=sys.stderr)


if __name__ == "__main__":
    make()
