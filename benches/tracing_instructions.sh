#!/usr/bin/env bash
# Instructions a scripted batch row costs, with trace export off and on, counted by valgrind's
# callgrind: deterministic where wall-clock time on a shared two-core machine is not (it moves by
# 15% and more between runs; instruction counts by a fraction of a percent). Each given build runs
# the scripted batch of benches/batch.sh (benches/plans/batch-scripted.yaml, 5 spans a row, -j 16)
# on SMALL and LARGE rows (3,000 and 6,000 by default) each way; the difference between the two
# sizes, divided by the rows between them, is a row's own cost (start-up and model-free set-up
# cancel out). Prints, per build, the instructions a row takes off and on, what export adds, and
# that share of the row; and checks that every row ran and no span was dropped.
#
#   bash benches/tracing_instructions.sh BINARY [BINARY ...]
#   SMALL=1000 LARGE=2000 bash benches/tracing_instructions.sh target/debug/pagantic
#
# valgrind does not decode the AVX-512 code that the repository's default `-C target-cpu=native`
# may emit: measure builds made with `RUSTFLAGS=""` (for pagantic alone, the build without the
# local engine is enough: `RUSTFLAGS="" CARGO_TARGET_DIR=... cargo build --no-default-features`).
# Traces go to the receiver the other trace benchmarks use (benches/tracing_common.sh).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: benches/tracing_instructions.sh BINARY [BINARY ...]" >&2; exit 2; }
command -v valgrind > /dev/null || { echo "valgrind is needed" >&2; exit 2; }
bins=()
for bin in "$@"; do bins+=("$(realpath "$bin")"); done
cd "$(dirname "$0")/.."
small=${SMALL:-3000}
large=${LARGE:-6000}
# shellcheck source=benches/tracing_common.sh
source benches/tracing_common.sh
ROWS=$small bench_rows 1 "$large"
start_receiver "$dir"

# Instructions of one batch over `rows` rows by build `bin`, with export `on` or off.
count() { # bin rows on|off
  local log="$dir/callgrind.log" otlp=()
  [ "$3" = on ] && otlp=(--otlp "$url")
  rm -f "$dir/out.jsonl" "$dir/summary.json"
  valgrind --tool=callgrind --callgrind-out-file=/dev/null --log-file="$log" \
    "$1" run --quiet benches/plans/batch-scripted.yaml --batch "$dir/rows-$2.jsonl" \
    --out "$dir/out.jsonl" --id id -j 16 --summary "$dir/summary.json" --no-cache "${otlp[@]}"
  python3 - "$dir/summary.json" "$2" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
rows = int(sys.argv[2])
assert s["rows_ok"] == rows, f"{s['rows_ok']} of {rows} rows ran"
assert s.get("trace_spans_dropped") in (None, 0), f"{s['trace_spans_dropped']} spans dropped"
PY
  sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$log"
}

for bin in "${bins[@]}"; do
  declare -A got=()
  for way in off on; do
    for rows in "$small" "$large"; do
      got[$way$rows]=$(count "$bin" "$rows" "$way")
    done
  done
  python3 - "$bin" "$small" "$large" "${got[off$small]}" "${got[off$large]}" "${got[on$small]}" "${got[on$large]}" <<'PY'
import sys
bin_, small, large = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
off_s, off_l, on_s, on_l = map(int, sys.argv[4:8])
off = (off_l - off_s) / (large - small)
on = (on_l - on_s) / (large - small)
print(f"{bin_}: a row takes {off:,.0f} instructions with export off, {on:,.0f} on: "
      f"export adds {on - off:,.0f} ({100 * (on - off) / off:.1f}% of the row); 0 spans dropped")
PY
  unset got
done
