"""With the store unavailable a call fails with an error that says so, and that a retry is safe; the retry
after recovery goes on from what the operation recorded, and every side effect happens once. A store that a
retry cannot get past (read-only, or its SQLite file deleted or replaced) is named as such, with what an
operator must do and no suggestion to call again; each failed call is one line in the log, never a traceback.

The store goes away for real: PostgreSQL is reached through a TCP relay that drops its connections, and a SQLite file
is locked by another connection holding `BEGIN EXCLUSIVE` past the store's busy timeout. A SQLite file is deleted or
renamed over, made immutable (`chattr +i`: root writes whatever a file's mode says) or put in a directory under a
read-only bind mount (for any other user, the mode of the file or directory does it); a PostgreSQL database of the
test's own gets `default_transaction_read_only`. Calls go through the SDK's own client and server, on the legacy era
and on 2026-07-28 rounds; tasks and the decision pages over real HTTP; the CLI as the installed command.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sqlite3
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import anyio
import anyio.to_thread
import psycopg
import pytest
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ElicitRequestFormParams, ElicitRequestURLParams, ElicitResult

from mcp_elicit.model import Operator
from mcp_elicit.server import Accepted, Elicitation, Flow, RequestState, Timing
from mcp_elicit.server.tasks import TaskPolicy, TaskSettings
from mcp_elicit.store import Store, StoreReadOnly, StoreUnavailable, open_store, utc_now
from mcp_elicit.store.aio import AsyncStore
from mcp_elicit.store.postgres import PostgresStore
from mcp_elicit.store.sqlite import SQLiteStore
from tests.helpers.commands import cli
from tests.helpers.doctor import GOOD
from tests.helpers.doctor import run as doctor
from tests.helpers.http_harness import StaticTokenVerifier, auth_settings, free_port, serving
from tests.helpers.inbox_site import browser, call, inbox_site, only, sign_in, token
from tests.helpers.pages_site import hidden
from tests.helpers.person import accept
from tests.helpers.records import Records
from tests.helpers.relay import Relay
from tests.helpers.results import error_text, text, unwrap
from tests.helpers.server import Approval, Counter
from tests.helpers.tasks_wire import MODERN, Wire

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
            with self._guard:  # a drop between the look above and here must not miss this connection
                if self.down.is_set():
                    client.close()
                    upstream.close()
                    continue
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
                await reached.list_decisions(Operator(), limit=1)
                await anyio.to_thread.run_sync(lambda: store.list_decisions(Operator(), limit=1))
                return
            except StoreUnavailable:
                await anyio.sleep(0.2)


@pytest.fixture
def counter(tmp_path: Path) -> Counter:
    return Counter(tmp_path / "effects.json")


@pytest.fixture
def elicitation(outage: Outage, counter: Counter) -> Iterator[Elicitation]:
    runtime = booking(outage.store, counter)
    yield runtime
    runtime.close()


def booking(store: Store, counter: Counter) -> Elicitation:
    """A served app on `store`: the tool `book` (a step, a question, a step) and the prompt `brief` (a step)."""
    runtime = Elicitation(
        store, request_state=RequestState(single_process=True), timing=Timing(lease=timedelta(seconds=1))
    )
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

    return runtime


class Person:
    """Approves every question; before the first answer, `first` takes the store away (while the question is out)."""

    def __init__(self, first: Callable[[], None] | None) -> None:
        self.first = first
        self.asked = 0

    async def __call__(
        self, context: ClientRequestContext, params: ElicitRequestFormParams | ElicitRequestURLParams
    ) -> ElicitResult:
        self.asked += 1
        if self.first is not None and self.asked == 1:
            self.first()
        return accept(approve=True)


def says_retry(result: CallToolResult, outage: Outage) -> None:
    message = error_text(result)
    assert RETRY_TEXT in message and "nothing was lost: call this tool again." in message, message
    assert outage.secret not in message


async def test_a_legacy_call_that_loses_the_store_says_retry_and_the_retry_acts_once(
    elicitation: Elicitation, outage: Outage, counter: Counter, caplog: pytest.LogCaptureFixture
) -> None:
    person = Person(outage.begin)
    async with Client(elicitation.mcp_server, mode="legacy", elicitation_callback=person) as client:
        with caplog.at_level(logging.WARNING, logger="mcp_elicit.server.runtime"):
            failed = await client.call_tool("book", {"seats": 2})
        says_retry(failed, outage)
        [line] = [record for record in caplog.records if record.name == "mcp_elicit.server.runtime"]
        assert line.levelno == logging.WARNING and line.exc_info is None
        assert line.getMessage().startswith(f"tool book failed: {RETRY_TEXT}") and outage.secret in line.getMessage()
        outage.end()
        await back(outage.store)
        assert text(await client.call_tool("book", {"seats": 2})) == "booked 2"
    assert counter.read() == {"plan": 1, "apply": 1}
    assert person.asked == 2  # the answer given while the store was away was never recorded: asked again


async def test_a_round_retried_while_the_store_is_away_can_be_sent_again_once_it_is_back(
    elicitation: Elicitation, outage: Outage, counter: Counter
) -> None:
    async with Client(elicitation.mcp_server, mode="2026-07-28", elicitation_callback=Person(None)) as client:
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
    async with Client(elicitation.mcp_server, mode="legacy", elicitation_callback=Person(None)) as client:
        outage.begin()
        says_retry(await client.call_tool("book", {"seats": 1}), outage)
        outage.end()
        await back(outage.store)
        assert text(await client.call_tool("book", {"seats": 1})) == "booked 1"
    assert counter.read() == {"plan": 1, "apply": 1}


async def test_a_prompt_gets_a_retryable_protocol_error(
    elicitation: Elicitation, outage: Outage, counter: Counter
) -> None:
    async with Client(elicitation.mcp_server, mode="legacy") as client:
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


# -- stores a retry cannot get past --------------------------------------------------------------------------------

READ_ONLY = "The decision store is read-only (its file, directory or database refuses writes)"
WRITABLE = "an operator makes it writable"
REPLACED = "The decision store's file was deleted or replaced while the server ran"
RESTART = "an operator restarts the server"


def says_until(message: str, condition: str, remedy: str, secret: str) -> None:
    """The condition, what must happen first, and no suggestion that calling again would do."""
    said = f"{condition}; this call changed nothing, and trying again fails the same way until {remedy}."
    assert message.endswith(said), message
    assert "call this tool again" not in message and "get this prompt again" not in message
    assert secret not in message


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    traced = [(record.name, record.getMessage()) for record in caplog.records if record.exc_info]
    assert traced == []


def failed_calls(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The runtime's lines, each of which must be a WARNING."""
    lines = [record for record in caplog.records if record.name == "mcp_elicit.server.runtime"]
    assert {record.levelno for record in lines} <= {logging.WARNING}
    return [record.getMessage() for record in lines]


