#!/usr/bin/env bash
# A batch against a rate-limited OpenAI-compatible stub, with and without the model's
# `rate_limit`. The stub (Python, on loopback) takes 100 ms to answer, at most IN_FLIGHT requests
# at once, and answers 429 with `Retry-After: 1` beyond its quota:
#
# - MODE=requests (the default): at most LIMIT accepted requests in any sliding 60-second window
#   (refused requests do not count); each row is a short prompt.
# - MODE=tokens: at most TOKENS accepted tokens in any sliding 60-second window, a request
#   counting its messages' characters / 4 plus the one token it answers (the `usage` it reports);
#   each row is about ROW_TOKENS tokens of prompt.
#
# Prints, for each run: rows ok, requests accepted and refused, the most accepted (requests or
# tokens) in any sliding 60 s window, the mean per minute, and the time taken against the ideal
# (ROWS / LIMIT minutes, or ROWS × tokens per row / TOKENS minutes).
#
#   bash benches/rate_limit.sh                                 # 200 rows, 60/min, -j 16
#   ROWS=40 LIMIT=240 IN_FLIGHT=4 bash benches/rate_limit.sh   # the quick one
#   MODE=tokens bash benches/rate_limit.sh                     # 200 rows of ~500 tokens, 30,000/min
#
# The paced run declares `rate_limit: { requests_per_minute: LIMIT, max_in_flight: IN_FLIGHT }`
# (MODE=tokens: `tokens_per_minute: TOKENS`; PACED=0 skips it); the unpaced one (UNPACED=0 skips
# it) declares none. BIN=path runs that build of pagantic instead of building the dev one.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE="${MODE:-requests}" ROWS="${ROWS:-200}" LIMIT="${LIMIT:-60}" IN_FLIGHT="${IN_FLIGHT:-5}"
JOBS="${JOBS:-16}" TOKENS="${TOKENS:-30000}" ROW_TOKENS="${ROW_TOKENS:-500}"
if [ "$MODE" = tokens ]; then LIMIT=1000000; else TOKENS=1000000000; fi
# BIN: a built pagantic to run (default: the dev build, built here).
if [ -z "${BIN:-}" ]; then cargo build --locked --quiet; fi
bin="${BIN:-${CARGO_TARGET_DIR:-target}/debug/pagantic}"
work="$(mktemp -d)"
trap 'kill "${stub:-}" 2>/dev/null || true; rm -rf "$work"' EXIT

cat > "$work/stub.py" <<'PY'
import json, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
limit, in_flight_most, token_limit, log = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
lock = threading.Lock()
accepted, state = [], {"in_flight": 0}
class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *args): pass
    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        prompt = sum(len(m.get("content") or "") for m in request["messages"]) // 4
        tokens = prompt + 1
        now = time.monotonic()
        with lock:
            recent = [(at, n) for at, n in accepted if now - at < 60]
            ok = (len(recent) < limit and sum(n for _, n in recent) + tokens <= token_limit
                  and state["in_flight"] < in_flight_most)
            if ok:
                accepted.append((now, tokens)); state["in_flight"] += 1
            with open(log, "a") as f:
                f.write(f"{'ok' if ok else 'refused'} {now} {tokens}\n")
        if not ok:
            body = b'{"error":{"message":"rate limit exceeded","type":"rate_limit"}}'
            self.send_response(429); self.send_header("retry-after", "1")
        else:
            time.sleep(0.1)
            with lock:
                state["in_flight"] -= 1
            body = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
                               "usage": {"prompt_tokens": prompt, "completion_tokens": 1,
                                         "total_tokens": tokens}}).encode()
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
log, took, mode, rows, limit, tokens = sys.argv[1], float(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
lines = [line.split() for line in open(log)]
ok = sorted((float(at), int(n)) for kind, at, n in lines if kind == "ok")
refused = sum(1 for kind, _, _ in lines if kind == "refused")
weight = (lambda n: n) if mode == "tokens" else (lambda n: 1)
unit, quota = ("tokens", tokens) if mode == "tokens" else ("requests", limit)
most = max((sum(weight(m) for b, m in ok if a <= b < a + 60) for a, _ in ok), default=0)
span = (ok[-1][0] - ok[0][0]) if len(ok) > 1 else 0
mean = sum(weight(n) for _, n in ok[1:]) / span * 60 if span else 0
per_row = sum(n for _, n in ok) / max(len(ok), 1)
ideal = rows / limit * 60 if mode == "requests" else rows * per_row / tokens * 60
print(f"  requests: {len(ok)} accepted, {refused} refused ({100 * refused / max(len(lines), 1):.0f}%)")
print(f"  most {unit} accepted in a sliding 60 s window: {most} (limit {quota}); mean {mean:.1f}/min")
print(f"  took {took:.1f} s; ideal {ideal:.1f} s ({100 * (took - ideal) / ideal:+.0f}%)")
PY

python3 - "$ROWS" "$MODE" "$ROW_TOKENS" > "$work/rows.jsonl" <<'PY'
import json, sys
rows, mode, row_tokens = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
for i in range(rows):
    text = f"row {i}"
    if mode == "tokens":
        text += " " + " ".join(f"w{(i * 7 + k) % 1000:03d}" for k in range(row_tokens * 4 // 5))[: row_tokens * 4 - len(text) - 1]
    print(json.dumps({"id": f"r{i}", "text": text}))
PY

run() {  # run NAME RATE_LIMIT_YAML
  : > "$work/log"; rm -f "$work/port"
  python3 "$work/stub.py" "$LIMIT" "$IN_FLIGHT" "$TOKENS" "$work/log" > "$work/port" &
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
  - { name: answer, type: infer, model: remote, template: "{{ inputs.text }}", max_tokens: 1 }
YAML
  rm -f "$work/out.jsonl"
  local started ended
  started="$(date +%s.%N)"
  PAGANTIC_CACHE_DIR="$work/cache-$1" "$bin" run "$work/plan.yaml" --batch "$work/rows.jsonl" \
    --id id --out "$work/out.jsonl" -j "$JOBS" 2> "$work/stderr" || true
  ended="$(date +%s.%N)"
  kill "$stub"; wait "$stub" 2>/dev/null || true
  [ -z "${VERBOSE:-}" ] || tail -5 "$work/stderr"
  if [ "$MODE" = tokens ]; then
    echo "$1: $ROWS rows of ~$ROW_TOKENS tokens at -j $JOBS, stub $TOKENS tokens/min and $IN_FLIGHT in flight"
  else
    echo "$1: $ROWS rows at -j $JOBS, stub $LIMIT/min and $IN_FLIGHT in flight"
  fi
  echo "  $(grep -o '[0-9]* rows ok, [0-9]* failed' "$work/stderr" | tail -1)"
  grep -o 'rate limits: .*' "$work/stderr" | sed 's/^/  /' || true
  python3 "$work/report.py" "$work/log" "$(echo "$ended - $started" | bc)" "$MODE" "$ROWS" "$LIMIT" "$TOKENS"
}

[ "${UNPACED:-1}" = 0 ] || run unpaced ""
if [ "${PACED:-1}" = 0 ]; then
  :
elif [ "$MODE" = tokens ]; then
  run paced ", rate_limit: { tokens_per_minute: $TOKENS, max_in_flight: $IN_FLIGHT }"
else
  run paced ", rate_limit: { requests_per_minute: $LIMIT, max_in_flight: $IN_FLIGHT }"
fi
