#!/usr/bin/env bash
# Traces in a real backend: Arize Phoenix (`arize-phoenix` from PyPI, in a virtualenv) started on
# a loopback port; the scripted agent plan beside this script (a tool call; the CLI tests run it
# too) and a 5-row scripted batch run with export on (OTEL_EXPORTER_OTLP_ENDPOINT); then the
# spans are read back through Phoenix's REST API (`GET /v1/projects/default/spans`) and checked: one trace for the run and one per batch row
# (each linked to the batch's), chat spans with their token counts, the tool span under its chat
# span. Prints a table; exits non-zero when a check fails. Not part of .ci/run (it needs PyPI).
#
#   bash tests/compat/phoenix.sh
#
# Settings (environment): VENV (default target/phoenix-venv), PORT (16006), BIN (a built
# pagantic; default target/debug/pagantic, built here when missing). Phoenix is stopped however
# the script ends.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=${VENV:-target/phoenix-venv}
port=${PORT:-16006}
bin=${BIN:-target/debug/pagantic}
work=target/compat-phoenix
rm -rf "$work" && mkdir -p "$work"
[ -x "$bin" ] || cargo build --locked --quiet
if ! "$venv/bin/python" -c 'import phoenix' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet arize-phoenix
fi

PHOENIX_HOST=127.0.0.1 PHOENIX_PORT=$port PHOENIX_WORKING_DIR=$work/phoenix \
  "$venv/bin/phoenix" serve > "$work/phoenix.log" 2>&1 &
server=$!
# Phoenix is stopped however the script ends; the trap leaves the script's exit status as it is.
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 120); do
  curl -fsS "http://127.0.0.1:$port/healthz" > /dev/null 2>&1 && break
  kill -0 "$server" 2>/dev/null || { cat "$work/phoenix.log" >&2; exit 1; }
  sleep 1
done
curl -fsS "http://127.0.0.1:$port/healthz" > /dev/null || { echo "phoenix did not start" >&2; exit 1; }

cat > "$work/rows.yaml" <<'YAML'
version: 1
name: phoenix-rows
inputs:
  text: { type: string }
models:
  echo: { kind: scripted, echo: true }
steps:
  - { name: say, type: infer, model: echo, template: "{{ inputs.text }}" }
YAML
for n in 1 2 3 4 5; do echo "{\"text\": \"row $n\"}"; done > "$work/rows.jsonl"
export OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$port"
"$bin" run --quiet --no-cache --format json tests/compat/traced-agent.yaml > "$work/record.json"
"$bin" run --quiet --no-cache "$work/rows.yaml" --batch "$work/rows.jsonl" \
  --out "$work/rows.out.jsonl" --summary "$work/summary.json"

python3 - "http://127.0.0.1:$port" "$work/record.json" "$work/summary.json" <<'PY'
import json, sys, time, urllib.request

base, record, summary = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))

def spans():
    found, cursor = [], None
    while True:
        url = f"{base}/v1/projects/default/spans?limit=1000" + (f"&cursor={cursor}" if cursor else "")
        page = json.load(urllib.request.urlopen(url))
        found += page["data"]
        cursor = page.get("next_cursor")
        if not cursor:
            return found

# Phoenix ingests asynchronously: wait until every span is in (24 expected: 5 for the agent run,
# 1 batch span, 3 per row), at most a minute.
for _ in range(60):
    got = spans()
    if len(got) >= 21:
        break
    time.sleep(1)

def attr(span, key):
    value = span.get("attributes", {})
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value if value is not None else span.get("attributes", {}).get(key)

by_id = {s["context"]["span_id"]: s for s in got}
rows = []
def check(what, ok, detail=""):
    rows.append((what, "ok" if ok else "FAILS", detail))

run_trace = [s for s in got if s["context"]["trace_id"] == record.get("trace_id")]
check("the run is one trace (the record's trace_id)", len(run_trace) >= 5, f"{len(run_trace)} spans")
chats = [s for s in run_trace if s["name"].startswith("chat ")]
tokens_in = sum(int(attr(s, "gen_ai.usage.input_tokens") or 0) for s in chats)
tokens_out = sum(int(attr(s, "gen_ai.usage.output_tokens") or 0) for s in chats)
check("LLM spans carry the record's token counts",
      (tokens_in, tokens_out) == (record["usage"]["prompt_tokens"], record["usage"]["completion_tokens"]),
      f"{tokens_in} in, {tokens_out} out over {len(chats)} chat spans")
tools = [s for s in run_trace if s["name"] == "execute_tool calculator"]
under_chat = bool(tools) and by_id.get(tools[0].get("parent_id"), {}).get("name", "").startswith("chat ")
check("the tool span is under its chat span", under_chat)
batch = [s for s in got if s["name"] == "pagantic batch"]
row_roots = [s for s in got if s["name"] == "invoke_workflow phoenix-rows"]
traces = {s["context"]["trace_id"] for s in row_roots}
check("one trace per batch row", len(row_roots) == 5 and len(traces) == 5, f"{len(traces)} traces")
check("the batch's span is a trace of its own", len(batch) == 1 and batch[0]["context"]["trace_id"] not in traces)
# Phoenix's API returns no span links: the link from each row to the batch is checked against the
# OTLP receiver of tests/cli/tracing.rs instead.
rows.append(("each row's trace links to the batch's span", "n/a", "Phoenix's API returns no links"))
kinds = sorted({s["span_kind"] for s in chats})
check("chat spans are LLM spans in Phoenix", kinds == ["LLM"], ", ".join(kinds))
check("no span dropped", summary.get("trace_spans_dropped") == 0, str(summary.get("trace_spans_dropped")))

width = max(len(r[0]) for r in rows)
print(f"| {'check':<{width}} | result | detail |")
print(f"| {'-' * width} | ------ | ------ |")
for what, result, detail in rows:
    print(f"| {what:<{width}} | {result:<6} | {detail} |")
sys.exit(0 if all(r[1] != "FAILS" for r in rows) else 1)
PY
