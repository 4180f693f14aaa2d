#!/usr/bin/env bash
# The example test suites on the embedded models, each case run 5 times with no call cache (the
# figures and the spread in docs/testing.md, "Results on the embedded models"):
#   plans/rag.test.yaml       12 questions over corpus/docs: retrieval and rerank metrics, answers
#   plans/classify.test.yaml  16 labelled reviews, two extraction prompts compared
# Writes the table to target/bench-tests/report.txt (and stdout), the JSON report (what
# `pagantic test --baseline` reads) to report.json and the page to report.html.
#
#   bash benches/tests.sh        # needs `cargo run -- models pull`; ~15 minutes on 2 cores
# Set REPEAT=K for another number of runs per case.
# Set PAGANTIC=path/to/pagantic to use a binary already built.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PAGANTIC:-}" ]; then
  cargo build --locked --quiet
  PAGANTIC=./target/debug/pagantic
fi
dir=target/bench-tests
mkdir -p "$dir"
start=$(date +%s)
status=0
"$PAGANTIC" test plans/rag.test.yaml plans/classify.test.yaml -j 1 --no-cache \
  --repeat "${REPEAT:-5}" --format json --out "$dir/report.json" --html "$dir/report.html" \
  || status=$?
python3 - "$dir/report.json" <<'PY' | tee "$dir/report.txt"
import json, sys
report = json.load(open(sys.argv[1]))
for suite in report["suites"]:
    print(f"{suite['file']} (needs {suite['min_pass_rate']:.4g}): {'PASS' if suite['passed'] else 'FAIL'}")
    for variant in suite["variants"]:
        spread = variant["pass_rate_spread"]
        failed = [c["name"] for c in variant["cases"] if not c["passed"]]
        print(f"  {variant['name']}: {variant['passed']}/{variant['total']} cases passed every run; "
              f"pass rate per repeat {spread['mean']:.3f} ± {spread['std_dev']:.3f} "
              f"(min {spread['min']:.3f}, max {spread['max']:.3f}); flaky {variant['flaky']}; "
              f"tokens {variant['tokens']}; mean {variant['mean_ms'] / 1000:.1f} s per run")
        if failed:
            print(f"    failed: {', '.join(failed)}")
PY
echo "wall: $(( $(date +%s) - start )) s; exit $status"
