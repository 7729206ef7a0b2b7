#!/usr/bin/env bash
# Start Iceberg's REST catalog test server (Iceberg's own RESTCatalogServer adapter, the one the
# apache/iceberg-rest-fixture image runs) on 127.0.0.1 and a free port, with its state in DIR: the catalog
# database DIR/catalog.db (SQLite), its log DIR/rest.log, and by default the warehouse DIR/warehouse.
#
# Usage: infra/rest-catalog-server.sh DIR [--warehouse W]
#   W: a local directory or s3://bucket/prefix (S3 takes AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
#      AWS_SECRET_ACCESS_KEY, AWS_REGION; needs `infra/setup.sh --s3`).
# Environment: REST_CATALOG_TOKEN (a bearer token every request must carry), REST_CATALOG_CLIENT_ID and
# REST_CATALOG_CLIENT_SECRET (OAuth2 client credentials exchanged for it), REST_CATALOG_READ_TOKEN (a token
# that may only read), CATALOG_<NAME> (catalog properties: CATALOG_INCLUDE__CREDENTIALS=true vends the S3
# credentials to clients), REST_CATALOG_JAVA_OPTS. Faults for tests: see infra/rest/.../LoopbackRestCatalog.java.
#
# Once the server answers, prints `uri=http://127.0.0.1:PORT/` as its first line of standard output, writes its
# process id to DIR/rest.pid and returns. Stop it with: kill "$(cat DIR/rest.pid)".
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage() { sed -n '2,17p' "$0" >&2; exit 2; }
[ $# -ge 1 ] || usage
case "$1" in -h|--help) usage ;; esac
DIR=$1; shift
WAREHOUSE=
while [ $# -gt 0 ]; do
  case "$1" in
    --warehouse) [ $# -ge 2 ] || usage; WAREHOUSE=$2; shift 2 ;;
    *) echo "rest-catalog-server: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
WAREHOUSE=${WAREHOUSE:-$DIR/warehouse}
JARS=${COMPACTOR_JARS_DIR:-$ROOT/.venv/share/compactor/jars}
if [ ! -d "$JARS/rest" ] || [ ! -f "$JARS/compactor-rest-catalog.jar" ]; then
  echo "rest-catalog-server: the REST catalog jars are missing in $JARS: run infra/setup.sh --rest" >&2
  exit 1
fi
CLASSPATH="$JARS/rest/*:$JARS/compactor-rest-catalog.jar"
# S3A first: Iceberg's core test jar (the fixture's home) carries a test copy of S3ABlockOutputStream that does not
# match hadoop-aws's other classes
case "$WAREHOUSE" in s3://*|s3a://*) CLASSPATH="$JARS/s3/*:$CLASSPATH" ;; esac
if [ -f "$DIR/rest.pid" ] && kill -0 "$(cat "$DIR/rest.pid")" 2>/dev/null; then
  echo "rest-catalog-server: a server already runs for $DIR (process $(cat "$DIR/rest.pid"))" >&2
  exit 1
fi
rm -f "$DIR/rest.port" "$DIR/rest.pid"
# shellcheck disable=SC2086 # REST_CATALOG_JAVA_OPTS is a list of options
setsid java -Xmx256m -XX:TieredStopAtLevel=1 ${REST_CATALOG_JAVA_OPTS:-} -cp "$CLASSPATH" \
  org.apache.iceberg.rest.LoopbackRestCatalog "$DIR" "$WAREHOUSE" >"$DIR/rest.log" 2>&1 </dev/null &
pid=$!
echo "$pid" > "$DIR/rest.pid"
for _ in $(seq 1 600); do
  if [ -s "$DIR/rest.port" ]; then
    echo "uri=http://127.0.0.1:$(cat "$DIR/rest.port")/"
    exit 0
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "rest-catalog-server: the server exited; the end of $DIR/rest.log:" >&2
    tail -n 20 "$DIR/rest.log" >&2
    rm -f "$DIR/rest.pid"
    exit 1
  fi
  sleep 0.1
done
echo "rest-catalog-server: no answer after 60 s; see $DIR/rest.log" >&2
kill "$pid" 2>/dev/null || true
rm -f "$DIR/rest.pid"
exit 1
