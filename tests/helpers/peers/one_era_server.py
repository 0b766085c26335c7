"""A stdio MCP server that speaks one protocol era only, as servers built for one revision do.

`--era 2025-11-25` (the default) speaks the `initialize` handshake only (2025-06-18 and 2025-11-25), as
servers built before 2026-07-28 do: no `server/discover` (`-32601`, like any method it does not know), and
every other request answered in the 2025 shapes whatever envelope it came in (no `resultType`), as servers
that do not check for the handshake answer. `--era 2026-07-28` speaks only the stateless era: it answers
`server/discover`, and refuses `initialize` with `-32022` naming the one version it serves.

Hand-written on purpose: the SDK's servers serve every era at once, so none of them can stand for a server
that does not know the other. Its tool `echo` answers its arguments; `malformed` answers a result no protocol
version accepts (content that is not a list), as a buggy server would; `announce` says, before answering, that
its tool list changed (a notice only the handshake era has), which it declares it does; `later` answers at
once, and logs `LATE` just before it answers the next request, as a task a call left running does. `--page N`
lists its tools N at a time, the cursor being the offset of the next page, as servers with long lists do. Run it
as `python -m tests.helpers.peers.one_era_server [--era ...] [--page N]`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

HANDSHAKE_VERSIONS = ("2025-06-18", "2025-11-25")
MODERN_VERSION = "2026-07-28"
SERVER_INFO = {"name": "one-era", "version": "1.0.0"}
TOOLS = [
    {"name": "echo", "description": "Say the arguments back.", "inputSchema": {"type": "object"}},
    {"name": "malformed", "description": "Answer a result that is not one.", "inputSchema": {"type": "object"}},
    {"name": "announce", "description": "Say that the tool list changed.", "inputSchema": {"type": "object"}},
    {"name": "later", "description": "Log a line after answering.", "inputSchema": {"type": "object"}},
]
LATE = "a line logged after its call ended"
pending: list[dict[str, Any]] = []
"""Notices to write before the next answer."""
page = len(TOOLS)
MODERN_RESULT = {"resultType": "complete", "ttlMs": 0, "cacheScope": "private"}


def handshake(request: dict[str, Any]) -> dict[str, Any]:
    method, params = request.get("method"), request.get("params") or {}
    if method == "initialize":
        offered = params.get("protocolVersion")
        version = offered if offered in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1]
        capabilities = {"tools": {"listChanged": True}}
        return {"result": {"protocolVersion": version, "capabilities": capabilities, "serverInfo": SERVER_INFO}}
    if method == "ping":
        return {"result": {}}
    if method == "tools/list":
        return {"result": listed(params)}
    return tool_call(method, params, {})


def modern(request: dict[str, Any]) -> dict[str, Any]:
    method, params = request.get("method"), request.get("params") or {}
    if method == "initialize":
        refused = {"supported": [MODERN_VERSION], "requested": params.get("protocolVersion")}
        return {"error": {"code": -32022, "message": "this server speaks 2026-07-28 only", "data": refused}}
    if method == "server/discover":
        info = {"io.modelcontextprotocol/serverInfo": SERVER_INFO}
        discovered = {"supportedVersions": [MODERN_VERSION], "capabilities": {"tools": {}}, "_meta": info}
        return {"result": {**MODERN_RESULT, **discovered}}
    if method == "tools/list":
        return {"result": {**MODERN_RESULT, **listed(params)}}
    return tool_call(method, params, MODERN_RESULT)


def listed(params: dict[str, Any]) -> dict[str, Any]:
    start = int(params.get("cursor") or 0)
    result: dict[str, Any] = {"tools": TOOLS[start : start + page]}
    if start + page < len(TOOLS):
        result["nextCursor"] = str(start + page)
    return result


def tool_call(method: object, params: dict[str, Any], shape: dict[str, Any]) -> dict[str, Any]:
    if method != "tools/call":
        return {"error": {"code": -32601, "message": f"Method not found: {method}"}}
    name = params.get("name")
    if name == "malformed":
        return {"result": {**shape, "content": "not a list"}}
    if name == "later":
        pending.append({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": LATE}})
        return {"result": {**shape, "content": [{"type": "text", "text": "later"}]}}
    if name == "announce":
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}) + "\n")
        return {"result": {**shape, "content": [{"type": "text", "text": "announced"}]}}
    if name != "echo":
        return {"error": {"code": -32602, "message": f"Unknown tool: {name}"}}
    said = json.dumps(params.get("arguments") or {})
    return {"result": {**shape, "content": [{"type": "text", "text": said}]}}


def main() -> None:
    parser = argparse.ArgumentParser()
    global page
    parser.add_argument("--era", choices=["2025-11-25", MODERN_VERSION], default="2025-11-25")
    parser.add_argument("--page", type=int, default=len(TOOLS))
    options = parser.parse_args()
    answer = modern if options.era == MODERN_VERSION else handshake
    page = options.page
    print("one-era server listening on stdio", file=sys.stderr, flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if "id" not in request:
            continue
        for notice in pending:
            sys.stdout.write(json.dumps(notice) + "\n")
        pending.clear()
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request["id"], **answer(request)}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
