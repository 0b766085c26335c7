"""The gateway relays one upstream to SDK clients of both eras: every request family, and what the upstream sends
back on the way (progress, questions, logs, list changes), with nothing of its own added and nothing stored.

The upstream is the SDK's own `MCPServer` peer served on loopback HTTP in this process, unless stdio is the
subject or the peer cannot do what is tested (the one-era peer answers malformed results and speaks one era
only); the gateway runs in process, and its client reaches it through the SDK's in-process transports or over
loopback HTTP.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx2
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.subscriptions import ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    REQUEST_TIMEOUT,
    ElicitCompleteNotification,
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitRequestURLParams,
    ElicitResult,
    ErrorData,
    LoggingMessageNotificationParams,
    PromptReference,
    ToolListChangedNotification,
)

from mcp_elicit.client import Accept, Consent, ElicitingClient, FormReply, FormRequest, UrlReply, UrlRequest
from mcp_elicit.client.handler import Mode
from mcp_elicit.gateway import Gateway, UpstreamUnavailable
from mcp_elicit.store import open_store
from mcp_elicit.store.sqlite import SQLiteStore
from tests.helpers.gateway import (
    ERAS,
    MODERN_ONLY,
    ONE_ERA,
    SDK_SERVER,
    Person,
    Served,
    connected,
    over_http,
    refusing_calls,
    relayed,
    said,
    sdk_over_http,
    stdio,
    text,
    until,
)
from tests.helpers.http_harness import free_port, serving
from tests.helpers.peers.sdk_server import CONNECT_URL, LINK_ID
from tests.helpers.peers.sdk_server import server as sdk_server
from tests.helpers.raw_http import handshake
from tests.helpers.server import Options, build

pytestmark = pytest.mark.anyio


def shown(model: Any) -> Any:
    """A result as its client sees it, less the stamp that says who answered."""
    dumped = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    dumped.pop("_meta", None)
    return dumped


async def every_family(client: Client) -> list[Any]:
    greeting = PromptReference(type="ref/prompt", name="greeting")
    return [
        await client.list_tools(),
        await client.call_tool("pid", {}),
        await client.call_tool("crash", {}),
        await client.list_prompts(),
        await client.get_prompt("greeting", {"name": "Ada"}),
        await client.list_resources(),
        await client.list_resource_templates(),
        await client.read_resource("note://readme"),
        await client.read_resource("note://mine"),
        await client.complete(greeting, {"name": "name", "value": "A"}),
    ]


@pytest.mark.parametrize("era", ERAS)
async def test_every_request_family_comes_back_as_the_upstream_gave_it(era: str) -> None:
    with sdk_over_http() as url:
        async with Client(url, mode="legacy" if era == "legacy" else "2026-07-28") as direct:
            expected = await every_family(direct)
        async with relayed(over_http(url), era) as client:
            results = await every_family(client)
            declared = client.server_capabilities
    assert [shown(result) for result in results] == [shown(result) for result in expected]
    assert results[2].is_error  # the upstream's tool error, as it gave it
    assert results[-1].completion.values == ["Ada", "Alan"]
    assert declared.completions is not None and declared.tools is not None and declared.resources is not None
    assert declared.logging is None  # the peer serves no logging/setLevel, so neither does the gateway
    assert declared.resources.subscribe is False


async def test_a_question_of_the_upstream_reaches_a_handshake_client_on_its_call() -> None:
    person = Person({"seats": 3})
    with sdk_over_http() as url:
        async with relayed(over_http(url, era="legacy"), "legacy", elicitation_callback=person) as client:
            booked = await client.call_tool("book", {"city": "Oslo"})
            consented = await client.call_tool("connect", {})
            person.answer = None
            declined = await client.call_tool("book", {"city": "Rome"})
    assert (text(booked), text(consented), text(declined)) == ("booked 3 to Oslo", "accept", "not booked (decline)")
    form, link, _ = person.asked
    assert isinstance(form, ElicitRequestFormParams) and form.message == "How many seats to Oslo?"
    assert form.requested_schema["properties"]["seats"]["maximum"] == 9
    assert isinstance(link, ElicitRequestURLParams) and (link.url, link.elicitation_id) == (CONNECT_URL, "connect-1")


async def test_the_upstream_is_told_why_a_client_cannot_be_asked() -> None:
    with sdk_over_http() as url:
        handshake = over_http(url, era="legacy")
        async with relayed(handshake, "2026-07-28", elicitation_callback=Person({"seats": 1})) as modern:
            with pytest.raises(MCPError) as no_back_channel:
                await modern.call_tool("book", {"city": "Oslo"})
        async with relayed(handshake, "legacy") as undeclared:  # no callback: no elicitation capability
            with pytest.raises(MCPError) as not_declared:
                await undeclared.call_tool("book", {"city": "Oslo"})
    # The SDK's `ctx.elicit` raises the gateway's refusal, which the peer's tool lets through as its error.
    assert no_back_channel.value.error.message == (
        "the gateway cannot ask the client of tools/call 'book' on the live call: its connection (protocol "
        "2026-07-28) carries no requests from server to client, and this gateway does not relay questions another way"
    )
    assert not_declared.value.error.message == (
        "the gateway cannot ask the client of tools/call 'book': it declared no elicitation capability"
    )


@pytest.mark.parametrize("era", ERAS)
async def test_progress_of_the_upstream_reaches_the_client_before_the_result(era: str) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def progressed(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    with sdk_over_http() as url:
        async with relayed(over_http(url), era) as client:
            counted = await client.call_tool("count", {"to": 3}, progress_callback=progressed)
            unasked = await client.call_tool("count", {"to": 2})
    assert (text(counted), text(unasked)) == ("counted to 3", "counted to 2")
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


@pytest.mark.parametrize("era", ERAS)
async def test_a_cancelled_call_is_cancelled_upstream(era: str, tmp_path: Path) -> None:
    marker = tmp_path / "held"
    with sdk_over_http() as url:
        async with relayed(over_http(url), era) as client:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(client.call_tool, "hold", {"marker": str(marker), "seconds": 60})
                await until(lambda: said(marker) == "holding")
                tasks.cancel_scope.cancel()
            await until(lambda: said(marker) == "cancelled")


@pytest.mark.parametrize("era", ERAS)
async def test_the_upstreams_log_messages_reach_the_client_that_opted_in(era: str) -> None:
    heard: list[LoggingMessageNotificationParams] = []
    unheard: list[LoggingMessageNotificationParams] = []

    async def hear(params: LoggingMessageNotificationParams) -> None:
        heard.append(params)

    async def miss(params: LoggingMessageNotificationParams) -> None:
        unheard.append(params)

    with sdk_over_http() as url:
        gateway = Gateway(over_http(url))
        async with gateway.running():
            # 2026-07-28 logs only for a request that opts in; the handshake sends every level.
            opt_in: dict[str, Any] = {} if era == "legacy" else {"log_level": "info"}
            async with connected(gateway, era, logging_callback=hear, **opt_in) as client:
                assert text(await client.call_tool("say", {"message": "hello"})) == "said"
            if era != "legacy":
                async with connected(gateway, era, logging_callback=miss) as quiet:
                    assert text(await quiet.call_tool("say", {"message": "unasked"})) == "said"
    assert [(params.level, params.data, params.logger) for params in heard] == [("info", "hello", "sdk-server")]
    assert unheard == []


@pytest.mark.parametrize("era", ERAS)
async def test_a_list_change_of_a_2026_upstream_reaches_clients_of_both_eras(era: str) -> None:
    heard = anyio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, ToolListChangedNotification):
            heard.set()

    with sdk_over_http() as url:
        gateway = Gateway(over_http(url, era="2026-07-28"))  # the peer announces changes on 2026-07-28 only
        async with gateway.running(), connected(gateway, era, message_handler=on_message) as client:
            assert client.server_capabilities.tools is not None and client.server_capabilities.tools.list_changed
            if era == "legacy":
                assert text(await client.call_tool("change", {})) == "announced"
                with anyio.fail_after(10):
                    await heard.wait()
            else:
                async with client.listen(tools_list_changed=True) as changes:
                    assert text(await client.call_tool("change", {})) == "announced"
                    with anyio.fail_after(10):
                        event = await changes.__anext__()
                assert isinstance(event, ToolsListChanged)


@pytest.mark.parametrize("era", ERAS)
async def test_a_list_change_of_a_handshake_upstream_reaches_clients_of_both_eras(era: str) -> None:
    heard = anyio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, ToolListChangedNotification):
            heard.set()

    gateway = Gateway(stdio(ONE_ERA))
    async with gateway.running(), connected(gateway, era, message_handler=on_message) as client:
        assert client.server_capabilities.tools is not None and client.server_capabilities.tools.list_changed
        if era == "legacy":
            assert text(await client.call_tool("announce", {})) == "announced"
            with anyio.fail_after(10):
                await heard.wait()
        else:
            async with client.listen(tools_list_changed=True) as changes:
                assert text(await client.call_tool("announce", {})) == "announced"
                with anyio.fail_after(10):
                    event = await changes.__anext__()
            assert isinstance(event, ToolsListChanged)


async def test_an_upstream_that_exits_fails_its_call_naming_both_and_is_started_again() -> None:
    async with relayed(stdio(SDK_SERVER), "legacy") as client:
        before = int(text(await client.call_tool("pid", {})))
        with pytest.raises(MCPError) as died:
            await client.call_tool("die", {})
        after = int(text(await client.call_tool("pid", {})))
    assert died.value.code == INTERNAL_ERROR
    assert died.value.error.message == (
        "upstream 'peer' closed the connection while tools/call 'die' was in flight; the gateway connects to it again"
    )
    assert after != before


async def test_a_command_inherits_the_gateway_settings_its_pass_env_names_and_no_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An upstream that is itself mcp-elicit gets the gateway's store; the gateway's other settings stay its own."""
    values = {
        "MCP_ELICIT_STORE": "sqlite:///shared.db",
        "MCP_ELICIT_LOG_FORMAT": "json",
        "MCP_ELICIT_AUTH_KEYS": "auth-keys-9c1",
        "PEER_REGION": "eu-west",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    async with relayed(stdio(SDK_SERVER, pass_env=("MCP_ELICIT_STORE",)), "legacy") as client:
        seen = {name: text(await client.call_tool("digest", {"variable": name})) for name in values}
    assert seen == {
        "MCP_ELICIT_STORE": hashlib.sha256(b"sqlite:///shared.db").hexdigest(),
        "MCP_ELICIT_LOG_FORMAT": "",
        "MCP_ELICIT_AUTH_KEYS": "",
        "PEER_REGION": hashlib.sha256(b"eu-west").hexdigest(),
    }


async def test_a_call_the_upstream_leaves_unanswered_times_out_naming_both(tmp_path: Path) -> None:
    marker = tmp_path / "held"
    with sdk_over_http() as url:
        async with relayed(over_http(url, timeout=2), "legacy") as client:
            with pytest.raises(MCPError) as hung:
                await client.call_tool("hold", {"marker": str(marker), "seconds": 60})
            await until(lambda: said(marker) == "cancelled")  # and the upstream was told to stop
            assert text(await client.call_tool("count", {"to": 1})) == "counted to 1"
    assert hung.value.code == REQUEST_TIMEOUT
    assert hung.value.error.message == (
        "upstream 'sdk' did not answer tools/call 'hold' within 2 s (nor report progress); the request was cancelled"
    )


async def test_a_question_to_the_person_stops_the_upstreams_clock() -> None:
    async def slow_person(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        await anyio.sleep(3)  # a person taking longer than the upstream's timeout to answer
        return ElicitResult(action="accept", content={"seats": 2})

    with sdk_over_http() as url:
        handshake = over_http(url, timeout=2, era="legacy")
        async with relayed(handshake, "legacy", elicitation_callback=slow_person) as client:
            assert text(await client.call_tool("book", {"city": "Oslo"})) == "booked 2 to Oslo"


async def test_a_malformed_result_is_refused_naming_the_upstream_and_the_call() -> None:
    async with relayed(stdio(ONE_ERA), "legacy") as client:
        with pytest.raises(MCPError) as malformed:
            await client.call_tool("malformed", {})
        echoed = await client.call_tool("echo", {"a": 1})
    assert malformed.value.code == INTERNAL_ERROR
    assert malformed.value.error.message == "upstream 'peer' returned an invalid result for tools/call 'malformed'"
    assert text(echoed) == '{"a": 1}'


@pytest.mark.parametrize("era", ERAS)
async def test_an_upstream_of_2026_alone_is_discovered_after_it_refuses_the_handshake(era: str) -> None:
    async with relayed(stdio(MODERN_ONLY), era) as client:
        assert [tool.name for tool in (await client.list_tools()).tools] == ["echo", "malformed", "announce", "later"]
        assert text(await client.call_tool("echo", {"a": 1})) == '{"a": 1}'


@pytest.mark.parametrize(
    ("command", "options", "problem"),
    [
        (("no-such-command-anywhere",), {}, "FileNotFoundError: [Errno 2] No such file or directory"),
        (
            (sys.executable, "-c", "raise SystemExit(4)"),
            {},
            "it closed the connection before the MCP handshake was done (see its own error output)",
        ),
        (
            (sys.executable, "-c", "import sys; sys.stdin.read()"),
            {"timeout": 2},
            "it did not complete the MCP handshake within 2 s",
        ),
        (ONE_ERA, {"era": "2026-07-28"}, "it speaks 2025-11-25, not 2026-07-28"),
    ],
    ids=["missing", "exits", "silent", "wrong-era"],
)
async def test_an_upstream_that_cannot_be_started_stops_the_gateway_from_starting(
    command: tuple[str, ...], options: dict[str, Any], problem: str
) -> None:
    with pytest.raises(UpstreamUnavailable) as refused:
        # Long enough for a process under coverage to start; the silent one is given less, since it is waited out.
        async with Gateway(stdio(command, **{"timeout": 10, **options})).running():
            pytest.fail("the gateway ran without its upstream")
    assert str(refused.value).startswith("upstream 'peer' could not be started: ")
    assert problem in str(refused.value)


async def test_an_http_upstream_that_goes_away_fails_calls_until_it_is_back() -> None:
    upstream = Served(lambda: sdk_server.streamable_http_app(host="127.0.0.1"))
    upstream.start()
    try:
        async with relayed(over_http(upstream.url, timeout=5), "legacy") as client:
            assert text(await client.call_tool("count", {"to": 1})) == "counted to 1"
            upstream.stop()
            with pytest.raises(MCPError) as gone:
                await client.call_tool("count", {"to": 1})
            upstream.start()
            with anyio.fail_after(30):
                while True:  # the gateway connects again on its own schedule (a backoff)
                    try:
                        back = await client.call_tool("count", {"to": 1})
                        break
                    except MCPError as still_gone:
                        assert still_gone.error.message.startswith("upstream 'sdk' ")
                        await anyio.sleep(0.1)
    finally:
        upstream.stop()
    assert gone.value.error.message.startswith("upstream 'sdk' ")
    assert text(back) == "counted to 1"


@pytest.mark.parametrize("era", ERAS)
async def test_clients_over_streamable_http_are_relayed_and_asked_on_their_own_session(era: str) -> None:
    person = Person({"seats": 4})
    with sdk_over_http() as url:
        gateway = Gateway(over_http(url, era="legacy"))
        with serving(gateway.server.streamable_http_app(host="127.0.0.1"), free_port()) as base:
            mode = "legacy" if era == "legacy" else "2026-07-28"
            async with Client(f"{base}/mcp", mode=mode, elicitation_callback=person) as client:
                assert client.protocol_version == ("2025-11-25" if era == "legacy" else "2026-07-28")
                assert "book" in {tool.name for tool in (await client.list_tools()).tools}
                if era == "legacy":
                    assert text(await client.call_tool("book", {"city": "Lima"})) == "booked 4 to Lima"
                else:
                    with pytest.raises(MCPError, match="cannot ask the client of tools/call 'book' on the live call"):
                        await client.call_tool("book", {"city": "Lima"})
    assert len(person.asked) == (1 if era == "legacy" else 0)


async def test_an_input_required_result_of_a_2026_upstream_goes_to_a_2026_client_only() -> None:
    person = Person({"answer": 42})
    with sdk_over_http() as url:
        gateway = Gateway(over_http(url, era="2026-07-28"))
        async with gateway.running():
            async with connected(gateway, "2026-07-28", elicitation_callback=person) as modern:
                answered = await modern.call_tool("quiz", {})
            async with connected(gateway, "legacy", elicitation_callback=person) as legacy:
                with pytest.raises(MCPError) as unbridged:
                    await legacy.call_tool("quiz", {})
    assert text(answered) == "answered accept 42 (quiz-1)"  # the upstream's sealed state went there and back
    assert unbridged.value.code == INTERNAL_ERROR
    assert unbridged.value.error.message == (
        "upstream 'sdk' answered tools/call 'quiz' by asking for input the 2026-07-28 way (InputRequiredResult), "
        "which a 2025-11-25 client cannot receive; a gateway without a store does not bridge that"
    )


@pytest.mark.parametrize("era", ERAS)
async def test_a_relayed_call_writes_nothing_to_the_store(era: str, tmp_path: Path) -> None:
    """A call that asks nothing stays a plain relay: not one statement reaches the store (a call whose upstream
    asks is durable, and `test_gateway_questions` shows what it records)."""
    store = open_store(f"sqlite://{tmp_path / 'gateway.db'}")
    assert isinstance(store, SQLiteStore)
    statements: list[str] = []
    tables = [row[0] for row in store.connection().execute("SELECT name FROM sqlite_master WHERE type = 'table'")]

    def rows() -> dict[str, int]:
        with sqlite3.connect(tmp_path / "gateway.db") as reader:
            return {table: reader.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0] for table in tables}

    before = rows()
    store.connection().set_trace_callback(statements.append)
    try:
        with sdk_over_http() as url:
            async with relayed(over_http(url), era, store=store, elicitation_callback=Person({"seats": 1})) as client:
                await every_family(client)
                await client.call_tool("count", {"to": 2}, progress_callback=lambda *_: anyio.sleep(0))
    finally:
        store.connection().set_trace_callback(None)
        store.close()
    assert statements == [], statements
    assert rows() == before and len(tables) > 5


async def test_the_questions_of_two_clients_at_once_each_reach_their_own_client() -> None:
    asked: list[int] = []
    both_asked = anyio.Event()
    booked: dict[str, str] = {}

    def person(seats: int) -> Any:
        async def answer(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
            asked.append(seats)
            if len(asked) == 2:
                both_asked.set()
            with anyio.fail_after(10):
                await both_asked.wait()  # each question is open while the other is asked: two lanes at once
            return ElicitResult(action="accept", content={"seats": seats})

        return answer

    async def book(client: Client, city: str) -> None:
        booked[city] = text(await client.call_tool("book", {"city": city}))

    with sdk_over_http() as url:
        gateway = Gateway(over_http(url, sessions=2, era="legacy"))
        with serving(gateway.server.streamable_http_app(host="127.0.0.1"), free_port()) as base:
            async with (
                Client(f"{base}/mcp", mode="legacy", elicitation_callback=person(1)) as first,
                Client(f"{base}/mcp", mode="legacy", elicitation_callback=person(2)) as second,
                anyio.create_task_group() as tasks,
            ):
                tasks.start_soon(book, first, "Oslo")
                tasks.start_soon(book, second, "Rome")
    assert booked == {"Oslo": "booked 1 to Oslo", "Rome": "booked 2 to Rome"}


@pytest.mark.parametrize("era", ERAS)
async def test_the_calls_own_meta_goes_upstream_and_the_downstream_connections_does_not(era: str) -> None:
    """Each era's client through an upstream session of its own era: the handshake, and 2026-07-28."""
    with sdk_over_http() as url:
        async with relayed(over_http(url, era="legacy" if era == "legacy" else "2026-07-28"), era) as client:
            meta: dict[str, Any] = {"trace": "t-1", "io.example/tenant": "acme"}
            seen = json.loads(text(await client.call_tool("meta", {}, meta=meta)))  # type: ignore[arg-type]
    # The upstream session stamps what is its own: the gateway's progress token (asked for on every request), on
    # 2026-07-28 the gateway's own envelope, and, in a process that traces (OpenTelemetry's global provider set, as
    # the telemetry tests leave it), the W3C context of the gateway's span; the client's envelope stays behind.
    own = ("progress_token", "io.modelcontextprotocol/", "traceparent", "tracestate")
    stamped = {key: seen.pop(key) for key in list(seen) if key.startswith(own)}
    assert seen == {"trace": "t-1", "io.example/tenant": "acme"}
    assert isinstance(stamped.pop("progress_token"), int)
    stamped.pop("traceparent", None)
    stamped.pop("tracestate", None)
    if era == "legacy":
        assert stamped == {}
    else:
        assert stamped["io.modelcontextprotocol/clientInfo"]["name"] == "mcp-elicit-gateway"


async def test_a_url_flow_the_upstream_says_is_complete_is_said_complete_to_the_client() -> None:
    completed = anyio.Event()
    said_complete: list[str] = []

    async def on_message(message: object) -> None:
        if isinstance(message, ElicitCompleteNotification):
            said_complete.append(message.params.elicitation_id)
            completed.set()

    with sdk_over_http() as url:
        async with relayed(
            over_http(url, era="legacy"), "legacy", elicitation_callback=Person({}), message_handler=on_message
        ) as client:
            assert text(await client.call_tool("link", {})) == "accept"
            with anyio.fail_after(10):
                await completed.wait()
    assert said_complete == [LINK_ID]


async def test_the_clients_refusal_reaches_the_upstream_as_it_gave_it() -> None:
    async def away(context: ClientRequestContext, params: ElicitRequestParams) -> ErrorData:
        return ErrorData(code=INVALID_REQUEST, message="the person is away")

    with sdk_over_http() as url:
        async with relayed(over_http(url, era="legacy"), "legacy", elicitation_callback=away) as client:
            with pytest.raises(MCPError) as refused:
                await client.call_tool("book", {"city": "Oslo"})
    assert (refused.value.code, refused.value.error.message) == (INVALID_REQUEST, "the person is away")


class KitPerson:
    """A person of the client kit who takes the modes given, and accepts whatever is asked."""

    def __init__(self, modes: tuple[Mode, ...]) -> None:
        self.modes = frozenset(modes)
        self.asked = 0

    async def form(self, request: FormRequest) -> FormReply:
        self.asked += 1
        return Accept({"seats": 2})

    async def url(self, request: UrlRequest) -> UrlReply:
        self.asked += 1
        return Consent()


async def test_a_client_is_never_sent_a_mode_of_question_it_did_not_declare() -> None:
    forms, links = KitPerson(("form",)), KitPerson(("url",))
    with sdk_over_http() as url:
        gateway = Gateway(over_http(url, era="legacy"))
        async with gateway.running():
            async with ElicitingClient(gateway.server, forms, era="2025-11-25") as forms_only:
                no_link = text(await forms_only.call_tool("connect", {}))
                booked = text(await forms_only.call_tool("book", {"city": "Oslo"}))
            async with ElicitingClient(gateway.server, links, era="2025-11-25") as links_only:
                with pytest.raises(MCPError) as no_form:
                    await links_only.call_tool("book", {"city": "Oslo"})
    assert no_link == (
        "refused: -32600 the gateway cannot ask the client of tools/call 'connect': it did not declare URL-mode "
        "elicitation"
    )
    assert booked == "booked 2 to Oslo" and forms.asked == 1
    assert no_form.value.error.message == (
        "the gateway cannot ask the client of tools/call 'book': it declared URL-mode elicitation only, and this is "
        "a form"
    )
    assert links.asked == 0


async def test_an_upstream_that_cannot_be_started_again_fails_calls_at_once_until_it_can(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    # Starts once; while `gone` exists, it exits at once instead (as a server whose command broke would).
    command = ("sh", "-c", f'test -e "{gone}" && exit 3; exec "$0" "$@"', *SDK_SERVER)
    async with relayed(stdio(command), "legacy") as client:
        gone.write_text("")
        with pytest.raises(MCPError):
            await client.call_tool("die", {})
        with pytest.raises(MCPError) as down:
            await client.call_tool("pid", {})  # waits for the new start, which fails
        with pytest.raises(MCPError) as still_down:
            await client.call_tool("pid", {})  # fails at once: nothing to wait for until the next attempt
        gone.unlink()
        with anyio.fail_after(20):
            while True:
                try:
                    back = await client.call_tool("pid", {})
                    break
                except MCPError as until_the_next_attempt:
                    assert until_the_next_attempt.error.message.startswith("upstream 'peer' could not be started")
                    await anyio.sleep(0.1)
    for error in (down.value, still_down.value):
        assert error.code == INTERNAL_ERROR
        assert error.error.message.startswith(
            "upstream 'peer' could not be started: it closed the connection before the MCP handshake was done (see "
            "its own error output); tools/call 'pid' was not sent (next attempt in "
        )
    assert int(text(back)) > 0


async def test_a_call_waiting_longer_than_the_timeout_for_a_session_another_client_holds_fails() -> None:
    holding = anyio.Event()
    release = anyio.Event()

    async def slow(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        holding.set()
        with anyio.fail_after(10):
            await release.wait()
        return ElicitResult(action="accept", content={"seats": 1})

    with sdk_over_http() as url:
        gateway = Gateway(over_http(url, timeout=2, sessions=1, era="legacy"))
        with serving(gateway.server.streamable_http_app(host="127.0.0.1"), free_port()) as base:
            async with (
                Client(f"{base}/mcp", mode="legacy", elicitation_callback=slow) as first,
                Client(f"{base}/mcp", mode="legacy") as second,
                anyio.create_task_group() as tasks,
            ):
                booked: list[str] = []

                async def book() -> None:
                    booked.append(text(await first.call_tool("book", {"city": "Oslo"})))

                tasks.start_soon(book)
                with anyio.fail_after(10):
                    await holding.wait()
                with pytest.raises(MCPError) as busy:
                    await second.call_tool("pid", {})
                listed = await second.list_tools()  # a list draws no question: it takes the held session
                release.set()
    assert busy.value.code == REQUEST_TIMEOUT
    assert busy.value.error.message == (
        "upstream 'sdk' is busy: tools/call 'pid' waited 2 s for one of its 1 session(s), each carrying calls of "
        "another client"
    )
    assert booked == ["booked 1 to Oslo"]  # the person took longer than the timeout: the clock was stopped
    assert "pid" in {tool.name for tool in listed.tools}


@pytest.mark.parametrize("era", ERAS)
async def test_mcp_elicits_own_server_asks_through_the_gateway_on_both_eras(era: str, tmp_path: Path) -> None:
    """On a handshake session its question comes as `elicitation/create` and is relayed live; on 2026-07-28 it
    comes as its own sealed round, which goes through to the client and back as it was."""
    person = Person({"approve": True, "note": "go"})
    store = f"sqlite://{tmp_path / 'upstream.db'}"
    elicitation, upstream = build(Options(store=store, tools=("flow",), effects=tmp_path / "effects"))
    try:
        with serving(upstream.streamable_http_app(host="127.0.0.1"), free_port()) as base:
            relayed_upstream = over_http(f"{base}/mcp", era="legacy" if era == "legacy" else "2026-07-28")
            async with relayed(relayed_upstream, era, elicitation_callback=person) as client:
                applied = await client.call_tool("approve", {"scope": "billing"})
    finally:
        elicitation.close()
    assert text(applied) == "applied billing (go)"
    [question] = person.asked
    assert isinstance(question, ElicitRequestFormParams) and question.message == "Apply plan for billing?"


async def test_a_client_whose_stream_drops_mid_call_resumes_it_and_gets_the_result(tmp_path: Path) -> None:
    """The gateway's streamable HTTP app keeps its SSE events: a call's stream opens with a priming event (an id, no
    data) and a `retry` field, and a client that lost it reconnects with `Last-Event-ID` and gets the result."""
    marker = tmp_path / "held"
    call = {"name": "hold", "arguments": {"marker": str(marker), "seconds": 1}}
    with sdk_over_http() as url:
        gateway = Gateway(over_http(url))
        with serving(gateway.server.streamable_http_app(host="127.0.0.1"), free_port()) as base:
            session = handshake(f"{base}/mcp", "2025-11-25", {})
            body = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}
            async with httpx2.AsyncClient(timeout=30) as http:
                async with http.stream("POST", f"{base}/mcp", json=body, headers=session) as posted:
                    first = await anext(sse_events(posted))  # then the client drops the stream
                resumed = {**session, "last-event-id": first["id"]}
                async with http.stream("GET", f"{base}/mcp", headers=resumed) as again:
                    with anyio.fail_after(20):
                        async for event in sse_events(again):
                            if event.get("data") and json.loads(event["data"]).get("id") == 2:
                                result = json.loads(event["data"])["result"]
                                break
    assert first["data"] == "" and first["retry"] == "1000"
    assert result["content"][0]["text"] == "held 1.0 s"
    assert said(marker) == "holding"  # the upstream's call ran on: the dropped stream did not cancel it


async def sse_events(response: httpx2.Response) -> AsyncIterator[dict[str, str]]:
    """The events of an SSE response, each as its fields (`id`, `retry`, `data`, ...)."""
    event: dict[str, str] = {}
    async for line in response.aiter_lines():
        if not line:
            if event:
                yield event
            event = {}
            continue
        name, _, value = line.partition(":")
        event[name] = f"{event[name]}\n{value.lstrip()}" if name in event else value.lstrip()


async def test_a_tool_whose_arguments_go_in_headers_is_called_on_a_2026_http_upstream() -> None:
    """A 2026-07-28 HTTP upstream requires the `Mcp-Param-*` headers of arguments its tool annotates with
    `x-mcp-header`; the SDK's client sends them for tools its session listed, which the gateway lists on connecting,
    whether or not its own client listed anything."""
    with sdk_over_http() as url:
        async with relayed(over_http(url), "2026-07-28") as client:
            forecast = await client.session.call_tool("weather", {"region": "Oslo"})
    assert text(forecast) == "sunny in Oslo"


async def test_an_http_upstream_is_reached_through_the_proxy_the_environment_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A gateway whose host reaches the upstream through a proxy (`HTTPS_PROXY` and the rest) goes through it, as
    any HTTP client of that host does. The stand-in proxy notes what it was asked for and answers 502."""
    asked: list[str] = []

    async def proxy(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            head = b""
            while b"\r\n\r\n" not in head:
                head += await stream.receive()
            asked.append(head.split(b"\r\n", 1)[0].decode())
            await stream.send(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")

    with sdk_over_http() as url:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy", "http_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
        async with listener, anyio.create_task_group() as tasks:
            tasks.start_soon(listener.serve, proxy)
            with pytest.raises(UpstreamUnavailable):
                async with Gateway(over_http(url, timeout=10)).running():
                    pytest.fail("the gateway reached its upstream past the proxy")
            tasks.cancel_scope.cancel()
    assert asked and asked[0] == f"POST {url} HTTP/1.1", asked


async def test_a_call_an_http_upstream_refuses_with_401_fails_saying_it_did_not_run() -> None:
    """An upstream that wants a credential the gateway was not given refuses the call before it runs: the client is
    told so, naming the upstream and the status, and nothing of the gateway's own bookkeeping."""

    with serving(refusing_calls(sdk_server.streamable_http_app(host="127.0.0.1")), free_port()) as base:
        async with relayed(over_http(f"{base}/mcp"), "legacy") as client:
            with pytest.raises(MCPError) as refused:
                await client.call_tool("pid", {})
    said = refused.value.error
    assert said.message.startswith("upstream 'sdk' refused tools/call 'pid' (HTTP 401)"), said.message
    assert "did not run" in said.message, said.message
    assert said.data == {"upstream": "sdk"}, said.data
