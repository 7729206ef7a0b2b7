#!/usr/bin/env bash
# Start a Kafka Connect worker in standalone mode (Kafka's ConnectStandalone, from the jars that
# `infra/setup.sh --connect` takes from Maven Central) with Iceberg's Kafka Connect sink and its transforms as
# its one plugin, against the broker at BOOTSTRAP. Its REST API listens on 127.0.0.1 and a free port; its
# configuration, source offsets and logs are in DIR. Connectors are created through the REST API
# (POST /connectors), as on any Connect worker.
#
# Usage: infra/kafka-connect.sh DIR --bootstrap BOOTSTRAP [--config KEY=VALUE ...]
#   --config: worker settings added to (or overriding) the defaults below.
# Environment: CONNECT_JAVA_OPTS (JVM options; default -Xmx512m).
#
# Once the REST API answers, prints `url=http://127.0.0.1:PORT` as its first line of standard output, writes its
# process id to DIR/connect.pid and returns. Stop it with: kill "$(cat DIR/connect.pid)".
#
# Plugins are found through their ServiceLoader manifests (`plugin.discovery=service_load`), which Iceberg's sink
# and transforms carry, not by scanning every class of every plugin jar: the worker is up in about 1.8 s instead
# of 6.2 s. A plugin without manifests needs `--config plugin.discovery=hybrid_warn`.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage() { sed -n '2,13p' "$0" >&2; exit 2; }
[ $# -ge 1 ] || usage
case "$1" in -h|--help) usage ;; esac
DIR=$1; shift
BOOTSTRAP=
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bootstrap) [ $# -ge 2 ] || usage; BOOTSTRAP=$2; shift 2 ;;
    --config) [ $# -ge 2 ] && [[ "$2" == *=* ]] || usage; EXTRA+=("$2"); shift 2 ;;
    *) echo "kafka-connect: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ -n "$BOOTSTRAP" ] || usage
JARS=${COMPACTOR_JARS_DIR:-$ROOT/.venv/share/compactor/jars}
if [ ! -d "$JARS/connect" ] || [ ! -d "$JARS/iceberg-sink" ]; then
  echo "kafka-connect: the Kafka Connect jars are missing in $JARS: run infra/setup.sh --connect" >&2
  exit 1
fi
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
if [ -f "$DIR/connect.pid" ] && kill -0 "$(cat "$DIR/connect.pid")" 2>/dev/null; then
  echo "kafka-connect: a worker already runs for $DIR (process $(cat "$DIR/connect.pid"))" >&2
  exit 1
fi
rm -f "$DIR/connect.pid"
mkdir -p "$DIR/logs" "$DIR/plugins"
ln -sfn "$JARS/iceberg-sink" "$DIR/plugins/iceberg-sink"   # one plugin: its own class loader
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat > "$DIR/worker.properties" <<PROPS
bootstrap.servers=$BOOTSTRAP
listeners=http://127.0.0.1:$PORT
rest.advertised.host.name=127.0.0.1
rest.advertised.port=$PORT
plugin.path=$DIR/plugins
offset.storage.file.filename=$DIR/connect.offsets
offset.flush.interval.ms=1000
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
value.converter.schemas.enable=false
plugin.discovery=service_load
PROPS
for setting in "${EXTRA[@]}"; do
  key=${setting%%=*}
  grep -v "^$key=" "$DIR/worker.properties" > "$DIR/worker.properties.new" || true
  echo "$setting" >> "$DIR/worker.properties.new"
  mv "$DIR/worker.properties.new" "$DIR/worker.properties"
done
cat > "$DIR/log4j2.properties" <<PROPS
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = $DIR/logs/connect.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
logger.clients.name = org.apache.kafka.clients
logger.clients.level = warn
PROPS
JAVA_OPTS=(-Xmx512m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC "-Dlog4j2.configurationFile=$DIR/log4j2.properties")
# shellcheck disable=SC2206 # CONNECT_JAVA_OPTS is a list of options
[ -n "${CONNECT_JAVA_OPTS:-}" ] && JAVA_OPTS+=(${CONNECT_JAVA_OPTS})
setsid java "${JAVA_OPTS[@]}" -cp "$JARS/connect/*" org.apache.kafka.connect.cli.ConnectStandalone \
  "$DIR/worker.properties" > "$DIR/logs/stdout.log" 2>&1 < /dev/null &
pid=$!
echo "$pid" > "$DIR/connect.pid"
for _ in $(seq 1 1200); do
  if grep -q "Kafka Connect started" "$DIR/logs/connect.log" 2>/dev/null \
      && (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
    echo "url=http://127.0.0.1:$PORT"
    exit 0
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "kafka-connect: the worker exited; the end of its logs:" >&2
    tail -n 20 "$DIR/logs/stdout.log" "$DIR/logs/connect.log" >&2 2>/dev/null || true
    rm -f "$DIR/connect.pid"
    exit 1
  fi
  sleep 0.1
done
echo "kafka-connect: the worker did not start within 120 s; see $DIR/logs" >&2
kill "$pid" 2>/dev/null || true
rm -f "$DIR/connect.pid"
exit 1
