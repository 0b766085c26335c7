"""What the gateway makes of an upstream's question during a `tools/call`, with a store: a durable decision of the
call's operation, asked the way the client's era asks (live on 2025, an `InputRequiredResult` round on 2026-07-28),
answered back to the waiting upstream request, and listed for operators; a call that asks nothing stays a plain
relay with no operation.

The upstream is the SDK's own `MCPServer` peer on loopback HTTP in this process, asking with `ctx.elicit` on a
handshake session (`auto`, or pinned with `era="legacy"`), or asking in its results on a 2026-07-28 session (pinned
with `era="2026-07-28"`); the clients are the SDK's `Client` of each era, in process.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CallToolResult,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitCompleteNotification,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitRequestURLParams,
    ElicitResult,
    InputRequiredResult,
    InputResponse,
    ListRootsResult,
    Root,
    TextContent,
)
from pydantic import FileUrl

from mcp_elicit.gateway import Gateway, UpstreamEra
from mcp_elicit.model import Decision, DecisionStatus, Operator
from mcp_elicit.server import Timing
from mcp_elicit.store import Store, open_store
from tests.helpers.gateway import ERAS, Person, connected, over_http, sdk_over_http, text, until
from tests.helpers.http_harness import free_port, serving
from tests.helpers.peers.asking_server import DRIVE_URL, PAY_URL, SIGN_IN_URL
from tests.helpers.peers.asking_server import connected as asking_connected
from tests.helpers.peers.asking_server import server as asking_server

pytestmark = pytest.mark.anyio

OPERATOR = Operator("test")
QUICK = Timing(long_poll=timedelta(milliseconds=200))
"""A 2026-07-28 call waiting on a question another call put out is held this long per round, not 5 s."""


def decisions(store: Store) -> list[Decision]:
    """Every decision in the store, as `mcp-elicit decisions ls` lists them."""
    return store.list_decisions(OPERATOR)


class Answers:
    """Answers each question with the next of `answers` (an action, or the content of an acceptance)."""

    def __init__(self, *answers: str | dict[str, Any]) -> None:
        self._answers = list(answers)
        self.asked: list[ElicitRequestParams] = []

    async def __call__(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        self.asked.append(params)
        answer = self._answers.pop(0)
        if isinstance(answer, str):
            return ElicitResult(action=answer)  # type: ignore[arg-type]
        return ElicitResult(action="accept", content=answer)


@pytest.mark.parametrize("era", ERAS)
async def test_a_form_question_of_a_handshake_upstream_is_a_durable_decision_on_either_era(
    era: str, tmp_path: Path
) -> None:
    store = open_store(f"sqlite://{tmp_path / 'gateway.db'}")
    person = Person({"seats": 3})
    try:
        with sdk_over_http() as url:
            gateway = Gateway(over_http(url, era="legacy"), store=store)
            async with gateway.running(), connected(gateway, era, elicitation_callback=person) as client:
                booked = await client.call_tool("book", {"city": "Oslo"})
        [decision] = decisions(store)
        operation = store.get_operation(decision.operation_id, OPERATOR)
    finally:
        store.close()
    assert text(booked) == "booked 3 to Oslo"
    [asked] = person.asked
    assert isinstance(asked, ElicitRequestFormParams) and asked.message == "How many seats to Oslo?"
    assert asked.requested_schema["properties"]["seats"]["maximum"] == 9  # the upstream's schema, as it came
    assert decision.status is DecisionStatus.ACCEPTED and decision.content == {"seats": 3}
    assert decision.key.startswith("q1.") and decision.message == "How many seats to Oslo?"
    assert (operation.method, operation.target, operation.status.value) == ("tools/call", "book", "completed")


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_a_declined_or_dismissed_question_reaches_the_upstream_as_such(
    era: str, action: str, tmp_path: Path
) -> None:
    store = open_store(f"sqlite://{tmp_path / 'gateway.db'}")
    person = Answers(action)
    try:
        with sdk_over_http() as url:
            gateway = Gateway(over_http(url, era="legacy"), store=store)
            async with gateway.running(), connected(gateway, era, elicitation_callback=person) as client:
                refused = await client.call_tool("book", {"city": "Rome"})
        [decision] = decisions(store)
    finally:
        store.close()
    assert text(refused) == f"not booked ({action})"
    assert decision.status is (DecisionStatus.DECLINED if action == "decline" else DecisionStatus.CANCELLED)


@pytest.mark.parametrize("era", ERAS)
async def test_an_answer_that_does_not_fit_the_upstreams_schema_is_asked_again_never_passed_on(
    era: str, tmp_path: Path
) -> None:
    store = open_store(f"sqlite://{tmp_path / 'gateway.db'}")
    person = Answers({"seats": 12}, {"seats": "two"}, {"seats": 2})
    try:
        with sdk_over_http() as url:
            gateway = Gateway(over_http(url, era="legacy"), store=store)
            async with gateway.running(), connected(gateway, era, elicitation_callback=person) as client:
                booked = await client.call_tool("book", {"city": "Lima"})
    finally:
        store.close()
    assert text(booked) == "booked 2 to Lima"  # the upstream's own check (at most 9) never saw the 12
    first, second, third = person.asked
    assert "previous answer could not be used" not in first.message
    assert "seats: must be at most 9" in second.message and "previous answer could not be used" in second.message
    assert "seats:" in third.message


@pytest.mark.parametrize("era", ERAS)
async def test_a_call_that_asks_nothing_starts_no_operation(era: str, tmp_path: Path) -> None:
    store = open_store(f"sqlite://{tmp_path / 'gateway.db'}")
    try:
        with sdk_over_http() as url:
            gateway = Gateway(over_http(url, era="legacy"), store=store)
            async with gateway.running(), connected(gateway, era, elicitation_callback=Person({"seats": 1})) as client:
                counted = await client.call_tool("count", {"to": 2})
                asked = await client.call_tool("book", {"city": "Oslo"})
        with sqlite3.connect(tmp_path / "gateway.db") as reader:
            operations = [
                row[0] for row in reader.execute("SELECT target FROM elicit_operations WHERE method = 'tools/call'")
            ]
    finally:
        store.close()
    assert text(counted) == "counted to 2"
    assert text(asked) == "booked 1 to Oslo"
    assert operations == ["book"]


@asynccontextmanager
async def asking(store: Store, era: str, **client: Any) -> AsyncIterator[Client]:
    """A gateway in front of the asking peer (on loopback HTTP in this process) and a client of `era`."""
    with serving(asking_server.streamable_http_app(host="127.0.0.1"), free_port()) as base:
        gateway = Gateway(over_http(f"{base}/mcp", era="legacy"), store=store, timing=QUICK)
        async with gateway.running(), connected(gateway, era, **client) as downstream:
            yield downstream


# On both engines: a round's commits, its nonce spent once and the answers recorded are the store's, whichever.
@pytest.mark.engines("sqlite", "postgres")
async def test_a_2026_round_and_its_retries_answer_the_upstream_request_still_waiting(
    store_url: str, tmp_path: Path
) -> None:
    store = open_store(store_url)
    ledger = tmp_path / "ledger"
    arguments = {"item": "pens", "ledger": str(ledger)}
    try:
        async with asking(store, "2026-07-28", elicitation_callback=Answers()) as client:  # driven by hand below
            first = await client.session.call_tool("order", arguments, allow_input_required=True)
            assert isinstance(first, InputRequiredResult) and first.input_requests and first.request_state
            [(quantity_key, how_many)] = first.input_requests.items()
            second = await client.session.call_tool(
                "order",
                arguments,
                input_responses={quantity_key: ElicitResult(action="accept", content={"quantity": 2})},
                request_state=first.request_state,
                allow_input_required=True,
            )
            assert isinstance(second, InputRequiredResult) and second.input_requests and second.request_state
            [(colour_key, which)] = second.input_requests.items()
            third = await client.session.call_tool(
                "order",
                arguments,
                input_responses={colour_key: ElicitResult(action="accept", content={"colour": "blue"})},
                request_state=second.request_state,
                allow_input_required=True,
            )
        asked = sorted((decision.key, decision.status.value) for decision in decisions(store))
    finally:
        store.close()
    assert isinstance(third, CallToolResult) and text(third) == "ordered 2 blue pens"
    assert isinstance(how_many, ElicitRequest) and how_many.params.message == "How many pens?"
    assert isinstance(which, ElicitRequest) and which.params.message == "Which colour of pens?"
    assert not first.request_state.startswith("{")  # sealed by the gateway, never its plaintext
    assert ledger.read_text() == "start pens\n"  # one upstream call carried all three downstream requests
    assert asked == sorted([(quantity_key, "accepted"), (colour_key, "accepted")])
    assert quantity_key.startswith("q1.") and colour_key.startswith("q2.")


@pytest.mark.parametrize("era", ERAS)
async def test_identical_calls_at_once_share_one_operation_and_its_answers(era: str, tmp_path: Path) -> None:
    store = open_store(f"sqlite://{tmp_path / 'gateway.db'}")
    ledger = tmp_path / "ledger"
    arguments = {"item": "cups", "ledger": str(ledger)}
    person = Answers({"quantity": 4}, {"colour": "red"}, {"quantity": 4}, {"colour": "red"})
    results: list[str] = []

    async def order(client: Client) -> None:
        results.append(text(await client.call_tool("order", arguments)))

    try:
        async with asking(store, era, elicitation_callback=person) as client, anyio.create_task_group() as tasks:
            tasks.start_soon(order, client)
            tasks.start_soon(order, client)
        operations = {decision.operation_id for decision in decisions(store)}
        recorded = len(decisions(store))
    finally:
        store.close()
    assert results == ["ordered 4 red cups"] * 2
    assert len(operations) == 1 and recorded == 2
    assert len(person.asked) == 2  # each question once, though two calls needed its answer


@pytest.mark.parametrize("era", ERAS)
async def test_a_url_question_points_at_the_upstreams_page_and_its_completion_is_recorded(
    era: str, tmp_path: Path
) -> None:
    store = open_store(f"sqlite://{tmp_path / 'gateway.db'}")
    person = Answers("accept")
    notices: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, ElicitCompleteNotification):
            notices.append(message.params.elicitation_id)

    try:
        async with asking(store, era, elicitation_callback=person, message_handler=on_message) as client:
            paid = await client.call_tool("pay", {"amount": 5, "ledger": str(tmp_path / "ledger")})
            [decision] = decisions(store)
            await until(
                lambda: store.get_decision(decision.elicitation_id, OPERATOR).status.value == "external_completed"
            )
            if era == "legacy":
                await until(lambda: bool(notices))
    finally:
        store.close()
    assert text(paid) == "payment accept"
    [asked] = person.asked
    assert isinstance(asked, ElicitRequestURLParams) and (asked.url, asked.message) == (PAY_URL, "Pay 5 EUR")
    assert (decision.mode.value, decision.url) == ("url", PAY_URL)
    if era == "legacy":  # asked with the decision's id, and told its flow is complete under that id
        assert asked.elicitation_id == decision.elicitation_id and notices == [decision.elicitation_id]
    else:
        assert asked.elicitation_id is None and notices == []


@pytest.mark.parametrize("era", ERAS)
async def test_a_declined_url_question_reaches_the_upstream_as_declined(era: str, tmp_path: Path) -> None:
    store = open_store(f"sqlite://{tmp_path / 'gateway.db'}")
    try:
        async with asking(store, era, elicitation_callback=Answers("decline")) as client:
            refused = await client.call_tool("pay", {"amount": 7, "ledger": str(tmp_path / "ledger")})
        [decision] = decisions(store)
    finally:
        store.close()
    assert text(refused) == "payment decline"
    assert decision.status is DecisionStatus.DECLINED


async def test_an_upstream_call_whose_question_nobody_answers_lets_go_of_its_session_at_the_ttl(tmp_path: Path) -> None:
    """One session with the upstream: the call waiting on an unanswered question holds it until the question's TTL,
    and then gives up (the upstream is told `cancel` and its request is cancelled), so the next call gets it."""
    store = open_store(f"sqlite://{tmp_path / 'gateway.db'}")
    ledger = str(tmp_path / "ledger")
    try:
        with serving(asking_server.streamable_http_app(host="127.0.0.1"), free_port()) as base:
            upstream = over_http(f"{base}/mcp", sessions=1, timeout=30, era="legacy")
            gateway = Gateway(upstream, store=store, timing=QUICK, question_ttl=timedelta(seconds=1))
            async with gateway.running():
                async with connected(gateway, "2026-07-28", elicitation_callback=Answers()) as forgetful:
                    left = await forgetful.session.call_tool(
                        "order", {"item": "pots", "ledger": ledger}, allow_input_required=True
                    )
                person = Answers({"quantity": 1}, {"colour": "blue"})
                async with connected(gateway, "legacy", elicitation_callback=person) as other:
                    ordered = await other.call_tool("order", {"item": "pans", "ledger": ledger})
        statuses = {decision.message: decision.status for decision in decisions(store)}
    finally:
        store.close()
    assert isinstance(left, InputRequiredResult)
    assert text(ordered) == "ordered 1 blue pans"
    assert statuses["How many pots?"] in (DecisionStatus.REQUESTED, DecisionStatus.EXPIRED)  # nobody answered it


async def test_a_2026_upstreams_round_is_asked_of_a_handshake_client_and_answered_back(tmp_path: Path) -> None:
    """A handshake client cannot take an `InputRequiredResult`: the gateway asks its questions on the live call and
    calls the upstream again with the answers and its `requestState`; a 2026-07-28 client gets the round itself."""
    store = open_store(f"sqlite://{tmp_path / 'gateway.db'}")
    person = Person({"answer": 42})
    try:
        with sdk_over_http() as url:
            gateway = Gateway(over_http(url, era="2026-07-28"), store=store)
            async with gateway.running():
                async with connected(gateway, "legacy", elicitation_callback=person) as legacy:
                    bridged = await legacy.call_tool("quiz", {})
                async with connected(gateway, "2026-07-28", elicitation_callback=person) as modern:
                    passed = await modern.call_tool("quiz", {})
        [decision] = decisions(store)  # the bridged round's; the one passed through is the upstream's own
    finally:
        store.close()
    assert text(bridged) == text(passed) == "answered accept 42 (quiz-1)"
    assert decision.message == "What is 6 x 7?" and decision.content == {"answer": 42}
    assert len(person.asked) == 2


async def test_a_2026_upstreams_url_request_is_asked_with_an_id_of_the_gateways_and_said_complete(
    tmp_path: Path,
) -> None:
    store = open_store(f"sqlite://{tmp_path / 'gateway.db'}")
    person = Answers("accept")
    notices: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, ElicitCompleteNotification):
            notices.append(message.params.elicitation_id)

    try:
        with serving(asking_server.streamable_http_app(host="127.0.0.1"), free_port()) as base:
            gateway = Gateway(over_http(f"{base}/mcp", era="2026-07-28"), store=store)
            async with (
                gateway.running(),
                connected(gateway, "legacy", elicitation_callback=person, message_handler=on_message) as client,
            ):
                signed = await client.call_tool("sign_in", {})
                await until(lambda: bool(notices))
        [decision] = decisions(store)
    finally:
        store.close()
    assert text(signed) == "signed in (accept, sign-in-1)"
    [asked] = person.asked
    assert isinstance(asked, ElicitRequestURLParams) and (asked.url, asked.message) == (
        SIGN_IN_URL,
        "Sign in to Example",
    )
    assert asked.elicitation_id == decision.elicitation_id and notices == [decision.elicitation_id]
    assert decision.status is DecisionStatus.EXTERNAL_COMPLETED  # the upstream's retry no longer asked for it


async def test_a_minus_32042_of_a_handshake_upstream_is_a_round_for_a_2026_client_and_the_call_goes_again(
    tmp_path: Path,
) -> None:
    """`-32042` does not exist at 2026-07-28: the gateway makes its URL flows a round, and once the retry brings the
    person's consent and the upstream said the flow is complete, sends the call upstream again."""
    store = open_store(f"sqlite://{tmp_path / 'gateway.db'}")
    try:
        async with asking(store, "2026-07-28", elicitation_callback=Answers()) as client:
            first = await client.session.call_tool("files", {}, allow_input_required=True)
            assert isinstance(first, InputRequiredResult) and first.input_requests and first.request_state
            [(key, connect)] = first.input_requests.items()
            assert text(await client.call_tool("drive_connected", {})) == "connected"  # the person, on its page
            listed = await client.session.call_tool(
                "files",
                {},
                input_responses={key: ElicitResult(action="accept")},
                request_state=first.request_state,
                allow_input_required=True,
            )
        [decision] = decisions(store)
    finally:
        asking_connected.clear()
        store.close()
    assert isinstance(connect, ElicitRequest) and isinstance(connect.params, ElicitRequestURLParams)
    assert (connect.params.url, connect.params.elicitation_id) == (DRIVE_URL, None)
    assert isinstance(listed, CallToolResult) and text(listed) == "files: notes.txt"
    assert decision.status is DecisionStatus.EXTERNAL_COMPLETED


