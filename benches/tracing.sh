#!/usr/bin/env bash
# The cost of exporting traces: the 100,000-row scripted batch of benches/batch.sh with export
# off and on (OTLP/HTTP to a receiver on loopback that takes every request), ROUNDS runs of each,
# alternated; prints the median rows/s, wall time and CPU time (user + system) of each side, the
# slowdown, the peak RSS, and the spans dropped (the batch summary's `trace_spans_dropped`; must
# be 0). The receiver shares the machine: its own CPU time is printed too, since on a small
# machine it is part of the wall-time slowdown though no part of pagantic's cost; so is the
# system part of pagantic's, which on loopback includes the kernel's work of receiving what
# pagantic sends (a collector on another machine takes that work there). Besides the
# medians, the median of each round's own off/on slowdown, which a host whose speed drifts
# between rounds disturbs less.
#
#   bash benches/tracing.sh                    # ROWS=100000 ROUNDS=5 by default
#   RECEIVER=python bash benches/tracing.sh    # the receiver in Python's http.server instead
#   PAGANTIC=target/release/pagantic bash benches/tracing.sh   # a binary built beforehand
#
# The receiver is benches/tracing_common.sh's: examples/otlp_receiver.rs by default, Python's
# http.server with RECEIVER=python. The dev build, as benches/batch.sh uses, unless PAGANTIC
# names another (a release build: `cargo build --release --no-default-features` is enough for the
# scripted model); GNU time for the peak RSS.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${PAGANTIC:-}" ]; then
  bin=$PAGANTIC
else
  cargo build --locked --quiet
  bin=./target/debug/pagantic
fi
# shellcheck source=benches/tracing_common.sh
source benches/tracing_common.sh
bench_rows 5
start_receiver "$dir"
: > "$dir/results.txt"
measure() { # label, extra flags…
  local label=$1; shift
  rm -f "$dir/out.jsonl"
  local before after
  before=$(awk '{print $14 + $15}' "/proc/$receiver/stat")
  /usr/bin/time -f "%M %e %U %S" -o "$dir/time.txt" "$bin" run --quiet benches/plans/batch-scripted.yaml \
    --batch "$dir/rows-$rows.jsonl" --out "$dir/out.jsonl" --id id -j 16 \
    --summary "$dir/summary.json" --no-cache "$@"
  after=$(awk '{print $14 + $15}' "/proc/$receiver/stat")
  read -r rss_kb wall user sys < "$dir/time.txt"
  python3 - "$dir/summary.json" "$label" "$rss_kb" "$wall" "$user" "$sys" "$((after - before))" \
    "$(getconf CLK_TCK)" >> "$dir/results.txt" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
label, rss_kb, wall, user, system, ticks, hz = sys.argv[2:]
cpu = float(user) + float(system)
print(label, s["rows_per_s"], wall, int(rss_kb) // 1024, s.get("trace_spans_dropped", 0), s["rows_ok"],
      f"{cpu:.2f}", f"{int(ticks) / int(hz):.2f}", system)
PY
}
for _ in $(seq "$rounds"); do
  measure off
  measure on --otlp "$url"
done
python3 - "$dir/results.txt" <<'PY'
import statistics, sys
runs = [line.split() for line in open(sys.argv[1])]
def side(label):
    mine = [r for r in runs if r[0] == label]
    median = lambda column: statistics.median(float(r[column]) for r in mine)
    return (median(1), median(2), max(int(r[3]) for r in mine), sum(int(r[4]) for r in mine),
            len(mine), mine[0][5], median(6), median(7), median(8))
off, on = side("off"), side("on")
for label, (rate, wall, rss, dropped, n, rows, cpu, receiver, system) in (("export off", off), ("export on", on)):
    print(f"{label:<11} {rows} rows x {n}: median {rate:9.1f} rows/s, {wall:6.2f} s wall, "
          f"{cpu:5.2f} s CPU ({system:4.2f} s of it the kernel's; receiver {receiver:4.2f} s), "
          f"peak RSS {rss} MiB, spans dropped {dropped}")
print(f"slowdown with export on: {100 * (off[0] / on[0] - 1):+.1f}% (rows/s, median of medians)")
# Each round runs off then on back to back: the median of the rounds' own slowdowns is steadier
# than the medians' when the machine's speed drifts between rounds (a shared host).
pairs = [(float(a[1]), float(b[1])) for a, b in zip(runs[0::2], runs[1::2])]
paired = statistics.median(o / n - 1 for o, n in pairs)
print(f"paired slowdown: {100 * paired:+.1f}% (median of {len(pairs)} rounds' off/on pairs: "
      + ", ".join(f"{100 * (o / n - 1):+.1f}%" for o, n in pairs) + ")")
print(f"pagantic's CPU time with export on: {100 * (on[6] / off[6] - 1):+.1f}% "
      f"({1e6 * (on[6] - off[6]) / (int(on[5]) * 5):.2f} µs a span, at 5 spans a row; "
      f"the kernel's part {on[8] - off[8]:+.2f} s, sending over loopback included)")
PY
