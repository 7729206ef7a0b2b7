#!/usr/bin/env bash
# Run one compactor verb on the Spark cluster: builds the spark-submit command from the lake settings
# (COMPACTOR_WAREHOUSE, COMPACTOR_CATALOG_URI, AWS_*) with `python -m compactor.deploy`, then runs it.
#   SPARK_MASTER=spark://spark-master:7077 infra/cluster/submit.sh compact shop.orders
#   infra/cluster/submit.sh --conf spark.executor.memory=2g --conf spark.executor.cores=2 clean --interval 60
# Leading --conf KEY=VALUE options are extra Spark settings. Needs spark-submit on PATH (pyspark's, from the
# virtual environment, is enough in client mode). No credential goes on any command line: the driver reads
# the S3 keys and the catalog password from the environment (COMPACTOR_CATALOG_PASSWORD is taken from
# COMPACTOR_CATALOG_URI here when the URI carries one).
# Output: standard output carries only the verb's result (`submit.sh compact T 2>/dev/null | jq .` works);
# progress, Spark's logging (WARN from the driver's first line; COMPACTOR_LOG_LEVEL or `--log-level L` before
# the verb change it) and this script's own lines go to standard error. spark-submit copies the Python
# driver's standard error into its standard output, so compactor/cli/submit.py writes Python's standard error
# to the driver JVM's instead, and the command carries the driver's log4j2 configuration.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY="${PYTHON:-$ROOT/.venv/bin/python}"
: "${SPARK_MASTER:?set SPARK_MASTER, e.g. spark://spark-master:7077}"
case "${COMPACTOR_CATALOG_URI:-}" in
  http://*|https://*) ;;  # an Iceberg REST catalog places its tables itself; COMPACTOR_WAREHOUSE is optional
  *) : "${COMPACTOR_WAREHOUSE:?set COMPACTOR_WAREHOUSE, e.g. s3://lake/warehouse}" ;;
esac
confs=()
while [ $# -gt 0 ] && [ "$1" = "--conf" ]; do
  [ $# -ge 2 ] || { echo "submit.sh: --conf needs KEY=VALUE" >&2; exit 2; }
  confs+=(--conf "$2"); shift 2
done
[ $# -gt 0 ] || { echo "usage: $0 [--conf KEY=VALUE ...] VERB [ARGS...]   (e.g. compact NAME, clean --interval 60)" >&2; exit 2; }
if [ -n "${COMPACTOR_CATALOG_URI:-}" ] && [[ "$COMPACTOR_CATALOG_URI" == *://*:*@* ]] && [ -z "${COMPACTOR_CATALOG_PASSWORD:-}" ]; then
  # decoded (%40 is @) by Python, which reads the URI from the environment, not from its arguments
  COMPACTOR_CATALOG_PASSWORD=$("$PY" -c 'import os, urllib.parse as u
print(u.unquote(u.urlsplit(os.environ["COMPACTOR_CATALOG_URI"]).password or ""), end="")')
  export COMPACTOR_CATALOG_PASSWORD
fi
command=$("$PY" -m compactor.deploy --master "$SPARK_MASTER" ${confs[@]+"${confs[@]}"} -- "$@")
export PATH="$ROOT/.venv/bin:$PATH"
echo "[submit] $command" >&2
eval "$command"