async def test_an_operator_cancelling_the_question_answers_the_waiting_upstream_request_cancel(tmp_path: Path) -> None:
    """`mcp-elicit decisions cancel` on a question a 2026-07-28 client left open: the upstream request waiting on it
    is told `cancel` without waiting for a retry or the TTL, so its session is free for the next call, and the retry
    gets what the upstream made of that."""
    store = open_store(f"sqlite://{tmp_path / 'gateway.db'}")
    ledger = str(tmp_path / "ledger")
    arguments = {"item": "bowls", "ledger": ledger}
    try:
        with serving(asking_server.streamable_http_app(host="127.0.0.1"), free_port()) as base:
            gateway = Gateway(over_http(f"{base}/mcp", sessions=1, timeout=30, era="legacy"), store=store, timing=QUICK)
            async with (
                gateway.running(),
                connected(gateway, "2026-07-28", elicitation_callback=Answers()) as first,
            ):
                left = await first.session.call_tool("order", arguments, allow_input_required=True)
                [decision] = decisions(store)
                store.transition(decision, DecisionStatus.CANCELLED, caller=OPERATOR, reason="cancelled by test")
                person = Answers({"quantity": 1}, {"colour": "red"})
                async with connected(gateway, "legacy", elicitation_callback=person) as other:
                    ordered = await other.call_tool("order", {"item": "jugs", "ledger": ledger})
                assert isinstance(left, InputRequiredResult) and left.input_requests and left.request_state
                [key] = left.input_requests
                retried = await first.session.call_tool(
                    "order",
                    arguments,
                    input_responses={key: ElicitResult(action="accept", content={"quantity": 2})},
                    request_state=left.request_state,
                    allow_input_required=True,
                )
    finally:
        store.close()
    assert text(ordered) == "ordered 1 red jugs"  # the session was free well before the 30 s a turn may wait
    assert isinstance(retried, CallToolResult) and text(retried) == "not ordered (cancel)"


