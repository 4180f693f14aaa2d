# Sourced by the trace benchmarks (tracing.sh, tracing_ab.sh, tracing_floor.sh).
#
# `bench_rows ROUNDS [N ...]` sets `dir` (target/bench-tracing), `rows` (ROWS, 100,000 by
# default) and `rounds` (ROUNDS, else the number given), and writes the rows there (and N more).
#
# `start_receiver DIR` starts the OTLP/HTTP receiver they export to on a loopback port of its own
# (written to DIR/receiver.port), stops it by its PID when the script exits, however it ends, and
# sets `receiver` (the PID) and `url`. The receiver is examples/otlp_receiver.rs, one thread of
# Rust as the integration tests' receiver is; with RECEIVER=python, Python's http.server, which
# spends several times as much CPU on each request's headers. With CAPTURE=FILE, the Python one,
# keeping the first request's body in FILE.
bench_rows() {
  dir=target/bench-tracing
  mkdir -p "$dir"
  rows=${ROWS:-100000}
  rounds=${ROUNDS:-$1}
  shift
  python3 benches/gen_rows.py "$dir" "$rows" "$@"
}

start_receiver() {
  local dir=$1
  rm -f "$dir/receiver.port"
  if [ "${RECEIVER:-rust}" = python ] || [ -n "${CAPTURE:-}" ]; then
    # Answers every POST with 200, keeping the connection open as collectors do.
    python3 - "$dir/receiver.port" "${CAPTURE:-}" <<'PY' &
import http.server, os, sys
class Take(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        if sys.argv[2] and not os.path.exists(sys.argv[2]):
            open(sys.argv[2], "wb").write(body)
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Take)
open(sys.argv[1], "w").write(str(server.server_address[1]))
server.serve_forever()
PY
  else
    cargo build --locked --quiet --example otlp_receiver
    ./target/debug/examples/otlp_receiver "$dir/receiver.port" &
  fi
  receiver=$!
  trap 'kill "$receiver" 2>/dev/null || true' EXIT
  while [ ! -s "$dir/receiver.port" ]; do
    kill -0 "$receiver" 2>/dev/null || { echo "the OTLP receiver did not start" >&2; exit 1; }
    sleep 0.1
  done
  url="http://127.0.0.1:$(cat "$dir/receiver.port")"
}
