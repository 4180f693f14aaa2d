#!/usr/bin/env python3
"""`pagantic serve` under an idle-connection flood, with the default limits.

Starts `serve` under `ulimit -n 1024`, opens 1,100 idle connections, then times `/healthz`,
reads the connection gauges from `/metrics`, waits for the idle timeout to close the sockets
and times the exit on SIGTERM. The server is stopped however the script ends.

    cargo build --locked && python3 benches/serve_flood.py
Set PAGANTIC=path/to/pagantic to use another binary.
"""
import os
import re
import resource
import socket
import subprocess
import time
import urllib.request

CONNECTIONS = 1100
binary = os.environ.get("PAGANTIC", "target/debug/pagantic")
resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
server = subprocess.Popen(
    ["bash", "-c", f"ulimit -n 1024; exec {binary} serve tests/plans/serve/echo.yaml --addr 127.0.0.1:0"],
    stderr=subprocess.PIPE,
    text=True,
)
sockets = []
try:
    address = re.search(r"http://(\S+)", server.stderr.readline()).group(1)
    host, port = address.split(":")
    for _ in range(CONNECTIONS):
        sockets.append(socket.create_connection((host, int(port))))
    start = time.time()
    body = urllib.request.urlopen(f"http://{address}/healthz", timeout=10).read()
    print(f"/healthz with {CONNECTIONS} idle connections open: {body!r} in {time.time() - start:.3f} s")
    metrics = urllib.request.urlopen(f"http://{address}/metrics", timeout=10).read().decode()
    print([line for line in metrics.splitlines() if "connections" in line and not line.startswith("#")])
    start = time.time()
    closed = 0
    for sock in sockets:
        sock.settimeout(60)
        try:
            closed += sock.recv(10) == b""
        except OSError:
            closed += 1
    print(f"{closed} of {CONNECTIONS} closed by the server after {time.time() - start:.1f} s")
    server.terminate()
    start = time.time()
    server.wait(timeout=30)
    print(f"SIGTERM: exit {server.returncode} in {time.time() - start:.2f} s")
finally:
    for sock in sockets:
        sock.close()
    if server.poll() is None:
        server.kill()
        server.wait()
