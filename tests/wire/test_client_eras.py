"""The client kit against servers of other eras and servers that go away: the SDK's own `MCPServer` (in-process
at 2025-06-18, as a stdio subprocess, over loopback HTTP), and stdio servers that speak one era only.

- 2025-06-18 has no URL mode: the kit declares form mode only, and refuses a URL request unseen.
- A client pinned to an era is refused by a server that does not speak it, naming what it does.
- A server that dies (SIGKILL) or stops ends the `async with` block with one `ConnectionLost`.
- A block cancelled from outside ends its task with a cancellation whose context chain ends.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, CallToolResult, TextContent

from mcp_elicit.client import (
    Accept,
    ConnectionLost,
    Consent,
    ElicitingClient,
    FormReply,
    FormRequest,
    Http,
    KitError,
    NoPersonHandler,
    Stdio,
    UnsupportedEra,
    UrlReply,
    UrlRequest,
)
from mcp_elicit.client.handler import Mode
from mcp_elicit.client.session import Era
from tests.helpers.http_harness import free_port
from tests.helpers.peers.sdk_server import CONNECT_URL, server

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]
SDK_SERVER = Stdio(command=sys.executable, args=["-m", "tests.helpers.peers.sdk_server"], cwd=ROOT)
HANDSHAKE_ONLY = Stdio(command=sys.executable, args=["-m", "tests.helpers.peers.one_era_server"], cwd=ROOT)
MODERN_ONLY = Stdio(
    command=sys.executable, args=["-m", "tests.helpers.peers.one_era_server", "--era", "2026-07-28"], cwd=ROOT
)


def text(result: CallToolResult) -> str:
    assert not result.is_error, result.content
    first = result.content[0]
    assert isinstance(first, TextContent)
    return first.text


class Person:
    """Answers every form with two seats and consents to every URL, noting what it was shown."""

    def __init__(self, modes: tuple[Mode, ...]) -> None:
        self.modes = frozenset(modes)
        self.asked: list[FormRequest | UrlRequest] = []

    async def form(self, request: FormRequest) -> FormReply:
        self.asked.append(request)
        return Accept({"seats": 2})

    async def url(self, request: UrlRequest) -> UrlReply:
        self.asked.append(request)
        return Consent()


class Browser:
    def __init__(self) -> None:
        self.opened: list[str] = []

    def __call__(self, url: str) -> bool:
        self.opened.append(url)
        return True


# -- 2025-06-18: form mode only ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("modes", "declared"),
    [(("form", "url"), {"form": {}}), (("form",), {"form": {}}), (("url",), None)],
)
async def test_2025_06_18_declares_form_mode_only(modes: tuple[Mode, ...], declared: dict[str, object] | None) -> None:
    async with ElicitingClient(server, Person(modes), era="2025-06-18") as client:
        assert client.protocol_version == "2025-06-18"
        seen = json.loads(text(await client.call_tool("capabilities", {})))
    assert seen.get("elicitation") == declared


async def test_a_url_request_on_2025_06_18_is_refused_unseen_and_reaches_the_person_on_2025_11_25() -> None:
    person, browser = Person(("form", "url")), Browser()
    async with ElicitingClient(server, person, era="2025-06-18", opener=browser) as client:
        refused = text(await client.call_tool("connect", {}))
        booked = text(await client.call_tool("book", {"city": "Oslo"}))
    assert refused == "refused: -32602 protocol 2025-06-18 has no URL-mode elicitation"
    assert booked == "booked 2 to Oslo"
    assert [type(asked) for asked in person.asked] == [FormRequest]
    assert browser.opened == []

    person = Person(("form", "url"))
    async with ElicitingClient(server, person, era="2025-11-25", opener=browser) as client:
        seen = json.loads(text(await client.call_tool("capabilities", {})))
        consented = text(await client.call_tool("connect", {}))
    assert seen["elicitation"] == {"form": {}, "url": {}}
    assert consented == "accept"
    assert [type(asked) for asked in person.asked] == [UrlRequest]
    assert browser.opened == [CONNECT_URL]


# -- a required era the server does not speak ----------------------------------------------------------------


async def test_requiring_2026_07_28_of_a_handshake_only_server_names_what_it_speaks() -> None:
    with pytest.raises(UnsupportedEra) as refused:
        async with ElicitingClient(HANDSHAKE_ONLY, NoPersonHandler(), era="2026-07-28"):
            pytest.fail("the client opened on an era the server does not speak")
    assert refused.value.wanted == "2026-07-28"
    assert refused.value.offered == ("2025-11-25",)
    assert str(refused.value) == "the server does not speak protocol 2026-07-28; it offers 2025-11-25"

    for era in ("auto", "2025-11-25"):
        async with ElicitingClient(HANDSHAKE_ONLY, NoPersonHandler(), era=era) as client:
            assert client.protocol_version == "2025-11-25"
            assert text(await client.call_tool("echo", {"said": "hello"})) == '{"said": "hello"}'
    async with ElicitingClient(server, NoPersonHandler(), era="2026-07-28") as client:
        assert client.protocol_version == "2026-07-28"
        assert client.asker.server_name == "sdk-server"


@pytest.mark.parametrize("era", ["2025-06-18", "2025-11-25"])
async def test_pinning_a_handshake_era_of_a_server_that_speaks_2026_07_28_only_names_it(era: Era) -> None:
    with pytest.raises(UnsupportedEra) as refused:
        async with ElicitingClient(MODERN_ONLY, NoPersonHandler(), era=era):
            pytest.fail("the client opened on an era the server does not speak")
    assert (refused.value.wanted, refused.value.offered) == (era, ("2026-07-28",))
    async with ElicitingClient(MODERN_ONLY, NoPersonHandler()) as client:
        assert client.protocol_version == "2026-07-28"
        assert text(await client.call_tool("echo", {"said": "hello"})) == '{"said": "hello"}'


# -- a server that goes away ---------------------------------------------------------------------------------


def kill_when(marker: Path, pid: int) -> threading.Thread:
    """SIGKILL `pid` once `marker` exists (the tool wrote it: the call is in flight)."""

    def watch() -> None:
        deadline = time.monotonic() + 20
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(pid, signal.SIGKILL)

    killer = threading.Thread(target=watch, daemon=True)
    killer.start()
    return killer


@pytest.mark.parametrize("era", ["2025-11-25", "2026-07-28"])
async def test_a_stdio_server_killed_mid_call_ends_the_block_with_connection_lost(tmp_path: Path, era: Era) -> None:
    marker = tmp_path / "holding"
    with pytest.raises(KitError) as raised:
        async with ElicitingClient(SDK_SERVER, NoPersonHandler(), era=era) as client:
            killer = kill_when(marker, int(text(await client.call_tool("pid", {}))))
            await client.call_tool("hold", {"marker": str(marker), "seconds": 30})
    killer.join(timeout=5)
    assert type(raised.value) is ConnectionLost
    cause = raised.value.__cause__
    assert isinstance(cause, MCPError) and cause.code == CONNECTION_CLOSED
    assert not raised.value.connecting


class HttpServer:
    """The SDK server over loopback HTTP in a thread, until `stop` (at once: open event streams are cut)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        config = uvicorn.Config(server.streamable_http_app(host="127.0.0.1"), host="127.0.0.1", port=self.port)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def start(self) -> None:
        self._thread.start()
        wait_until(lambda: self._server.started)

    def stop(self) -> None:
        self._server.should_exit = self._server.force_exit = True
        self._thread.join(timeout=10)
        assert not self._thread.is_alive()


