#!/usr/bin/env bash
# Start a single-node Kafka broker (KRaft, broker and controller in one process) from the jars that
# `infra/setup.sh --kafka` takes from Maven Central, with its data, configuration and logs in DIR, bound to
# 127.0.0.1 on free ports. Its storage is formatted by Kafka's own tool (kafka.tools.StorageTool).
#
# Usage: infra/kafka-server.sh DIR [--config KEY=VALUE ...]
#   --config: broker settings added to (or overriding) the defaults below, e.g. log.cleaner.backoff.ms=200.
# Environment: KAFKA_JAVA_OPTS (JVM options; default -Xmx512m); KAFKA_SASL_PLAIN_USERS=USER:PASSWORD[,...]
#   also opens a SASL_PLAINTEXT listener (mechanism PLAIN) that accepts those users (from the environment, so no
#   password is on a command line), and prints `sasl_bootstrap=127.0.0.1:PORT` as the second line.
#
# Once the broker accepts connections, prints `bootstrap=127.0.0.1:PORT` as its first line of standard output,
# writes its process id to DIR/kafka.pid and returns. Stop it with: kill "$(cat DIR/kafka.pid)".
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage() { sed -n '2,11p' "$0" >&2; exit 2; }
[ $# -ge 1 ] || usage
case "$1" in -h|--help) usage ;; esac
DIR=$1; shift
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --config) [ $# -ge 2 ] && [[ "$2" == *=* ]] || usage; EXTRA+=("$2"); shift 2 ;;
    *) echo "kafka-server: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
JARS=${COMPACTOR_JARS_DIR:-$ROOT/.venv/share/compactor/jars}
if [ ! -d "$JARS/kafka" ]; then
  echo "kafka-server: the Kafka jars are missing in $JARS: run infra/setup.sh --kafka" >&2
  exit 1
fi
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
if [ -f "$DIR/kafka.pid" ] && kill -0 "$(cat "$DIR/kafka.pid")" 2>/dev/null; then
  echo "kafka-server: a broker already runs for $DIR (process $(cat "$DIR/kafka.pid"))" >&2
  exit 1
fi
rm -f "$DIR/kafka.pid"
mkdir -p "$DIR/data" "$DIR/logs"
read -r PORT CONTROLLER_PORT SASL_PORT < <(python3 - <<'PY'
import socket
sockets = [socket.socket() for _ in range(3)]
for s in sockets:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in sockets))
PY
)
cat > "$DIR/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$DIR/data
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.retention.check.interval.ms=1000
log.cleaner.backoff.ms=1000
num.network.threads=2
num.io.threads=2
background.threads=2
PROPS
if [ -n "${KAFKA_SASL_PLAIN_USERS:-}" ]; then
  USERS=""
  IFS=, read -r -a PAIRS <<< "$KAFKA_SASL_PLAIN_USERS"
  for pair in "${PAIRS[@]}"; do
    [[ "$pair" == *:* ]] || { echo "kafka-server: KAFKA_SASL_PLAIN_USERS expects USER:PASSWORD[,...]" >&2; exit 2; }
    USERS+=" user_${pair%%:*}=\"${pair#*:}\""
  done
  sed -i -e "s|^listeners=.*|&,SASL_PLAINTEXT://127.0.0.1:$SASL_PORT|" \
         -e "s|^advertised.listeners=.*|&,SASL_PLAINTEXT://127.0.0.1:$SASL_PORT|" \
         -e "s|^listener.security.protocol.map=.*|&,SASL_PLAINTEXT:SASL_PLAINTEXT|" "$DIR/server.properties"
  cat >> "$DIR/server.properties" <<PROPS
sasl.enabled.mechanisms=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required$USERS;
PROPS
  chmod 600 "$DIR/server.properties"
fi
for setting in "${EXTRA[@]}"; do
  key=${setting%%=*}
  grep -v "^$key=" "$DIR/server.properties" > "$DIR/server.properties.new" || true
  echo "$setting" >> "$DIR/server.properties.new"
  mv "$DIR/server.properties.new" "$DIR/server.properties"
done
cat > "$DIR/log4j2.properties" <<PROPS
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = $DIR/logs/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
logger.kafka.name = org.apache.kafka
logger.kafka.level = warn
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = info
logger.cleaner2.name = org.apache.kafka.storage.internals.log.LogCleaner
logger.cleaner2.level = info
PROPS
JAVA_OPTS=(-Xmx512m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC "-Dlog4j2.configurationFile=$DIR/log4j2.properties"
           "-Dkafka.logs.dir=$DIR/logs")
# shellcheck disable=SC2206 # KAFKA_JAVA_OPTS is a list of options
[ -n "${KAFKA_JAVA_OPTS:-}" ] && JAVA_OPTS+=(${KAFKA_JAVA_OPTS})
if [ ! -f "$DIR/data/meta.properties" ]; then
  # Kafka's own form of a random id (base64url of 16 bytes), never starting with "-" as Kafka's Uuid.randomUuid
  # also ensures: one id in 64 would otherwise start with it and read as an option
  CLUSTER_ID=$(python3 -c 'import base64, uuid
while (i := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"): pass
print(i)')
  java "${JAVA_OPTS[@]}" -cp "$JARS/kafka/*" kafka.tools.StorageTool format --standalone \
    --cluster-id="$CLUSTER_ID" --config "$DIR/server.properties" > "$DIR/logs/format.log" 2>&1 \
    || { echo "kafka-server: formatting the storage failed:" >&2; cat "$DIR/logs/format.log" >&2; exit 1; }
fi
setsid java "${JAVA_OPTS[@]}" -cp "$JARS/kafka/*" kafka.Kafka "$DIR/server.properties" \
  > "$DIR/logs/stdout.log" 2>&1 < /dev/null &
pid=$!
echo "$pid" > "$DIR/kafka.pid"
for _ in $(seq 1 900); do
  if grep -q "Kafka Server started" "$DIR/logs/server.log" 2>/dev/null \
      && (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
    echo "bootstrap=127.0.0.1:$PORT"
    [ -z "${KAFKA_SASL_PLAIN_USERS:-}" ] || echo "sasl_bootstrap=127.0.0.1:$SASL_PORT"
    exit 0
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "kafka-server: the broker exited; the end of its logs:" >&2
    tail -n 20 "$DIR/logs/stdout.log" "$DIR/logs/server.log" >&2 2>/dev/null || true
    rm -f "$DIR/kafka.pid"
    exit 1
  fi
  sleep 0.1
done
echo "kafka-server: the broker did not start within 90 s; see $DIR/logs" >&2
kill "$pid" 2>/dev/null || true
rm -f "$DIR/kafka.pid"
exit 1
