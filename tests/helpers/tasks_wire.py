"""A raw JSON-RPC client over streamable HTTP, for checking the tasks wire exactly as the spec writes it.

2025-11-25 opens a session with `initialize`; 2026-07-28 sends the per-request `_meta` envelope and the
routing headers (`Mcp-Name` is the task id on `tasks/*`). A server request arriving on a response's SSE
stream (the 2025-11-25 `elicitation/create` on `tasks/result`) is handed to `on_request`, whose result (or
the error of the `WireError` it raises) is posted back, and the stream is read on to the request's own response.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2

LEGACY, MODERN = "2025-11-25", "2026-07-28"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
ServerRequest = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class WireError(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        self.code = int(error["code"])
        self.message = str(error.get("message"))
        self.data = error.get("data")
        super().__init__(f"{self.code}: {self.message}")


class Wire:
    def __init__(
        self,
        url: str,
        era: str,
        *,
        token: str | None = None,
        form: bool = True,
        url_mode: bool = False,
        tasks: bool = True,
    ) -> None:
        self.url = url
        self.era = era
        self._token = token
        elicitation: dict[str, Any] = {}
        if form:
            elicitation["form"] = {}
        if url_mode:
            elicitation["url"] = {}
        self.capabilities: dict[str, Any] = {"elicitation": elicitation} if elicitation else {}
        if tasks and era == MODERN:
            self.capabilities["extensions"] = {TASKS_EXTENSION: {}}
        self._headers: dict[str, str] = {"accept": "application/json, text/event-stream"}
        if token:
            self._headers["authorization"] = f"Bearer {token}"
        self._next_id = 0
        self._http: httpx2.AsyncClient | None = None
        self.initialized: dict[str, Any] = {}
        self.last_result: dict[str, Any] = {}
        """What the last `tasks/result` returned (2025-11-25)."""

    async def __aenter__(self) -> Wire:
        self._http = httpx2.AsyncClient(timeout=60)
        if self.era == LEGACY:
            params = {"protocolVersion": LEGACY, "capabilities": self.capabilities, "clientInfo": _INFO}
            response, messages = await self._post(self._message("initialize", params), self._headers)
            assert messages[-1]["result"]["protocolVersion"] == LEGACY, messages
            self.initialized = messages[-1]["result"]
            self._headers |= {"mcp-session-id": response.headers["mcp-session-id"], "mcp-protocol-version": LEGACY}
            await self._post({"jsonrpc": "2.0", "method": "notifications/initialized"}, self._headers)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._http is not None
        await self._http.aclose()

    def _message(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next_id += 1
        return {"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params}

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        on_request: ServerRequest | None = None,
        override: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """The result of one request; a JSON-RPC error raises `WireError`. `override` replaces routing headers."""
        params = dict(params or {})
        headers = dict(self._headers)
        if self.era == MODERN:
            params["_meta"] = {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": self.capabilities,
                "io.modelcontextprotocol/clientInfo": _INFO,
                **params.get("_meta", {}),
            }
            headers |= {"mcp-protocol-version": MODERN, "mcp-method": method}
            name = params.get("name") if method == "tools/call" else params.get("taskId")
            if isinstance(name, str):
                headers["mcp-name"] = name
        headers |= override or {}
        message = self._message(method, params)
        assert self._http is not None
        # JSON's own escapes (ensure_ascii), so that a test can send what no UTF-8 encoder writes: a lone "\ud800".
        content, headers["content-type"] = json.dumps(message), "application/json"
        async with self._http.stream("POST", self.url, content=content, headers=headers) as response:
            if "event-stream" not in response.headers.get("content-type", ""):
                body = json.loads(await response.aread())
                return _outcome(body)
            async for line in response.aiter_lines():
                if not line.startswith("data:") or not line[5:].strip():
                    continue
                received = json.loads(line[5:])
                if "method" in received and "id" in received:
                    if on_request is None:
                        raise AssertionError(f"unexpected server request {received}")
                    try:
                        reply: dict[str, Any] = {"result": await on_request(received)}
                    except WireError as refusal:  # the client answers the server's request with an error
                        reply = {"error": {"code": refusal.code, "message": refusal.message}}
                    await self._post({"jsonrpc": "2.0", "id": received["id"], **reply}, self._headers)
                    continue
                if received.get("id") == message["id"]:
                    return _outcome(received)
        raise AssertionError(f"no response to {method}")

    async def _post(self, body: dict[str, Any], headers: dict[str, str]) -> tuple[httpx2.Response, list[Any]]:
        assert self._http is not None
        response = await self._http.post(self.url, json=body, headers=headers)
        if "event-stream" in response.headers.get("content-type", ""):
            lines = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
            return response, [json.loads(line) for line in lines if line]
        return response, [response.json()] if response.content else []

    async def call_as_task(self, tool: str, arguments: dict[str, Any], ttl: int | None = None) -> dict[str, Any]:
        """`tools/call` asking for a task the era's way; returns the task (flat on both eras)."""
        params: dict[str, Any] = {"name": tool, "arguments": arguments}
        if self.era == LEGACY:
            params["task"] = {} if ttl is None else {"ttl": ttl}
            result = await self.request("tools/call", params)
            assert set(result) <= {"task", "_meta"}, result
            task: dict[str, Any] = result["task"]
            return task
        result = await self.request("tools/call", params)
        assert result["resultType"] == "task", result
        return result


def _outcome(body: dict[str, Any]) -> dict[str, Any]:
    if "error" in body:
        raise WireError(body["error"])
    result: dict[str, Any] = body["result"]
    return result


_INFO = {"name": "tasks-wire", "version": "0"}
