"""With the store unavailable a call fails with an error that says so, and that a retry is safe; the retry
after recovery goes on from what the operation recorded, and every side effect happens once.

The store goes away for real: PostgreSQL is reached through a TCP relay that drops its connections, and a SQLite file
is locked by another connection holding `BEGIN EXCLUSIVE` past the store's busy timeout. Calls go through
the SDK's own client and server, on the legacy era and on 2026-07-28 rounds.
"""

from __future__ import annotations

import logging
import socket
import sqlite3
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
import pytest
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ElicitRequestFormParams, ElicitRequestURLParams, ElicitResult

from mcp_elicit.model import Operator
from mcp_elicit.server import Accepted, Elicitation, Flow
from mcp_elicit.store import Store, StoreUnavailable, utc_now
from mcp_elicit.store.offload import AsyncStore
from mcp_elicit.store.postgres import PostgresStore
from mcp_elicit.store.sqlite import SQLiteStore
from tests.serving import Approval, Counter, accept
from tests.test_health import Relay
from tests.test_server_flow import error_text, text, unwrap

pytestmark = pytest.mark.anyio

RETRY_TEXT = "The decision store is unavailable right now"


class Outage(Protocol):
    store: Store
    secret: str
    """What names the store's location, which the caller must not be shown."""

    def begin(self) -> None: ...

    def end(self) -> None: ...


