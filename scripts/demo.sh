#!/usr/bin/env bash
# icecache at work in front of a real Iceberg catalog, in about a minute after the build:
# installs SeaweedFS and pyiceberg into .test-env (scripts/test-env.sh demo), starts the
# SeaweedFS Iceberg catalog on loopback, seeds a table, starts icecache in front of it, and shows
# what icecache does (scripts/demo.py). Everything it started stops when it ends or is
# interrupted.
#
# usage: scripts/demo.sh [--keep]   (builds icecache in release mode first)
#        ICECACHE_BIN=path/to/icecache scripts/demo.sh
#   --keep  leaves the catalog and icecache running until Ctrl-C, to keep playing
#
# The catalog and icecache listen on fixed loopback ports below 32768 (the kernel never hands
# those out on its own): 21181 and 21833 for the catalog's REST and S3 ports, 21818 and 21918
# for icecache (and 21819 for a second icecache under --credentials strip).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# shellcheck source=scripts/seaweedfs.sh
. scripts/seaweedfs.sh

keep=0
[ "${1:-}" = --keep ] && keep=1
bash scripts/test-env.sh demo
venv="$root/.test-env/venv"
bin="${ICECACHE_BIN:-}"
if [ -z "$bin" ]; then
  echo "demo: building icecache (release)…"
  cargo build --release --quiet
  bin="$root/target/release/icecache"
fi

ports=(21181 21833 21333 21080 21888 21818 21918 21819 21919 22181 22833 22333 22080 22888)
for port in "${ports[@]}"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "demo: port $port is taken; the demo needs ${ports[*]}" >&2
    exit 1
  fi
done

work=$(mktemp -d)
weed_dir=$(weed_scratch)
pids=()
stop() {
  for pid in "${pids[@]}"; do stop_process "$pid"; done
  rm -rf "$work" "$weed_dir"
}
trap stop EXIT
trap 'exit 130' INT TERM

weed_mini "$venv/bin/weed" "$weed_dir" -s3.port.iceberg=21181 -s3.port=21833 -s3.port.grpc=22833 \
  -master.port=21333 -master.port.grpc=22333 -volume.port=21080 -volume.port.grpc=22080 \
  -filer.port=21888 -filer.port.grpc=22888 -admin.port=22181 \
  >"$work/catalog.log" 2>&1 &
pids+=($!)

"$bin" --upstream http://127.0.0.1:21181 --listen 127.0.0.1:21818 \
  --admin-listen 127.0.0.1:21918 --log-level warn >"$work/icecache.log" 2>&1 &
pids+=($!)
"$bin" --upstream http://127.0.0.1:21181 --listen 127.0.0.1:21819 \
  --admin-listen 127.0.0.1:21919 --log-level warn --credentials strip \
  >"$work/icecache-strip.log" 2>&1 &
pids+=($!)

ICECACHE_DEMO_KEEP=$keep ICECACHE_S3=http://127.0.0.1:21833 "$venv/bin/python" "$root/scripts/demo.py" \
  http://127.0.0.1:21181 http://127.0.0.1:21818 http://127.0.0.1:21918 http://127.0.0.1:21819 \
  || { echo "demo: failed; the catalog's log ends:" >&2; tail -5 "$work/catalog.log" >&2; exit 1; }
if [ "$keep" = 1 ]; then
  echo "demo: running until Ctrl-C"
  wait "${pids[0]}"
fi
