#!/usr/bin/env bash
# Reduce throughput and memory: 1,000,000 scripted rows in 10,000 groups grouped (spilled to the
# on-disk store) and reduced once per group — input rows/s end to end and peak RSS (targets:
# at least 20,000 rows/s, under 300 MB) — then the runs a 1,000-row group takes at --fold 50.
#
#   bash benches/reduce.sh            # ROWS=1000000 GROUP_COUNT=10000 by default
#
# The dev build (the profile of the README commands: dependencies optimised, pagantic itself
# at level 1); GNU time for the peak RSS. Prints one line per measurement.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked --quiet
bin=./target/debug/pagantic
dir=target/bench-reduce
rows=${ROWS:-1000000}
groups=${GROUP_COUNT:-10000}
mkdir -p "$dir"
cat > "$dir/count.yaml" <<'YAML'
version: 1
name: reduce-count
inputs:
  rows: { type: array }
  group: { type: string }
  fold_level: { type: integer, default: 0 }
models:
  llm: { kind: scripted, echo: true }
steps:
  - name: count
    type: infer
    model: llm
    template: >-
      {% if inputs.fold_level == 0 %}{{ inputs.group }}: {{ inputs.rows | length }} reviews,
      {{ inputs.rows | map(attribute='stars') | sum }} stars{% else %}{{ inputs.group }}:
      {{ inputs.rows | length }} partial counts{% endif %}
YAML
python3 - "$dir" "$rows" "$groups" <<'PY'
import json, sys
directory, rows, groups = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
reviews = ["Light, fast, battery lasts all day.", "Fans get loud under load.",
           "Arrived broken; support never answered.", "Does the job.", "Great screen, pricey."]
with open(f"{directory}/rows.jsonl", "w") as f:
    for i in range(rows):
        f.write(json.dumps({"id": f"r{i}", "product": f"p{i % groups}", "stars": i % 5 + 1,
                            "text": f"{reviews[i % len(reviews)]} (#{i})"}) + "\n")
with open(f"{directory}/one-group.jsonl", "w") as f:
    for i in range(1000):
        f.write(json.dumps({"id": f"r{i}", "product": "p0", "stars": i % 5 + 1}) + "\n")
PY
measure() { # input, label, extra flags…
  local input=$1 label=$2
  shift 2
  rm -f "$dir/out.jsonl" "$dir/out.jsonl.meta.json" "$dir/out.jsonl.chunks.jsonl"
  /usr/bin/time -f "%M %e" -o "$dir/time.txt" "$bin" run --quiet "$dir/count.yaml" --batch "$input" \
    --group-by product --out "$dir/out.jsonl" -j 16 --summary "$dir/summary.json" --no-cache "$@"
  read -r rss_kb wall < "$dir/time.txt"
  python3 - "$dir/summary.json" "$label" "$rss_kb" "$wall" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
g = s["grouped"]
print(f"{sys.argv[2]:<36} {g['input_rows']:>8} rows  {g['groups']:>6} groups  "
      f"{g['input_rows_per_s']:>9.0f} input rows/s  {s['model_calls']:>6} model calls  "
      f"peak RSS {int(sys.argv[3]) / 1024:.0f} MiB  ({sys.argv[4]} s wall, {s['rows_failed']} failed)")
PY
}
measure "$dir/rows.jsonl" "reduce, scripted, -j 16"
measure "$dir/one-group.jsonl" "1,000-row group, --fold 50" --fold 50
