#!/usr/bin/env bash
# Run the demo on the embedded default (local Spark, a warehouse directory, a SQLite catalog):
# create a topic, produce records, compact it with the Spark job, and read it raw and compacted.
# Extra arguments go to the demo (see: infra/demo.sh --help).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/infra/setup.sh"
cd "$ROOT"
exec "$ROOT/.venv/bin/python" -m compactor.demo "$@"
