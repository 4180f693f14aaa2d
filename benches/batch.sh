#!/usr/bin/env bash
# Batch throughput and memory: rows/s on the scripted engine for 100,000 rows (the per-row
# overhead of pagantic itself), peak RSS for 10,000 vs 100,000 rows (memory must stay flat: the
# input is streamed), and rows/s on the embedded local model at -j 1 vs -j 8.
#
#   bash benches/batch.sh            # LOCAL_ROWS=16 by default; the local part needs `models pull`
#
# The dev build (the profile of the README commands: dependencies optimised, pagantic itself
# at level 1); GNU time for the peak RSS. Prints one line per measurement.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked --quiet
bin=./target/debug/pagantic
dir=target/bench-batch
mkdir -p "$dir"
python3 benches/gen_rows.py "$dir" 10000 100000
measure() { # rows file, plan, -j, label
  rm -f "$dir/out.jsonl"
  /usr/bin/time -f "%M %e" -o "$dir/time.txt" "$bin" run --quiet "$2" --batch "$1" --out "$dir/out.jsonl" \
    --id id -j "$3" --summary "$dir/summary.json" --no-cache
  read -r rss_kb wall < "$dir/time.txt"
  python3 - "$dir/summary.json" "$4" "$rss_kb" "$wall" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
rows = s["rows_ok"] + s["rows_failed"]
print(f"{sys.argv[2]:<34} {rows:>7} rows  {s['rows_per_s']:>9.1f} rows/s  "
      f"{1e6 / s['rows_per_s'] if s['rows_per_s'] else 0:>8.1f} µs/row  peak RSS {int(sys.argv[3]) / 1024:.0f} MiB  "
      f"({sys.argv[4]} s wall, {s['rows_failed']} failed)")
PY
}
measure "$dir/rows-10000.jsonl" benches/plans/batch-scripted.yaml 16 "scripted, -j 16"
measure "$dir/rows-100000.jsonl" benches/plans/batch-scripted.yaml 16 "scripted, -j 16"
local_rows=${LOCAL_ROWS:-16}
head -n "$local_rows" "$dir/rows-10000.jsonl" > "$dir/rows-local.jsonl"
measure "$dir/rows-local.jsonl" benches/plans/batch-local.yaml 1 "local model, -j 1"
measure "$dir/rows-local.jsonl" benches/plans/batch-local.yaml 8 "local model, -j 8"
