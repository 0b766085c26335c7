"""The gateway's gates (`gateway.gating`) on a lowlevel `Server` that forwards to a real upstream `MCPServer` over
the SDK's in-memory client, on every era: approve, edit and reject; the forward at most once; binding to the
upstream's tool list. The upstream records what reached it, so "forwarded once, with the edit" is a fact."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from mcp import Client
from mcp.server import Server
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolRequestParams, ListToolsResult, Tool
from pydantic import Field

import mcp_elicit.testing as scripted
from mcp_elicit import Elicitation, RequestState
from mcp_elicit.approvals import APPROVAL_KEY, REJECT_FIELD, GateRefused
from mcp_elicit.gateway import Gateway
from mcp_elicit.gateway import upstream as relayed
from mcp_elicit.gateway.gates import GateTable
from mcp_elicit.gateway.gating import Gates, assign_gates, run_gated
from mcp_elicit.model import OperationStatus
from mcp_elicit.store import open_store
from mcp_elicit.testing import ControlledClock, Harness

pytestmark = pytest.mark.anyio


class Upstream:
    """A real MCP server with a `transfer` tool, and what reached it; `fail` makes the next forward lose its
    connection after the upstream ran the call (the gateway cannot know it did)."""

    def __init__(self) -> None:
        self.server = MCPServer("bank")
        self.received: list[dict[str, Any]] = []
        self.fail = False
        self.refuse = False

        @self.server.tool()
        def transfer(account: str, amount: Annotated[int, Field(multiple_of=5)]) -> str:
            if amount > 10_000:
                raise ToolError("over the limit")
            self.received.append({"account": account, "amount": amount})
            return f"sent {amount} to {account}"

    async def tools(self) -> list[Tool]:
        async with Client(self.server) as client:
            return (await client.list_tools()).tools

    async def forward(self, arguments: dict[str, Any]) -> dict[str, Any]:
        if self.refuse:  # as the relay reports a JSON-RPC error the upstream answered with
            return {"error": {"code": -32602, "message": "the bank refuses these arguments"}}
        async with Client(self.server) as client:
            try:
                result = await client.call_tool("transfer", arguments)
            except MCPError as error:
                return {"error": error.error.model_dump(mode="json", exclude_none=True)}
        if self.fail:
            raise ConnectionError("the upstream's connection ended before its answer came")
        return {"result": result.model_dump(mode="json", by_alias=True, exclude_none=True)}


@pytest.fixture
def upstream() -> Upstream:
    return Upstream()


@pytest.fixture
def gates() -> Gates:
    return Gates([GateTable(tool="transfer", editable=["amount"], when="amount >= 100")], "bank")


@pytest.fixture
def elicit_app(elicit_store_url: str, elicit_clock: ControlledClock) -> Iterator[Elicitation]:
    app = Elicitation(
        open_store(elicit_store_url, clock=elicit_clock),
        request_state=RequestState(single_process=True),
        clock=elicit_clock,
    )
    yield app
    app.close()


@pytest.fixture
async def elicit_server(elicit_app: Elicitation, upstream: Upstream, gates: Gates) -> Server[Any]:
    listed = await upstream.tools()
    assert gates.bind(listed) == []

    async def list_tools(context: Any, params: Any) -> ListToolsResult:
        return ListToolsResult(tools=listed)

    async def call_tool(context: Any, params: CallToolRequestParams) -> Any:
        gated = gates.gate_of(params.name)
        arguments = dict(params.arguments or {})
        if gated is None or not gated.gate.applies(arguments, params.name):
            return (await upstream.forward(arguments))["result"]
        return await run_gated(elicit_app, context, params, gated, upstream="bank", forward=upstream.forward)

    server: Server[Any] = Server("gateway", on_list_tools=list_tools, on_call_tool=call_tool)
    elicit_app.install(server)
    return server


def approve(**content: Any) -> dict[str, scripted.Reply]:
    return {APPROVAL_KEY: scripted.accept(content)}


async def test_a_call_the_predicate_lets_through_is_forwarded_unasked(elicit: Harness, upstream: Upstream) -> None:
    called = await elicit.call("transfer", {"account": "acme", "amount": 5})
    assert called.text == "sent 5 to acme"
    assert called.asked == ()
    assert upstream.received == [{"account": "acme", "amount": 5}]


async def test_an_approved_call_is_forwarded_once_as_approved(elicit: Harness, upstream: Upstream) -> None:
    called = await elicit.call("transfer", {"account": "acme", "amount": 500}, answers=approve())
    assert called.text == "sent 500 to acme"
    assert upstream.received == [{"account": "acme", "amount": 500}]
    again = await elicit.call("transfer", {"account": "acme", "amount": 500}, answers=approve())
    assert [question.key for question in again.asked] == [APPROVAL_KEY]  # a new request: asked, never replayed
    assert upstream.received == [{"account": "acme", "amount": 500}] * 2


async def test_an_edit_is_forwarded_and_the_model_is_told(elicit: Harness, upstream: Upstream) -> None:
    called = await elicit.call("transfer", {"account": "acme", "amount": 500}, answers=approve(amount=250))
    texts = [block.text for block in called.result.content]  # type: ignore[union-attr]
    assert "sent 250 to acme" in texts
    assert any("amount" in text and "500" in text and "250" in text for text in texts), texts
    assert upstream.received == [{"account": "acme", "amount": 250}]


async def test_an_edit_the_tools_schema_refuses_is_asked_again(elicit: Harness, upstream: Upstream) -> None:
    # The form cannot show `multipleOf`; the upstream's schema still holds the edit to it. An era asks again on the
    # live call or under the next key (`@approval#2`), naming the problem.
    edits = [scripted.accept({"amount": 252}), scripted.accept({"amount": 255})]
    script = scripted.Script({APPROVAL_KEY: edits, f"{APPROVAL_KEY}#2": edits[1]})
    called = await elicit.call("transfer", {"account": "acme", "amount": 500}, answers=script)
    assert called.result.content[-1].text == "sent 255 to acme"  # type: ignore[union-attr]
    assert len(called.asked) == 2
    assert upstream.received == [{"account": "acme", "amount": 255}]


async def test_a_rejected_call_is_never_forwarded(elicit: Harness, upstream: Upstream) -> None:
    answers = {APPROVAL_KEY: scripted.accept({REJECT_FIELD: True})}
    called = await elicit.call("transfer", {"account": "acme", "amount": 500}, answers=answers)
    assert "reject" in called.error.lower()
    assert upstream.received == []


async def test_the_upstreams_refusal_fails_the_call_naming_it(elicit: Harness, upstream: Upstream) -> None:
    called = await elicit.call("transfer", {"account": "acme", "amount": 50_000}, answers=approve())
    assert "over the limit" in called.error
    assert upstream.received == []


async def test_a_forward_whose_outcome_was_lost_is_never_sent_again(elicit: Harness, upstream: Upstream) -> None:
    upstream.fail = True
    with pytest.raises(MCPError):  # the gateway's own error: it cannot tell what became of the call
        await elicit.call("transfer", {"account": "acme", "amount": 500}, answers=approve())
    upstream.fail = False
    again = await elicit.call("transfer", {"account": "acme", "amount": 500})
    assert "forward 'transfer' to upstream 'bank' was started by an earlier attempt of operation" in again.error
    assert "whether it took effect is unknown" in again.error
    assert upstream.received == [{"account": "acme", "amount": 500}]  # once, never twice
    assert again.operation_id is not None
    operation = elicit.elicitation.store.get_operation(again.operation_id, elicit.principal)
    assert operation.status is OperationStatus.FAILED


async def test_a_gate_stays_armed_while_its_tool_is_not_listed(upstream: Upstream) -> None:
    gates = Gates([GateTable(tool="transfer"), GateTable(tool="wire")], "bank")
    with pytest.raises(GateRefused, match="has not listed tool 'transfer' yet"):
        gates.gate_of("transfer")
    problems = gates.bind(await upstream.tools())
    assert problems == ["the gate of tool 'wire': upstream 'bank' does not list that tool"]
    assert gates.gate_of("transfer") is not None
    assert gates.gate_of("balance") is None
    with pytest.raises(GateRefused, match="does not list that tool; the call was not forwarded"):
        gates.gate_of("wire")
    assert gates.bind([]) == [
        "the gate of tool 'transfer': upstream 'bank' does not list that tool",
        "the gate of tool 'wire': upstream 'bank' does not list that tool",
    ]
    with pytest.raises(GateRefused):
        gates.gate_of("transfer")


def test_one_tool_gated_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="tool 'pay' has two"):
        Gates([GateTable(tool="pay"), GateTable(tool="pay", when="amount > 1")], "bank")


def test_a_gate_that_cannot_be_bound_to_its_tools_schema_stays_armed_and_says_why() -> None:
    gates = Gates([GateTable(tool="odd")], "bank", "bank")
    odd = Tool(name="odd", input_schema={"$schema": 5, "type": "object", "properties": {"x": {"type": "string"}}})
    [problem] = gates.bind([odd])
    assert problem.startswith("upstream 'bank': ")
    with pytest.raises(GateRefused):
        gates.gate_of("odd")


def test_a_gate_written_with_the_prefixed_name_is_told_the_name_to_use() -> None:
    gates = Gates([GateTable(tool="bank_transfer")], "bank", "bank")
    [problem] = gates.bind([Tool(name="transfer", input_schema={"type": "object"})])
    assert "a gate names the tool as its upstream does: 'transfer'" in problem


async def test_an_error_the_upstream_answered_with_fails_the_call_naming_it(
    elicit: Harness, upstream: Upstream
) -> None:
    upstream.refuse = True
    called = await elicit.call("transfer", {"account": "acme", "amount": 500}, answers=approve())
    assert "upstream 'bank' answered 'transfer' with error -32602: the bank refuses these arguments" in called.error


def test_gates_are_assigned_to_the_upstream_they_name() -> None:
    bank, shop = (relayed.Upstream(name, command=(f"{name}-server",)) for name in ("bank", "shop"))
    assigned = assign_gates([GateTable(tool="pay", upstream="shop"), GateTable(tool="transfer", upstream="bank")],
                            [bank, shop])  # fmt: skip
    assert {name: [table.tool for table in tables] for name, tables in assigned.items()} == {
        "shop": ["pay"],
        "bank": ["transfer"],
    }
    assert [table.tool for table in assign_gates([GateTable(tool="pay")], [bank])["bank"]] == ["pay"]
    with pytest.raises(ValueError, match=r"gate\[0\]\.upstream: missing; with several upstreams"):
        assign_gates([GateTable(tool="pay")], [bank, shop])
    with pytest.raises(
        ValueError, match=r"gate\[0\]\.upstream: expected one of the upstreams \(bank, shop\), not 'tills'"
    ):
        assign_gates([GateTable(tool="pay", upstream="tills")], [bank, shop])


def test_a_gateway_refuses_gates_it_cannot_keep(tmp_path: Path) -> None:
    bank = relayed.Upstream("bank", command=("bank-server",))
    with pytest.raises(ValueError, match="approval gates need a store"):
        Gateway(bank, gates=[GateTable(tool="pay")])
    store = open_store(f"sqlite://{tmp_path / 'gateway.db'}")
    try:
        with pytest.raises(ValueError, match=r"gate\[0\]\.fallback: Fallback.WEB sends the person"):
            Gateway(bank, store=store, gates=[GateTable(tool="pay", fallback="web")])  # no pages without sign-in
        gateway = Gateway(bank, store=store, gates=[GateTable(tool="pay")])
        assert gateway.upstream is bank
        with pytest.raises(RuntimeError, match="relays several upstreams"):
            _ = Gateway(
                [
                    relayed.Upstream("bank", command=("bank-server",), prefix="bank"),
                    relayed.Upstream("shop", url="http://127.0.0.1:9/mcp", prefix="shop"),
                ]
            ).pool
    finally:
        store.close()
