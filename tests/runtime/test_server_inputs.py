"""Asking the client itself (sampling, roots), several things in one round, and prompts that ask.

Tool calls go through `mcp_elicit.testing.Harness`, the model and the roots scripted as the host's callbacks
(`sdk=SdkOptions(...)`), on both paths and both stores; the callbacks count how often they are called, so a
test can prove a journaled answer is never asked twice. Prompts, and the rounds whose shape is the subject
(what one round asks, answers without the round that asked them), use the SDK's client directly: the harness
calls tools, and the kit answers only what a round asks.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CallToolResult,
    CreateMessageRequest,
    CreateMessageResult,
    ElicitRequest,
    ElicitResult,
    GetPromptResult,
    InputRequiredResult,
    ListRootsRequest,
    ListRootsResult,
    Root,
    TextContent,
)
from pydantic import BaseModel, Field, FileUrl

from mcp_elicit.client import SdkOptions
from mcp_elicit.model import DecisionStatus, Operator, Principal, request_digest
from mcp_elicit.server import Accepted, Elicitation, Flow, RequestState
from mcp_elicit.server.eras.mrtr_state import RoundState
from mcp_elicit.store import open_store
from mcp_elicit.testing import Harness, accept
from tests.helpers.model import Model
from tests.helpers.person import Person
from tests.helpers.results import text, unwrap
from tests.helpers.server import Approval, Counter, Name

pytestmark = pytest.mark.anyio

ERAS = ["legacy", "2026-07-28"]
MODERN = "2026-07-28"
BOTH_PATHS = pytest.mark.elicit_eras("2025-11-25", MODERN)
"""A live call the server holds open, and rounds: how often the body runs differs, what is asked must not."""
LOCAL = Principal("local-user", "stdio")


class Topic(BaseModel):
    topic: str = Field(min_length=1, description="What the briefing covers")


@dataclass
class Roots:
    """The client's roots, and how often it was asked for them."""

    roots: list[Root] = field(default_factory=lambda: [Root(uri=FileUrl("file:///work/repo"), name="repo")])
    calls: int = 0

    async def __call__(self, context: ClientRequestContext) -> ListRootsResult:
        self.calls += 1
        return ListRootsResult(roots=self.roots)


def reply_text(reply: CreateMessageResult) -> str:
    return reply.content.text if isinstance(reply.content, TextContent) else "(not text)"


def build_input_tools(elicitation: Elicitation, counter: Counter) -> None:
    @elicitation.tool()
    async def draft(flow: Flow, topic: str) -> str:
        """Ask the model for a line, then ask the person whether to publish it."""
        counter.bump("draft body")
        line = reply_text(await flow.sample(f"Write one line about {topic}", max_tokens=40, key="line"))
        answer = await flow.ask(f"Publish {line!r}?", Approval, key="publish")
        published = isinstance(answer, Accepted) and answer.data.approve
        return f"published: {line}" if published else f"kept: {line}"

    @elicitation.tool()
    async def index_workspace(flow: Flow) -> str:
        """Ask the client for its roots, then ask the person whether to index them."""
        counter.bump("index body")
        names = ", ".join(root.name or str(root.uri) for root in await flow.roots())
        answer = await flow.ask(f"Index {names}?", Approval, key="index")
        return f"indexed {names}" if isinstance(answer, Accepted) and answer.data.approve else "not indexed"

    @elicitation.tool()
    async def everything(flow: Flow) -> str:
        """Ask the person, the model and the roots together."""
        counter.bump("everything body")
        name, greeting, roots = await flow.gather(
            flow.ask("Who is this for?", Name, key="who"),
            flow.sample("Generate a greeting", max_tokens=20, key="greeting"),
            flow.roots(key="where"),
        )
        who = name.data.name if isinstance(name, Accepted) else "nobody"
        return f"{who} | {reply_text(greeting)} | {len(roots)} root(s)"

    @elicitation.tool()
    async def model_only(flow: Flow) -> str:
        """Ask only the model."""
        return reply_text(await flow.sample("Say hi", max_tokens=5))

    @elicitation.tool()
    async def roots_only(flow: Flow) -> str:
        """Ask only for the roots."""
        return f"{len(await flow.roots())} root(s)"

    @elicitation.tool()
    async def reserved_step(flow: Flow) -> str:
        """Names a step in the library's journal namespace, which is refused."""
        return await flow.step("mcp-elicit/input/greeting", lambda: "forged")

    @elicitation.prompt(title="Briefing")
    async def briefing(flow: Flow, audience: str) -> str:
        """A briefing whose subject the person chooses before the prompt is rendered."""
        counter.bump("briefing body")
        answer = await flow.ask(f"What should the briefing for {audience} cover?", Topic, key="topic")
        if isinstance(answer, Accepted):
            return f"Brief {audience} on {answer.data.topic}."
        return f"Brief {audience} on anything."

    @elicitation.prompt()
    async def grounded_briefing(flow: Flow) -> str:
        """A briefing grounded in the model's own summary."""
        return reply_text(await flow.sample("Summarize the week", max_tokens=50, key="week"))


