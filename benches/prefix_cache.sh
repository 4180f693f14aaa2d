#!/usr/bin/env bash
# The prefix cache on a batch whose rows share a prompt prefix: the 16 labelled reviews, one
# constrained greedy classification per row, with shared instructions and with ~330 tokens of
# shared few-shot examples, prefix cache on and off (examples/prefix_cache_speed.rs); then
# whether concurrent greedy answers match the answers sent alone, at the plans' max_batch 1 and
# at 8 (examples/prefix_cache_check.rs).
#
#   bash benches/prefix_cache.sh [REPETITIONS]   # needs `pagantic models pull`; default 3
#
# Prints one JSON line per run and a summary line with the best wall time of each side.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked --quiet --example prefix_cache_speed --example prefix_cache_check
mkdir -p target/bench-prefix
./target/debug/examples/prefix_cache_speed "${1:-3}"
for max_batch in 1 8; do
  ./target/debug/examples/prefix_cache_check "$max_batch" 8 16 1 24 target/bench-prefix/reference.json \
    | python3 -c 'import json, sys; d = json.load(sys.stdin); print(json.dumps({k: d[k] for k in ("max_batch", "concurrency", "answers", "mismatched", "round_s", "rss_mib")}))'
done