@contextmanager
def unwritable(path: Path) -> Iterator[None]:
    """`path`, a file or a directory, refuses writes until the block ends, for root as well.

    Root writes whatever a mode says, so as root a file is made immutable and a directory is covered by a
    read-only bind mount of itself; where that is not permitted (a container without the capability), the
    test is skipped, saying so. For any other user the mode does it.
    """
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(mode & ~0o222)
        try:
            yield
        finally:
            path.chmod(mode)
        return
    where = str(path)
    if path.is_dir():
        steps, undo = [["mount", "--bind", where, where], ["mount", "-o", "remount,bind,ro", where]], ["umount", where]
    else:
        steps, undo = [["chattr", "+i", where]], ["chattr", "-i", where]
    for done, step in enumerate(steps):
        try:
            ran = subprocess.run(step, capture_output=True, text=True, check=False)
        except FileNotFoundError as missing:
            ran = subprocess.CompletedProcess(step, 127, "", str(missing))
        if ran.returncode != 0:
            if done:
                subprocess.run(undo, check=True)
            pytest.skip(f"as root, only `{' '.join(step)}` makes {where} read-only, and it failed here: {ran.stderr}")
    try:
        yield
    finally:
        subprocess.run(undo, check=True)


@contextmanager
def own_database(pg_server: str, prefix: str) -> Iterator[str]:
    """The URL of a migrated database of this test's own, dropped afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        url = urlunsplit(urlsplit(pg_server)._replace(path=f"/{name}"))
        PostgresStore(url, clock=utc_now).close()
        yield url
    finally:
        with psycopg.connect(pg_server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def read_only_database(pg_server: str) -> Iterator[str]:
    """A database set to `default_transaction_read_only` (what a new session of it gets; a hot standby refuses
    writes with the same SQLSTATE)."""
    with own_database(pg_server, "elicit_ro") as url, psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{urlsplit(url).path.lstrip("/")}" SET default_transaction_read_only = on')
        yield url


@contextmanager
def reading_role(pg_server: str) -> Iterator[str]:
    """A database reached as a role that may only read its tables (a deployment that granted the store's user
    too little)."""
    role = f"elicit_reader_{uuid.uuid4().hex[:12]}"
    with own_database(pg_server, "elicit_priv") as url:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'CREATE ROLE "{role}" LOGIN')
            admin.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{role}"')
        try:
            parts = urlsplit(url)
            yield urlunsplit(parts._replace(netloc=f"{role}@{parts.netloc.rpartition('@')[2]}"))
        finally:
            with psycopg.connect(url, autocommit=True) as admin:
                admin.execute(f'DROP OWNED BY "{role}"')
                admin.execute(f'DROP ROLE IF EXISTS "{role}"')


@pytest.fixture(params=["sqlite", "postgres", "postgres-role"])
def read_only(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The URL of a store that opens and reads but refuses every write, and what names its location."""
    if request.param == "sqlite":
        path = tmp_path / "elicit.db"
        SQLiteStore(path, clock=utc_now).close()
        with unwritable(path):
            yield f"sqlite://{path}", str(path)
        return
    refusing = read_only_database if request.param == "postgres" else reading_role
    with refusing(request.getfixturevalue("pg_server")) as url:
        yield url, urlsplit(url).path.lstrip("/")