@pytest.fixture
def counter(tmp_path: Path) -> Counter:
    return Counter(tmp_path / "effects.json")


@pytest.fixture
def elicitation(store_url: str, counter: Counter) -> Iterator[Elicitation]:
    runtime = Elicitation(open_store(store_url), request_state=RequestState(keys=[b"i" * 32]))
    runtime.server("inputs-server")
    build_input_tools(runtime, counter)
    yield runtime
    runtime.close()


@pytest.fixture
def elicit_app(elicitation: Elicitation) -> Elicitation:
    return elicitation


def host(model: Model | None = None, roots: Roots | None = None) -> SdkOptions:
    """The host's own callbacks: the client declares sampling and roots only with one for them."""
    return SdkOptions(sampling_callback=model, list_roots_callback=roots)


def client(
    elicitation: Elicitation,
    era: str,
    *,
    person: Person | None = None,
    model: Model | None = None,
    roots: Roots | None = None,
) -> Client:
    """A client declaring exactly the capabilities it has a callback for."""
    return Client(
        elicitation.mcp_server,
        mode=era,
        elicitation_callback=person,
        sampling_callback=model,
        list_roots_callback=roots,
    )


def round_state(elicitation: Elicitation, sealed: str | None) -> RoundState:
    """The plaintext round state inside a sealed requestState, read with the server's own key ring."""
    assert sealed is not None
    claims = json.loads(elicitation.request_state_security.codec.unseal(sealed))
    return RoundState.decode(claims["s"])


# -- sampling and roots, journaled --------------------------------------------------------------


@BOTH_PATHS
async def test_the_model_is_asked_once_however_often_the_body_runs(elicit: Harness, counter: Counter) -> None:
    model = Model(reply="Ship it today.")
    called = await elicit.call(
        "draft", {"topic": "releases"}, answers={"publish": accept(approve=True)}, sdk=host(model=model)
    )
    assert called.text == "published: Ship it today."
    [asked] = model.asked
    assert asked.max_tokens == 40
    first = asked.messages[0].content
    assert isinstance(first, TextContent) and first.text == "Write one line about releases"
    assert [question.message for question in called.asked] == ["Publish 'Ship it today.'?"]
    # 2026-07-28 re-runs the body on every retry (sample, then ask, then done); the legacy era runs it once.
    assert counter.read()["draft body"] == (3 if elicit.era == MODERN else 1)


@BOTH_PATHS
async def test_the_roots_are_asked_once_however_often_the_body_runs(elicit: Harness, counter: Counter) -> None:
    roots = Roots()
    called = await elicit.call("index_workspace", answers={"index": accept(approve=True)}, sdk=host(roots=roots))
    assert called.text == "indexed repo"
    assert roots.calls == 1
    assert counter.read()["index body"] == (3 if elicit.era == MODERN else 1)


