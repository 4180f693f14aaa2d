#!/usr/bin/env bash
# What moving a batch's trace bytes to a collector on the same machine costs by itself, with no
# span built: the 100,000-row scripted batch of benches/tracing.sh with export off, alone and
# with curl beside it posting the same bytes to the same receiver (one request pagantic sent,
# captured first, posted as many times as the batch sends requests, at the rate it sends them).
# Prints each side's median rows/s and CPU time, curl's CPU time, and the median of the rounds'
# own slowdowns. Set beside benches/tracing.sh's slowdown, it says how much of export's cost is
# the transfer (curl, the kernel's loopback TCP, the receiver) rather than pagantic's spans.
#
#   bash benches/tracing_floor.sh              # ROUNDS=12 by default; needs curl
set -euo pipefail
cd "$(dirname "$0")/.."
command -v curl > /dev/null || { echo "tracing_floor.sh: needs curl" >&2; exit 2; }
cargo build --locked --quiet
bin=./target/debug/pagantic
# shellcheck source=benches/tracing_common.sh
source benches/tracing_common.sh
bench_rows 12 2000
# One request as pagantic sends it (512 spans): the first that a 2,000-row batch sends.
rm -f "$dir/request.bin"
CAPTURE="$dir/request.bin" start_receiver "$dir"
rm -f "$dir/out.jsonl"
"$bin" run --quiet benches/plans/batch-scripted.yaml --batch "$dir/rows-2000.jsonl" \
  --out "$dir/out.jsonl" --id id --no-cache --otlp "$url"
kill "$receiver"
[ -s "$dir/request.bin" ] || { echo "tracing_floor.sh: no request was captured" >&2; exit 1; }
start_receiver "$dir"
# As many requests as the batch sends (5 spans a row, 512 a request), at the rate export sends
# them in a batch that runs at about 40,000 rows/s.
requests=$(( (rows * 5 + 511) / 512 ))
rate=$(( requests * 40000 / rows ))
urls=()
for _ in $(seq "$requests"); do urls+=("$url/v1/traces"); done
batch() { # the export-off batch, its rows/s and CPU time appended to results
  rm -f "$dir/out.jsonl"
  /usr/bin/time -f "%U %S" -o "$dir/time.txt" "$bin" run --quiet benches/plans/batch-scripted.yaml \
    --batch "$dir/rows-$rows.jsonl" --out "$dir/out.jsonl" --id id -j 16 \
    --summary "$dir/summary.json" --no-cache
}
: > "$dir/floor.txt"
for round in $(seq "$rounds"); do
  for side in $(printf 'alone\nbeside\n' | shuf); do
    sender=
    if [ "$side" = beside ]; then
      /usr/bin/time -f "%U %S" -o "$dir/curl.time" curl -s -o /dev/null --rate "$rate/s" \
        -H 'content-type: application/x-protobuf' --data-binary "@$dir/request.bin" "${urls[@]}" &
      sender=$!
    fi
    batch
    curl_cpu=0
    if [ -n "$sender" ]; then
      wait "$sender"
      curl_cpu=$(awk '{print $1 + $2}' "$dir/curl.time")
    fi
    read -r user sys < "$dir/time.txt"
    python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); print(sys.argv[2], sys.argv[3], s["rows_per_s"], float(sys.argv[4]) + float(sys.argv[5]), sys.argv[6])' \
      "$dir/summary.json" "$round" "$side" "$user" "$sys" "$curl_cpu" >> "$dir/floor.txt"
  done
done
python3 - "$dir/floor.txt" "$requests" "$(stat -c %s "$dir/request.bin")" <<'PY'
import collections, statistics, sys
rounds = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    round_, side, rate, cpu, curl = line.split()
    rounds[round_][side] = (float(rate), float(cpu), float(curl))
print(f"curl beside the batch: {sys.argv[2]} requests of {int(sys.argv[3]):,} bytes")
for side in ("alone", "beside"):
    mine = [r[side] for r in rounds.values()]
    print(f"export off, {side:<6}: median {statistics.median(m[0] for m in mine):9.1f} rows/s, "
          f"{statistics.median(m[1] for m in mine):5.2f} s CPU; curl {statistics.median(m[2] for m in mine):4.2f} s CPU")
slowdown = statistics.median(r["alone"][0] / r["beside"][0] - 1 for r in rounds.values())
print(f"slowdown from the transfer alone: {100 * slowdown:+.1f}% (median of {len(rounds)} rounds' pairs)")
PY