def wait_until(condition: Callable[[], bool], seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


@pytest.fixture
def http_server() -> Iterator[HttpServer]:
    running = HttpServer()
    running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.mark.parametrize("era", ["2025-11-25", "2026-07-28"])
async def test_an_http_server_stopped_mid_session_ends_the_block_with_connection_lost(
    http_server: HttpServer, era: Era
) -> None:
    with pytest.raises(KitError) as raised:
        async with ElicitingClient(Http(http_server.url), NoPersonHandler(), era=era) as client:
            assert text(await client.call_tool("pid", {})) == str(os.getpid())
            http_server.stop()
            await client.call_tool("pid", {})
    assert type(raised.value) is ConnectionLost
    assert raised.value.__cause__ is not None


async def test_an_exception_of_the_block_comes_out_as_it_is() -> None:
    with pytest.raises(LookupError) as raised:
        async with ElicitingClient(server, NoPersonHandler()) as client:
            await client.call_tool("pid", {})
            raise LookupError("the host's own failure")
    assert type(raised.value) is LookupError


def context_chain(error: BaseException) -> tuple[list[BaseException], bool]:
    """`error` and its `__context__`s, in order, and whether the chain loops back on itself."""
    chain: list[BaseException] = []
    link: BaseException | None = error
    while link is not None:
        if any(seen is link for seen in chain):
            return chain, True
        chain.append(link)
        link = link.__context__
    return chain, False


async def test_a_block_cancelled_mid_call_ends_its_task_with_a_cancellation_whose_context_chain_ends() -> None:
    """Cancelled from outside while a call is held, the kit's task ends in a cancellation whose `__context__`
    chain ends. When a task ends, anyio walks that chain through every cancellation in it: a chain that loops
    back on itself held the event loop there, past every timeout (a balancer test cancelled on a loaded machine).
    """
    held = MCPServer("held")
    holding = anyio.Event()

    @held.tool()
    async def hold() -> str:
        holding.set()
        await anyio.sleep_forever()
        return "never"

    ended: list[tuple[BaseException, bool]] = []

    async def host() -> None:
        try:
            async with ElicitingClient(held, NoPersonHandler(), era="2025-11-25") as client:
                await client.call_tool("hold", {})
        except BaseException as raised:
            chain, looped = context_chain(raised)
            ended.append((raised, looped))
            if looped:
                chain[-1].__context__ = None  # so that the task can end and the assertion below say why
            raise

    async with anyio.create_task_group() as group:
        group.start_soon(host)
        await holding.wait()
        group.cancel_scope.cancel()
    [(raised, looped)] = ended
    assert isinstance(raised, anyio.get_cancelled_exc_class())
    assert not looped, f"{raised!r}: its __context__ chain loops back on itself"
