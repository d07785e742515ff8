#!/usr/bin/env bash
# loadTable latency against a real SeaweedFS catalog: direct, through icecache with the cache
# off (pure proxy cost), through icecache revalidating every request (a miss: one upstream
# call each), and through icecache from memory (a hit). Loopback only; bounded by N requests.
#   bash benches/latency.sh [N]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
n=${1:-2000}
bash scripts/test-env.sh
cargo build --release --quiet
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

AWS_ACCESS_KEY_ID=admin AWS_SECRET_ACCESS_KEY=adminsecret .test-env/venv/bin/weed mini \
  -dir="$work/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 -tableBucket=warehouse -admin.ui=false \
  -webdav=false -s3.port.lance=0 -master.telemetry=false >"$work/catalog.log" 2>&1 &
pids+=($!)
catalog=http://127.0.0.1:8181
for _ in $(seq 1 120); do
  token=$(curl -sf -X POST "$catalog/v1/oauth/tokens" \
    -d 'grant_type=client_credentials&client_id=admin&client_secret=adminsecret' 2>/dev/null |
    sed -n 's/.*"access_token":"\([^"]*\)".*/\1/p') || true
  if [ -n "${token:-}" ] && curl -sf -H "Authorization: Bearer $token" "$catalog/v1/warehouse/namespaces" >/dev/null 2>&1; then break; fi
  sleep 0.5
done
.test-env/venv/bin/python tests/py/iceberg_client.py "$catalog" append bench events 1000 >/dev/null

start_icecache() {  # name port admin-port flags...
  local port=$2 admin=$3; shift 3
  ./target/release/icecache --upstream "$catalog" --listen "127.0.0.1:$port" \
    --admin-listen "127.0.0.1:$admin" --log-level warn "$@" &
  pids+=($!)
  for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$admin/healthz" >/dev/null && return; sleep 0.05; done
}
start_icecache off 28181 29181 --cache-enabled false
start_icecache miss 28182 29182 --fresh-for 0s
start_icecache hit 28183 29183

echo "loadTable of a table with one snapshot; $n sequential requests per target; $(nproc) cores"
.test-env/venv/bin/python benches/latency.py "$n" "$token" /v1/warehouse/namespaces/bench/tables/events \
  "direct (SeaweedFS)=$catalog" \
  "icecache, cache off=http://127.0.0.1:28181" \
  "icecache, every load a miss=http://127.0.0.1:28182" \
  "icecache, hit=http://127.0.0.1:28183"
