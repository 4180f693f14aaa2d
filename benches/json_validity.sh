#!/usr/bin/env bash
# Share of valid JSON from the embedded local model on a labelled set of 16 reviews
# (benches/data/reviews-labelled.jsonl), with and without decoder constraints, and with and without
# voting — the same prompt and schema throughout:
#   raw         one `infer` answer, checked as emitted (json.loads + the schema, no repair)
#   structured  one `structured` attempt: pagantic's repair and enum normalisation, then the schema
#   voted       a `redundant` step: 3 candidates (temperatures 0, 0.7, 1.0), field_majority vote
# "off" runs the model with `decoder_constraints: false` (schemas only checked after decoding).
#
#   bash benches/json_validity.sh        # needs `cargo run -- models pull`; ~9 minutes on 2 cores
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked --quiet
dir=target/bench-json
mkdir -p "$dir"
# A copy, so a build started meanwhile cannot swap the binary under the runs.
bin="$dir/pagantic"
cp "${CARGO_TARGET_DIR:-target}/debug/pagantic" "$bin"
schema='{ type: object, additionalProperties: false, required: [sentiment, rating], properties: { sentiment: { enum: [positive, negative, neutral] }, rating: { type: integer, minimum: 1, maximum: 5 } } }'
prompt='Classify this product review. Reply with JSON only: {\"sentiment\": \"positive\" | \"negative\" | \"neutral\", \"rating\": 1 to 5}. Review: {{ inputs.text }}'
for constraints in on off; do
  flag=$([ "$constraints" = on ] && echo true || echo false)
  for shape in raw structured voted; do
    plan="$dir/$shape-$constraints.yaml"
    case $shape in
      raw) step="type: infer
    max_tokens: 48$( ([ "$constraints" = on ] && printf '\n    constraint: { json_schema: %s }' "$schema") || true)" ;;
      structured) step="type: structured
    max_tokens: 48
    max_attempts: 1
    schema: $schema" ;;
      voted) step="type: redundant
    max_tokens: 48
    n: 3
    temperatures: [0.0, 0.7, 1.0]
    schema: $schema
    voting: { method: field_majority }" ;;
    esac
    cat > "$plan" <<PLAN
version: 1
name: json-$shape-$constraints
inputs:
  text: { type: string }
models:
  llm: { kind: mistralrs, decoder_constraints: $flag }
steps:
  - name: answer
    model: llm
    temperature: 0
    template: "$prompt"
    $step
PLAN
    rm -f "$dir/$shape-$constraints.jsonl"
    "$bin" run --quiet --no-cache "$plan" --batch benches/data/reviews-labelled.jsonl --id id -j 4 \
      --out "$dir/$shape-$constraints.jsonl" || true
  done
done
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
gold = {json.loads(l)["id"]: json.loads(l)["sentiment"] for l in open("benches/data/reviews-labelled.jsonl")}
def valid(v):
    return (isinstance(v, dict) and set(v) == {"sentiment", "rating"}
            and v["sentiment"] in ("positive", "negative", "neutral")
            and isinstance(v["rating"], int) and not isinstance(v["rating"], bool) and 1 <= v["rating"] <= 5)
def value(shape, line):
    if line["status"] != "ok":
        return None
    out = line["output"]
    if shape == "raw":
        try:
            out = json.loads(out.strip())
        except (ValueError, AttributeError):
            return None
    if shape == "voted":
        out = out.get("value")
    return out if valid(out) else None
print(f"{'answer':<12} {'constraints':<12} {'valid JSON':>11} {'sentiment right':>16}")
for shape in ("raw", "structured", "voted"):
    for c in ("off", "on"):
        lines = [json.loads(l) for l in open(f"{d}/{shape}-{c}.jsonl")]
        values = {l["row"]: value(shape, l) for l in lines}
        ok = [r for r, v in values.items() if v is not None]
        right = [r for r in ok if values[r]["sentiment"] == gold[r]]
        n = len(gold)
        print(f"{shape:<12} {c:<12} {len(ok):>5}/{n} {100*len(ok)/n:>4.0f}% {len(right):>9}/{n} {100*len(right)/n:>4.0f}%")
PY
