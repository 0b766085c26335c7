"""Edges of a body's `Flow` and of the app around it: sampling keys, several questions for a client that cannot
be asked, a URL question on an app without a public address, steps whose function hands back an awaitable, and
the app's own lifespan inside the library's."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import asynccontextmanager, suppress
from datetime import timedelta
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CreateMessageResult,
    ElicitResult,
    InputRequiredResult,
    SamplingMessage,
    TextContent,
)
from pydantic import BaseModel

from mcp_elicit.model import DecisionStatus, OperationStatus, Operator
from mcp_elicit.server import ANSWERS_ARGUMENT, Accepted, Elicitation, Fallback, Flow, RequestState
from mcp_elicit.testing import ControlledClock, Harness
from tests.helpers.model import Model
from tests.helpers.person import Person
from tests.helpers.results import text
from tests.helpers.server import Approval, Name

pytestmark = pytest.mark.anyio


def said(result: CreateMessageResult) -> str:
    assert isinstance(result.content, TextContent)
    return result.content.text


class Quote(BaseModel):
    amount: int


async def price(amount: int) -> Quote:
    return Quote(amount=amount)


def quoted(amount: int) -> Awaitable[Quote]:
    """A plain function handing back the work to await, typed so: the step journals and returns a `Quote`."""
    return price(amount)


class Pricer:
    """An object whose `__call__` is async: not a coroutine function to `inspect`, yet its call is awaited."""

    async def __call__(self, amount: int) -> Quote:
        return Quote(amount=amount * 10)


def tools(elicitation: Elicitation) -> None:
    @elicitation.tool()
    async def chat(flow: Flow) -> str:
        """Asks the model twice without naming the requests, once with messages of its own."""
        first = await flow.sample("Say one thing", max_tokens=5)
        history = [SamplingMessage(role="user", content=TextContent(type="text", text="Say another"))]
        second = await flow.sample(history, max_tokens=5)
        return f"{said(first)} / {said(second)}"

    @elicitation.tool()
    async def misnamed(flow: Flow, key: str) -> str:
        """Names its model request as told, twice."""
        try:
            await flow.sample("Once", max_tokens=5, key=key)
            await flow.sample("Twice", max_tokens=5, key=key)
        except ValueError as refused:
            return str(refused)
        return "both asked"

    @elicitation.tool(fallback=Fallback.ARGUMENTS)
    async def onboarding(flow: Flow) -> str:
        """Asks two questions together; a client that cannot show forms answers them in the call's arguments."""
        name, approval = await flow.gather(
            flow.ask("Your name?", Name, key="who"), flow.ask("Approve the account?", Approval, key="approve")
        )
        return f"{type(name).__name__} {type(approval).__name__}"

    @elicitation.resource("notes://{topic}")
    async def note(flow: Flow, topic: str) -> str:
        """A note the model writes when it is read."""
        return said(await flow.sample(f"Write a note on {topic}", max_tokens=20))

    @elicitation.tool()
    async def pricing(flow: Flow) -> str:
        """Steps whose functions are not coroutine functions but hand back awaitables."""
        typed: Quote = await flow.step("typed", quoted, 1)
        wrapped = await flow.step("wrapped", lambda: price(2), returns=Quote)
        called = await flow.step("called", Pricer(), 3, returns=Quote)
        return f"{type(typed).__name__} {typed.amount} / {wrapped.amount} / {called.amount}"

    @elicitation.tool()
    async def stubborn(flow: Flow) -> str:
        """Swallows the end of its turn (a round to ask in) and asks on regardless."""
        with suppress(BaseException):  # what a careless body does
            await flow.ask("Your name?", Name, key="who")
        await flow.ask("Approve the account?", Approval, key="approve")
        return "asked both"

    @elicitation.prompt()
    async def briefing(flow: Flow) -> str:
        """A prompt that asks whom the briefing is for."""
        reader = await flow.ask("Who is it for?", Name, key="reader")
        return f"Brief {reader.data.name}" if isinstance(reader, Accepted) else "Brief nobody"

    @elicitation.tool()
    async def link(flow: Flow) -> str:
        """Sends the person to the server's own page."""
        outcome = await flow.ask_url("Connect your account", key="connect")
        return type(outcome).__name__


@pytest.fixture
def lifespan_events() -> list[str]:
    return []


@pytest.fixture
def elicitation(store_url: str, lifespan_events: list[str]) -> Iterator[Elicitation]:
    @asynccontextmanager
    async def own(server: Any) -> AsyncIterator[dict[str, str]]:
        lifespan_events.append("up")
        try:
            yield {"pool": "open"}
        finally:
            lifespan_events.append("down")

    runtime = Elicitation(store_url, request_state=RequestState(keys=[b"e" * 32]))
    runtime.server("flow-edges", lifespan=own)
    tools(runtime)
    yield runtime
    runtime.close()


async def test_unnamed_model_requests_get_keys_of_their_own_and_each_its_own_answer(
    elicitation: Elicitation, lifespan_events: list[str]
) -> None:
    model = Model()
    async with Client(elicitation.mcp_server, mode="legacy", sampling_callback=model) as client:
        result = await client.call_tool("chat", {})
        assert lifespan_events == ["up"], "the app's own lifespan runs inside the library's"
    assert text(result) == "reply 1 / reply 2"
    assert [message.content.text for params in model.asked for message in params.messages] == [  # type: ignore[union-attr]
        "Say one thing",
        "Say another",
    ]
    assert lifespan_events == ["up", "down"]


