#!/bin/bash
# Instructions (user space) per request on the hit path, counted by callgrind: the same figure
# every run, whatever else the machine does. One worker, the 50 KB fixture upstream, 2,000
# keep-alive requests after 50 of warm-up.
#
# usage: bash benches/instructions.sh [304|hit] [N] [ICECACHE_BINARY]
#        FLOOR=fixed|hyper bash benches/instructions.sh [304|hit] [N]
#   FLOOR measures the load benchmark's floor server instead (`benches/floor_server.rs`: fixed
#   bytes, or the same answers through hyper's HTTP/1.1 server), under the same callgrind setup.
#        VARY=1 bash benches/instructions.sh [304|hit] [N]
#   each request carries a field of its own (`X-Trace: <n>`): no two heads on the connection
#   are the same, so none is answered from what an earlier one derived.
#        BUS=1 bash benches/instructions.sh [304|hit] [N]
#   also counts locked (atomic read-modify-write) instructions per request (callgrind's global
#   bus events): with two workers, each one on a counter both write moves a cache line between
#   the cores.
# needs: valgrind (apt-get install valgrind), python3, cargo
set -euo pipefail
MODE=${1:-304}; N=${2:-2000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
bench_binary() {
  cargo bench --bench "$1" --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import sys, json
for line in sys.stdin:
    m = json.loads(line)
    if m.get("executable") and m["target"]["name"] == sys.argv[1]: print(m["executable"])' "$1"
}
FIXTURE=$(bench_binary fixture_server)
FLOOR_SERVER=$(bench_binary floor_server)
# After the bench binaries: building those builds icecache again with the dev-dependencies'
# features (tokio's test clock) at target/release/icecache, which this build replaces.
cargo build --release --quiet
BIN=${3:-$ROOT/target/release/icecache}
WORK=$(mktemp -d)
BUS_ARG=(); [ -n "${BUS:-}" ] && BUS_ARG=(--collect-bus=yes)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$WORK"' EXIT
python3 benches/make_metadata.py 51200 "$WORK/body.json"
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
UP=$(port); LISTEN=$(port); ADMIN=$(port)
"$FIXTURE" "127.0.0.1:$UP" "$WORK/body.json" '"fixture-v1"' 0 >/dev/null 2>&1 &
case "${FLOOR:-}" in
  "")
    valgrind --tool=callgrind "${BUS_ARG[@]}" --instr-atstart=no --callgrind-out-file="$WORK/cg.out" "$BIN" \
      --upstream "http://127.0.0.1:$UP" --listen "127.0.0.1:$LISTEN" \
      --admin-listen "127.0.0.1:$ADMIN" --log-level warn --fresh-for 1h --workers 1 \
      >/dev/null 2>&1 &
    READY="http://127.0.0.1:$ADMIN/healthz" ;;
  fixed|hyper)
    MODE_ARG=(); [ "$FLOOR" = hyper ] && MODE_ARG=(hyper)
    valgrind --tool=callgrind "${BUS_ARG[@]}" --instr-atstart=no --callgrind-out-file="$WORK/cg.out" \
      "$FLOOR_SERVER" "127.0.0.1:$LISTEN" "$WORK/body.json" '"fixture-v1"' \
      "${MODE_ARG[@]}" >/dev/null 2>&1 &
    READY="http://127.0.0.1:$LISTEN/" ;;
  *) echo "FLOOR must be fixed or hyper" >&2; exit 64 ;;
esac
VPID=$!
for _ in $(seq 1 150); do curl -s -o /dev/null "$READY" && break; sleep 0.2; done
python3 - "$MODE" "$N" "$VPID" "$LISTEN" "${VARY:-}" <<'PY'
import http.client, subprocess, sys
mode, n, pid, port = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
vary = sys.argv[5] == "1"
c = http.client.HTTPConnection("127.0.0.1", port)
h = {"Authorization": "Bearer benchmark-token"}
path = "/v1/warehouse/namespaces/db/tables/events"
c.request("GET", path, headers=h); r = c.getresponse(); r.read()
if mode == "304":
    h["If-None-Match"] = r.getheader("ETag")
for _ in range(50):
    c.request("GET", path, headers=h); c.getresponse().read()
subprocess.run(["callgrind_control", "-i", "on", pid], capture_output=True, check=True)
for i in range(n):
    if vary:
        h["X-Trace"] = str(i)
    c.request("GET", path, headers=h); r = c.getresponse(); r.read()
    assert r.status == (304 if mode == "304" else 200), r.status
subprocess.run(["callgrind_control", "-i", "off", pid], capture_output=True, check=True)
subprocess.run(["callgrind_control", "-d", pid], capture_output=True, check=True)
PY
sleep 0.5
kill "$VPID"; wait "$VPID" 2>/dev/null || true
# CALLGRIND_KEEP=DIR keeps the profiles (callgrind_annotate --inclusive=yes DIR/cg.out*).
if [ -n "${CALLGRIND_KEEP:-}" ]; then mkdir -p "$CALLGRIND_KEEP" && cp "$WORK"/cg.out* "$CALLGRIND_KEEP"/; fi
TOTAL=0; LOCKED=0
for f in "$WORK"/cg.out*; do
  T=$(callgrind_annotate "$f" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  [[ "$T" =~ ^[0-9]+$ ]] || T=0
  TOTAL=$((TOTAL + T))
  if [ -n "${BUS:-}" ]; then
    G=$(callgrind_annotate --show=Ge "$f" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
    [[ "$G" =~ ^[0-9]+$ ]] || G=0
    LOCKED=$((LOCKED + G))
  fi
done
echo "$MODE${FLOOR:+ (floor: $FLOOR)}${VARY:+ (a field of its own per request)}: $((TOTAL / N)) instructions/request (user space, N=$N)"
if [ -n "${BUS:-}" ]; then
  echo "  locked instructions: $(python3 -c "print(f'{$LOCKED / $N:.1f}')")/request"
fi
