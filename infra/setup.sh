#!/usr/bin/env bash
# Set up everything the project needs on a fresh machine that has Python 3.11 and Java 17: a virtual
# environment with pinned Python packages, and the JVM jars from Maven Central by coordinate, pinned by SHA-256
# in infra/jars.lock (infra/jars.py; Maven and the JDK's javac come from Debian if missing), and the project's
# compiled Spark functions.
#
# Usage: infra/setup.sh [--s3] [--kafka] [--rest] [--connect] [--all]
#   --s3      also the S3A jars (hadoop-aws, the AWS SDK bundle; ~280 MB), needed for s3:// warehouses, and
#             Iceberg's AWS bundle (~63 MB: S3FileIO, for a REST catalog's vended storage credentials)
#   --kafka   also a Kafka broker's jars (infra/kafka-server.sh: tests and the demo)
#   --rest    also Iceberg's REST catalog test server (infra/rest-catalog-server.sh: tests)
#   --connect also a Kafka Connect worker with Iceberg's sink (infra/kafka-connect.sh: tests)
#   --all     all of the above (the test suite's set-up)
#
# Idempotent: every step checks a stamp and does nothing when it is already done.
# Environment: PYTHON (interpreter to build the venv from), COMPACTOR_VENV (default ./.venv).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${COMPACTOR_VENV:-$ROOT/.venv}
JAR_SETS=()
for arg in "$@"; do
  case "$arg" in
    --s3) JAR_SETS+=(--set s3 --set aws) ;;
    --kafka|--rest) JAR_SETS+=(--set "${arg#--}") ;;
    --connect) JAR_SETS+=(--set connect --set iceberg-sink) ;;
    --all) JAR_SETS+=(--set s3 --set aws --set kafka --set rest --set connect --set iceberg-sink) ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "setup: unknown argument '$arg' (expected --s3, --kafka, --rest, --connect or --all)" >&2; exit 2 ;;
  esac
done

say() { printf '[setup] %s\n' "$*" >&2; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

# --- Python 3.11 ---------------------------------------------------------------------------
find_python() {
  local candidate
  for candidate in "${PYTHON:-}" python3.11 python3; do
    [ -n "$candidate" ] || continue
    command -v "$candidate" >/dev/null 2>&1 || continue
    if "$candidate" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' 2>/dev/null; then
      command -v "$candidate"
      return 0
    fi
  done
  return 1
}
PY=$(find_python) || die "Python 3.11 is required (found: $(python3 --version 2>&1 || echo none)). Install python3.11 or set PYTHON=/path/to/python3.11."

# --- Java 17 ---------------------------------------------------------------------------------
JAVA_BIN=java
[ -n "${JAVA_HOME:-}" ] && JAVA_BIN="$JAVA_HOME/bin/java"
command -v "$JAVA_BIN" >/dev/null 2>&1 || die "Java 17 is required and no 'java' was found. Install it (Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME."
JAVA_MAJOR=$("$JAVA_BIN" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1)
[ "$JAVA_MAJOR" = "17" ] || die "Java 17 is required for Spark 3.5 here; '$JAVA_BIN' is version '${JAVA_MAJOR:-unknown}'. Set JAVA_HOME to a Java 17 installation."

# --- Debian packages: Maven (resolves the jars) and the JDK's javac (builds the project's own jars) ----
missing=()
command -v mvn >/dev/null 2>&1 || missing+=(maven)
if ! { [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/javac" ]; } && ! command -v javac >/dev/null 2>&1; then
  missing+=(openjdk-17-jdk-headless)
fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    say "installing Debian packages: ${missing[*]}"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    say "installing Debian packages with sudo: ${missing[*]}"
    sudo apt-get update -qq >/dev/null
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    die "missing Debian packages: ${missing[*]}. Install them as root: apt-get install ${missing[*]}"
  fi
fi

# --- Virtual environment and pinned Python packages -----------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  say "creating virtual environment $VENV"
  "$PY" -m venv "$VENV"
fi
STAMP_DIR="$VENV/.compactor-setup"
mkdir -p "$STAMP_DIR"
want=$(cat "$ROOT/pyproject.toml" "$ROOT/infra/constraints.txt" | sha256sum | cut -d' ' -f1)
have=$(cat "$STAMP_DIR/python-packages" 2>/dev/null || true)
if [ "$want" != "$have" ]; then
  say "installing Python packages (pinned by infra/constraints.txt)"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade "pip>=24" 
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    -c "$ROOT/infra/constraints.txt" -e "$ROOT[dev]"
  echo "$want" > "$STAMP_DIR/python-packages"
fi
# The project's own modules as bytecode. pip compiles the packages it installs, but the editable install leaves
# the repository's modules to each process, which compiles them again whenever it may not cache them (as under
# PYTHONDONTWRITEBYTECODE): about 0.1 s of every command's start. compileall recompiles only what changed.
"$VENV/bin/python" -m compileall -q -j 0 "$ROOT/compactor" "$ROOT/readers" "$ROOT/tests" "$ROOT/bench" >/dev/null \
  || say "could not compile the repository's modules (a read-only checkout?): each process compiles them itself"

# --- JVM jars from Maven Central (pinned in infra/jars.lock), and the project's own jars -------------
"$VENV/bin/python" "$ROOT/infra/jars.py" --dest "$VENV/share/compactor/jars" \
  --cache "$ROOT/.cache/m2" "${JAR_SETS[@]}"
