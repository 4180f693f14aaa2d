"""A stand-in OpenAI-compatible server for tests/scale/slurm.sh: it echoes the last user message
after a short delay, and answers 429 (Retry-After: 0) to the first FAIL_COUNT requests whose
message names a row `r<i>` of shard FAIL_SHARD of SHARDS (i mod SHARDS) — one task's model
fails retryably for a while. It listens on a free loopback port, written to PORT_FILE once it
listens, and counts the answers it gave per row in COUNTS_FILE (JSON) when it gets SIGTERM.

    python3 stub_openai.py PORT_FILE COUNTS_FILE DELAY_S SHARDS FAIL_SHARD FAIL_COUNT
"""

import json
import os
import re
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port_file, counts_file = sys.argv[1], sys.argv[2]
delay, shards, fail_shard, fail_count = float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
lock = threading.Lock()
refused = 0
answered = {}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status, body, headers=()):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        global refused
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        text = [m for m in request["messages"] if m["role"] == "user"][-1]["content"]
        row = re.search(r"\br(\d+)\b", text)
        row = int(row.group(1)) if row else -1
        with lock:
            fail = row % shards == fail_shard and refused < fail_count
            refused += fail
        if fail:
            error = {"error": {"message": "slow down", "type": "rate_limit"}}
            return self.reply(429, error, [("Retry-After", "0")])
        time.sleep(delay)
        with lock:
            answered[row] = answered.get(row, 0) + 1
        words = len(text.split())
        self.reply(200, {
            "id": "stub", "object": "chat.completion", "model": request.get("model", "stub"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": f"label for {text}"}}],
            "usage": {"prompt_tokens": words, "completion_tokens": words + 2, "total_tokens": 2 * words + 2},
        })


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that went away mid-answer (the preempted task's rows in flight) is expected.
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


server = Server(("127.0.0.1", 0), Handler)


def stop(*_):
    with lock:
        json.dump({"refused": refused, "answered": {str(k): v for k, v in answered.items()}}, open(counts_file, "w"))
    threading.Thread(target=server.shutdown).start()


signal.signal(signal.SIGTERM, stop)
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(port_file + ".tmp", port_file)
server.serve_forever()
