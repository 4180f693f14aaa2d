#!/usr/bin/env bash
# Instructions a scripted batch row's spans take to be built and encoded through the generated
# OTLP message types (opentelemetry-proto's structs, encoded by prost) rather than the trace
# module's own encoder, counted by valgrind's callgrind. A request pagantic sent for the scripted
# batch of benches/batch.sh (5 spans a row) is captured first; examples/otlp_generated_types.rs
# then fills a request of the same spans anew (every string and id allocated, as filling one from
# events does), encodes it and frees it, SMALL and LARGE times (100 and 300 by default); the
# difference between the two, per row, is what the generated types take for a row's spans, with
# no queue, thread or socket. Set it beside benches/tracing_instructions.sh's whole cost of
# export (encoding, queueing and sending) on the same build.
#
#   bash benches/tracing_generated.sh PAGANTIC GENERATED
#
# PAGANTIC is the pagantic binary that sends the request; GENERATED the example, built as
# benches/tracing_instructions.sh says (`RUSTFLAGS=""`, since valgrind does not decode the
# native build's AVX-512): `RUSTFLAGS="" CARGO_TARGET_DIR=/tmp/cg cargo build
# --no-default-features --example otlp_generated_types` gives /tmp/cg/debug/examples/....
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: benches/tracing_generated.sh PAGANTIC GENERATED" >&2; exit 2; }
command -v valgrind > /dev/null || { echo "valgrind is needed" >&2; exit 2; }
bin=$(realpath "$1")
generated=$(realpath "$2")
cd "$(dirname "$0")/.."
small=${SMALL:-100}
large=${LARGE:-300}
# shellcheck source=benches/tracing_common.sh
source benches/tracing_common.sh
ROWS=2000 bench_rows 1
# One request as pagantic sends it (512 spans): the first that a 2,000-row batch sends.
rm -f "$dir/request.bin" "$dir/out.jsonl"
CAPTURE="$dir/request.bin" start_receiver "$dir"
"$bin" run --quiet benches/plans/batch-scripted.yaml --batch "$dir/rows-2000.jsonl" \
  --out "$dir/out.jsonl" --id id --no-cache --otlp "$url"
kill "$receiver"
[ -s "$dir/request.bin" ] || { echo "tracing_generated.sh: no request was captured" >&2; exit 1; }

# Instructions of `rounds` rounds, and the spans a round.
count() { # rounds
  local log="$dir/callgrind.log" said
  said=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null --log-file="$log" \
    "$generated" "$dir/request.bin" "$1")
  echo "$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$log") ${said%% *}"
}
read -r few spans < <(count "$small")
read -r many _ < <(count "$large")
python3 - "$few" "$many" "$small" "$large" "$spans" <<'PY'
import sys
few, many, small, large, spans = map(int, sys.argv[1:6])
per_span = (many - few) / ((large - small) * spans)
print(f"the generated types take {per_span:,.0f} instructions a span to fill, encode and free: "
      f"{5 * per_span:,.0f} a row of 5 spans ({spans} spans a request)")
PY
