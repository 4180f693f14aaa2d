#!/usr/bin/env bash
# How far the `judge` assertion can be trusted on a model: grades 32 answers whose correctness is
# known (benches/judge/labelled.jsonl: 16 questions, each with a right and a wrong answer) and
# prints the judge's agreement with the labels and how often it passed a wrong answer.
#
#   bash benches/judge.sh        # the embedded model; needs `cargo run -- models pull`; ~1 minute
# Set PAGANTIC=path/to/pagantic to use a binary already built. To measure another judge, change
# the `llm` model in benches/judge/answer.yaml (a bigger GGUF file, or a `kind: openai` server).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PAGANTIC:-}" ]; then
  cargo build --locked --quiet
  PAGANTIC=./target/debug/pagantic
fi
dir=target/bench-judge
mkdir -p "$dir"
start=$(date +%s)
# Exit 1 is expected (a good judge fails the wrong answers, so the suite fails): the agreement
# below is the result, computed from the JSON report.
"$PAGANTIC" test benches/judge/judge.test.yaml -j 1 --no-cache --format json \
  --out "$dir/report.json" || [ $? -eq 1 ]
python3 - "$dir/report.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
cases = report["suites"][0]["variants"][0]["cases"]
agree = right = wrong = false_pass = false_fail = broken = 0
for case in cases:
    label = "right" if case["name"].endswith("-right") else "wrong"
    verdicts = [a for a in case["assertions"] if a["type"] == "judge"]
    if not verdicts or verdicts[0].get("note") is None:
        broken += 1
        continue
    passed = verdicts[0]["passed"]
    if label == "right":
        right += 1
        false_fail += not passed
    else:
        wrong += 1
        false_pass += passed
    agree += passed == (label == "right")
graded = right + wrong
print(f"judged {graded} answers ({right} right, {wrong} wrong), {broken} without a verdict")
print(f"agreement with the labels: {agree}/{graded} ({agree / max(graded, 1):.0%})")
print(f"passed a wrong answer:     {false_pass}/{wrong} ({false_pass / max(wrong, 1):.0%})")
print(f"failed a right answer:     {false_fail}/{right} ({false_fail / max(right, 1):.0%})")
PY
echo "wall: $(( $(date +%s) - start )) s"