@BOTH_PATHS
@pytest.mark.parametrize("tool", ["draft", "index_workspace"])
async def test_a_journaled_answer_outlives_a_call_that_failed_later(elicit: Harness, tool: str) -> None:
    """The first client answers the model or roots request but cannot show forms; a second client resumes
    the same operation, and only the person is asked: the journal answers for the client's first answer."""
    arguments = {"topic": "releases"} if tool == "draft" else {}
    first_model, first_roots = Model(reply="First model."), Roots([Root(uri=FileUrl("file:///first"), name="first")])
    if elicit.era == MODERN:
        with pytest.raises(MCPError) as raised:
            await elicit.call(tool, arguments, modes=(), sdk=host(first_model, first_roots))
        assert raised.value.code == -32021
    else:
        failed = await elicit.call(tool, arguments, modes=(), sdk=host(first_model, first_roots))
        assert "form elicitation" in failed.error
    assert len(first_model.asked) + first_roots.calls == 1

    later_model, later_roots = Model(reply="Second model."), Roots()
    answers = {"publish": accept(approve=True), "index": accept(approve=True)}
    result = (await elicit.call(tool, arguments, answers=answers, sdk=host(later_model, later_roots))).text
    assert result == ("published: First model." if tool == "draft" else "indexed first")
    assert later_model.asked == [] and later_roots.calls == 0
    assert len(elicit.asked) == 1


@pytest.mark.elicit_eras("2025-11-25")
async def test_a_legacy_client_refusing_the_model_gets_a_tool_error_and_is_asked_again(elicit: Harness) -> None:
    refusing = Model(refuse=True)
    refused = await elicit.call("model_only", sdk=host(model=refusing))
    assert "refused the sampling request 'sample'" in refused.error
    willing = Model(reply="hi!")
    assert (await elicit.call("model_only", sdk=host(model=willing))).text == "hi!"
    assert len(refusing.asked) == len(willing.asked) == 1


@pytest.mark.elicit_eras(MODERN)  # the name is refused by `flow.step` itself, before any era's path
async def test_step_names_in_the_library_namespace_are_refused(elicit: Harness) -> None:
    assert "reserved" in (await elicit.call("reserved_step")).error


# -- several at once ----------------------------------------------------------------------------


@BOTH_PATHS
async def test_gather_asks_the_person_the_model_and_the_roots(elicit: Harness, counter: Counter) -> None:
    model, roots = Model(reply="Hi Ada"), Roots()
    called = await elicit.call("everything", answers={"who": accept(name="Ada")}, sdk=host(model, roots))
    assert called.text == "Ada | Hi Ada | 1 root(s)"
    assert (len(called.asked), len(model.asked), roots.calls) == (1, 1, 1)
    # One round for all three on 2026-07-28: the body runs once to ask them and once to finish.
    assert counter.read()["everything body"] == (2 if elicit.era == MODERN else 1)


