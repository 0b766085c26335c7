"""Approval gates of the gateway's config file in front of a real upstream of another language (the TypeScript
reference server, `get-sum`), on either client era: the issue's minimal `[[gate]] tool = "get-sum"`, approve,
edit, reject, a standing grant, a `when` predicate, and a gate whose tool the upstream does not list. What ran
upstream is read from its answer ("The sum of a and b is ...")."""

from __future__ import annotations

import json
import logging
import tomllib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ElicitRequestFormParams, ElicitRequestParams, ElicitResult, TextContent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mcp_elicit.approvals import APPROVAL_KEY, GRANT_FIELD, REJECT_FIELD
from mcp_elicit.gateway import Gateway, Upstream
from mcp_elicit.gateway.gates import GateTable
from mcp_elicit.model import OperationStatus, Operator
from mcp_elicit.store import Store, open_store
from tests.helpers.gateway import ERAS, Served, connected, everything

pytestmark = pytest.mark.anyio

OPERATOR = Operator("test")


class Approver:
    """Answers each approval with the next of `answers` (the form's content, or "decline"), noting each one."""

    def __init__(self, *answers: dict[str, Any] | str) -> None:
        self._answers = list(answers)
        self.asked: list[ElicitRequestFormParams] = []

    async def __call__(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        assert isinstance(params, ElicitRequestFormParams)
        self.asked.append(params)
        answer = self._answers.pop(0)
        if isinstance(answer, str):
            return ElicitResult(action=answer)  # type: ignore[arg-type]
        return ElicitResult(action="accept", content=answer)


def said(result: CallToolResult) -> list[str]:
    return [block.text for block in result.content if isinstance(block, TextContent)]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(f"sqlite://{tmp_path / 'gateway.db'}")
    yield opened
    opened.close()


@asynccontextmanager
async def gated(store: Store, config: str, era: str, approver: Approver) -> AsyncIterator[Client]:
    tables = [GateTable.model_validate(table) for table in tomllib.loads(config)["gate"]]
    gateway = Gateway(everything(), store=store, gates=tables)
    async with gateway.running(), connected(gateway, era, elicitation_callback=approver) as client:
        yield client


@pytest.mark.parametrize("era", ERAS)
async def test_the_minimal_gate_asks_with_every_argument_editable_and_runs_what_was_approved(
    era: str, store: Store
) -> None:
    approver = Approver({}, {"a": 40})
    async with gated(store, '[[gate]]\ntool = "get-sum"', era, approver) as client:
        approved = await client.call_tool("get-sum", {"a": 2, "b": 3})
        edited = await client.call_tool("get-sum", {"a": 2, "b": 3})
    assert said(approved) == ["The sum of 2 and 3 is 5."]
    assert said(edited) == [
        "The user changed the arguments before approving (a: 2 → 40); the tool ran with the changes.",
        "The sum of 40 and 3 is 43.",
    ]
    first, second = approver.asked
    assert "Tool: get-sum" in first.message
    assert set(first.requested_schema["properties"]) >= {"a", "b"}
    assert first.requested_schema["properties"]["a"]["default"] == 2
    assert second.message == first.message  # a new call, a new approval: never replayed


@pytest.mark.parametrize("era", ERAS)
async def test_a_rejected_or_declined_call_never_reaches_the_upstream(era: str, store: Store) -> None:
    approver = Approver({REJECT_FIELD: True}, "decline")
    async with gated(store, '[[gate]]\ntool = "get-sum"', era, approver) as client:
        rejected = await client.call_tool("get-sum", {"a": 2, "b": 3})
        declined = await client.call_tool("get-sum", {"a": 2, "b": 3})
    assert rejected.is_error and declined.is_error
    assert not any("The sum" in line for line in said(rejected) + said(declined))
    assert "rejected" in said(rejected)[0].lower()


@pytest.mark.parametrize("era", ERAS)
async def test_a_standing_grant_lets_later_calls_through_unasked(era: str, store: Store) -> None:
    config = '[[gate]]\ntool = "get-sum"\neditable = []\ngrants = { session = "1h" }'
    approver = Approver({GRANT_FIELD: "session"})
    async with gated(store, config, era, approver) as client:
        first = await client.call_tool("get-sum", {"a": 1, "b": 1})
        later = await client.call_tool("get-sum", {"a": 5, "b": 5})
    assert said(first)[-1] == "The sum of 1 and 1 is 2."
    assert "also approved get-sum calls from this app for this session" in said(first)[0]
    assert said(later)[-1] == "The sum of 5 and 5 is 10."
    assert len(approver.asked) == 1
    assert any("Ran without asking" in line for line in said(later)), said(later)


@pytest.mark.parametrize("era", ERAS)
async def test_when_decides_which_calls_are_gated_and_the_others_touch_no_store(era: str, store: Store) -> None:
    approver = Approver({})
    async with gated(store, '[[gate]]\ntool = "get-sum"\nwhen = "a + b > 100"', era, approver) as client:
        small = await client.call_tool("get-sum", {"a": 2, "b": 3})
        assert store.list_decisions(OPERATOR) == []
        big = await client.call_tool("get-sum", {"a": 200, "b": 3})
        assert [decision.key for decision in store.list_decisions(OPERATOR)] == [APPROVAL_KEY]
    assert said(small) == ["The sum of 2 and 3 is 5."]
    assert said(big) == ["The sum of 200 and 3 is 203."]
    assert len(approver.asked) == 1 and "a: 200" in approver.asked[0].message


@pytest.mark.parametrize("era", ERAS)
async def test_a_gate_whose_tool_the_upstream_does_not_list_is_reported_and_stays_armed(
    era: str, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "mcp_elicit.gateway.gating")
    config = '[[gate]]\ntool = "get-sum"\nwhen = "c > 1"\n[[gate]]\ntool = "launch-missiles"'
    async with gated(store, config, era, Approver()) as client:
        refused = await client.call_tool("get-sum", {"a": 2, "b": 3})
    reported = [record.getMessage() for record in caplog.records]
    assert any("does not list that tool" in line and "launch-missiles" in line for line in reported), reported
    assert any("when reads ['c'], not arguments of the tool" in line for line in reported), reported
    assert refused.is_error
    assert "when reads ['c']" in said(refused)[0] and "the call was not forwarded" in said(refused)[0]


PAID: list[dict[str, Any]] = []
PAY_TOOL = {"name": "pay", "inputSchema": {"type": "object", "properties": {"amount": {"type": "integer"}}}}


async def _paying_upstream(request: Request) -> Response:
    """A streamable HTTP upstream whose `pay` runs, then its response stream ends before the answer (a proxy's
    timeout, a crash mid-response): the SDK's client then makes up an error of its own."""
    if request.method != "POST":
        return Response(status_code=405)
    body = json.loads(await request.body())
    if "id" not in body:
        return Response(status_code=202)
    method, number = body["method"], body["id"]
    if method == "initialize":
        info = {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "b", "version": "1"},
        }
        return JSONResponse({"jsonrpc": "2.0", "id": number, "result": info}, headers={"mcp-session-id": "s1"})
    if method == "tools/list":
        return JSONResponse({"jsonrpc": "2.0", "id": number, "result": {"tools": [PAY_TOOL]}})
    if method == "tools/call":
        PAID.append(body["params"]["arguments"])
        return Response(b"", media_type="text/event-stream")
    return JSONResponse({"jsonrpc": "2.0", "id": number, "error": {"code": -32601, "message": "no such method"}})


async def test_an_answer_lost_after_the_upstream_ran_the_call_is_an_unknown_outcome_never_a_second_run(
    store: Store,
) -> None:
    served = Served(lambda: Starlette(routes=[Route("/mcp", _paying_upstream, methods=["GET", "POST", "DELETE"])]))
    served.start()
    approver = Approver({})
    gateway = Gateway(Upstream("bank", url=served.url, era="legacy"), store=store, gates=[GateTable(tool="pay")])
    try:
        async with gateway.running(), connected(gateway, "legacy", elicitation_callback=approver) as client:
            with pytest.raises(MCPError):
                await client.call_tool("pay", {"amount": 500})
            again = await client.call_tool("pay", {"amount": 500})
    finally:
        served.stop()
    assert again.is_error
    assert "forward 'pay' to upstream 'bank' was started by an earlier attempt" in said(again)[0]
    assert PAID == [{"amount": 500}]
    assert len(approver.asked) == 1
    [approval] = store.list_decisions(OPERATOR)
    assert store.get_operation(approval.operation_id, OPERATOR).status is OperationStatus.FAILED  # checked by a person
