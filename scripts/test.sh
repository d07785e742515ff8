#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what the tests need (scripts/test-env.sh:
# SeaweedFS, pyiceberg, DuckDB, PyYAML, pyspark, iceberg-js; scripts/java-env.sh: the Iceberg
# Java client, the reference catalog and Spark's Iceberg jars from Maven Central; promtool,
# systemd-analyze, redis-server and nats-server from Debian; the rustberg catalog built from
# crates.io into ~/.cache/icecache), starts the real catalog once on loopback, runs `cargo test`
# and the Rust-client crate, and stops what it started.
# Every test must run: one that cannot fails (ICECACHE_TEST_REQUIRE_ALL), and the closing line
# counts what ran.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# shellcheck source=scripts/seaweedfs.sh
. scripts/seaweedfs.sh

bash scripts/test-env.sh
bash scripts/java-env.sh
ICECACHE_TRINO_HOME=$(bash scripts/trino-env.sh)
export ICECACHE_TRINO_HOME
if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
apt_updated=""
apt_update() { [ -n "$apt_updated" ] || { $sudo apt-get update -qq; apt_updated=1; }; }
if ! command -v promtool >/dev/null 2>&1; then
  echo "test.sh: installing promtool (Debian package prometheus)"
  apt_update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi

if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "test.sh: installing systemd-analyze (Debian package systemd)"
  apt_update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends systemd >/dev/null
fi

if ! command -v redis-server >/dev/null 2>&1; then
  echo "test.sh: installing redis-server (Debian package redis-server; the tests start their own)"
  apt_update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends redis-server >/dev/null
fi

if ! command -v nats-server >/dev/null 2>&1 && [ ! -x /usr/sbin/nats-server ]; then
  echo "test.sh: installing nats-server (Debian package nats-server, with JetStream; the tests start their own)"
  apt_update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends nats-server >/dev/null
fi
export ICECACHE_NATS_SERVER="$(command -v nats-server || echo /usr/sbin/nats-server)"

# rustberg, the one catalog here that sends ETags and answers 304: built once, then cached.
bash scripts/build-rustberg.sh
export ICECACHE_RUSTBERG="${ICECACHE_RUSTBERG_ROOT:-$HOME/.cache/icecache/rustberg}/bin/rustberg"

catalog_port=8181
if (exec 3<>"/dev/tcp/127.0.0.1/$catalog_port") 2>/dev/null; then
  echo "test.sh: port $catalog_port is taken; SeaweedFS needs it (stop what holds it)" >&2
  exit 1
fi
work=$(mktemp -d)
# What the tests and the servers they start leave in the temporary directory goes with the run.
mkdir "$work/tmp"
export TMPDIR="$work/tmp"
# SeaweedFS's volumes, this run's and those of the tests that start a weed of their own.
weed_dir=$(weed_scratch)
export ICECACHE_TEST_WEED_DIR="$weed_dir"
catalog_pid=""
cleanup() {
  if [ -n "$catalog_pid" ]; then stop_process "$catalog_pid"; fi
  rm -rf "$work" "$weed_dir"
}
trap cleanup EXIT

weed_mini "$root/.test-env/venv/bin/weed" "$weed_dir" >"$work/catalog.log" 2>&1 &
catalog_pid=$!
ready() {
  local token
  token=$(curl -sf -X POST "http://127.0.0.1:$catalog_port/v1/oauth/tokens" \
    -d 'grant_type=client_credentials&client_id=admin&client_secret=adminsecret' 2>/dev/null |
    sed -n 's/.*"access_token":"\([^"]*\)".*/\1/p') || return 1
  # The table bucket appears a moment after the REST port answers.
  [ -n "$token" ] && curl -sf -H "Authorization: Bearer $token" \
    "http://127.0.0.1:$catalog_port/v1/warehouse/namespaces" >/dev/null 2>&1
}
for _ in $(seq 1 120); do
  if ready; then break; fi
  if ! kill -0 "$catalog_pid" 2>/dev/null; then
    echo "test.sh: SeaweedFS exited; its log:" >&2; cat "$work/catalog.log" >&2; exit 1
  fi
  sleep 0.5
