#!/usr/bin/env bash
# The example test suites on the embedded models (the README's "Testing pipelines" figures):
#   plans/rag.test.yaml       12 questions over corpus/docs: retrieval and rerank metrics, answers
#   plans/classify.test.yaml  16 labelled reviews, two extraction prompts compared
# Writes the table to target/bench-tests/report.txt (and stdout) and the page to report.html.
#
#   bash benches/tests.sh        # needs `cargo run -- models pull`; ~15 minutes on 2 cores
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
"$PAGANTIC" test plans/rag.test.yaml plans/classify.test.yaml -j 1 \
  --out "$dir/report.txt" --html "$dir/report.html" || status=$?
cat "$dir/report.txt"
echo "wall: $(( $(date +%s) - start )) s; exit $status"
