#!/usr/bin/env bash
# `kind: mcp` tools against a real peer: an MCP server written with the Python MCP SDK (`mcp`, its
# `MCPServer`), whose tools a pagantic agent on a scripted model calls over stdio (the server
# started by pagantic) and over streamable HTTP (the server started here). Prints a matrix:
# works / fails, and exits 0 only when every case works.
#
#   bash tests/compat/mcp_client.sh     # the first run creates a virtualenv (a minute, needs PyPI)
#
# Settings (environment): VENV (default target/mcp-compat-venv, shared with mcp.sh), BIN (a built
# pagantic; default target/debug/pagantic, built here when missing). The HTTP server listens on a
# free loopback port and is stopped however the script ends.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=${VENV:-target/mcp-compat-venv}
bin=${BIN:-target/debug/pagantic}
work=$(pwd)/target/mcp-client-compat
mkdir -p "$work"
[ -x "$bin" ] || cargo build --locked --quiet
if ! "$venv/bin/python" -c 'import mcp' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet 'mcp==2.3.0'
fi
python=$(cd "$(dirname "$venv/bin/python")" && pwd)/python

cat >"$work/server.py" <<'PY'
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("compat")


@server.tool()
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


@server.tool()
def shout(text: str) -> str:
    """Says the text in capitals."""
    return text.upper()


@server.tool()
def forbidden() -> str:
    """Not in the plan's allow list."""
    return "reached"


if sys.argv[1] == "stdio":
    server.run()
else:
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
PY

# Stops the server by PID however the script ends, keeping the script's exit status.
source tests/compat/stop_server.sh

# A plan whose agent calls `add` and `shout`, then `forbidden` (refused: not allowed), then answers.
write_plan() {
  cat >"$work/plan-$1.yaml" <<YAML
version: 1
name: mcp-client-compat
models:
  caller:
    kind: scripted
    replies:
      - { call: { tool: add, arguments: { a: 2, b: 3 } } }
      - { call: { tool: shout, arguments: { text: hello } } }
      - { call: { tool: forbidden, arguments: {} } }
      - done
tools:
  python:
    kind: mcp
    $2
    allow: [add, shout]
    side_effects: none
steps:
  - name: ask
    type: agent
    model: caller
    template: Use the tools.
    tools: [python]
YAML
}

# Runs the plan of transport $1 and checks the calls' results; prints "works" or "fails: why".
check() {
  local record
  if ! record=$("$bin" run "$work/plan-$1.yaml" --format json 2>"$work/run-$1.log"); then
    echo "fails: exit $? ($(tail -c 300 "$work/run-$1.log"))"
    return
  fi
  "$python" - "$record" <<'PY'
import json, sys

record = json.loads(sys.argv[1])
calls = next(s for s in record["steps"] if s["name"] == "ask")["detail"]["tool_calls"]
problems = []
if not (calls[0]["ok"] and "5" in calls[0]["result"]["text"]):
    problems.append(f"add: {calls[0]}")
if not (calls[1]["ok"] and "HELLO" in calls[1]["result"]["text"]):
    problems.append(f"shout: {calls[1]}")
if calls[2]["ok"] or calls[2]["error"]["code"] != "TOOL_NOT_FOUND":
    problems.append(f"forbidden was not refused: {calls[2]}")
print("fails: " + "; ".join(problems) if problems else "works")
PY
}

write_plan stdio "command: [\"$python\", \"$work/server.py\", stdio]"
stdio=$(check stdio)

port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$python" "$work/server.py" http "$port" >"$work/http-server.log" 2>&1 &
server=$!
for _ in $(seq 300); do
  "$python" -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null && break
  kill -0 "$server" 2>/dev/null || { cat "$work/http-server.log" >&2; exit 1; }
  sleep 0.1
done
write_plan http "url: http://127.0.0.1:$port/mcp"
http=$(check http)

mcp_version=$("$python" -c 'from importlib.metadata import version; print(version("mcp"))')
echo "| pagantic kind: mcp against | transport | result |"
echo "| --- | --- | --- |"
echo "| Python MCP SDK (mcp $mcp_version) MCPServer | stdio | $stdio |"
echo "| Python MCP SDK (mcp $mcp_version) MCPServer | streamable HTTP | $http |"
[ "$stdio" = works ] && [ "$http" = works ]
