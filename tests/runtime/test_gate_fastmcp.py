"""Gates on FastMCP tools (`FastMCPFlows.tool(gate=...)`), on every era: a call the gate's `when` exempts runs
unasked, one it gates is asked; a session grant given with an approval lets the tool's next call through.

The tools record what they ran (`ran`), so "ran unasked" and "nothing ran" are facts of the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastmcp import FastMCP

import mcp_elicit.testing as scripted
from mcp_elicit import Elicitation, Flow, Gate, Grants, RequestState
from mcp_elicit.approvals import APPROVAL_KEY, GRANT_FIELD
from mcp_elicit.fastmcp import FastMCPFlows
from mcp_elicit.model import GrantKind, Operator
from mcp_elicit.store import open_store
from mcp_elicit.testing import ControlledClock, Harness

pytestmark = pytest.mark.anyio


class Ran:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []


@pytest.fixture
def ran() -> Ran:
    return Ran()


@pytest.fixture
def served(elicit_store_url: str, elicit_clock: ControlledClock, ran: Ran) -> Iterator[tuple[Elicitation, FastMCP]]:
    app = Elicitation(
        open_store(elicit_store_url, clock=elicit_clock),
        request_state=RequestState(single_process=True),
        clock=elicit_clock,
    )
    flows = FastMCPFlows(app)
    server = flows.server("fast-gated")

    @flows.tool(gate=Gate(when=lambda args: args["amount"] >= 100))
    async def refund(flow: Flow, order: str, amount: int) -> str:
        ran.calls.append(("refund", {"order": order, "amount": amount}))
        return f"refunded {amount} on {order}"

    @flows.tool(gate=Gate(grants=Grants()))
    async def restart(flow: Flow, service: str) -> str:
        ran.calls.append(("restart", {"service": service}))
        return f"restarted {service}"

    yield app, server
    app.close()


@pytest.fixture
def elicit_app(served: tuple[Elicitation, FastMCP]) -> Elicitation:
    return served[0]


@pytest.fixture
def elicit_server(served: tuple[Elicitation, FastMCP]) -> FastMCP:
    return served[1]


async def test_a_call_when_exempts_runs_unasked_and_one_it_gates_is_asked(elicit: Harness, ran: Ran) -> None:
    small = await elicit.call("refund", {"order": "A-1", "amount": 20})
    assert (small.text, small.asked) == ("refunded 20 on A-1", ())
    assert elicit.decisions(call=small) == []
    large = await elicit.call("refund", {"order": "A-2", "amount": 400}, answers={APPROVAL_KEY: scripted.accept({})})
    assert large.text == "refunded 400 on A-2"
    [asked] = large.asked
    assert asked.key == APPROVAL_KEY and 'order: "A-2"' in asked.message
    rejected = await elicit.call("refund", {"order": "A-3", "amount": 900}, answers={APPROVAL_KEY: scripted.decline()})
    assert "The user rejected this call; nothing ran." in rejected.error
    assert ran.calls == [("refund", {"order": "A-1", "amount": 20}), ("refund", {"order": "A-2", "amount": 400})]


async def test_a_session_grant_lets_the_next_call_through(elicit: Harness, elicit_app: Elicitation, ran: Ran) -> None:
    first = await elicit.call(
        "restart", {"service": "api"}, answers={APPROVAL_KEY: scripted.accept({GRANT_FIELD: "session"})}
    )
    assert first.text.endswith("restarted api") and [q.key for q in first.asked] == [APPROVAL_KEY]
    [grant] = elicit_app.store.grant_page(Operator()).grants
    assert (grant.kind, grant.tool) == (GrantKind.SESSION, "restart")
    second = await elicit.call("restart", {"service": "web"})
    assert second.asked == () and second.result.content[-1].text == "restarted web"  # type: ignore[union-attr]
    trail = elicit_app.store.audit_trail(grant.grant_id, Operator())
    assert [row.details.get("operation_id") for row in trail if row.reason.startswith("let a call")] == [
        second.operation_id
    ]
    assert ran.calls == [("restart", {"service": "api"}), ("restart", {"service": "web"})]
