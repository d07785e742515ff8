#!/usr/bin/env bash
# How soon a write made past icecache is served through it: the suite's two event tests, run
# alone (one test at a time, release build, nothing else of the suite beside them) for ROUNDS
# rounds of 100 commits each, with what each round saw:
# - SeaweedFS's filer webhook: from a direct commit's answer to the new table served;
# - Lakekeeper's updateTable on NATS: from the publish to the new table served.
# The tests assert only that every change is seen; the latency is measured here.
#   bash benches/events_latency.sh [ROUNDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rounds=${1:-3}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for round in $(seq 1 "$rounds"); do
  bash scripts/test.sh --release --test events_seaweedfs --test events_nats -- \
    --test-threads=1 --nocapture --exact \
    a_direct_commit_is_seen_and_without_events_it_is_not \
    an_update_on_nats_is_applied_in_both_namespace_encodings >"$log" 2>&1 ||
    { cat "$log" >&2; exit 1; }
  grep -oE '(seen after a direct commit|applied after publish): .*' "$log" |
    sed "s/^/round $round: /"
done
