#!/usr/bin/env bash
# Run the whole test suite on a fresh machine: set-up (venv, packages, every jar set), lint, types, the docs site
# (mkdocs --strict), tests. Extra arguments go to pytest (e.g. infra/test.sh -k producer -x). It runs every tier;
# the shorter loops are `pytest -m "not slow"` (before a commit) and `pytest -m "not spark" -n 2` (JVM-free).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/infra/setup.sh" --all
"$ROOT/infra/postgres-server.sh"   # best effort: server binaries for the PostgreSQL-catalog tests
cd "$ROOT"
PY="$ROOT/.venv/bin/python"
if [ "${COMPACTOR_SKIP_LINT:-0}" != "1" ]; then
  echo "[test] ruff" >&2
  "$ROOT/.venv/bin/ruff" check .
  echo "[test] mypy" >&2
  "$ROOT/.venv/bin/mypy"
  echo "[test] mkdocs build --strict" >&2   # the docs site: broken links, anchors or nav entries fail
  site=$(mktemp -d)   # not into the repository; not --quiet, which hides the warnings --strict fails on
  "$ROOT/.venv/bin/mkdocs" build --strict --site-dir "$site" || { rm -rf "$site"; exit 1; }
  rm -rf "$site"
fi
echo "[test] the test JVMs' class-data-sharing archive" >&2   # once per JVM and jar set (tests/jvm_archive.py)
"$PY" -m tests.jvm_archive
echo "[test] pytest" >&2
# The tests' temporary directories (their lakes, catalogs and servers' data) on a memory file system when it has
# room: every catalog commit, Parquet file and metadata file is written there, and SQLite's fsyncs cost nothing
# (5-8% of the wall time of a JVM-heavy subset on this disk). Each run has a folder of its own, locked while the run
# lasts (infra/test-tmpdir.sh), so that two runs on one machine cannot empty each other's folders. A passing run's
# folder is removed at its end; a failing run's is kept for a look until a later run starts. A caller's own
# --basetemp wins.
. "$ROOT/infra/test-tmpdir.sh"
test_tmpdir "/dev/shm/compactor-tests-$(id -u)" $((8 * 1024 * 1024))
BASETEMP=()
if [ -n "$TEST_TMPDIR" ]; then
  BASETEMP=(--basetemp "$TEST_TMPDIR")
  echo "[test] temporary directories in $TEST_TMPDIR (memory)" >&2
fi
# -n 2: two workers, one SparkSession each; one Kafka broker, Connect worker and REST catalog (tests/conftest.py)
status=0
"$PY" -m pytest -n 2 --durations=25 "${BASETEMP[@]}" "$@" || status=$?
if [ "$status" -eq 0 ] && [ -n "$TEST_TMPDIR" ]; then
  rm -rf "$TEST_TMPDIR" "$TEST_TMPDIR.lock"
fi
exit "$status"
