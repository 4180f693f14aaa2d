#!/usr/bin/env bash
# `pagantic serve` under load, on loopback only, stopping by itself: REQUESTS (default 20,000)
# POSTs at CONCURRENCY (default 64) against the scripted 3-step plan
# (benches/peers/pagantic/three-steps.yaml), with --max-concurrent and --queue above the load so
# nothing may be refused (errors must be 0); requests/s, p50 / p99 latency, the server's RSS
# before and after. With HAYHOOKS_VENV, the same pipeline served by Hayhooks
# (benches/peers/hayhooks/three_steps) under the same load, in the same run. Then, on the embedded model (needs `models pull`), the time of a one-word
# answer through `serve` once the model is warm against `pagantic run` (a fresh process: load +
# answer).
#
#   bash benches/serve.sh                       # REQUESTS=20000 CONCURRENCY=64 by default
#   SKIP_LOCAL=1 bash benches/serve.sh          # without the embedded-model part
#   HAYHOOKS_VENV=/tmp/hayhooks-venv bash benches/serve.sh
#
# The Hayhooks venv: python3 -m venv /tmp/hayhooks-venv && /tmp/hayhooks-venv/bin/pip install hayhooks==2.1.0
#
# The dev build (the profile of the README commands); the load generator is
# examples/serve_load.rs (reqwest, one keep-alive connection per worker).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked --quiet --bin pagantic --example serve_load
target=${CARGO_TARGET_DIR:-target}
bin=$target/debug/pagantic
load=$target/debug/examples/serve_load
dir=$target/bench-serve
mkdir -p "$dir"
requests=${REQUESTS:-20000}
concurrency=${CONCURRENCY:-64}

start_server() { # log file, args…
  local log=$1; shift
  "$bin" serve "$@" --addr 127.0.0.1:0 2> "$log" &
  server=$!
  until grep -q "listening on" "$log"; do
    kill -0 "$server" 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.05
  done
  url=$(grep -o "http://[0-9.:]*" "$log" | head -n 1)
}
rss_mib() { awk '/VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/$1/status"; }
measure() { # label, server pid, url: 200 warm-up requests, then the load; RSS before and after
  local before warm result after
  before=$(rss_mib "$2")
  "$load" "$3" '{"question": "What is a GGUF file?"}' 200 8 > /dev/null
  warm=$(rss_mib "$2")
  result=$("$load" "$3" '{"question": "What is a GGUF file?"}' "$requests" "$concurrency")
  after=$(rss_mib "$2")
  echo "$1: $result"
  echo "  server RSS: ${before} MiB at start, ${warm} MiB after 200 warm-up requests, ${after} MiB after the run"
}

start_server "$dir/scripted.log" benches/peers/pagantic/three-steps.yaml \
  --max-concurrent "$concurrency" --queue "$requests"
measure "scripted 3-step plan, pagantic serve, $requests requests at concurrency $concurrency" \
  "$server" "$url/v1/plans/three-steps/runs"
kill -TERM "$server"; wait "$server"

if [[ -n "${HAYHOOKS_VENV:-}" ]]; then
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$HAYHOOKS_VENV/bin/hayhooks" run --host 127.0.0.1 --port "$port" \
    --pipelines-dir benches/peers/hayhooks > "$dir/hayhooks.log" 2>&1 &
  hayhooks=$!
  until curl -sf "http://127.0.0.1:$port/status" > /dev/null; do
    kill -0 "$hayhooks" 2>/dev/null || { cat "$dir/hayhooks.log"; exit 1; }
    sleep 0.2
  done
  # uvicorn's worker is the child of the `hayhooks` process; its RSS is what serves.
  worker=$(pgrep -P "$hayhooks" | head -n 1 || true); worker=${worker:-$hayhooks}
  version=$("$HAYHOOKS_VENV/bin/pip" show hayhooks | awk '/^Version/ { print $2 }')
  measure "the same pipeline, Hayhooks $version, same load" "$worker" "http://127.0.0.1:$port/three_steps/run"
  kill -TERM "$hayhooks"; wait "$hayhooks" || true
fi

if [[ -z "${SKIP_LOCAL:-}" ]]; then
  plan=benches/plans/one-word.yaml
  body='{"question": "Answer with one word: what colour is the sky on a clear day?"}'
  start=$(date +%s.%N)
  "$bin" run --quiet "$plan" -i question="Answer with one word: what colour is the sky on a clear day?" > "$dir/cold.txt"
  cold=$(echo "$(date +%s.%N) - $start" | bc)
  start_server "$dir/local.log" "$plan"
  "$load" "$url/v1/plans/one-word/runs" "$body" 1 1 > /dev/null      # loads the model
  warm=$("$load" "$url/v1/plans/one-word/runs" "$body" 5 1)
  kill -TERM "$server"; wait "$server"
  echo "one-word answer on the embedded model: pagantic run (cold) ${cold} s; through serve, warm, 5 requests one at a time: $warm"
  echo "  answer: $(cat "$dir/cold.txt")"
fi