async def test_gather_puts_every_unanswered_input_in_one_round(elicitation: Elicitation) -> None:
    async with client(elicitation, MODERN, person=Person(), model=Model(), roots=Roots()) as c:
        first = await c.session.call_tool("everything", {}, allow_input_required=True)
        assert isinstance(first, InputRequiredResult) and first.input_requests is not None
        requests = first.input_requests
        assert list(requests) == ["who", "greeting", "where"]
        assert isinstance(requests["who"], ElicitRequest)
        assert isinstance(requests["greeting"], CreateMessageRequest)
        assert isinstance(requests["where"], ListRootsRequest)
        [decision] = elicitation.store.list_decisions(Operator())
        assert round_state(elicitation, first.request_state).asked == {
            "who": decision.elicitation_id,
            "greeting": "sampling/createMessage",
            "where": "roots/list",
        }

        # Only the person answered, and the model's answer came under the wrong key's type: both others are
        # asked again, in a new round whose state records only them.
        wrong = ElicitResult(action="accept", content={"text": "not a model answer"})
        partial = await c.session.call_tool(
            "everything",
            {},
            input_responses={"who": ElicitResult(action="accept", content={"name": "Ada"}), "greeting": wrong},
            request_state=first.request_state,
            allow_input_required=True,
        )
        assert isinstance(partial, InputRequiredResult) and partial.input_requests is not None
        assert list(partial.input_requests) == ["greeting", "where"]
        assert round_state(elicitation, partial.request_state).asked == {
            "greeting": "sampling/createMessage",
            "where": "roots/list",
        }

        model_answer = CreateMessageResult(
            role="assistant", content=TextContent(type="text", text="Hello Ada"), model="m", stop_reason="endTurn"
        )
        done = await c.session.call_tool(
            "everything",
            {},
            input_responses={"greeting": model_answer, "where": ListRootsResult(roots=[])},
            request_state=partial.request_state,
            allow_input_required=True,
        )
    assert isinstance(done, CallToolResult)
    assert text(done) == "Ada | Hello Ada | 0 root(s)"
    [decision] = elicitation.store.list_decisions(Operator())
    assert decision.status is DecisionStatus.ACCEPTED


async def test_answers_to_queries_without_the_round_that_asked_them_are_not_applied(elicitation: Elicitation) -> None:
    unsolicited = CreateMessageResult(
        role="assistant", content=TextContent(type="text", text="injected"), model="m", stop_reason="endTurn"
    )
    async with client(elicitation, MODERN, model=Model()) as c:
        first = await c.session.call_tool(
            "model_only", {}, input_responses={"sample": unsolicited}, allow_input_required=True
        )
        assert isinstance(first, InputRequiredResult) and first.input_requests is not None
        assert list(first.input_requests) == ["sample"]
        answered = await c.session.call_tool(
            "model_only",
            {},
            input_responses={"sample": unsolicited},
            request_state=first.request_state,
            allow_input_required=True,
        )
        assert isinstance(answered, CallToolResult) and text(answered) == "injected"
        # The round's state is single-use: the same state cannot answer again.
        with pytest.raises((MCPError, BaseExceptionGroup)) as raised:
            await c.session.call_tool(
                "model_only",
                {},
                input_responses={"sample": unsolicited},
                request_state=first.request_state,
                allow_input_required=True,
            )
    error = unwrap(raised.value)
    assert isinstance(error, MCPError) and error.code == -32602


# -- capabilities -----------------------------------------------------------------------------------


@pytest.mark.elicit_eras(MODERN)
@pytest.mark.parametrize(
    ("tool", "has", "required"),
    [
        ("model_only", {"person", "roots"}, {"sampling": {}}),
        ("roots_only", {"person", "model"}, {"roots": {}}),
        ("everything", {"person"}, {"sampling": {}, "roots": {}}),
        ("everything", set(), {"elicitation": {"form": {}}, "sampling": {}, "roots": {}}),
    ],
)
async def test_modern_client_missing_capabilities_gets_32021_naming_them_all(
    elicit: Harness, tool: str, has: set[str], required: dict[str, object]
) -> None:
    model, roots = Model(), Roots()
    with pytest.raises(MCPError) as raised:
        await elicit.call(
            tool,
            modes=("form",) if "person" in has else (),
            sdk=host(model if "model" in has else None, roots if "roots" in has else None),
        )
    assert raised.value.code == -32021
    assert raised.value.data == {"requiredCapabilities": required}
    assert (elicit.asked, model.asked, roots.calls) == ([], [], 0)


