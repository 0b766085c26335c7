"""The gateway's sessions with its upstream (lanes) when things go wrong or happen at once: an upstream error
that looks like a dropped connection, an HTTP upstream that restarted, a client that gives up while a session
starts, calls that wait for a session or ask a question side by side, and what the upstream says after a call
ended. Real upstreams (the SDK peer on stdio or loopback HTTP, the one-era peer on stdio), the gateway in
process, its clients in process or over loopback HTTP.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import (
    ElicitCompleteNotification,
    ElicitRequestParams,
    ElicitResult,
    LoggingMessageNotificationParams,
)
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_elicit.gateway import Gateway
from tests.helpers.gateway import (
    ONE_ERA,
    SDK_SERVER,
    Person,
    Served,
    connected,
    over_http,
    read_body,
    relayed,
    said,
    sdk_over_http,
    stdio,
    text,
    until,
)
from tests.helpers.http_harness import free_port, serving
from tests.helpers.peers.sdk_server import REFUSAL
from tests.helpers.peers.sdk_server import server as sdk_server

pytestmark = pytest.mark.anyio


async def test_an_upstreams_own_error_minus_32000_is_its_answer_and_its_connection_lives_on(tmp_path: Path) -> None:
    """-32000 is the generic server error, and also the code the SDK gives a dropped connection: only the
    transport says the connection ended, never the code of an answer."""
    marker = tmp_path / "held"
    held: list[str] = []
    async with relayed(stdio(SDK_SERVER), "legacy") as client:
        before = text(await client.call_tool("pid", {}))

        async def hold() -> None:
            held.append(text(await client.call_tool("hold", {"marker": str(marker), "seconds": 1})))

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(hold)
            await until(lambda: said(marker) == "holding")
            with pytest.raises(MCPError) as refused:
                await client.call_tool("refuse", {})
        after = text(await client.call_tool("pid", {}))
    assert (refused.value.code, refused.value.error.message) == (-32000, REFUSAL)
    assert held == ["held 1.0 s"]  # the call in flight beside it was not failed
    assert after == before  # nor the upstream restarted


async def test_an_http_upstream_restarted_between_calls_gets_the_next_call_on_a_new_session() -> None:
    """Its 404 says it never saw the call, so the call goes once more, on a session of the new process."""
    upstream = Served(lambda: sdk_server.streamable_http_app(host="127.0.0.1"))
    upstream.start()
    try:
        gateway = Gateway(over_http(upstream.url, timeout=5))
        async with gateway.running(), connected(gateway, "legacy") as client:
            assert text(await client.call_tool("count", {"to": 1})) == "counted to 1"
            upstream.stop()
            upstream.start()  # nothing in flight: the gateway hears nothing of it until its next call
            again = await client.call_tool("count", {"to": 2})
            statuses = [lane.status for lane in gateway.pool.lanes]
    finally:
        upstream.stop()
    assert text(again) == "counted to 2"
    assert statuses == ["up"]


def _answering_404(seen: list[object]) -> ASGIApp:
    """The SDK peer behind a front that runs each `tools/call` and then answers it with HTTP 404 and a JSON-RPC
    error of its own for that very request (the session header kept): an answer, not a lost session."""
    inner = sdk_server.streamable_http_app(host="127.0.0.1")

    async def front(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await inner(scope, receive, send)
            return
        body, replayed = await read_body(receive)
        request = json.loads(body)
        if request.get("method") != "tools/call":
            await inner(scope, replayed, send)
            return
        seen.append(request["params"]["name"])
        session = dict(scope["headers"]).get(b"mcp-session-id", b"")
        error = {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32601, "message": "gone from here"}}
        headers = [(b"content-type", b"application/json"), (b"mcp-session-id", session)]
        await send({"type": "http.response.start", "status": 404, "headers": headers})
        await send({"type": "http.response.body", "body": json.dumps(error).encode()})

    return front


async def test_an_http_upstreams_404_that_answers_the_call_is_its_answer_and_the_call_is_not_sent_again() -> None:
    """A 404 whose body is the upstream's JSON-RPC error for that request was seen by the upstream (it may have run
    the call): the client gets that error and the call goes upstream once."""
    seen: list[object] = []
    upstream = Served(lambda: _answering_404(seen))
    upstream.start()
    try:
        gateway = Gateway(over_http(upstream.url, timeout=5))
        async with gateway.running(), connected(gateway, "legacy") as client:
            with pytest.raises(MCPError) as answered:
                await client.call_tool("count", {"to": 1})
    finally:
        upstream.stop()
    assert (answered.value.code, answered.value.error.message) == (-32601, "gone from here")
    assert seen == ["count"]


async def test_a_client_giving_up_while_a_session_starts_does_not_stop_it(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    first = tmp_path / "first"
    # The first process starts at once; any later one waits for `gate`, so the second session is still starting
    # when its first caller gives up.
    command = (
        "sh",
        "-c",
        f'if [ -e "{first}" ]; then while [ ! -e "{gate}" ]; do sleep 0.02; done; else : > "{first}"; fi; '
        'exec "$0" "$@"',
        *SDK_SERVER,
    )
    marker = tmp_path / "held"
    gateway = Gateway(stdio(command, sessions=2, timeout=10, era="legacy"))
    async with (
        gateway.running(),
        connected(gateway, "legacy") as holder,
        connected(gateway, "2026-07-28") as other,
        anyio.create_task_group() as tasks,
    ):
        tasks.start_soon(holder.call_tool, "hold", {"marker": str(marker), "seconds": 60})
        await until(lambda: said(marker) == "holding")  # the first session is this client's until it answers
        with anyio.move_on_after(0.5) as gave_up:
            await other.call_tool("pid", {})  # the second session starts for it
        gate.write_text("")
        with anyio.fail_after(10):
            answered = await other.call_tool("pid", {})
        tasks.cancel_scope.cancel()
    assert gave_up.cancelled_caught
    assert int(text(answered)) > 0


async def test_the_time_a_call_waits_for_a_session_is_not_the_upstreams_to_answer(tmp_path: Path) -> None:
    asked = anyio.Event()

    async def slow(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        asked.set()
        await anyio.sleep(1.6)  # most of the upstream's 2 s: the other client's call waits as long
        return ElicitResult(action="accept", content={"seats": 1})

    with sdk_over_http() as url:
        gateway = Gateway(over_http(url, timeout=2, sessions=1, era="legacy"))
        async with (
            gateway.running(),
            connected(gateway, "legacy", elicitation_callback=slow) as asking,
            connected(gateway, "2026-07-28") as waiting,
            anyio.create_task_group() as tasks,
        ):
            tasks.start_soon(asking.call_tool, "book", {"city": "Oslo"})
            with anyio.fail_after(10):
                await asked.wait()
            held = await waiting.call_tool("hold", {"marker": str(tmp_path / "held"), "seconds": 1})
    assert text(held) == "held 1.0 s"


async def test_a_question_stops_the_clock_of_every_call_its_client_has_on_the_session(tmp_path: Path) -> None:
    """A handshake upstream's question does not say which call it belongs to: with two calls of one client in
    flight, both wait for the person."""
    marker = tmp_path / "held"

    async def slow(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        await anyio.sleep(3)  # longer than the upstream's timeout
        return ElicitResult(action="accept", content={"seats": 2})

    results: dict[str, str] = {}
    with sdk_over_http() as url:
        async with relayed(over_http(url, timeout=2, era="legacy"), "legacy", elicitation_callback=slow) as client:

            async def call(name: str, arguments: dict[str, Any]) -> None:
                results[name] = text(await client.call_tool(name, arguments))

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(call, "hold", {"marker": str(marker), "seconds": 1})
                await until(lambda: said(marker) == "holding")
                tasks.start_soon(call, "book", {"city": "Oslo"})  # the younger call is the one that asks
    assert results == {"hold": "held 1.0 s", "book": "booked 2 to Oslo"}


async def test_a_url_flow_said_complete_after_its_call_reaches_the_client_that_was_asked() -> None:
    completed: list[str] = []
    heard = anyio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, ElicitCompleteNotification):
            completed.append(message.params.elicitation_id)
            heard.set()

    with sdk_over_http() as url:
        gateway = Gateway(over_http(url, sessions=1, era="legacy"))
        async with (
            gateway.running(),
            connected(gateway, "legacy", elicitation_callback=Person({}), message_handler=on_message) as asked,
            connected(gateway, "legacy") as other,
        ):
            assert text(await asked.call_tool("connect", {})) == "accept"  # its question had id connect-1
            # The upstream says so later, during a call of another client on the same session.
            assert text(await other.call_tool("finish", {"elicitation_id": "connect-1"})) == "completed"
            with anyio.fail_after(10):
                await heard.wait()
    assert completed == ["connect-1"]


async def test_a_log_line_that_comes_after_its_call_is_told_to_no_other_client() -> None:
    heard: dict[str, list[Any]] = {"first": [], "second": []}

    def hearing(who: str) -> Any:
        async def hear(params: LoggingMessageNotificationParams) -> None:
            heard[who].append(params.data)

        return hear

    gateway = Gateway(stdio(ONE_ERA))
    with serving(gateway.server.streamable_http_app(host="127.0.0.1"), free_port()) as base:
        async with (
            Client(f"{base}/mcp", mode="legacy", logging_callback=hearing("first")) as first,
            Client(f"{base}/mcp", mode="legacy", logging_callback=hearing("second")) as second,
        ):
            await first.list_tools()  # the SDK's client lists tools once, before a first call: not after this one
            assert text(await first.call_tool("later", {})) == "later"
            # The upstream's late line comes while the one request on its session is the other client's list,
            # which claims no log message.
            assert "later" in {tool.name for tool in (await second.list_tools()).tools}
            assert text(await second.call_tool("echo", {})) == "{}"
    assert heard == {"first": [], "second": []}


async def test_calls_of_every_client_share_one_2026_session_of_a_dual_era_upstream(tmp_path: Path) -> None:
    """`auto` speaks 2026-07-28 with an upstream that speaks both: such a session carries no questions from the
    upstream, so a call held upstream keeps no other client's call waiting for a session, with one session only."""
    marker = tmp_path / "held"
    with sdk_over_http() as url:
        gateway = Gateway(over_http(url, timeout=2, sessions=1, era="2026-07-28"))
        async with (
            gateway.running(),
            connected(gateway, "legacy") as holding,
            connected(gateway, "2026-07-28") as other,
            anyio.create_task_group() as tasks,
        ):
            tasks.start_soon(holding.call_tool, "hold", {"marker": str(marker), "seconds": 60})
            await until(lambda: said(marker) == "holding")
            counted = await other.call_tool("count", {"to": 1})  # on a handshake session: busy after 2 s
            again = await holding.call_tool("count", {"to": 1})  # and the holder's own second call, alongside
            lanes = [(lane.era, lane.holder) for lane in gateway.pool.lanes]
            tasks.cancel_scope.cancel()
    assert (text(counted), text(again)) == ("counted to 1", "counted to 1")
    assert lanes == [("2026-07-28", None)]


