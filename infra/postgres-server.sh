#!/usr/bin/env bash
# Best effort: install Debian's PostgreSQL server binaries (not a running service) so the test suite can
# start a throwaway server for the PostgreSQL-catalog tests. Without root or apt it does nothing and says
# so; those tests then skip with that reason. Never fails the caller.
set -uo pipefail
if compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "[setup] PostgreSQL server binaries not installed (needs root and apt-get); PostgreSQL-catalog tests will skip" >&2
  exit 0
fi
echo "[setup] installing the PostgreSQL server binaries (Debian 'postgresql', no cluster, no service)" >&2
mkdir -p /etc/postgresql-common
[ -e /etc/postgresql-common/createcluster.conf ] || echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.conf
POLICY=/usr/sbin/policy-rc.d
CREATED_POLICY=0
if [ ! -e "$POLICY" ]; then printf '#!/bin/sh\nexit 101\n' > "$POLICY"; chmod +x "$POLICY"; CREATED_POLICY=1; fi
( apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null ) \
  || echo "[setup] could not install PostgreSQL; PostgreSQL-catalog tests will skip" >&2
[ "$CREATED_POLICY" = "1" ] && rm -f "$POLICY"
exit 0