def test_a_read_only_store_opens_reads_and_refuses_each_write_as_read_only(read_only: tuple[str, str]) -> None:
    url, secret = read_only
    store = open_store(url)
    try:
        assert store.list_decisions(Operator()) == []
        with pytest.raises(StoreReadOnly, match="is read-only") as refused:
            Records(store, utc_now).operation()
        assert secret in str(refused.value)
        assert isinstance(refused.value, StoreUnavailable) and refused.value.remedy == WRITABLE
        assert store.list_decisions(Operator()) == []
    finally:
        store.close()


async def test_a_read_only_store_is_named_read_only_to_the_caller_without_a_retry_or_a_traceback(
    read_only: tuple[str, str], counter: Counter, caplog: pytest.LogCaptureFixture
) -> None:
    url, secret = read_only
    runtime = booking(open_store(url), counter)
    try:
        async with Client(runtime.mcp_server, mode="2026-07-28", elicitation_callback=Person(None)) as client:
            with caplog.at_level(logging.INFO):
                failed = await client.call_tool("book", {"seats": 2})
                with pytest.raises((MCPError, BaseExceptionGroup)) as raised:
                    await client.get_prompt("brief", {"audience": "ops"})
    finally:
        runtime.close()
    says_until(error_text(failed), READ_ONLY, WRITABLE, secret)
    error = unwrap(raised.value)
    assert isinstance(error, MCPError) and error.code == -32603 and error.error.data == {"retryable": False}
    says_until(error.message, READ_ONLY, WRITABLE, secret)
    no_tracebacks(caplog)
    lines = failed_calls(caplog)
    assert [line.split(":")[0] for line in lines] == ["tool book failed", "prompt brief failed"]
    assert all(f": {READ_ONLY}: " in line and secret in line for line in lines)
    assert counter.read() == {}


