#!/usr/bin/env bash
# The `openai` engine against a real OpenAI-compatible server: llama-cpp-python's server
# (0.3.36, `--chat_format chatml-function-calling`) serving the embedded GGUF on a loopback port.
# Runs the plans beside this script — infer, streaming, structured, agent (native, prompt, auto),
# redundant, a schema the server cannot compile (fail-open) and a rate-limited batch — with the
# built pagantic and prints a matrix: works / degraded-to-MODE / fails. Exits 1 when a row differs
# from the matrix docs/models.md documents (naming it), so the documented matrix stays true.
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

# name  plan  extra flags (every row asks the server: no row is answered from the call cache)
cases="infer infer.yaml --no-stream --no-cache
stream infer.yaml --stream --no-cache
structured structured.yaml --no-stream --no-cache
agent-native agent-native.yaml --no-stream --no-cache
agent-prompt agent-prompt.yaml --no-stream --no-cache
agent-auto agent-auto.yaml --no-stream --no-cache
redundant redundant.yaml --no-stream --no-cache
fail-open fail-open.yaml --no-stream --no-cache"
while read -r name plan flags; do
  sed "s#127.0.0.1:18123#127.0.0.1:$port#" "tests/compat/$plan" >"$work/$plan"
  rm -f "$work/$name.events.jsonl"
  # shellcheck disable=SC2086 # one or more flags
  "$bin" run --quiet $flags --format json --events "$work/$name.events.jsonl" "$work/$plan" \
    >"$work/$name.out" 2>"$work/$name.err" || true
done <<<"$cases"

# A batch of 6 rows at -j 4 whose model allows 20 requests a minute: paced about 3 s apart.
sed "s#127.0.0.1:18123#127.0.0.1:$port#" tests/compat/rate-limit.yaml >"$work/rate-limit.yaml"
rm -f "$work"/rate-limit.{events,out,summary}.json*
"$bin" run --quiet --no-stream --no-cache --batch tests/compat/rate-limit.jsonl -j 4 \
  --out "$work/rate-limit.out.jsonl" --summary "$work/rate-limit.summary.json" \
  --events "$work/rate-limit.events.jsonl" "$work/rate-limit.yaml" \
  >"$work/rate-limit.out" 2>"$work/rate-limit.err" || true

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

# fail-open: the server compiles no grammar for the schema and answers under a generic JSON one;
# every answer must have been checked (`schema_mode: ignored`, `constrained: false` when it did
# not conform) and the step then repaired, retried or failed on its own.
record, events, out = load("fail-open")
calls = [e["data"] for e in events if e["kind"] == "inference" and "error" not in e["data"]]
ignored = [d for d in calls if d.get("schema_mode") == "ignored"]
wrong = [d for d in ignored if d.get("constrained") is not False]
ok = record is not None and record.get("status") == "complete"
if not calls:
    result, answer = failed(record, events, "fail-open"), ""
elif wrong:
    result, answer = "fails (ignored answer recorded as constrained)", ""
elif ok:
    answer = json.dumps(step(record).get("output"))[:40]
    if ignored:
        result = f"works (ignored schema caught on {len(ignored)}/{len(calls)} answers, valid after repair/retries)"
    else:
        result = "works (server answer conformed)"
elif ignored:
    result = (f"ignored schema caught ({len(ignored)}/{len(calls)} answers), then "
              + failed(record, events, "fail-open") + f" after {len(calls)} attempts")
    answer = ""
else:
    result, answer = failed(record, events, "fail-open") + " (ignored schema not caught)", ""
rows.append(("fail-open", result, answer))

# rate-limit: every row answered, none refused, the summary's wait above zero, and the requests
# spread out: at most burst (1) + 1 answers in any 3-second window.
try:
    summary = json.load(open(f"{work}/rate-limit.summary.json"))
    lines = [json.loads(l) for l in open(f"{work}/rate-limit.out.jsonl")]
    events = [json.loads(l) for l in open(f"{work}/rate-limit.events.jsonl")]
except (OSError, ValueError):
    err = open(f"{work}/rate-limit.err").read().strip().splitlines()
    rows.append(("rate-limit", "fails (" + (err[-1][:60] if err else "no summary") + ")", ""))
else:
    good = [l for l in lines if l.get("status") == "ok"]
    waited = summary.get("rate_limit_wait_ms", 0) / 1000
    refused = summary.get("rate_limited", 0)
    # answers' end times (`at`; `at_ms` counts from each row's own start)
    from datetime import datetime
    ends = sorted(datetime.fromisoformat(e["at"].replace("Z", "+00:00")).timestamp()
                  for e in events if e["kind"] == "inference")
    most = max((sum(1 for t in ends if s <= t < s + 3) for s in ends), default=0)
    facts = (f"{len(good)}/{len(lines)} rows in {summary.get('wall_ms', 0) / 1000:.1f} s, "
             f"waited {waited:.1f} s, {refused} refused, at most {most} answers in 3 s")
    paced = waited > 0 and most <= 2
    verdict = "works" if len(good) == len(lines) == 6 and refused == 0 and paced else "fails"
    answer = ", ".join(str(l.get("output")) for l in sorted(good, key=lambda l: l["index"]))
    rows.append(("rate-limit", f"{verdict} ({facts})", answer[:40]))
print("| feature | llama-cpp-python 0.3.36 (chatml-function-calling) | answer |")
print("| --- | --- | --- |")
for name, result, answer in rows:
    print(f"| {name} | {result} | `{answer}` |")

# The matrix in docs/models.md is what this script promises: every row's verdict must be the
# documented one, or the script exits 1 naming the rows that differ. A verdict is the result up
# to its details in parentheses ("works", "degraded-to-prompt"), and for a failure the reason too
# ("fails (no tool call)"), so an agent that fails for another reason breaks the promise.
def verdict(result):
    head, _, rest = result.partition(" (")
    return f"{head} ({rest.split(')')[0]})" if head == "fails" and rest else head
docs = open("docs/models.md").read().splitlines()
top = next(i for i, line in enumerate(docs) if line.startswith("| feature | llama-cpp-python"))
promised = {}
for line in docs[top + 2:]:
    if not line.startswith("|"):
        break
    cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
    promised[cells[0]] = cells[1]
found = {name: result for name, result, _ in rows}
broken = [f"{name}: documented {verdict(promised[name])!r}, got {verdict(found.get(name, 'missing'))!r}"
          for name in promised if verdict(found.get(name, "missing")) != verdict(promised[name])]
broken += [f"{name}: not in the documented matrix" for name in found if name not in promised]
for line in broken:
    print(f"compat: {line}", file=sys.stderr)
sys.exit(1 if broken else 0)
PY
