#!/usr/bin/env bash
# The `openai` engine against a real OpenAI-compatible server: llama-cpp-python's server
# (0.3.36, `--chat_format chatml-function-calling`) serving the embedded GGUF on a loopback port.
# Runs the plans beside this script — infer, streaming, structured, agent (native, prompt, auto)
# and redundant — with the built pagantic and prints a matrix: works / degraded-to-MODE / fails.
#
#   bash tests/compat/run.sh     # needs `pagantic models pull`; the first run builds
#                                # llama-cpp-python in a virtualenv (15-25 minutes on 2 cores)
#
# Settings (environment): VENV (default target/compat-venv), PORT (18123), THREADS (2), BIN (a
# built pagantic; default target/debug/pagantic, built here when missing). The server is stopped
# however the script ends.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=${VENV:-target/compat-venv}
port=${PORT:-18123}
threads=${THREADS:-2}
bin=${BIN:-target/debug/pagantic}
model=${MODEL:-$HOME/.cache/pagantic/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf}
work=target/compat
mkdir -p "$work"
[ -x "$bin" ] || cargo build --locked --quiet
[ -f "$model" ] || { echo "no model at $model: run \`pagantic models pull\` first" >&2; exit 2; }
if ! "$venv/bin/python" -c 'import llama_cpp.server' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet 'llama-cpp-python[server]==0.3.36'
fi

# Stops the server by PID however the script ends, keeping the script's exit status.
source tests/compat/stop_server.sh
"$venv/bin/python" -m llama_cpp.server --model "$model" --chat_format chatml-function-calling \
  --host 127.0.0.1 --port "$port" --n_threads "$threads" --n_ctx 4096 >"$work/server.log" 2>&1 &
server=$!
for _ in $(seq 120); do
  curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null && break
  kill -0 "$server" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
  sleep 1
done

# name  plan  extra flags
cases="infer infer.yaml --no-stream
stream infer.yaml --stream
structured structured.yaml --no-stream
agent-native agent-native.yaml --no-stream
agent-prompt agent-prompt.yaml --no-stream
agent-auto agent-auto.yaml --no-stream
redundant redundant.yaml --no-stream"
while read -r name plan flag; do
  sed "s#127.0.0.1:18123#127.0.0.1:$port#" "tests/compat/$plan" >"$work/$plan"
  rm -f "$work/$name.events.jsonl"
  "$bin" run --quiet "$flag" --format json --events "$work/$name.events.jsonl" "$work/$plan" \
    >"$work/$name.out" 2>"$work/$name.err" || true
done <<<"$cases"

python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def load(name):
    events = [json.loads(l) for l in open(f"{work}/{name}.events.jsonl")]
    out = open(f"{work}/{name}.out").read()
    record = None
    try:
        record = json.loads(out)
    except ValueError:
        pass
    return record, events, out
def failed(record, events, name):
    err = open(f"{work}/{name}.err").read().strip().splitlines()
    for e in events:
        if e["kind"] == "step_end" and e["data"].get("status") == "failed":
            return f"fails ({e['data']['error']['code']})"
    return "fails (" + (err[-1][:60] if err else "no output") + ")"
def step(record):
    return (record or {}).get("steps", [{}])[-1] if record else {}
def modes(events):
    return {e["data"]["schema_mode"] for e in events
            if e["kind"] == "inference" and "schema_mode" in e["data"] and "error" not in e["data"]}
rows = []
for name in ["infer", "stream", "structured", "agent-native", "agent-prompt", "agent-auto", "redundant"]:
    record, events, out = load(name)
    ok = record is not None and record.get("status") == "complete"
    if name == "stream":
        fails = any(e["kind"] == "step_end" and e["data"].get("status") == "failed" for e in events)
        result = failed(None, events, name) if fails else ("works" if out.strip() else "fails (nothing streamed)")
        rows.append((name, result, out.strip()[:40])); continue
    if not ok:
        rows.append((name, failed(record, events, name), "")); continue
    s = step(record)
    output = s.get("output")
    if name == "redundant" and isinstance(output, dict):
        output = output.get("value")
    detail = s.get("detail") or {}
    used = sorted(modes(events), key=["json_schema", "json_object", "prompt"].index)
    if name.startswith("agent"):
        calls = [c for c in detail.get("tool_calls", []) if c.get("ok")]
        right = "391" in json.dumps(output)
        mode = detail.get("tool_calls_mode")
        if not calls:
            result = "fails (no tool call)"
        elif not right:
            result = "fails (wrong answer)"
        elif name == "agent-auto" and mode == "prompt":
            result = "degraded-to-prompt"
        else:
            result = "works"
        if used and used[-1] != "json_schema" and result in ("works", "degraded-to-prompt"):
            result += f" (schema: {used[-1]})"
    elif used and used[-1] != "json_schema":
        result = f"degraded-to-{used[-1]}"
    else:
        result = "works"
    rows.append((name, result, json.dumps(output)[:40]))
print("| feature | llama-cpp-python 0.3.36 (chatml-function-calling) | answer |")
print("| --- | --- | --- |")
for name, result, answer in rows:
    print(f"| {name} | {result} | `{answer}` |")
PY
