"""What an upstream asks while the gateway forwards an approved call, on every pair of eras: a 2026-07-28
upstream's `InputRequiredResult` round and a handshake upstream's `elicitation/create` are asked through the
call's operation (durable decisions beside its approval), on whichever era the client speaks, and every message
that makes the upstream go on is sent at most once, with the arguments approved. Also where the mark that a
forward started is made: once the forward holds a session with the upstream, not before.

The upstreams are real servers: the asking peer (the SDK's `MCPServer`, whose ledger counts what reached it) on
loopback HTTP, pinned to either era, and a FastMCP server asking with `ctx.elicit` over stdio; the clients are
the SDK's `Client` of each era, in process.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import Client as FastMCPClient
from mcp.client.session import ClientRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from mcp_types import (
    CallToolResult,
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitRequestURLParams,
    ElicitResult,
    InputRequiredResult,
)

from mcp_elicit.approvals import APPROVAL_KEY
from mcp_elicit.gateway import Gateway
from mcp_elicit.gateway.gates import GateTable
from mcp_elicit.model import DecisionStatus, OperationStatus, Operator
from mcp_elicit.server import IdentityPolicy, RequestState
from mcp_elicit.store import Store, open_store
from tests.helpers.gateway import ERAS, SDK_SERVER, connected, over_http, said, sdk_over_http, stdio, text, until
from tests.helpers.http_harness import free_port, serving
from tests.helpers.peers.asking_server import DRIVE_URL, Quantity
from tests.helpers.peers.asking_server import connected as asking_connected
from tests.helpers.peers.asking_server import server as asking_server

pytestmark = pytest.mark.anyio

OPERATOR = Operator("test")
ASKING = (sys.executable, "-m", "tests.helpers.peers.asking_server")


class Person:
    """Approves with `approval` (the form's content: an edit, or nothing), and answers each other question with the
    content its message starts with in `answers`; notes each message."""

    def __init__(self, approval: dict[str, Any], answers: dict[str, dict[str, Any]]) -> None:
        self.approval = approval
        self.answers = answers
        self.asked: list[str] = []

    async def __call__(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        assert isinstance(params, ElicitRequestFormParams)
        self.asked.append(params.message)
        if params.message.startswith("Approve this call?"):
            return ElicitResult(action="accept", content=self.approval)
        [content] = [answer for start, answer in self.answers.items() if params.message.startswith(start)]
        return ElicitResult(action="accept", content=content)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(f"sqlite://{tmp_path / 'gateway.db'}")
    yield opened
    opened.close()


def ledger_of(path: Path) -> list[str]:
    return said(path).splitlines()


@pytest.mark.parametrize("era", ERAS)
async def test_a_2026_upstreams_round_during_an_approved_call_is_asked_and_the_approved_call_sent_again_once(
    era: str, store: Store, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    person = Person({"amount": 250}, {"Which reference?": {"reference": "INV-7"}})
    with serving(asking_server.streamable_http_app(host="127.0.0.1"), free_port()) as base:
        gateway = Gateway(over_http(f"{base}/mcp", era="2026-07-28"), store=store, gates=[GateTable(tool="transfer")])
        async with gateway.running(), connected(gateway, era, elicitation_callback=person) as client:
            sent = await client.call_tool("transfer", {"amount": 500, "ledger": str(ledger)})
    recorded = store.list_decisions(OPERATOR)
    assert said_lines(sent)[-1] == "sent 250 (accept, INV-7)"
    assert ledger_of(ledger) == ["start transfer 250", "start transfer 250 INV-7 transfer-250"]
    assert person.asked[1:] == ["Which reference?"]
    assert len({decision.operation_id for decision in recorded}) == 1
    assert sorted(decision.key.split(".")[0] for decision in recorded) == sorted([APPROVAL_KEY, "q1"])
    assert all(decision.status is DecisionStatus.ACCEPTED for decision in recorded)


@pytest.mark.parametrize("era", ERAS)
async def test_a_handshake_upstreams_questions_during_an_approved_call_are_decisions_of_its_operation(
    era: str, store: Store, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    person = Person({}, {"How many pens?": {"quantity": 2}, "Which colour of pens?": {"colour": "blue"}})
    with serving(asking_server.streamable_http_app(host="127.0.0.1"), free_port()) as base:
        gateway = Gateway(over_http(f"{base}/mcp", era="legacy"), store=store, gates=[GateTable(tool="order")])
        async with gateway.running(), connected(gateway, era, elicitation_callback=person) as client:
            ordered = await client.call_tool("order", {"item": "pens", "ledger": str(ledger)})
    recorded = store.list_decisions(OPERATOR)
    assert said_lines(ordered)[-1] == "ordered 2 blue pens"
    assert ledger_of(ledger) == ["start pens"]  # one upstream call carried every answer, across rounds too
    assert person.asked[1:] == ["How many pens?", "Which colour of pens?"]
    assert len({decision.operation_id for decision in recorded}) == 1
    assert sorted(decision.key.split(".")[0] for decision in recorded) == sorted([APPROVAL_KEY, "q1", "q2"])


@pytest.mark.parametrize("era", ERAS)
async def test_a_minus_32042_of_the_upstream_during_an_approved_call_is_asked_then_the_call_forwarded_once(
    era: str, store: Store, tmp_path: Path
) -> None:
    """An upstream's `-32042` means the approved call did not run upstream: the URL flow it names is asked as a
    decision of the call's operation (on either era: `-32042` does not exist at 2026-07-28), and once the person
    consented and the upstream said the flow is complete, the approved call is forwarded again, once."""
    ledger = tmp_path / "ledger"
    asked: list[str] = []
    with serving(asking_server.streamable_http_app(host="127.0.0.1"), free_port()) as base:
        gates = [GateTable(tool="files", editable=[])]
        gateway = Gateway(over_http(f"{base}/mcp", era="legacy"), store=store, gates=gates)
        async with gateway.running(), connected(gateway, era) as page:

            async def person(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
                if isinstance(params, ElicitRequestURLParams):
                    asked.append(params.url)
                    assert text(await page.call_tool("drive_connected", {})) == "connected"  # the drive's page
                    return ElicitResult(action="accept")
                asked.append(params.message.split("\n")[0])
                return ElicitResult(action="accept", content={})

            try:
                async with connected(gateway, era, elicitation_callback=person) as client:
                    listed = await client.call_tool("files", {"ledger": str(ledger)})
            finally:
                asking_connected.clear()
    recorded = {decision.key.split(".")[0]: decision for decision in store.list_decisions(OPERATOR)}
    assert text(listed) == "files: notes.txt"
    assert asked == ["Approve this call?", DRIVE_URL]
    assert ledger_of(ledger) == ["start files"]  # forwarded again once the flow was done, and only then
    assert sorted(recorded) == sorted([APPROVAL_KEY, "q1"])
    assert len({decision.operation_id for decision in recorded.values()}) == 1
    assert recorded["q1"].status is DecisionStatus.EXTERNAL_COMPLETED
    [operation_id] = {decision.operation_id for decision in recorded.values()}
    assert store.get_operation(operation_id, OPERATOR).status is OperationStatus.COMPLETED


async def test_a_minus_32042_flow_declined_during_an_approved_call_ends_it_naming_the_url_and_nothing_ran(
    store: Store, tmp_path: Path
) -> None:
    """The person refusing to open the page the upstream's `-32042` needs: the call ends as a tool error saying
    which page, the operation ends with it, and the approved call is not forwarded again."""
    ledger = tmp_path / "ledger"

    async def person(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        if isinstance(params, ElicitRequestURLParams):
            return ElicitResult(action="decline")
        return ElicitResult(action="accept", content={})

    with serving(asking_server.streamable_http_app(host="127.0.0.1"), free_port()) as base:
        gates = [GateTable(tool="files", editable=[])]
        gateway = Gateway(over_http(f"{base}/mcp", era="legacy"), store=store, gates=gates)
        async with gateway.running(), connected(gateway, "legacy", elicitation_callback=person) as client:
            refused = await client.call_tool("files", {"ledger": str(ledger)})
    assert refused.is_error and DRIVE_URL in said_lines(refused)[0]
    assert ledger_of(ledger) == []
    [operation_id] = {decision.operation_id for decision in store.list_decisions(OPERATOR)}
    assert store.get_operation(operation_id, OPERATOR).status is OperationStatus.COMPLETED


async def test_a_fastmcp_upstreams_ctx_elicit_during_an_approved_call_reaches_a_2026_client(store: Store) -> None:
    """FastMCP's `Context.elicit` needs the handshake; the gateway asks it of a 2026-07-28 client in a round."""
    asked: list[str] = []

    async def handler(message: str, response_type: Any, params: Any, context: Any) -> Any:
        asked.append(message)
        if message.startswith("Approve this call?"):
            return ElicitResult(action="accept", content={})
        return response_type(value=3)

    loopback = IdentityPolicy(allow_unauthenticated_loopback=True)  # as the command serves loopback
    upstream = stdio((sys.executable, "-m", "tests.helpers.peers.fastmcp_plain"))
    gateway = Gateway(upstream, store=store, identity=loopback, gates=[GateTable(tool="book", editable=[])])
    with serving(gateway.server.streamable_http_app(host="127.0.0.1"), free_port()) as base:
        async with FastMCPClient(f"{base}/mcp", mode="2026-07-28", elicitation_handler=handler) as client:
            result = await client.call_tool("book", {"city": "Oslo"})
    assert result.data == "booked 3 to Oslo"
    assert asked[1:] == ["How many seats to Oslo?"]


async def test_an_approved_call_whose_upstream_request_died_with_the_gateway_is_an_unknown_outcome(
    store: Store, tmp_path: Path
) -> None:
    """The upstream request waiting for the answer lives in the gateway's memory: a gateway started anew cannot hand
    it the answer, and does not send the approved call again (the upstream may have acted before it asked)."""
    ledger = tmp_path / "ledger"
    arguments = {"item": "cups", "ledger": str(ledger)}
    keys = RequestState(keys=[b"k" * 32])

    def gateway() -> Gateway:
        upstream = stdio(ASKING, era="legacy")  # a process that ends with the gateway, as a host's does
        return Gateway(upstream, store=store, request_state=keys, gates=[GateTable(tool="order", editable=[])])

    first = gateway()
    async with first.running(), connected(first, "2026-07-28", elicitation_callback=Person({}, {})) as client:
        approval = await client.session.call_tool("order", arguments, allow_input_required=True)
        assert isinstance(approval, InputRequiredResult) and approval.input_requests and approval.request_state
        [approval_key] = approval.input_requests
        question = await client.session.call_tool(
            "order",
            arguments,
            input_responses={approval_key: ElicitResult(action="accept", content={})},
            request_state=approval.request_state,
            allow_input_required=True,
        )
    assert isinstance(question, InputRequiredResult) and question.input_requests and question.request_state
    [question_key] = question.input_requests
    assert ledger_of(ledger) == ["start cups"]  # the forward went, and its request waited for the answer
    second = gateway()
    async with second.running(), connected(second, "2026-07-28", elicitation_callback=Person({}, {})) as client:
        answered = await client.session.call_tool(
            "order",
            arguments,
            input_responses={question_key: ElicitResult(action="accept", content={"quantity": 1})},
            request_state=question.request_state,
            allow_input_required=True,
        )
    assert isinstance(answered, CallToolResult) and answered.is_error
    assert "forward 'order' to upstream" in said_lines(answered)[0]
    assert "whether it took effect is unknown, so it is not run again" in said_lines(answered)[0]
    assert ledger_of(ledger) == ["start cups"]  # never sent again
    [operation_id] = {decision.operation_id for decision in store.list_decisions(OPERATOR)}
    assert store.get_operation(operation_id, OPERATOR).status is OperationStatus.FAILED


async def test_a_2025_clients_call_again_after_its_upstream_request_died_is_an_unknown_outcome_unasked(
    store: Store, tmp_path: Path
) -> None:
    """The same restart for a 2025 client, whose question was asked live: its identical call after the restart
    fails with the unknown outcome at once, and the person is not asked a question nothing could take."""
    ledger = tmp_path / "ledger"
    arguments = {"item": "cups", "ledger": str(ledger)}
    asked = anyio.Event()

    async def gone(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        assert isinstance(params, ElicitRequestFormParams)
        if params.message.startswith("Approve this call?"):
            return ElicitResult(action="accept", content={})
        asked.set()
        await anyio.sleep_forever()  # the gateway goes before the person answers
        raise AssertionError("unreachable")

    def gateway() -> Gateway:
        upstream = stdio(ASKING, era="legacy")
        return Gateway(upstream, store=store, gates=[GateTable(tool="order", editable=[])])

    first = gateway()
    async with (
        first.running(),
        connected(first, "legacy", elicitation_callback=gone) as client,
        anyio.create_task_group() as calling,
    ):
        calling.start_soon(client.call_tool, "order", arguments)
        await asked.wait()
        calling.cancel_scope.cancel()
    assert ledger_of(ledger) == ["start cups"]
    person = Person({}, {"How many cups?": {"quantity": 1}})
    second = gateway()
    async with second.running(), connected(second, "legacy", elicitation_callback=person) as client:
        answered = await client.call_tool("order", arguments)
    assert answered.is_error
    assert "whether it took effect is unknown, so it is not run again" in said_lines(answered)[0]
    assert person.asked == []
    assert ledger_of(ledger) == ["start cups"]


async def test_a_gated_call_that_gave_up_waiting_for_a_busy_session_has_not_started(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The mark that an approved forward started means the request may have left: a call cancelled while every
    session of the upstream carried another call left none, so the identical call made next runs (on the approval
    given), never failing with an unknown outcome."""
    caplog.set_level(logging.DEBUG, "mcp_elicit.gateway.upstream")
    marker = tmp_path / "held"
    person = Person({}, {})
    with sdk_over_http() as url:
        upstream = over_http(url, era="legacy", sessions=1, timeout=30)
        gateway = Gateway(upstream, store=store, gates=[GateTable(tool="count", editable=[])])
        async with gateway.running(), connected(gateway, "legacy", elicitation_callback=person) as client:
            async with anyio.create_task_group() as holding:
                holding.start_soon(client.call_tool, "hold", {"marker": str(marker), "seconds": 60})
                await until(lambda: said(marker) == "holding")  # the one session carries it
                with anyio.CancelScope() as giving_up:
                    async with anyio.create_task_group() as calling:
                        calling.start_soon(_give_up_once_waiting, caplog, giving_up)
                        await client.call_tool("count", {"to": 2})
                holding.cancel_scope.cancel()
            await until(lambda: said(marker) == "cancelled")
            counted = await client.call_tool("count", {"to": 2})
    assert giving_up.cancelled_caught
    assert text(counted) == "counted to 2"
    assert person.asked == ["Approve this call?\n\nTool: count\nto: 2"]  # the approval given counts for it


async def test_a_gated_calls_wait_for_its_session_starts_once_it_was_approved(store: Store) -> None:
    """An approval that took longer than the upstream's timeout was the person's time, not the upstream's: the
    approved forward still waits up to its full timeout for the session, here an upstream starting again after it
    crashed while the person was deciding."""
    person = Person({}, {})
    upstream = stdio(SDK_SERVER, era="legacy", timeout=5)
    gateway = Gateway(upstream, store=store, gates=[GateTable(tool="count", editable=[])])
    async with gateway.running(), connected(gateway, "legacy") as other:

        async def slowly(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
            await anyio.sleep(5.5)  # the time passing is the point: longer than the upstream's timeout
            with pytest.raises(MCPError):
                await other.call_tool("die", {})  # the session goes: the forward waits for the next one
            return await person(context, params)

        async with connected(gateway, "legacy", elicitation_callback=slowly) as client:
            counted = await client.call_tool("count", {"to": 2})
    assert text(counted) == "counted to 2"
    assert person.asked == ["Approve this call?\n\nTool: count\nto: 2"]


async def _give_up_once_waiting(caplog: pytest.LogCaptureFixture, scope: anyio.CancelScope) -> None:
    await until(lambda: any("waits for a session of upstream" in record.getMessage() for record in caplog.records))
    scope.cancel()


def said_lines(result: CallToolResult) -> list[str]:
    return [block.text for block in result.content if block.type == "text"]


async def test_a_minus_32042_after_an_answered_question_fails_the_call_and_never_runs_it_again(
    store: Store, tmp_path: Path
) -> None:
    """A `-32042` that ends the upstream request after it asked a question (and may have acted on the answer) is no
    sign that the call did not run: the call fails, its URL flow is not asked, and the tool is not run again."""
    ledger = tmp_path / "ledger"
    acting = MCPServer("acting")

    @acting.tool()
    async def pens(ctx: Context) -> str:
        """Ask how many pens, note the order, then want a drive connected."""
        with ledger.open("a") as file:
            file.write("start\n")
        await ctx.elicit("How many pens?", Quantity)
        with ledger.open("a") as file:
            file.write("ordered\n")
        flow = ElicitRequestURLParams(message="Connect your drive", url=DRIVE_URL, elicitation_id="late-1")
        raise UrlElicitationRequiredError([flow])

    asked: list[str] = []

    async def person(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        if isinstance(params, ElicitRequestURLParams):
            asked.append(params.url)
            return ElicitResult(action="decline")
        asked.append(params.message.split("\n")[0])
        return ElicitResult(action="accept", content={} if params.message.startswith("Approve") else {"quantity": 2})

    with serving(acting.streamable_http_app(host="127.0.0.1"), free_port()) as base:
        gateway = Gateway(over_http(f"{base}/mcp", era="legacy"), store=store, gates=[GateTable(tool="pens")])
        async with gateway.running(), connected(gateway, "legacy", elicitation_callback=person) as client:
            try:
                ended = str((await client.call_tool("pens", {})).content)
            except MCPError as error:
                ended = error.error.message
    assert asked == ["Approve this call?", "How many pens?"], ended
    assert "may have acted" in ended and "not sent again" in ended, ended
    assert ledger.read_text().splitlines() == ["start", "ordered"]