class Model:
    """A client's model and workspace: answers every sampling request with `4`, and lists one root."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def sample(self, context: ClientRequestContext, params: CreateMessageRequestParams) -> CreateMessageResult:
        self.asked.append("sampling")
        return CreateMessageResult(role="assistant", content=TextContent(type="text", text="4"), model="test-model")

    async def roots(self, context: ClientRequestContext) -> ListRootsResult:
        self.asked.append("roots")
        return ListRootsResult(roots=[Root(uri=FileUrl("file:///home/ada/project"))])


@pytest.mark.parametrize(
    ("era", "upstream_era"),
    [("legacy", "legacy"), ("legacy", "2026-07-28"), ("2026-07-28", "2026-07-28")],
    ids=["handshake-upstream", "2026-upstream-bridged", "2026-upstream-passed-through"],
)
async def test_the_upstreams_sampling_and_roots_requests_reach_the_clients_model_and_workspace(
    era: str, upstream_era: UpstreamEra, tmp_path: Path
) -> None:
    """What the upstream asks of the client itself is answered by the client, whichever era either side speaks: a
    handshake upstream's request on the lane goes to the client's live call, a 2026-07-28 upstream's round is sent
    to a 2025 client request by request, and reaches a 2026-07-28 client as it is. Nothing of it is recorded."""
    store = open_store(f"sqlite://{tmp_path / 'gateway.db'}")
    model = Model()
    try:
        with sdk_over_http() as url:
            gateway = Gateway(over_http(url, era=upstream_era), store=store)
            async with (
                gateway.running(),
                connected(gateway, era, sampling_callback=model.sample, list_roots_callback=model.roots) as client,
            ):
                sampled = await client.call_tool("sample", {})
                rooted = await client.call_tool("roots", {})
                spoke = gateway.pool.first.era
        recorded = decisions(store)
    finally:
        store.close()
    assert (text(sampled), text(rooted)) == ("the model said 4", "file:///home/ada/project")
    assert model.asked == ["sampling", "roots"]
    assert spoke == ("2025-11-25" if upstream_era == "legacy" else "2026-07-28")
    assert recorded == []


async def test_a_sampling_request_the_client_cannot_take_is_refused_to_the_upstream_saying_why(tmp_path: Path) -> None:
    store = open_store(f"sqlite://{tmp_path / 'gateway.db'}")
    try:
        with sdk_over_http() as url:
            gateway = Gateway(over_http(url, era="2026-07-28"), store=store)
            async with gateway.running(), connected(gateway, "legacy") as client:  # it declared no sampling
                with pytest.raises(MCPError) as refused:
                    await client.call_tool("sample", {})
    finally:
        store.close()
    assert refused.value.error.message == (
        "tools/call 'sample': the gateway cannot send sampling/createMessage to the client of tools/call 'sample': "
        "it declared no sampling capability"
    )


async def test_a_2026_clients_input_responses_go_to_a_2026_upstream_as_they_came(tmp_path: Path) -> None:
    """The gateway puts out no round of its own between a 2026-07-28 client and a 2026-07-28 upstream: responses the
    client sends, with the upstream's state or none, are the upstream's to read."""
    store = open_store(f"sqlite://{tmp_path / 'gateway.db'}")
    answer: dict[str, InputResponse] = {"answer": ElicitResult(action="accept", content={"answer": 42})}
    try:
        with sdk_over_http() as url:
            gateway = Gateway(over_http(url, era="2026-07-28"), store=store)
            async with gateway.running(), connected(gateway, "2026-07-28") as client:
                unasked = await client.session.call_tool("quiz", {}, input_responses=answer, allow_input_required=True)
        recorded = decisions(store)
    finally:
        store.close()
    assert isinstance(unasked, CallToolResult) and text(unasked) == "answered accept 42 (None)"
    assert recorded == []
