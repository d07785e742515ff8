#!/usr/bin/env bash
# Fuzzes everything icecache parses from the network or from users (fuzz/fuzz_targets/), each
# target for SECONDS (default 60), with cargo-fuzz and libFuzzer. New interesting inputs join
# fuzz/corpus/TARGET/, minimised afterwards; commit them: tests/it/fuzz_findings.rs replays the
# corpus in the normal suite. A crash leaves its input in fuzz/artifacts/TARGET/.
#   ./scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
shift || true
targets=("$@")
[ "${#targets[@]}" -gt 0 ] || targets=(route if_none_match key strip config event)
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
cd "$root/fuzz"
# cargo-fuzz passes nightly-only flags (sanitizers); this stable toolchain accepts them so.
export RUSTC_BOOTSTRAP=1
for target in "${targets[@]}"; do
  echo "== $target (${seconds}s)"
  cargo fuzz run "$target" "corpus/$target" -- -max_total_time="$seconds" -max_len=65536 \
    -print_final_stats=1
  cargo fuzz cmin "$target" "corpus/$target" >/dev/null 2>&1
done
