#!/usr/bin/env bash
# Builds the rustberg 0.3.0 Iceberg REST catalog (a real catalog that sends ETags and answers
# 304) once, into ~/.cache/icecache/rustberg. A debug build: about 5 minutes on 2 cores, where
# its release profile (fat LTO) takes 15-25; the tests ask it for a handful of tables.
set -euo pipefail
root="${ICECACHE_RUSTBERG_ROOT:-$HOME/.cache/icecache/rustberg}"
if [ -x "$root/bin/rustberg" ]; then
  echo "rustberg already built: $root/bin/rustberg"
  exit 0
fi
cargo install rustberg --version 0.3.0 --locked --debug --root "$root"
echo "built: $root/bin/rustberg"
