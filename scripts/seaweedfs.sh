# SeaweedFS (`weed mini`) for the suite and the demo: where its volumes live, how it starts,
# whether it has room to write, and how it stops. Sourced by scripts/test.sh and scripts/demo.sh.
#
# weed mini sizes its volume slots from the free space it sees when it starts and refuses every
# write (S3 answers 500, "no volume server capacity") once the slots are gone or its disk is under
# 1% free. A build that fills the disk must not decide whether the catalog can write, so its
# volumes go to tmpfs when there is room there.

# The smallest volume weed mini picks on its own: more slots from the same free space (the
# tests write kilobytes per table).
WEED_VOLUME_MB=64
# Free volume slots below which the catalog is not started at all.
WEED_MIN_FREE_SLOTS=16

# weed_scratch: prints a new directory for weed's data. Under $ICECACHE_WEED_DIR when set; else
# on /dev/shm when it has 2 GiB available; else under $TMPDIR.
weed_scratch() {
  if [ -n "${ICECACHE_WEED_DIR:-}" ]; then
    mktemp -d "$ICECACHE_WEED_DIR/icecache-weed.XXXXXX"
    return
  fi
  local avail
  if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    avail=$(df -Pk /dev/shm | awk 'NR == 2 { print $4 }')
    if [ "${avail:-0}" -ge $((2 * 1024 * 1024)) ]; then
      mktemp -d /dev/shm/icecache-weed.XXXXXX
      return
    fi
  fi
  mktemp -d
}

# weed_mini WEED DIR [FLAG...]: becomes `weed mini` on loopback with its data under DIR, the
# suite's S3 keys (admin / adminsecret) and table bucket (warehouse), in WEED_VOLUME_MB volumes;
# FLAGs add to or override these (ports). Run it in the background: its pid is weed's.
weed_mini() {
  local weed=$1 dir=$2
  shift 2
  AWS_ACCESS_KEY_ID=admin AWS_SECRET_ACCESS_KEY=adminsecret exec "$weed" mini -dir="$dir/data" \
    -ip=127.0.0.1 -ip.bind=127.0.0.1 -tableBucket=warehouse -admin.ui=false -webdav=false \
    -s3.port.lance=0 -master.telemetry=false -master.volumeSizeLimitMB="$WEED_VOLUME_MB" "$@"
}

# weed_room MASTER_URL DIR: fails, saying why, when the master has fewer than
# WEED_MIN_FREE_SLOTS free volume slots for data under DIR.
weed_room() {
  local master=$1 dir=$2 free
  free=$(curl -sf "$master/dir/status" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["Topology"]["Free"])' 2>/dev/null) || {
    echo "SeaweedFS's master at $master did not say how many volume slots it has" >&2
    return 1
  }
  if [ "$free" -lt "$WEED_MIN_FREE_SLOTS" ]; then
    echo "SeaweedFS has $free free volume slots for $dir (it needs $WEED_MIN_FREE_SLOTS;" \
      "$(df -Ph "$dir" | awk 'NR == 2 { print $4 }') available there): free some space," \
      "or point ICECACHE_WEED_DIR at a file system with room" >&2
    return 1
  fi
}

# stop_process PID: SIGTERM, then SIGKILL when it has not exited within 15 s (weed mini can hang
# in its shutdown after a volume store failed), then reaps it.
stop_process() {
  local pid=$1 _
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 30); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