@pytest.mark.parametrize(
    ("key", "refusal"),
    [
        ("bad key!", "a question key is 1-64 letters, digits, '_', '.', '-': got 'bad key!'"),
        ("line", "question key 'line' is used twice in one tool body; keys name questions"),
    ],
)
async def test_a_model_request_key_that_is_malformed_or_used_twice_is_refused(
    elicitation: Elicitation, key: str, refusal: str
) -> None:
    model = Model()
    async with Client(elicitation.mcp_server, mode="legacy", sampling_callback=model) as client:
        result = await client.call_tool("misnamed", {"key": key})
    assert text(result) == refusal
    assert len(model.asked) == (0 if " " in key else 1), "a refused key asks the model nothing"


async def test_a_client_that_cannot_be_asked_is_told_every_question_and_how_to_answer_them(
    elicitation: Elicitation,
) -> None:
    called = await Harness(elicitation, era="2026-07-28").call("onboarding", modes=())
    error = called.error
    assert "This tool needs answers to:\n- who: Your name? (JSON schema: " in error
    assert "\n- approve: Approve the account? (JSON schema: " in error
    assert ANSWERS_ARGUMENT in error and '"who": {...}, "approve": {...}' in error


async def test_a_url_question_on_an_app_with_no_public_address_fails_naming_the_missing_setting_in_the_log(
    elicitation: Elicitation, caplog: pytest.LogCaptureFixture
) -> None:
    called = await Harness(elicitation, era="2025-11-25").call("link")
    assert called.error == "Error executing tool link"
    assert "ask_url needs the server's public base URL: Elicitation(public_base_url=...)" in caplog.text
    assert called.asked == ()


async def test_a_resource_read_whose_model_request_the_client_refuses_is_an_invalid_request(
    elicitation: Elicitation,
) -> None:
    model = Model(refuse=True)
    async with Client(elicitation.mcp_server, mode="legacy", sampling_callback=model) as client:
        with pytest.raises(MCPError) as refused:
            await client.read_resource("notes://rollout")
    assert refused.value.error.code == -32600
    assert "sampling" in refused.value.error.message
    assert len(model.asked) == 1


async def test_a_step_whose_function_hands_back_an_awaitable_journals_what_it_gives(elicitation: Elicitation) -> None:
    harness = Harness(elicitation, era="2025-11-25")
    called = await harness.call("pricing")
    assert called.text == "Quote 1 / 2 / 30", "the `-> Awaitable[Quote]` annotation types the answer"
    harness.assert_journal(called, {"typed": {"amount": 1}, "wrapped": {"amount": 2}, "called": {"amount": 30}})


async def test_a_body_that_swallows_the_end_of_its_turn_meets_it_again_at_its_next_flow_call(
    elicitation: Elicitation,
) -> None:
    async with Client(elicitation.mcp_server, mode="2026-07-28", elicitation_callback=Person()) as client:
        first = await client.session.call_tool("stubborn", {}, allow_input_required=True)
    assert isinstance(first, InputRequiredResult) and first.input_requests is not None
    assert list(first.input_requests) == ["who"], "the round asks what the turn ended on, not what came after"


async def test_a_prompt_whose_operation_was_cancelled_while_its_round_was_out_is_an_invalid_request(
    elicitation: Elicitation,
) -> None:
    store, operator = elicitation.store, Operator("ops")
    async with Client(elicitation.mcp_server, mode="2026-07-28", elicitation_callback=Person()) as client:
        first = await client.session.get_prompt("briefing", allow_input_required=True)
        assert isinstance(first, InputRequiredResult)
        [decision] = store.list_decisions(operator)
        operation = store.get_operation(decision.operation_id, operator)
        store.finish_operation(operation, OperationStatus.CANCELLED, caller=operator, reason="called off")
        with pytest.raises(MCPError) as ended:
            await client.session.get_prompt(
                "briefing",
                input_responses={"reader": ElicitResult(action="accept", content={"name": "Ada"})},
                request_state=first.request_state,
                allow_input_required=True,
            )
    assert ended.value.error.code == -32600
    assert ended.value.error.message == (
        "An identical call of this prompt ended its operation as cancelled while this call waited; "
        "call again to start afresh"
    )


async def test_a_client_that_cannot_be_asked_calling_again_after_the_pages_question_lapsed_gets_the_expiry(
    store_url: str,
) -> None:
    clock = ControlledClock()
    runtime = Elicitation(
        store_url, clock=clock, request_state=RequestState(keys=[b"w" * 32]), public_base_url="http://127.0.0.1:9"
    )
    runtime.server("web-fallback")

    @runtime.tool(fallback=Fallback.WEB)
    async def approve(flow: Flow) -> str:
        """Asked on the decision page when the client cannot show forms."""
        answer = await flow.ask("Approve the account?", Approval, key="approve", ttl=timedelta(minutes=5))
        return type(answer).__name__

    try:
        harness = Harness(runtime, era="2025-11-25")
        first = await harness.call("approve", modes=())
        assert "answer at http://127.0.0.1:9/elicit/" in first.error
        clock.advance(timedelta(minutes=6))
        again = await harness.call("approve", modes=())
        assert again.text == "Expired", "the lapsed question is expired, not linked again"
        [decision] = runtime.store.list_decisions(Operator("ops"))
        assert decision.status is DecisionStatus.EXPIRED
    finally:
        runtime.close()
