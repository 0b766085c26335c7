"""A gate on a lowlevel `Server` tool, through `Elicitation.run_tool(..., gate=Gate(...).bind(...))`, on every era:
approve, edit (the body reads the arguments it runs with from `flow.arguments`), reject.

The body records what it ran (`ran`), so "nothing ran" and "ran once, with the edit" are facts of the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from mcp.server import Server
from mcp_types import CallToolRequestParams, CallToolResult, ListToolsResult, TextContent, Tool
from pydantic import BaseModel, Field

import mcp_elicit.testing as scripted
from mcp_elicit import Elicitation, Flow, Gate, RequestState
from mcp_elicit.approvals import APPROVAL_KEY, NOTE_FIELD, REJECT_FIELD
from mcp_elicit.model import OperationStatus
from mcp_elicit.store import open_store
from mcp_elicit.testing import ControlledClock, Harness

pytestmark = pytest.mark.anyio


class Transfer(BaseModel):
    account: str
    amount: Annotated[int, Field(ge=1, le=1000, multiple_of=5)]


SCHEMA = Transfer.model_json_schema()
GATED = Gate(editable=["amount"]).bind("transfer", SCHEMA, lambda args: Transfer.model_validate(args).model_dump())


class Ran:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []


@pytest.fixture
def ran() -> Ran:
    return Ran()


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
def elicit_server(elicit_app: Elicitation, ran: Ran) -> Server[Any]:
    async def list_tools(context: Any, params: Any) -> ListToolsResult:
        return ListToolsResult(tools=[Tool(name="transfer", input_schema=SCHEMA)])

    async def call_tool(context: Any, params: CallToolRequestParams) -> Any:
        async def body(flow: Flow) -> CallToolResult:
            ran.calls.append(dict(flow.arguments))
            said = f"sent {flow.arguments['amount']} to {flow.arguments['account']}"
            return CallToolResult(content=[TextContent(type="text", text=said)])

        return await elicit_app.run_tool(context, params, body, gate=GATED)

    server: Server[Any] = Server("lowlevel-gated", on_list_tools=list_tools, on_call_tool=call_tool)
    elicit_app.install(server)
    return server


def approve(**content: Any) -> dict[str, scripted.Reply]:
    return {APPROVAL_KEY: scripted.accept(content)}


async def test_an_approved_call_runs_once_as_called(elicit: Harness, ran: Ran) -> None:
    called = await elicit.call("transfer", {"account": "acme", "amount": 500}, answers=approve())
    assert called.text == "sent 500 to acme"
    [asked] = called.asked
    assert asked.key == APPROVAL_KEY and "Tool: transfer" in asked.message
    assert asked.schema is not None and asked.schema["properties"]["amount"]["default"] == 500
    assert ran.calls == [{"account": "acme", "amount": 500}]


async def test_an_edit_runs_the_edited_arguments_once_and_the_model_is_told(elicit: Harness, ran: Ran) -> None:
    called = await elicit.call("transfer", {"account": "acme", "amount": 500}, answers=approve(amount=250))
    assert [block.text for block in called.result.content] == [  # type: ignore[union-attr]
        "The user changed the arguments before approving (amount: 500 → 250); the tool ran with the changes.",
        "sent 250 to acme",
    ]
    assert ran.calls == [{"account": "acme", "amount": 250}]
    # The form cannot show `multipleOf`; the tool's own validation still holds the edit to it, and asks again.
    refused_edit = await elicit.call(
        "transfer", {"account": "acme", "amount": 500},
        answers=scripted.Script({APPROVAL_KEY: [scripted.accept({"amount": 251}), scripted.accept({"amount": 255})],
                                 f"{APPROVAL_KEY}#2": scripted.accept({"amount": 255})}),
    )  # fmt: skip
    assert refused_edit.result.content[-1].text == "sent 255 to acme"  # type: ignore[union-attr]
    assert ran.calls[1:] == [{"account": "acme", "amount": 255}], "an edit the tool's validation refuses never ran"


async def test_a_rejection_runs_nothing_and_the_model_reads_the_note(elicit: Harness, ran: Ran) -> None:
    called = await elicit.call(
        "transfer", {"account": "acme", "amount": 500}, answers=approve(**{REJECT_FIELD: True, NOTE_FIELD: "no"})
    )
    assert called.error == "The user rejected this call; nothing ran. Note from the user: no"
    assert ran.calls == []
    assert elicit.operation(called).status is OperationStatus.FAILED
