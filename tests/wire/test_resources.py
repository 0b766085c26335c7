"""`@elicitation.resource(uri_template)`: a resource read gets the same `Flow` as a tool call, on every era.

2025-06-18 and 2025-11-25 ask with an `elicitation/create` related to the `resources/read`; 2026-07-28 answers
the read with an `InputRequiredResult` and the client retries it with `inputResponses` and the echoed
`requestState`. Real parts: two server instances over streamable HTTP on loopback sharing one store and key
ring, bearer tokens checked by the SDK's middleware, the client kit and the SDK's own client.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import (
    BlobResourceContents,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
    InputResponses,
    ReadResourceResult,
    TextResourceContents,
)

from mcp_elicit.client import ElicitingClient, Http, ScriptedHandler
from mcp_elicit.client.errors import KitError
from mcp_elicit.model import DecisionStatus, Operation, OperationStatus, Operator, Principal
from mcp_elicit.server import Accepted, Elicitation, Flow, RequestState
from mcp_elicit.store import Store, open_store
from tests.helpers.http_harness import ISSUER, StaticTokenVerifier, auth_settings, free_port, serving
from tests.helpers.person import Person

pytestmark = pytest.mark.anyio

ERAS = ["2025-06-18", "2025-11-25", "2026-07-28"]
KEYS = [b"r" * 32]
BINARY = bytes(range(256))
ALICE = Principal(f"{ISSUER}#alice", "client-a")


@dataclass
class Counted:
    runs: dict[str, int] = field(default_factory=dict)

    def bump(self, what: str) -> int:
        self.runs[what] = self.runs.get(what, 0) + 1
        return self.runs[what]


def build(elicitation: Elicitation, counted: Counted) -> None:
    @elicitation.resource("notes://{name}", mime_type="text/plain")
    async def note(flow: Flow, name: str) -> str:
        size = await flow.step("measure", lambda: counted.bump(name) and len(name) * 100)
        shown = await flow.ask(f"Show the note {name} ({size} words)?", bool, key="show")
        if isinstance(shown, Accepted) and shown.data:
            return f"note {name} for {flow.principal.principal_id}"
        return f"{name} stays hidden ({type(shown).__name__})"

    @elicitation.resource("blobs://{name}", mime_type="application/octet-stream")
    async def blob(flow: Flow, name: str) -> bytes:
        await flow.ask(f"Send the blob {name}?", bool, key="send")
        return BINARY


@dataclass
class Instances:
    urls: list[str]
    store: Store
    counted: Counted


@contextmanager
def instances(store_url: str, count: int = 2) -> Iterator[Instances]:
    """`count` servers over HTTP, one store and one key ring: any of them serves any round."""
    counted = Counted()
    store = open_store(store_url)
    with ExitStack() as stack:
        urls = []
        for _ in range(count):
            port = free_port()
            elicitation = Elicitation(store, request_state=RequestState(keys=KEYS))
            server = elicitation.server("notes", token_verifier=StaticTokenVerifier(), auth=auth_settings(port))
            build(elicitation, counted)
            urls.append(f"{stack.enter_context(serving(server.streamable_http_app(), port))}/mcp")
        try:
            yield Instances(urls, store, counted)
        finally:
            stack.close()
            store.close()


@pytest.fixture
def served(store_url: str) -> Iterator[Instances]:
    with instances(store_url) as running:
        yield running


def operations(store: Store) -> list[Operation]:
    """The operations the decisions were asked in, one each."""
    ids = dict.fromkeys(decision.operation_id for decision in store.list_decisions(Operator()))
    return [store.get_operation(operation_id, Operator()) for operation_id in ids]


def only_text(result: ReadResourceResult) -> str:
    [content] = result.contents
    assert isinstance(content, TextResourceContents), content
    return content.text


@asynccontextmanager
async def sdk_client(url: str, token: str, era: str) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=era, elicitation_callback=Person()) as client:
            yield client


@pytest.mark.parametrize("era", ERAS)
async def test_a_read_asks_once_journals_its_step_and_replays_on_every_era(served: Instances, era: str) -> None:
    handler = ScriptedHandler([{"match": "Show the note plans", "reply": "accept", "content": {"value": True}}])
    async with ElicitingClient(Http(served.urls[0], bearer_token="token-alice"), handler, era=era) as client:  # type: ignore[arg-type]
        read = await client.read_resource("notes://plans")
        again = await client.read_resource("notes://plans")
    assert only_text(read) == only_text(again) == f"note plans for {ISSUER}#alice"
    [asked] = handler.asked
    assert asked.message == "Show the note plans (500 words)?" and asked.asker.resource == "notes://plans"
    assert served.counted.runs == {"plans": 1}  # the step ran once; the second read replayed
    [decision] = served.store.list_decisions(Operator())
    assert decision.status is DecisionStatus.ACCEPTED and decision.key == "show"
    assert decision.principal == ALICE
    [operation] = operations(served.store)
    assert (operation.method, operation.target, operation.status) == (
        "resources/read",
        "notes://{name}",
        OperationStatus.COMPLETED,
    )
    assert decision.operation_id == operation.operation_id


@pytest.mark.parametrize("era", ERAS)
async def test_a_declined_read_reaches_the_body_and_another_uri_is_another_operation(
    served: Instances, era: str
) -> None:
    handler = ScriptedHandler(
        [
            {"match": "Show the note a", "reply": "decline"},
            {"match": "Show the note b", "reply": "accept", "content": {"value": False}},
        ]
    )
    async with ElicitingClient(Http(served.urls[0], bearer_token="token-bob"), handler, era=era) as client:  # type: ignore[arg-type]
        declined = await client.read_resource("notes://a")
        refused = await client.read_resource("notes://b")
    assert only_text(declined) == "a stays hidden (Declined)"
    assert only_text(refused) == "b stays hidden (Accepted)"
    assert len(operations(served.store)) == 2


@pytest.mark.parametrize("era", ["2026-07-28"])  # the result is recorded and replayed alike on every era
async def test_bytes_are_recorded_and_replayed_exactly(served: Instances, era: str) -> None:
    handler = ScriptedHandler([{"match": "Send the blob", "reply": "accept", "content": {"value": True}}])
    async with ElicitingClient(Http(served.urls[0], bearer_token="token-alice"), handler, era=era) as client:  # type: ignore[arg-type]
        first = await client.read_resource("blobs://raw")
        replayed = await client.read_resource("blobs://raw")
    for result in (first, replayed):
        [content] = result.contents
        assert isinstance(content, BlobResourceContents) and content.mime_type == "application/octet-stream"
        assert base64.b64decode(content.blob) == BINARY
    assert len(handler.asked) == 1


@pytest.mark.parametrize("era", ERAS)
async def test_a_client_that_cannot_be_asked_gets_minus_32021_naming_the_form_capability(
    served: Instances, era: str
) -> None:
    nobody = ScriptedHandler([], modes=())
    async with ElicitingClient(Http(served.urls[0], bearer_token="token-alice"), nobody, era=era) as client:  # type: ignore[arg-type]
        with pytest.raises((MCPError, KitError)) as raised:
            await client.read_resource("notes://plans")
    assert "This resource needs the client's form elicitation capability" in str(raised.value)
    assert served.counted.runs == {"plans": 1}  # the step before the question ran, and stays journaled


async def test_on_2026_07_28_the_read_answers_input_required_and_any_instance_serves_the_retry_once(
    served: Instances,
) -> None:
    first_url, second_url = served.urls
    async with sdk_client(first_url, "token-alice", "2026-07-28") as client:
        first = await client.session.read_resource("notes://roadmap", allow_input_required=True)
    assert isinstance(first, InputRequiredResult) and first.input_requests is not None and first.request_state
    asked = first.input_requests["show"].params
    assert isinstance(asked, ElicitRequestFormParams) and asked.message == "Show the note roadmap (700 words)?"
    [operation] = operations(served.store)
    assert operation.status is OperationStatus.OPEN

    answer: InputResponses = {"show": ElicitResult(action="accept", content={"value": True})}
    async with sdk_client(second_url, "token-bob", "2026-07-28") as bob:
        with pytest.raises(MCPError, match="Invalid or expired requestState"):
            await bob.session.read_resource(
                "notes://roadmap", input_responses=answer, request_state=first.request_state, allow_input_required=True
            )
    async with sdk_client(second_url, "token-alice", "2026-07-28") as client:
        with pytest.raises(MCPError, match="Invalid or expired requestState"):  # another resource, the same state
            await client.session.read_resource(
                "notes://other", input_responses=answer, request_state=first.request_state, allow_input_required=True
            )
        done = await client.session.read_resource(
            "notes://roadmap", input_responses=answer, request_state=first.request_state, allow_input_required=True
        )
        assert isinstance(done, ReadResourceResult) and only_text(done) == f"note roadmap for {ISSUER}#alice"
        # The spec: a result reached through a retry MUST NOT be cached; and this one is alice's alone.
        assert (done.ttl_ms, done.cache_scope) == (0, "private")
        with pytest.raises(MCPError, match="Invalid or expired requestState"):  # the round is spent
            await client.session.read_resource(
                "notes://roadmap", input_responses=answer, request_state=first.request_state, allow_input_required=True
            )
    assert served.counted.runs == {"roadmap": 1}
    [decision] = served.store.list_decisions(Operator())
    assert decision.status is DecisionStatus.ACCEPTED


async def test_an_invalid_answer_is_asked_again_never_recorded(served: Instances) -> None:
    async with sdk_client(served.urls[0], "token-alice", "2026-07-28") as client:
        first = await client.session.read_resource("notes://x", allow_input_required=True)
        assert isinstance(first, InputRequiredResult)
        wrong: InputResponses = {"show": ElicitResult(action="accept", content={"value": "yes please"})}
        again = await client.session.read_resource(
            "notes://x", input_responses=wrong, request_state=first.request_state, allow_input_required=True
        )
    assert isinstance(again, InputRequiredResult) and again.input_requests is not None
    assert set(again.input_requests) == {"show"}
    [decision] = served.store.list_decisions(Operator())
    assert decision.status is DecisionStatus.REQUESTED


def test_a_static_uri_is_refused_when_registered(sqlite_url: str) -> None:
    elicitation = Elicitation(sqlite_url, request_state=RequestState(keys=KEYS))
    elicitation.server("notes")
    try:
        with pytest.raises(ValueError, match="has no URI template variables"):

            @elicitation.resource("notes://all")
            async def every(flow: Flow) -> str:
                return "all"

        with pytest.raises(TypeError, match="must take exactly one parameter annotated Flow"):

            @elicitation.resource("notes://{name}")
            async def flowless(name: str) -> str:
                return name
    finally:
        elicitation.close()