async def test_a_log_message_on_a_shared_2026_session_reaches_the_one_call_that_opted_in(tmp_path: Path) -> None:
    """A 2026-07-28 upstream logs only on a request that opted in to the level: with another client's call on the
    session meanwhile, the message is that call's, and never the other client's."""
    heard: dict[str, list[Any]] = {"quiet": [], "listening": []}

    def hearing(who: str) -> Any:
        async def hear(params: LoggingMessageNotificationParams) -> None:
            heard[who].append(params.data)

        return hear

    marker = tmp_path / "held"
    with sdk_over_http() as url:
        gateway = Gateway(over_http(url, era="2026-07-28"))
        async with (
            gateway.running(),
            connected(gateway, "2026-07-28", logging_callback=hearing("quiet")) as quiet,
            connected(gateway, "2026-07-28", logging_callback=hearing("listening"), log_level="info") as listening,
            anyio.create_task_group() as tasks,
        ):
            tasks.start_soon(quiet.call_tool, "hold", {"marker": str(marker), "seconds": 60})
            await until(lambda: said(marker) == "holding")  # the quiet client's call is first on the session
            assert text(await listening.call_tool("say", {"message": "hello"})) == "said"
            tasks.cancel_scope.cancel()
    assert heard == {"quiet": [], "listening": ["hello"]}
