#!/usr/bin/env bash
# Two builds of pagantic side by side, both exporting traces: the 100,000-row scripted batch of
# benches/tracing.sh, run ROUNDS times by each build in an order shuffled every round, to the
# same receiver on loopback. Prints each build's median rows/s and CPU time, and the median of
# the rounds' own ratios (B against A), which a host whose speed drifts from one round to the
# next disturbs less than the medians. For judging a change to the export path, whose effect is
# a few percent of the off/on slowdown that benches/tracing.sh measures.
#
#   bash benches/tracing_ab.sh OLD_BINARY NEW_BINARY        # ROUNDS=20 by default
#   RECEIVER=python bash benches/tracing_ab.sh A B           # the receiver in Python instead
#
# A "binary" may be a script that runs one with settings, e.g. `#!/bin/sh` then
# `OTEL_TRACES_SAMPLER=always_off exec path/to/pagantic "$@"`. Build both the same way (for
# two commits: `git worktree add`, then `cargo build` in each with its own CARGO_TARGET_DIR).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: benches/tracing_ab.sh BINARY_A BINARY_B" >&2; exit 2; }
a=$(realpath "$1")
b=$(realpath "$2")
cd "$(dirname "$0")/.."
# shellcheck source=benches/tracing_common.sh
source benches/tracing_common.sh
bench_rows 20
start_receiver "$dir"
: > "$dir/ab.txt"
for round in $(seq "$rounds"); do
  for side in $(printf 'A\nB\n' | shuf); do
    bin=$a
    [ "$side" = B ] && bin=$b
    rm -f "$dir/out.jsonl"
    /usr/bin/time -f "%U %S" -o "$dir/time.txt" "$bin" run --quiet benches/plans/batch-scripted.yaml \
      --batch "$dir/rows-$rows.jsonl" --out "$dir/out.jsonl" --id id -j 16 \
      --summary "$dir/summary.json" --no-cache --otlp "$url"
    read -r user sys < "$dir/time.txt"
    python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); print(sys.argv[2], sys.argv[3], s["rows_per_s"], float(sys.argv[4]) + float(sys.argv[5]), s.get("trace_spans_dropped", 0))' \
      "$dir/summary.json" "$round" "$side" "$user" "$sys" >> "$dir/ab.txt"
  done
done
python3 - "$dir/ab.txt" "$a" "$b" <<'PY'
import collections, statistics, sys
rounds = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    round_, side, rate, cpu, dropped = line.split()
    rounds[round_][side] = (float(rate), float(cpu), int(dropped))
for side, path in (("A", sys.argv[2]), ("B", sys.argv[3])):
    mine = [r[side] for r in rounds.values()]
    print(f"{side} {path}: median {statistics.median(m[0] for m in mine):9.1f} rows/s, "
          f"{statistics.median(m[1] for m in mine):5.2f} s CPU, spans dropped {sum(m[2] for m in mine)}")
rate = statistics.median(r["B"][0] / r["A"][0] - 1 for r in rounds.values())
cpu = statistics.median(r["B"][1] / r["A"][1] - 1 for r in rounds.values())
print(f"B against A, median of {len(rounds)} rounds' ratios: rows/s {100 * rate:+.1f}%, CPU time {100 * cpu:+.1f}%")
PY