done
ready || {
  echo "test.sh: SeaweedFS did not start; its log:" >&2; cat "$work/catalog.log" >&2; exit 1; }
weed_room http://127.0.0.1:9333 "$weed_dir" || exit 1

export ICECACHE_TEST_CATALOG="http://127.0.0.1:$catalog_port"
export ICECACHE_TEST_S3="http://127.0.0.1:8333"
# A plain bucket beside SeaweedFS's table bucket, for the reference catalog's warehouse.
export ICECACHE_TEST_S3_BUCKET=icecache-reference
curl -sf -o /dev/null --aws-sigv4 "aws:amz:us-east-1:s3" --user admin:adminsecret \
  -X PUT "$ICECACHE_TEST_S3/$ICECACHE_TEST_S3_BUCKET" || {
  echo "test.sh: could not create the S3 bucket $ICECACHE_TEST_S3_BUCKET" >&2; exit 1; }
export ICECACHE_TEST_REQUIRE_ALL=1
export ICECACHE_TEST_SKIPS="$work/skips"
# A test that hangs fails the run, with what the run printed (the tests still running are named
# there), instead of holding it until CI gives up. `timeout` stops the whole process group.
suite_seconds=${ICECACHE_TEST_TIMEOUT:-3000}
bounded() {
  local seconds=$1 status=0
  shift
  timeout --kill-after=30 "$seconds" "$@" </dev/null 2>&1 | tee -a "$work/test.log" || status=$?
  if [ "$status" = 124 ]; then
    echo "test.sh: \`$*\` ran past $seconds s and was stopped" >&2
  fi
  return "$status"
}
bounded "$suite_seconds" cargo test --locked "$@"

# The Apache Iceberg Rust client, a crate of its own (about 300 dependencies, built once into a
# cached target directory). Run with the whole suite, not when arguments pick some tests.
if [ "$#" -eq 0 ]; then
  ICECACHE_BIN="$root/target/debug/icecache" \
    CARGO_TARGET_DIR="${ICECACHE_RUST_CLIENT_TARGET:-$HOME/.cache/icecache/rust-client-target}" \
    bounded 1800 cargo test --locked --manifest-path tests/rust-client/Cargo.toml
fi

# The newcomer's demo (scripts/demo.sh), once, non-interactive, with the binary just built: it
# must show each thing it promises.
demo=0
if [ "$#" -eq 0 ]; then
  ICECACHE_BIN="$root/target/debug/icecache" bash scripts/demo.sh >"$work/demo.log" 2>&1 || {
    echo "test.sh: scripts/demo.sh failed:" >&2; cat "$work/demo.log" >&2; exit 1; }
  for shown in "x-cache: MISS" "x-cache: HIT" " 304 " "commit seen" "hit ratio" "no secret"; do
    grep -qF -- "$shown" "$work/demo.log" || {
      echo "test.sh: scripts/demo.sh did not show \"$shown\":" >&2; cat "$work/demo.log" >&2; exit 1; }
  done
  echo "test.sh: scripts/demo.sh ran and showed MISS, HIT, 304, a commit seen, the hit ratio and strip"
  demo=1
fi

# The compatibility matrix in docs/compatibility.md, from what this whole run recorded.
if [ "$#" -eq 0 ]; then
  python3 scripts/compatibility.py
fi

# One closing line for the whole run (every cargo test above has already succeeded; a test
# that could not run failed it, so nothing was skipped unless the file below says so).
passed=$(awk '/^test result: ok\./ { sum += $4 } END { print sum + 0 }' "$work/test.log")
ignored=$(awk '/^test result: ok\./ { sum += $8 } END { print sum + 0 }' "$work/test.log")
# Tests that returned early because something was missing (cargo counts them as passed).
early=0
if [ -f "$work/skips" ]; then early=$(wc -l < "$work/skips"); fi
echo "icecache: $(( passed - early + demo )) passed, $(( early + ignored )) skipped, 0 failed"
