"""Gated calls through a running gateway, driven by `mcp_elicit.testing.Harness` on every era: approve, edit and
reject; an edit the tool's schema refuses asked again; the upstream's refusals named. The upstream is a real
`MCPServer` on loopback HTTP that records what reached it, so "forwarded once, with the edit" is a fact."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from mcp.server import Server
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from pydantic import Field

import mcp_elicit.testing as scripted
from mcp_elicit import Elicitation, RequestState
from mcp_elicit.approvals import APPROVAL_KEY, REJECT_FIELD
from mcp_elicit.gateway import Gateway, Upstream
from mcp_elicit.gateway.gates import GateTable
from mcp_elicit.store import open_store
from mcp_elicit.testing import ControlledClock, Harness
from tests.helpers.http_harness import free_port, serving

pytestmark = pytest.mark.anyio

REFUSED = "closed-account"
"""The account the bank answers a JSON-RPC error for, as an upstream refuses a request it received."""


class Bank:
    """A real MCP server with a `transfer` tool, and what reached it."""

    def __init__(self) -> None:
        self.server = MCPServer("bank")
        self.received: list[dict[str, Any]] = []

        @self.server.tool()
        def transfer(account: str, amount: Annotated[int, Field(multiple_of=5)]) -> str:
            if account == REFUSED:
                raise MCPError(INVALID_PARAMS, "the bank refuses these arguments")
            if amount > 10_000:
                raise ToolError("over the limit")
            self.received.append({"account": account, "amount": amount})
            return f"sent {amount} to {account}"


@pytest.fixture
def bank() -> Bank:
    return Bank()


@pytest.fixture
def bank_url(bank: Bank) -> Iterator[str]:
    with serving(bank.server.streamable_http_app(host="127.0.0.1"), free_port()) as base:
        yield f"{base}/mcp"


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
def elicit_server(elicit_app: Elicitation, bank_url: str) -> Server[Any]:
    gate = GateTable(tool="transfer", editable=["amount"], when="amount >= 100")
    return Gateway(Upstream("bank", url=bank_url, era="legacy"), elicitation=elicit_app, gates=[gate]).server


def approve(**content: Any) -> dict[str, scripted.Reply]:
    return {APPROVAL_KEY: scripted.accept(content)}


async def test_a_call_the_predicate_lets_through_is_forwarded_unasked(elicit: Harness, bank: Bank) -> None:
    called = await elicit.call("transfer", {"account": "acme", "amount": 5})
    assert called.text == "sent 5 to acme"
    assert called.asked == ()
    assert bank.received == [{"account": "acme", "amount": 5}]


async def test_an_approved_call_is_forwarded_once_as_approved(elicit: Harness, bank: Bank) -> None:
    called = await elicit.call("transfer", {"account": "acme", "amount": 500}, answers=approve())
    assert called.text == "sent 500 to acme"
    assert bank.received == [{"account": "acme", "amount": 500}]
    again = await elicit.call("transfer", {"account": "acme", "amount": 500}, answers=approve())
    assert [question.key for question in again.asked] == [APPROVAL_KEY]  # a new request: asked, never replayed
    assert bank.received == [{"account": "acme", "amount": 500}] * 2


async def test_an_edit_is_forwarded_and_the_model_is_told(elicit: Harness, bank: Bank) -> None:
    called = await elicit.call("transfer", {"account": "acme", "amount": 500}, answers=approve(amount=250))
    texts = [block.text for block in called.result.content]  # type: ignore[union-attr]
    assert "sent 250 to acme" in texts
    assert any("amount" in text and "500" in text and "250" in text for text in texts), texts
    assert bank.received == [{"account": "acme", "amount": 250}]


async def test_an_edit_the_tools_schema_refuses_is_asked_again(elicit: Harness, bank: Bank) -> None:
    # The form cannot show `multipleOf`; the upstream's schema still holds the edit to it. An era asks again on the
    # live call or under the next key (`@approval#2`), naming the problem.
    edits = [scripted.accept({"amount": 252}), scripted.accept({"amount": 255})]
    script = scripted.Script({APPROVAL_KEY: edits, f"{APPROVAL_KEY}#2": edits[1]})
    called = await elicit.call("transfer", {"account": "acme", "amount": 500}, answers=script)
    assert called.result.content[-1].text == "sent 255 to acme"  # type: ignore[union-attr]
    assert len(called.asked) == 2
    assert bank.received == [{"account": "acme", "amount": 255}]


async def test_a_rejected_call_is_never_forwarded(elicit: Harness, bank: Bank) -> None:
    answers = {APPROVAL_KEY: scripted.accept({REJECT_FIELD: True})}
    called = await elicit.call("transfer", {"account": "acme", "amount": 500}, answers=answers)
    assert "reject" in called.error.lower()
    assert bank.received == []


async def test_the_upstreams_tool_error_fails_the_call_naming_it(elicit: Harness, bank: Bank) -> None:
    called = await elicit.call("transfer", {"account": "acme", "amount": 50_000}, answers=approve())
    assert "over the limit" in called.error
    assert bank.received == []


async def test_an_error_the_upstream_answered_with_fails_the_call_naming_it(elicit: Harness, bank: Bank) -> None:
    called = await elicit.call("transfer", {"account": REFUSED, "amount": 500}, answers=approve())
    assert "upstream 'bank' answered 'transfer' with error -32602: the bank refuses these arguments" in called.error
