#!/usr/bin/env bash
# Run one compactor verb on the Spark cluster: builds the spark-submit command from the lake settings
# (COMPACTOR_WAREHOUSE, COMPACTOR_CATALOG_URI, AWS_*) with `python -m compactor.deploy`, then runs it.
#   SPARK_MASTER=spark://spark-master:7077 infra/cluster/submit.sh compact shop.orders
#   infra/cluster/submit.sh clean --interval 60
# Needs spark-submit on PATH (pyspark's, from the virtual environment, is enough in client mode).
# Output: standard output carries only the verb's result (`submit.sh compact T 2>/dev/null | jq .` works);
# progress, Spark's logging (WARN from the driver's first line; COMPACTOR_LOG_LEVEL or `--log-level L` before
# the verb change it) and this script's own lines go to standard error. spark-submit copies the Python
# driver's standard error into its standard output, so compactor/cli/submit.py writes Python's standard error
# to the driver JVM's instead, and the command carries the driver's log4j2 configuration.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY="${PYTHON:-$ROOT/.venv/bin/python}"
: "${SPARK_MASTER:?set SPARK_MASTER, e.g. spark://spark-master:7077}"
: "${COMPACTOR_WAREHOUSE:?set COMPACTOR_WAREHOUSE, e.g. s3://lake/warehouse}"
[ $# -gt 0 ] || { echo "usage: $0 VERB [ARGS...]   (e.g. compact NAME, clean --interval 60)" >&2; exit 2; }
command=$("$PY" -m compactor.deploy --master "$SPARK_MASTER" --warehouse "$COMPACTOR_WAREHOUSE" \
  ${COMPACTOR_CATALOG_URI:+--catalog-uri "$COMPACTOR_CATALOG_URI"} -- "$@")
if [ -n "${COMPACTOR_CATALOG_URI:-}" ] && [[ "$COMPACTOR_CATALOG_URI" == *://*:*@* ]]; then
  pass=${COMPACTOR_CATALOG_URI#*://}; pass=${pass%@*}; export COMPACTOR_CATALOG_PASSWORD=${pass#*:}
fi
export PATH="$ROOT/.venv/bin:$PATH"
echo "[submit] $command" | sed 's/secret[^ ]*/***/g' >&2
eval "$command"
