"""A raw MCP client over streamable HTTP: JSON-RPC posts and the handshake of any protocol version, for peers the
SDK's client cannot be (an older version, a malformed request)."""

from __future__ import annotations

import json
from typing import Any

import httpx2


def post(url: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[httpx2.Response, list[dict[str, Any]]]:
    response = httpx2.post(url, json=body, headers=headers, timeout=30)
    if "event-stream" in response.headers.get("content-type", ""):
        lines = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        return response, [json.loads(line) for line in lines if line]
    return response, [response.json()] if response.content else []


def handshake(url: str, version: str, capabilities: dict[str, Any]) -> dict[str, str]:
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    response, messages = post(
        url,
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": version,
                "capabilities": capabilities,
                "clientInfo": {"name": "raw", "version": "0"},
            },
        },
        headers,
    )
    assert messages[0]["result"]["protocolVersion"] == version
    session = {**headers, "mcp-session-id": response.headers["mcp-session-id"], "mcp-protocol-version": version}
    post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    return session
