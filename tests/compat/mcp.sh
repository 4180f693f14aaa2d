#!/usr/bin/env bash
# `pagantic serve` against real clients from PyPI: the Python MCP SDK (`mcp`) lists the served
# plans as tools and calls them over streamable HTTP (`serve --mcp`) and over stdio
# (`serve --mcp-stdio`, started as a subprocess), and the official `openai` client lists the plans
# as models (`client.models.list()`) and chats with one. Prints a matrix: works / fails, and exits
# 0 only when every case works.
#
#   bash tests/compat/mcp.sh     # the first run creates a virtualenv (a minute, needs PyPI)
#
# Settings (environment): VENV (default target/mcp-compat-venv), BIN (a built pagantic; default
# target/debug/pagantic, built here when missing). The server listens on a free loopback port and
# is stopped however the script ends.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=${VENV:-target/mcp-compat-venv}
bin=${BIN:-target/debug/pagantic}
work=target/mcp-compat
mkdir -p "$work"
[ -x "$bin" ] || cargo build --locked --quiet
if ! "$venv/bin/python" -c 'import mcp, openai' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet 'mcp==2.3.0' 'openai==3.57.0'
fi

# Stops the server by PID however the script ends, keeping the script's exit status.
source tests/compat/stop_server.sh

plans=(tests/plans/serve/echo.yaml tests/plans/serve_mcp/profile.yaml tests/plans/failing.yaml)
export MCP_COMPAT_TOKEN=compat-token
"$bin" serve --mcp --addr 127.0.0.1:0 --token-env MCP_COMPAT_TOKEN "${plans[@]}" \
  2>"$work/serve.log" &
server=$!
base=
for _ in $(seq 300); do
  base=$(sed -n 's#.*listening on \(http://[^ ]*\).*#\1#p' "$work/serve.log")
  [ -n "$base" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$base" ] || { echo "the server did not start" >&2; cat "$work/serve.log" >&2; exit 1; }

"$venv/bin/python" - "$base" "$MCP_COMPAT_TOKEN" "$bin" "${plans[@]}" <<'PY'
import asyncio, os, sys
from importlib.metadata import version

import openai
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

base, token, binary, plans = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
rows = []

def failure(e):
    return f"{type(e).__name__}: {e}"[:160]

async def case(client, name, check):
    """Runs one check and records what it says, or why it failed."""
    try:
        rows.append((client, name, "works", await check()))
    except Exception as e:  # every case is reported, whatever fails
        rows.append((client, name, "fails", failure(e)))

def text(result):
    return "".join(getattr(block, "text", "") for block in result.content)

async def exercise(label, client):
    """Lists the served plans as tools and calls a text one, a JSON one and a failing one."""
    async with client:
        listed = await client.list_tools()
        async def tools():
            names = [tool.name for tool in listed.tools]
            assert names == ["echo", "failing", "profile"], names
            echo = listed.tools[0]
            assert echo.input_schema["required"] == ["question"], echo.input_schema
            return f"{', '.join(names)} (protocol {client.protocol_version})"
        async def echo():
            result = await client.call_tool("echo", {"question": "hi", "times": 2})
            assert not result.is_error and text(result) == "echo: hi x2", result
            return text(result)
        async def profile():
            result = await client.call_tool("profile", {"person": "Ada"})
            assert result.structured_content == {"name": "Ada Lovelace", "born": 1815}, result
            return f"structuredContent {result.structured_content}"
        async def failing():
            result = await client.call_tool("failing", {})
            assert result.is_error and text(result).startswith("VALIDATION_RULE_FAILED"), result
            return "isError: " + text(result).splitlines()[0][:60]
        await case(label, "list tools", tools)
        await case(label, "call (text output)", echo)
        await case(label, "call (JSON output)", profile)
        await case(label, "call (failed run)", failing)

async def without_token():
    async with create_mcp_http_client() as bare:
        response = await bare.post(f"{base}/mcp", json={})
    assert response.status_code == 401, response.status_code
    return f"HTTP {response.status_code}"

async def mcp_cases():
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    stdio = StdioServerParameters(
        command=binary, args=["serve", "--mcp-stdio", *plans], cwd=os.getcwd()
    )
    for label, client in [
        ("mcp (HTTP)", lambda: Client(streamable_http_client(f"{base}/mcp", http_client=http))),
        ("mcp (stdio)", lambda: Client(stdio)),
    ]:
        try:
            await exercise(label, client())
        except Exception as e:
            rows.append((label, "connect", "fails", failure(e)))
    await case("mcp (HTTP)", "no token: 401", without_token)

async def openai_cases():
    client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=token)
    async def models():
        ids = sorted([m.id async for m in client.models.list()])
        assert ids == ["echo", "failing", "profile"], ids
        return ", ".join(ids)
    async def retrieve():
        model = await client.models.retrieve("echo")
        assert model.id == "echo" and model.owned_by == "pagantic", model
        return f"{model.id} owned_by {model.owned_by}"
    async def unknown():
        try:
            await client.models.retrieve("ecko")
        except openai.NotFoundError as e:
            return f"NotFoundError ({e.code})"
        raise AssertionError("no error for an unknown model")
    async def chat():
        reply = await client.chat.completions.create(
            model="echo", messages=[{"role": "user", "content": "hi"}]
        )
        assert reply.choices[0].message.content == "echo: hi x1", reply
        return reply.choices[0].message.content
    await case("openai", "models.list()", models)
    await case("openai", "models.retrieve()", retrieve)
    await case("openai", "models.retrieve(unknown)", unknown)
    await case("openai", "chat.completions.create()", chat)

asyncio.run(mcp_cases())
asyncio.run(openai_cases())
print(f"mcp {version('mcp')}, openai {version('openai')}, Python {sys.version.split()[0]}")
print("| client | case | result | detail |")
print("|---|---|---|---|")
for client, name, result, detail in rows:
    print(f"| {client} | {name} | {result} | {detail.replace('|', '/')} |")
sys.exit(0 if all(result == "works" for _, _, result, _ in rows) else 1)
PY