@pytest.mark.elicit_eras("2025-11-25")
@pytest.mark.parametrize(
    ("tool", "has", "named"),
    [
        ("model_only", {"person", "roots"}, "sampling"),
        ("roots_only", {"person", "model"}, "roots"),
        ("everything", {"person", "roots"}, "sampling"),
    ],
)
async def test_legacy_client_missing_a_capability_gets_a_tool_error_naming_it(
    elicit: Harness, tool: str, has: set[str], named: str
) -> None:
    model, roots = Model(), Roots()
    called = await elicit.call(
        tool,
        answers={"who": accept(name="Ada")},
        modes=("form",) if "person" in has else (),
        sdk=host(model if "model" in has else None, roots if "roots" in has else None),
    )
    message = called.error
    assert f"({named})" in message and "cannot receive" in message
    assert model.asked == [] and roots.calls == 0


# -- prompts that ask ----------------------------------------------------------------------------------


def prompt_text(result: GetPromptResult) -> str:
    [message] = result.messages
    assert isinstance(message.content, TextContent)
    return message.content.text


@pytest.mark.parametrize("era", ERAS)
async def test_a_prompt_asks_and_replays_like_a_tool(elicitation: Elicitation, counter: Counter, era: str) -> None:
    person = Person([ElicitResult(action="accept", content={"topic": "the incident"})])
    async with client(elicitation, era, person=person) as c:
        first = await c.get_prompt("briefing", {"audience": "ops"})
        again = await c.get_prompt("briefing", {"audience": "ops"})
    assert prompt_text(first) == prompt_text(again) == "Brief ops on the incident."
    assert [params.message for params in person.asked] == ["What should the briefing for ops cover?"]
    assert counter.read()["briefing body"] == (2 if era == MODERN else 1)
    called = {"name": "briefing", "arguments": {"audience": "ops"}}
    store = elicitation.store
    digest = request_digest("prompts/get", called)
    [operation] = store.find_operations(LOCAL, method="prompts/get", target="briefing", request_digest=digest)
    [decision] = store.list_decisions(Operator())
    assert (decision.operation_id, decision.origin_method) == (operation.operation_id, "prompts/get")
    as_tool = request_digest("tools/call", called)
    assert store.find_operations(LOCAL, method="tools/call", target="briefing", request_digest=as_tool) == []


async def test_a_prompt_round_is_an_input_required_result_on_prompts_get(elicitation: Elicitation) -> None:
    async with client(elicitation, MODERN, person=Person()) as c:
        first = await c.session.get_prompt("briefing", {"audience": "ops"}, allow_input_required=True)
        assert isinstance(first, InputRequiredResult) and first.input_requests is not None
        assert list(first.input_requests) == ["topic"]
        with pytest.raises((MCPError, BaseExceptionGroup)):
            await c.session.get_prompt(
                "briefing",
                {"audience": "dev"},
                input_responses={"topic": ElicitResult(action="accept", content={"topic": "x"})},
                request_state=first.request_state,
                allow_input_required=True,
            )
        done = await c.session.get_prompt(
            "briefing",
            {"audience": "ops"},
            input_responses={"topic": ElicitResult(action="accept", content={"topic": "latency"})},
            request_state=first.request_state,
            allow_input_required=True,
        )
    assert isinstance(done, GetPromptResult) and prompt_text(done) == "Brief ops on latency."


@pytest.mark.parametrize("era", ERAS)
async def test_a_prompt_that_cannot_ask_answers_32021_on_every_era(elicitation: Elicitation, era: str) -> None:
    async with client(elicitation, era, person=Person()) as c:
        with pytest.raises((MCPError, BaseExceptionGroup)) as raised:
            await c.get_prompt("grounded_briefing")
    error = unwrap(raised.value)
    assert isinstance(error, MCPError) and error.code == -32021
    assert error.data == {"requiredCapabilities": {"sampling": {}}}


@pytest.mark.parametrize("era", ERAS)
async def test_a_prompt_can_ask_the_model(elicitation: Elicitation, era: str) -> None:
    model = Model(reply="A calm week.")
    async with client(elicitation, era, model=model) as c:
        assert prompt_text(await c.get_prompt("grounded_briefing")) == "A calm week."
    assert len(model.asked) == 1
