#!/usr/bin/env bash
# A batch against a rate-limited OpenAI-compatible stub, with and without the model's
# `rate_limit`. The stub (Python, on loopback) accepts at most LIMIT requests in any sliding
# 60-second window (refused requests do not count) and at most IN_FLIGHT at once, answers 429
# with `Retry-After: 1` beyond that, and takes 100 ms to answer. Prints, for each run: rows ok,
# requests accepted and refused, the most accepted in any sliding 60 s window, the mean per
# minute, and the time taken against the ideal (ROWS / LIMIT minutes).
#
#   bash benches/rate_limit.sh                                 # 200 rows, 60/min, -j 16
#   ROWS=40 LIMIT=240 IN_FLIGHT=4 bash benches/rate_limit.sh   # the quick one
#
# The paced run declares `rate_limit: { requests_per_minute: LIMIT, max_in_flight: IN_FLIGHT }`;
# the unpaced one (UNPACED=0 skips it) declares none.
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS="${ROWS:-200}" LIMIT="${LIMIT:-60}" IN_FLIGHT="${IN_FLIGHT:-5}" JOBS="${JOBS:-16}"
cargo build --locked --quiet
bin="${CARGO_TARGET_DIR:-target}/debug/pagantic"
work="$(mktemp -d)"
trap 'kill "${stub:-}" 2>/dev/null || true; rm -rf "$work"' EXIT

cat > "$work/stub.py" <<'PY'
import json, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
limit, in_flight_most, log = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
lock = threading.Lock()
accepted, state = [], {"in_flight": 0}
class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *args): pass
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        now = time.monotonic()
        with lock:
            recent = sum(1 for at in accepted if now - at < 60)
            ok = recent < limit and state["in_flight"] < in_flight_most
            if ok:
                accepted.append(now); state["in_flight"] += 1
            with open(log, "a") as f:
                f.write(f"{'ok' if ok else 'refused'} {now}\n")
        if not ok:
            body = b'{"error":{"message":"rate limit exceeded","type":"rate_limit"}}'
            self.send_response(429); self.send_header("retry-after", "1")
        else:
            time.sleep(0.1)
            with lock:
                state["in_flight"] -= 1
            body = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
                               "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}).encode()
            self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers(); self.wfile.write(body)
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
PY

cat > "$work/report.py" <<'PY'
import sys
log, took, rows, limit = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
lines = [line.split() for line in open(log)]
ok = sorted(float(at) for kind, at in lines if kind == "ok")
refused = sum(1 for kind, _ in lines if kind == "refused")
most = max((sum(1 for b in ok if a <= b < a + 60) for a in ok), default=0)
span = (ok[-1] - ok[0]) if len(ok) > 1 else 0
mean = (len(ok) - 1) / span * 60 if span else 0
ideal = rows / limit * 60
print(f"  requests: {len(ok)} accepted, {refused} refused ({100 * refused / max(len(lines), 1):.0f}%)")
print(f"  most accepted in a sliding 60 s window: {most} (limit {limit}); mean {mean:.1f}/min")
print(f"  took {took:.1f} s; ideal {ideal:.1f} s ({100 * (took - ideal) / ideal:+.0f}%)")
PY

python3 -c "import json; [print(json.dumps({'id': f'r{i}', 'text': f'row {i}'})) for i in range($ROWS)]" > "$work/rows.jsonl"

run() {  # run NAME RATE_LIMIT_YAML
  : > "$work/log"; rm -f "$work/port"
  python3 "$work/stub.py" "$LIMIT" "$IN_FLIGHT" "$work/log" > "$work/port" &
  stub=$!
  while [ ! -s "$work/port" ]; do sleep 0.1; done
  local port; port="$(cat "$work/port")"
  cat > "$work/plan.yaml" <<YAML
version: 1
name: paced
inputs:
  text: { type: string }
models:
  remote: { kind: openai, base_url: "http://127.0.0.1:$port/v1", model: served$2 }
steps:
  - { name: answer, type: infer, model: remote, template: "{{ inputs.text }}", max_tokens: 4 }
YAML
  rm -f "$work/out.jsonl"
  local started ended
  started="$(date +%s.%N)"
  PAGANTIC_CACHE_DIR="$work/cache-$1" "$bin" run "$work/plan.yaml" --batch "$work/rows.jsonl" \
    --id id --out "$work/out.jsonl" -j "$JOBS" 2> "$work/stderr" || true
  ended="$(date +%s.%N)"
  kill "$stub"; wait "$stub" 2>/dev/null || true
  [ -z "${VERBOSE:-}" ] || tail -5 "$work/stderr"
  echo "$1: $ROWS rows at -j $JOBS, stub $LIMIT/min and $IN_FLIGHT in flight"
  echo "  $(grep -o '[0-9]* rows ok, [0-9]* failed' "$work/stderr" | tail -1)"
  python3 "$work/report.py" "$work/log" "$(echo "$ended - $started" | bc)" "$ROWS" "$LIMIT"
}

[ "${UNPACED:-1}" = 0 ] || run unpaced ""
run paced ", rate_limit: { requests_per_minute: $LIMIT, max_in_flight: $IN_FLIGHT }"