class Dropping(Relay):
    """A relay that keeps its port while PostgreSQL is away: it drops every connection, open or new, at once.

    Closing the listening socket instead would let another process's connection take the port meanwhile.
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.down = threading.Event()
        super().__init__(target)

    def drop(self) -> None:
        self.down.set()
        self.cut()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            if self.down.is_set():
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            with self._guard:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()


class PostgresDown:
    def __init__(self, url: str, relay: Dropping) -> None:
        self.relay = relay
        self.store: Store = PostgresStore(relay.url(url), clock=utc_now, connect_timeout=2)
        self.secret = str(relay.port)

    def begin(self) -> None:
        self.relay.drop()

    def end(self) -> None:
        self.relay.down.clear()


class SQLiteLocked:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.store: Store = SQLiteStore(path, clock=utc_now, busy_timeout=0.3)
        self.secret = str(path)
        self._locker: sqlite3.Connection | None = None

    def begin(self) -> None:
        self._locker = sqlite3.connect(self.path, isolation_level=None)
        self._locker.execute("BEGIN EXCLUSIVE")

    def end(self) -> None:
        assert self._locker is not None
        self._locker.execute("ROLLBACK")
        self._locker.close()


@pytest.fixture(params=["sqlite", "postgres"])
def outage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Outage]:
    taken: Outage
    if request.param == "sqlite":
        taken = SQLiteLocked(tmp_path / "elicit.db")
        yield taken
        taken.store.close()
        return
    pg_server: str = request.getfixturevalue("pg_server")
    parts = urlsplit(pg_server)
    relay = Dropping((parts.hostname or "127.0.0.1", parts.port or 5432))
    try:
        taken = PostgresDown(request.getfixturevalue("pg_schema_url"), relay)
        yield taken
        taken.store.close()
    finally:
        relay.release()
        relay.close()


async def back(store: Store) -> None:
    """Wait until the store answers again the way the server reaches it (a PostgreSQL pool reconnects with a
    growing pause, and drops each connection the outage broke when it is next used)."""
    reached = AsyncStore(store)
    with anyio.fail_after(60):
        while True:
            try:
                await reached(store.list_decisions, Operator(), limit=1)
                await anyio.to_thread.run_sync(lambda: store.list_decisions(Operator(), limit=1))
                return
            except StoreUnavailable:
                await anyio.sleep(0.2)


@pytest.fixture
def counter(tmp_path: Path) -> Counter:
    return Counter(tmp_path / "effects.json")


@pytest.fixture
def elicitation(outage: Outage, counter: Counter) -> Iterator[Elicitation]:
    runtime = Elicitation(outage.store, single_process=True, lease=timedelta(seconds=1))
    runtime.server("outage")

    @runtime.tool()
    async def book(flow: Flow, seats: int) -> str:
        await flow.step("plan", lambda: counter.bump("plan"))
        answer = await flow.ask(f"Book {seats} seats?", Approval, key="confirm")
        if isinstance(answer, Accepted) and answer.data.approve:
            await flow.step("apply", lambda: counter.bump("apply"))
            return f"booked {seats}"
        return type(answer).__name__.lower()

    @runtime.prompt()
    async def brief(flow: Flow, audience: str) -> str:
        await flow.step("draft", lambda: counter.bump("draft"))
        return f"Brief {audience}."

    yield runtime
    runtime.close()


class Person:
    """Approves every question; before the first answer, the store goes away (while the question is out)."""

    def __init__(self, outage: Outage | None) -> None:
        self.outage = outage
        self.asked = 0

    async def __call__(
        self, context: ClientRequestContext, params: ElicitRequestFormParams | ElicitRequestURLParams
    ) -> ElicitResult:
        self.asked += 1
        if self.outage is not None and self.asked == 1:
            self.outage.begin()
        return accept(approve=True)


def says_retry(result: CallToolResult, outage: Outage) -> None:
    message = error_text(result)
    assert RETRY_TEXT in message and "nothing was lost: call this tool again." in message, message
    assert outage.secret not in message


async def test_a_legacy_call_that_loses_the_store_says_retry_and_the_retry_acts_once(
    elicitation: Elicitation, outage: Outage, counter: Counter, caplog: pytest.LogCaptureFixture
) -> None:
    assert elicitation._server is not None
    person = Person(outage)
    async with Client(elicitation._server, mode="legacy", elicitation_callback=person) as client:
        with caplog.at_level(logging.WARNING, logger="mcp_elicit.server.runtime"):
            failed = await client.call_tool("book", {"seats": 2})
        says_retry(failed, outage)
        assert "the store being unavailable" in caplog.text and outage.secret in caplog.text
        outage.end()
        await back(outage.store)
        assert text(await client.call_tool("book", {"seats": 2})) == "booked 2"
    assert counter.read() == {"plan": 1, "apply": 1}
    assert person.asked == 2  # the answer given while the store was away was never recorded: asked again


async def test_a_round_retried_while_the_store_is_away_can_be_sent_again_once_it_is_back(
    elicitation: Elicitation, outage: Outage, counter: Counter
) -> None:
    assert elicitation._server is not None
    async with Client(elicitation._server, mode="2026-07-28", elicitation_callback=Person(None)) as client:
        first = await client.session.call_tool("book", {"seats": 3}, allow_input_required=True)
        assert not isinstance(first, CallToolResult)
        answered: dict[str, Any] = {
            "input_responses": {"confirm": accept(approve=True)},
            "request_state": first.request_state,
        }
        outage.begin()
        says_retry(await client.call_tool("book", {"seats": 3}, **answered), outage)
        outage.end()
        await back(outage.store)
        assert text(await client.call_tool("book", {"seats": 3}, **answered)) == "booked 3"
    assert counter.read() == {"plan": 1, "apply": 1}


async def test_a_call_made_while_the_store_is_away_fails_the_same_way(
    elicitation: Elicitation, outage: Outage, counter: Counter
) -> None:
    assert elicitation._server is not None
    async with Client(elicitation._server, mode="legacy", elicitation_callback=Person(None)) as client:
        outage.begin()
        says_retry(await client.call_tool("book", {"seats": 1}), outage)
        outage.end()
        await back(outage.store)
        assert text(await client.call_tool("book", {"seats": 1})) == "booked 1"
    assert counter.read() == {"plan": 1, "apply": 1}


async def test_a_prompt_gets_a_retryable_protocol_error(
    elicitation: Elicitation, outage: Outage, counter: Counter
) -> None:
    assert elicitation._server is not None
    async with Client(elicitation._server, mode="legacy") as client:
        outage.begin()
        with pytest.raises((MCPError, BaseExceptionGroup)) as raised:
            await client.get_prompt("brief", {"audience": "ops"})
        error = unwrap(raised.value)
        assert isinstance(error, MCPError) and error.code == -32603
        assert RETRY_TEXT in error.message and "get this prompt again" in error.message
        assert outage.secret not in error.message
        assert error.error.data == {"retryable": True}
        outage.end()
        await back(outage.store)
        again = await client.get_prompt("brief", {"audience": "ops"})
    assert "Brief ops." in str(again.messages[0].content)
    assert counter.read() == {"draft": 1}
