#!/usr/bin/env bash
# Builds the rustberg 0.3.0 Iceberg REST catalog (a real catalog that sends ETags and answers
# 304) once, into ~/.cache/icecache/rustberg. It takes 15-25 minutes on 2 cores, so the test
# suite does not build it: tests that need it run when it is there and skip, saying so, when not.
set -euo pipefail
root="${ICECACHE_RUSTBERG_ROOT:-$HOME/.cache/icecache/rustberg}"
if [ -x "$root/bin/rustberg" ]; then
  echo "rustberg already built: $root/bin/rustberg"
  exit 0
fi
# Its release profile uses fat LTO; without it the build is several minutes shorter.
CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
  CARGO_PROFILE_RELEASE_OPT_LEVEL=1 \
  cargo install rustberg --version 0.3.0 --locked --root "$root"
echo "built: $root/bin/rustberg"