@pytest.mark.parametrize("how", ["deleted", "replaced"])
async def test_a_sqlite_file_deleted_or_replaced_under_the_server_is_named_with_what_to_do_and_logged_in_a_line(
    tmp_path: Path, counter: Counter, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    path = tmp_path / "elicit.db"
    runtime = booking(SQLiteStore(path, clock=utc_now), counter)

    def take_away() -> None:
        if how == "deleted":
            path.unlink()
            return
        other = tmp_path / "other.db"
        SQLiteStore(other, clock=utc_now).close()
        other.replace(path)

    try:
        async with Client(runtime.mcp_server, mode="legacy", elicitation_callback=Person(take_away)) as client:
            with caplog.at_level(logging.INFO):
                answered = await client.call_tool("book", {"seats": 2})
                again = await client.call_tool("book", {"seats": 2})
                with pytest.raises((MCPError, BaseExceptionGroup)) as raised:
                    await client.get_prompt("brief", {"audience": "ops"})
    finally:
        runtime.close()
    for result in (answered, again):
        says_until(error_text(result), REPLACED, RESTART, str(path))
    error = unwrap(raised.value)
    assert isinstance(error, MCPError) and error.error.data == {"retryable": False}
    says_until(error.message, REPLACED, RESTART, str(path))
    no_tracebacks(caplog)
    assert failed_calls(caplog) == [
        f"{kind} failed: {REPLACED} ({path})" for kind in ["tool book"] * 2 + ["prompt brief"]
    ]
    [found] = [r for r in caplog.records if r.name == "mcp_elicit.store.sqlite" and r.levelno >= logging.WARNING]
    assert found.levelno == logging.ERROR and f"{path}-wal beside it" in found.getMessage()  # what to do, once
    assert counter.read() == {"plan": 1}


def test_a_sqlite_store_in_a_read_only_directory_is_refused_as_read_only_and_the_cli_says_so(tmp_path: Path) -> None:
    directory = tmp_path / "store"
    directory.mkdir()
    path = directory / "elicit.db"
    SQLiteStore(path, clock=utc_now).close()  # closed cleanly: no -wal or -shm file is left to read it with
    with unwritable(directory):
        with pytest.raises(StoreReadOnly) as refused:
            open_store(f"sqlite://{path}")
        assert str(refused.value).startswith(f"{path} is read-only: ")
        with pytest.raises(StoreReadOnly, match=f"its directory {directory}, where SQLite creates"):
            open_store(f"sqlite://{directory / 'new.db'}")
        listed = cli("decisions", "ls", store=f"sqlite://{path}")
        code, problems, _ = doctor(tmp_path, {**GOOD, "MCP_ELICIT_STORE": f"sqlite://{path}"})
    assert listed.returncode == 2 and listed.stdout == ""
    assert listed.stderr.startswith(f"error: {path} is read-only: ") and "unable to open" not in listed.stderr
    assert code == 1 and problems == [f"store: {refused.value}"]  # what to do, and no advice beside it


def test_the_cli_lists_a_read_only_database_and_says_read_only_for_a_write(pg_server: str) -> None:
    with read_only_database(pg_server) as url:
        listed = cli("decisions", "ls", "--json", store=url)
        swept = cli("decisions", "sweep", store=url)
    assert listed.returncode == 0 and json.loads(listed.stdout) == [], listed.stderr
    assert swept.returncode == 2 and "is read-only (cannot execute" in swept.stderr, swept.stderr
    assert "default_transaction_read_only" in swept.stderr


async def test_a_task_whose_store_file_goes_away_is_left_with_a_line_in_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "elicit.db"
    port = free_port()
    runtime = Elicitation(
        SQLiteStore(path, clock=utc_now),
        request_state=RequestState(keys=[b"t" * 32]),
        public_base_url=f"http://127.0.0.1:{port}",
        timing=Timing(lease=timedelta(seconds=2)),
        tasks=TaskSettings(poll_interval=timedelta(milliseconds=200)),
    )
    server = runtime.server("tasks-gone", token_verifier=StaticTokenVerifier(), auth=auth_settings(port))

    @runtime.tool(task=TaskPolicy.REQUIRED)
    async def nightly(flow: Flow) -> str:
        path.unlink()  # as an operator's `rm` would, while the task runs
        return str(await flow.step("report", lambda: "written"))

    with caplog.at_level(logging.INFO), serving(server.streamable_http_app(), port) as base:
        async with Wire(f"{base}/mcp", MODERN, token="token-alice") as wire:
            task = await wire.call_as_task("nightly", {})
        with anyio.fail_after(20):
            while not [record for record in caplog.records if record.name == "mcp_elicit.server.tasks.runner"]:
                await anyio.sleep(0.05)
    runtime.close()
    no_tracebacks(caplog)
    lines = [record for record in caplog.records if record.name == "mcp_elicit.server.tasks.runner"]
    assert {record.levelno for record in lines} == {logging.WARNING}
    stopped = f"task {task['taskId']} stopped, taken up again after its lease: {REPLACED} ({path})"
    assert [record.getMessage() for record in lines if "stopped" in record.getMessage()] == [stopped]


async def test_the_decision_pages_and_the_inbox_name_a_store_that_refuses_a_write_without_a_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "elicit.db"
    with inbox_site(f"sqlite://{path}") as site:
        await call(site, "legacy", "book", city="Oslo")
        decision = only(site, "How many seats to Oslo?")
        with browser() as alice:
            sign_in(alice, site, "alice")
            form = alice.get(f"{site.base}/elicit/{decision.elicitation_id}")
            inbox = alice.get(f"{site.base}/inbox")
            assert form.status_code == inbox.status_code == 200
            path.unlink()
            with caplog.at_level(logging.INFO):
                answered = alice.post(
                    f"{site.base}/elicit/{decision.elicitation_id}/answer",
                    data={"csrf": hidden(form.text, "csrf"), "action": "accept", "f.seats": "3"},
                )
                declined = alice.post(
                    f"{site.base}/inbox/{decision.elicitation_id}/decline",
                    data={"csrf": token(inbox.text, decision.elicitation_id, "decline")},
                )
    for page in (answered, declined):
        assert page.status_code == 503 and "Nothing was recorded" in page.text
        assert f"{REPLACED}. Trying again fails the same way until {RESTART}." in page.text.replace("&#x27;", "'")
        assert str(path) not in page.text
    no_tracebacks(caplog)
    lines = [record.getMessage() for record in caplog.records if record.name == "mcp_elicit.web.pages"]
    assert lines == [
        f"POST /elicit/{decision.elicitation_id}/answer failed: {REPLACED} ({path})",
        f"POST /inbox/{decision.elicitation_id}/decline failed: {REPLACED} ({path})",
    ]


def test_a_pool_with_no_free_connection_in_time_says_so_not_that_the_connection_was_lost(pg_schema_url: str) -> None:
    """psycopg_pool's PoolTimeout is an OperationalError: read as one, it was taken for a lost connection."""
    store = PostgresStore(pg_schema_url, clock=utc_now, min_size=1, max_size=1, connect_timeout=1)
    holding, release = threading.Event(), threading.Event()

    def hold_the_only_connection() -> None:
        def work() -> None:
            store.count_decisions(Operator())
            holding.set()
            release.wait(10)

        store.atomically(work)

    holder = threading.Thread(target=hold_the_only_connection)
    holder.start()
    try:
        assert holding.wait(10)
        with pytest.raises(StoreUnavailable, match=r"no connection to .* became free in time"):
            store.count_decisions(Operator())
    finally:
        release.set()
        holder.join(10)
        store.close()
