#!/usr/bin/env bash
# The call cache: a 1,000-row batch of three 50 ms model calls per row (scripted model), run cold,
# re-run fully cached, and re-run after editing only the last step's template; peak RSS of a
# 100,000-row scripted batch without the cache, filling it, and answered from it; and the
# embedded local model's 16-row classification batch, cold vs cached.
#
#   bash benches/cache.sh                      # the local part needs `pagantic models pull`
#   PAGANTIC_BIN=path/to/pagantic bash benches/cache.sh   # use a binary already built
#   SKIP_LOCAL=1 bash benches/cache.sh         # without the local model
#
# The dev build (the profile of the README commands); GNU time for the peak RSS. Every cache
# lives under target/bench-cache, so the user's own cache is never read or written.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${PAGANTIC_BIN:-}" ]]; then
  cargo build --locked --quiet
  PAGANTIC_BIN=./target/debug/pagantic
fi
bin=$PAGANTIC_BIN
dir=target/bench-cache
rm -rf "$dir" && mkdir -p "$dir"
python3 benches/gen_rows.py "$dir" 1000 100000
measure() { # label, plan, rows file, -j, cache flags…
  local label=$1 plan=$2 rows=$3 jobs=$4
  shift 4
  rm -f "$dir/out.jsonl"
  /usr/bin/time -f "%M %e" -o "$dir/time.txt" "$bin" run --quiet "$plan" --batch "$rows" \
    --out "$dir/out.jsonl" --id id -j "$jobs" --summary "$dir/summary.json" "$@"
  read -r rss_kb wall < "$dir/time.txt"
  python3 - "$dir/summary.json" "$label" "$rss_kb" "$wall" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
rows, c = s["rows_ok"] + s["rows_failed"], s["cache"]
print(f"{sys.argv[2]:<44} {rows:>7} rows  {s['rows_per_s']:>9.1f} rows/s  {s['model_calls']:>6} model calls  "
      f"{c['hits']:>6} hits  {c['misses']:>6} misses  peak RSS {int(sys.argv[3]) / 1024:.0f} MiB  "
      f"({sys.argv[4]} s wall, {s['rows_failed']} failed)")
PY
}
cp benches/plans/cache-scripted.yaml "$dir/plan.yaml"
measure "3 × 50 ms calls, cold"                "$dir/plan.yaml" "$dir/rows-1000.jsonl" 16 --cache "$dir/c1"
measure "3 × 50 ms calls, cached re-run"       "$dir/plan.yaml" "$dir/rows-1000.jsonl" 16 --cache "$dir/c1"
sed -i 's/template: "Summary: /template: "In short: /' "$dir/plan.yaml"
measure "3 × 50 ms calls, last template edited" "$dir/plan.yaml" "$dir/rows-1000.jsonl" 16 --cache "$dir/c1"
measure "100k rows, --no-cache"                benches/plans/batch-scripted.yaml "$dir/rows-100000.jsonl" 16 --no-cache
measure "100k rows, cache filled (cold)"       benches/plans/batch-scripted.yaml "$dir/rows-100000.jsonl" 16 --cache "$dir/c2"
measure "100k rows, answered from the cache"   benches/plans/batch-scripted.yaml "$dir/rows-100000.jsonl" 16 --cache "$dir/c2"
du -sh "$dir/c2" | awk '{print "cache of 100k rows on disk: " $1}'
if [[ -z "${SKIP_LOCAL:-}" ]]; then
  head -n 16 "$dir/rows-1000.jsonl" > "$dir/rows-local.jsonl"
  measure "local model, 16 rows, cold"          benches/plans/batch-local.yaml "$dir/rows-local.jsonl" 1 --cache "$dir/c3"
  measure "local model, 16 rows, cached"        benches/plans/batch-local.yaml "$dir/rows-local.jsonl" 1 --cache "$dir/c3"
fi
