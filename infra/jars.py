"""Put the JVM jars this project needs in place, from Maven Central by coordinate, pinned by checksum.

Each *set* of jars is a few root coordinates that Maven resolves (with their runtime dependencies where the
set says so) into one folder, ``<dest>/<set>/``:

* ``spark``: Iceberg's Spark runtime and the JDBC drivers of the SQL catalogs (every Spark session);
* ``s3``: S3A (``hadoop-aws`` of PySpark's Hadoop client version, with the AWS SDK it was built against);
* ``aws``: Iceberg's AWS bundle (``S3FileIO`` and the AWS SDK v2 it needs), with which Spark's Iceberg reads and
  writes a REST catalog's tables with the storage credentials the catalog vends (installed with ``s3``);
* ``kafka``: Kafka's broker and tools (tests and the demo: ``infra/kafka-server.sh``);
* ``rest``: Iceberg's REST catalog test server and what it runs on (tests: ``infra/rest-catalog-server.sh``);
* ``connect``: a Kafka Connect worker (tests: ``infra/kafka-connect.sh``), and ``iceberg-sink``: Iceberg's
  Kafka Connect sink with its transforms, the plugin that worker loads.

Every jar a resolution yields must be listed in ``infra/jars.lock`` with its coordinate and SHA-256, and
nothing else may appear: a changed resolution stops the set-up instead of installing unreviewed jars
(``--update-lock`` re-pins, for a reviewed upgrade). Maven runs with its local repository in
``.cache/m2``, so a second resolution is offline. A set whose folder already holds exactly its locked jars
is not resolved again: a second run does nothing. The project's compiled Spark functions
(``compactor-udf.jar``) and the REST server's loopback launcher are built by ``infra/java_jars.py``.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from java_jars import ensure_rest_catalog_jar, ensure_udf_jar  # infra/, next to this script

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "infra" / "jars.lock"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
STAMP = ".locked"


@dataclass(frozen=True)
class JarSet:
    """Root coordinates (``group:artifact:version[:classifier]``) and whether their dependencies come along."""

    roots: tuple[str, ...]
    transitive: bool
    why: str


ICEBERG = "1.10.1"  # every Iceberg artifact (1.10.2 is served only in part); pyiceberg 0.12 reads and writes its tables
KAFKA = "4.1.1"
HADOOP = "3.3.4"  # PySpark 3.5.9's hadoop-client-api / hadoop-client-runtime
SQLITE_JDBC = "org.xerial:sqlite-jdbc:3.50.3.0"
POSTGRES_JDBC = "org.postgresql:postgresql:42.7.7"

SETS: dict[str, JarSet] = {
    "spark": JarSet((f"org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:{ICEBERG}", SQLITE_JDBC, POSTGRES_JDBC),
                    transitive=False, why="every Spark session: Iceberg's runtime, the SQL catalogs' JDBC drivers"),
    "s3": JarSet((f"org.apache.hadoop:hadoop-aws:{HADOOP}",), transitive=True,
                 why="S3A for s3:// warehouses (with the AWS SDK bundle hadoop-aws was built against)"),
    "aws": JarSet((f"org.apache.iceberg:iceberg-aws-bundle:{ICEBERG}",), transitive=False,
                  why="Iceberg's S3FileIO for Spark: a REST catalog's vended storage credentials"),
    "kafka": JarSet((f"org.apache.kafka:kafka_2.13:{KAFKA}", "org.apache.logging.log4j:log4j-slf4j-impl:2.24.3"),
                    transitive=True, why="a Kafka broker for tests and the demo"),
    "rest": JarSet((f"org.apache.iceberg:iceberg-open-api:{ICEBERG}:test-fixtures",
                    f"org.apache.iceberg:iceberg-core:{ICEBERG}:tests",
                    f"org.apache.iceberg:iceberg-core:{ICEBERG}",
                    "org.eclipse.jetty:jetty-servlet:11.0.25",
                    f"org.apache.hadoop:hadoop-client-api:{HADOOP}",
                    f"org.apache.hadoop:hadoop-client-runtime:{HADOOP}",
                    "org.slf4j:slf4j-simple:2.0.17",
                    SQLITE_JDBC),
                   transitive=True, why="Iceberg's REST catalog test server, for tests"),
    "connect": JarSet((f"org.apache.kafka:connect-runtime:{KAFKA}", "org.apache.logging.log4j:log4j-slf4j-impl:2.24.3"),
                      transitive=True, why="a Kafka Connect worker, for tests"),
    "iceberg-sink": JarSet((f"org.apache.iceberg:iceberg-kafka-connect:{ICEBERG}",
                            f"org.apache.iceberg:iceberg-kafka-connect-transforms:{ICEBERG}",
                            f"org.apache.iceberg:iceberg-parquet:{ICEBERG}",
                            f"org.apache.hadoop:hadoop-client-api:{HADOOP}",
                            f"org.apache.hadoop:hadoop-client-runtime:{HADOOP}",
                            SQLITE_JDBC, POSTGRES_JDBC),
                           transitive=True, why="Iceberg's Kafka Connect sink (a Connect plugin), for tests"),
}


@dataclass(frozen=True)
class Locked:
    """One pinned jar: its set, coordinate, file name and SHA-256."""

    set_name: str
    coordinate: str
    filename: str
    sha256: str

    def line(self) -> str:
        return "\t".join((self.set_name, self.coordinate, self.filename, self.sha256))


def log(message: str) -> None:
    print(f"[setup] {message}", file=sys.stderr, flush=True)


def fail(message: str) -> SystemExit:
    return SystemExit(f"[setup] ERROR: {message}")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_lock(path: Path = LOCK) -> dict[str, list[Locked]]:
    """The lock file: ``set<TAB>coordinate<TAB>file<TAB>sha256`` per line (``#`` comments)."""
    out: dict[str, list[Locked]] = {}
    if not path.exists():
        return out
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 4:
            raise fail(f"{path}:{number}: expected 4 tab-separated fields, got {len(fields)}")
        entry = Locked(*fields)
        out.setdefault(entry.set_name, []).append(entry)
    return out


def write_lock(entries: dict[str, list[Locked]], path: Path = LOCK) -> None:
    lines = ["# Every JVM jar infra/jars.py installs: set, Maven coordinate, file name, SHA-256.",
             "# Generated by `infra/jars.py --update-lock`; review the changes before committing them."]
    for name in sorted(entries):
        lines += [e.line() for e in sorted(entries[name], key=lambda e: e.filename)]
    path.write_text("\n".join(lines) + "\n")


def stamp_of(entries: list[Locked]) -> str:
    return hashlib.sha256("\n".join(sorted(e.line() for e in entries)).encode()).hexdigest()


def installed(folder: Path, entries: list[Locked]) -> bool:
    """Whether ``folder`` holds exactly ``entries`` (as recorded when they were verified and installed)."""
    stamp = folder / STAMP
    if not entries or not stamp.exists() or stamp.read_text().strip() != stamp_of(entries):
        return False
    present = {p.name for p in folder.glob("*.jar")}
    return present == {e.filename for e in entries}


def _dependency_xml(coordinate: str, transitive: bool) -> str:
    parts = coordinate.split(":")
    if len(parts) not in (3, 4):
        raise fail(f"not a Maven coordinate: {coordinate}")
    group, artifact, version = (escape(p) for p in parts[:3])
    classifier = f"<classifier>{escape(parts[3])}</classifier>" if len(parts) == 4 else ""
    exclusions = "" if transitive else ("<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId>"
                                        "</exclusion></exclusions>")
    return (f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId><version>{version}"
            f"</version>{classifier}{exclusions}</dependency>")


def resolve(name: str, jar_set: JarSet, repo: Path) -> tuple[Path, list[Locked]]:
    """Resolve ``jar_set`` with Maven into a temporary folder (repository layout): the folder and its jars."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise fail("Maven ('mvn') is missing: apt-get install maven (infra/setup.sh does this as root)")
    work = Path(tempfile.mkdtemp(prefix=f"jars-{name}-"))
    deps = "".join(_dependency_xml(c, jar_set.transitive) for c in jar_set.roots)
    (work / "pom.xml").write_text(
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        f"<groupId>local.compactor</groupId><artifactId>jars-{name}</artifactId><version>1</version>"
        f"<packaging>pom</packaging><dependencies>{deps}</dependencies></project>")
    out = work / "out"
    command = [mvn, "-B", "-q", f"-Dmaven.repo.local={repo}", "-f", str(work / "pom.xml"),
               f"{DEPENDENCY_PLUGIN}:copy-dependencies", f"-DoutputDirectory={out}", "-DincludeScope=runtime",
               "-Dmdep.useRepositoryLayout=true", "-Dmdep.copyPom=false"]
    log(f"resolving the '{name}' jars with Maven ({', '.join(jar_set.roots)})")
    done = subprocess.run(command, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        detail = "\n".join(line for line in (done.stdout + done.stderr).splitlines() if "ERROR" in line)[-2000:]
        raise fail(f"Maven could not resolve the '{name}' jars (is Maven Central reachable?):\n{detail}")
    found: list[Locked] = []
    for jar in sorted(out.rglob("*.jar")):
        version_dir = jar.parent
        artifact, group = version_dir.parent.name, ".".join(version_dir.parent.parent.relative_to(out).parts)
        coordinate = f"{group}:{artifact}:{version_dir.name}"
        stem = f"{artifact}-{version_dir.name}"
        if jar.stem != stem and jar.stem.startswith(stem + "-"):
            coordinate += ":" + jar.stem[len(stem) + 1:]
        found.append(Locked(name, coordinate, jar.name, sha256_of(jar)))
    return work, found


def ensure_set(name: str, dest: Path, repo: Path, locked: list[Locked], *, update_lock: bool) -> list[Locked]:
    """Install set ``name`` into ``dest/<name>`` unless it is there already; returns its (verified) entries."""
    folder = dest / name
    if not update_lock and installed(folder, locked):
        return locked
    work, found = resolve(name, SETS[name], repo)
    try:
        if not update_lock:
            check_against_lock(name, found, locked)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=dest))
        for entry in found:
            source = next(work.rglob(entry.filename))
            shutil.copyfile(source, staging / entry.filename)
        (staging / STAMP).write_text(stamp_of(found) + "\n")
        old = dest / f".{name}.old"
        shutil.rmtree(old, ignore_errors=True)
        if folder.exists():
            folder.rename(old)
        staging.rename(folder)  # the folder is either the old set or the whole new one, never a mix
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    size = sum((folder / e.filename).stat().st_size for e in found) / 1e6
    log(f"installed {len(found)} '{name}' jars ({size:.0f} MB) in {folder}")
    return found


def check_against_lock(name: str, found: list[Locked], locked: list[Locked]) -> None:
    if not locked:
        raise fail(f"infra/jars.lock has no '{name}' jars: run infra/jars.py --update-lock and review the result")
    want = {e.filename: e for e in locked}
    got = {e.filename: e for e in found}
    problems = [f"unexpected {f} ({got[f].coordinate})" for f in sorted(set(got) - set(want))]
    problems += [f"missing {f} ({want[f].coordinate})" for f in sorted(set(want) - set(got))]
    problems += [f"{f}: SHA-256 {got[f].sha256}, pinned {want[f].sha256}"
                 for f in sorted(set(got) & set(want)) if got[f].sha256 != want[f].sha256]
    if problems:
        raise fail(f"the '{name}' jars Maven resolved differ from infra/jars.lock: " + "; ".join(problems))


def pyspark_jars_dir() -> Path:
    import pyspark  # the venv's pyspark: the compiled functions build against its jars

    return Path(pyspark.__file__).parent / "jars"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, required=True, help="directory that receives one folder per set")
    parser.add_argument("--cache", type=Path, required=True, help="Maven's local repository (an ignored folder)")
    parser.add_argument("--set", dest="sets", action="append", choices=sorted(SETS), default=[],
                        help="a set to install besides 'spark' (repeatable)")
    parser.add_argument("--update-lock", action="store_true",
                        help="resolve every set again and rewrite infra/jars.lock (review the diff)")
    parser.add_argument("--java-src", type=Path, default=ROOT / "compactor" / "spark" / "java",
                        help="the compiled Spark functions' Java sources")
    args = parser.parse_args()
    args.dest.mkdir(parents=True, exist_ok=True)
    lock = read_lock()
    wanted = sorted(SETS) if args.update_lock else ["spark", *sorted(set(args.sets) - {"spark"})]
    for name in wanted:
        lock[name] = ensure_set(name, args.dest, args.cache.resolve(), lock.get(name, []),
                                update_lock=args.update_lock)
    if args.update_lock:
        write_lock(lock)
        log(f"wrote {LOCK}")
    runtime = next(args.dest / "spark" / e.filename for e in lock["spark"]
                   if e.coordinate.startswith("org.apache.iceberg:iceberg-spark-runtime"))
    ensure_udf_jar(args.dest, args.java_src, pyspark_jars_dir(), runtime)
    if "rest" in wanted:
        ensure_rest_catalog_jar(args.dest, ROOT / "infra" / "rest", args.dest / "rest")


if __name__ == "__main__":
    main()
