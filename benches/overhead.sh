#!/usr/bin/env bash
# Orchestration overhead per step, pagantic vs LangGraph and Haystack, side by side.
#
#   bash benches/overhead.sh
#
# pagantic: `run --format json` on generated plans of template steps (no model); the figure is the
# executor's own duration_ms from the run record divided by the steps (process start, loading and
# checking excluded, as the peers' figures exclude imports and graph compilation), best of 5 runs,
# each a fresh process with no warm-up; release build.
# Peers (optional; one warm-up run, then the best of 5 inside one process): a virtualenv with
# langgraph==1.2.22 and haystack-ai==3.4.0, given as BENCH_VENV, e.g.
#   python3 -m venv /tmp/benchvenv && /tmp/benchvenv/bin/pip install langgraph==1.2.22 haystack-ai==3.4.0
#   BENCH_VENV=/tmp/benchvenv bash benches/overhead.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --quiet
bin="${CARGO_TARGET_DIR:-target}/release/pagantic"
plans=target/bench-plans
python3 benches/gen_plans.py "$plans"
printf '%-14s %8s %14s %14s %14s\n' plan steps "pagantic µs" "langgraph µs" "haystack µs"
for spec in linear:10 linear:100 linear:300 linear:1000 fanout:50 fanout:200; do
  kind=${spec%%:*}; size=${spec##*:}
  plan="$plans/$kind-$size.yaml"
  best=""
  for _ in 1 2 3 4 5; do
    us=$("$bin" run --quiet --format json "$plan" | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["duration_ms"]*1000/len(r["steps"]))')
    best=$(python3 -c "print(min(float('$us'), float('${best:-1e18}')))")
  done
  steps=$(grep -c 'type: template' "$plan")
  lg="-"; hs="-"
  if [ -n "${BENCH_VENV:-}" ]; then
    lg=$("$BENCH_VENV/bin/python" benches/peers/overhead_langgraph.py "$kind" "$size" | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["us_per_step"],1))')
    hs=$("$BENCH_VENV/bin/python" benches/peers/overhead_haystack.py "$kind" "$size" | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["us_per_step"],1))')
  fi
  printf '%-14s %8s %14.1f %14s %14s\n' "$kind-$size" "$steps" "$best" "$lg" "$hs"
done
