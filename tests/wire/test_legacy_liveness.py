"""How a 2025-era call carrying a question watches its client: pings, answers that never fit, completion notices."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitCompleteNotification, ElicitRequestFormParams, ElicitRequestURLParams, ElicitResult

from mcp_elicit.model import DecisionStatus, Operator
from mcp_elicit.server import Accepted, Elicitation, Flow, IdentityPolicy, RequestState, ResumePolicy, Timing
from tests.helpers.http_harness import free_port, serving
from tests.helpers.person import Person, accept
from tests.helpers.results import text, unwrap
from tests.helpers.server import Approval
from tests.helpers.tasks_http import answer
from tests.helpers.tasks_wire import LEGACY, Wire

pytestmark = pytest.mark.anyio
OPERATOR = Operator("ops")
PROBE = timedelta(milliseconds=200)
LET_GO = "the client stopped answering pings; the question is free again"


def tools(elicitation: Elicitation) -> None:
    @elicitation.tool()
    async def approve(flow: Flow) -> str:
        """One form question on the live call."""
        outcome = await flow.ask("Approve the deploy?", Approval, key="approve")
        if isinstance(outcome, Accepted):
            return f"approve={outcome.data.approve}"
        return type(outcome).__name__

    @elicitation.tool()
    async def connect_later(flow: Flow) -> str:
        """A URL flow that does not hold the call: -32042, then a notice or a retry."""
        outcome = await flow.ask_url("Connect your account", key="connect", resume=ResumePolicy.NOTIFICATION)
        return type(outcome).__name__


@dataclass
class App:
    runtime: Elicitation
    url: str


@pytest.fixture
def app(store_url: str) -> Iterator[App]:
    port = free_port()
    runtime = Elicitation(
        store_url,
        request_state=RequestState(keys=[b"l" * 32]),
        public_base_url=f"http://127.0.0.1:{port}",
        identity=IdentityPolicy(allow_unauthenticated_loopback=True),
        timing=Timing(reask_after=PROBE),
    )
    server = runtime.server("legacy-liveness")
    tools(runtime)
    with serving(server.streamable_http_app(host="127.0.0.1"), port) as base:
        yield App(runtime, f"{base}/mcp")
    runtime.close()


async def test_a_client_that_stops_answering_pings_frees_the_question_yet_its_late_answer_counts(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mcp_elicit.server.eras.legacy")
    seen: list[str] = []

    async def thinking_person(request: dict[str, Any]) -> dict[str, Any]:
        """Reads its stream only after answering: the pings the server sends meanwhile go unanswered."""
        seen.append(request["method"])
        if request["method"] != "elicitation/create":
            return {}
        with anyio.fail_after(15):
            while LET_GO not in caplog.text:  # the server gives up on the pings after its 5 s ping timeout
                await anyio.sleep(0.1)
        return answer(approve=True)

    async with Wire(app.url, LEGACY) as wire:
        result = await wire.request("tools/call", {"name": "approve", "arguments": {}}, on_request=thinking_person)
    assert result["content"][0]["text"] == "approve=True", "the person answered first: the answer wins"
    assert seen[0] == "elicitation/create" and "ping" in seen[1:]
    [decision] = app.runtime.store.list_decisions(OPERATOR)
    assert decision.status is DecisionStatus.ACCEPTED
    assert f"decision {decision.elicitation_id}: {LET_GO}" in caplog.text


async def test_a_client_that_answers_pings_keeps_its_question_however_long_the_person_takes(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mcp_elicit.server.eras.legacy")
    asked: list[str] = []

    async def slow_person(
        context: ClientRequestContext, params: ElicitRequestFormParams | ElicitRequestURLParams
    ) -> ElicitResult:
        asked.append(params.message)
        await anyio.sleep(6 * PROBE.total_seconds())  # several pings come and are answered by the SDK meanwhile
        return accept(approve=False)

    async with Client(app.runtime.mcp_server, mode="legacy", elicitation_callback=slow_person) as client:
        result = await client.call_tool("approve", {})
    assert text(result) == "approve=False"
    assert asked == ["Approve the deploy?"]
    assert LET_GO not in caplog.text


async def test_three_answers_in_a_row_that_do_not_fit_the_form_cancel_the_question(app: App) -> None:
    person = Person([accept(approve="maybe"), accept(approve="later"), accept(note=7)])
    async with Client(app.runtime.mcp_server, mode="legacy", elicitation_callback=person) as client:
        result = await client.call_tool("approve", {})
    assert text(result) == "Cancelled"
    messages = [params.message for params in person.asked]
    assert len(messages) == 3, "asked three times, then given up on"
    assert messages[0] == "Approve the deploy?"
    assert all(m.startswith("Approve the deploy?\n\n(The previous answer could not be used: ") for m in messages[1:])
    assert all(m.endswith(" Please answer again.)") for m in messages[1:])
    [decision] = app.runtime.store.list_decisions(OPERATOR)
    assert decision.status is DecisionStatus.CANCELLED
    [*_, last] = app.runtime.store.audit_trail(decision.elicitation_id, OPERATOR)
    assert (last.to_status, last.reason) == ("cancelled", "3 answers in a row were invalid")


async def test_a_url_flow_declined_after_a_32042_sends_no_completion_notice(app: App) -> None:
    notified: list[str] = []

    async def on_message(message: object) -> None:
        if isinstance(message, ElicitCompleteNotification):
            notified.append(message.params.elicitation_id)

    async with Client(
        app.runtime.mcp_server, mode="legacy", elicitation_callback=Person(), message_handler=on_message
    ) as client:
        with pytest.raises((MCPError, BaseExceptionGroup)) as raised:
            await client.call_tool("connect_later", {})
        error = unwrap(raised.value)
        assert isinstance(error, MCPError) and error.code == -32042
        await anyio.sleep(1.2)  # the notices watch looks (every half second) at a flow still open
        [decision] = app.runtime.store.list_decisions(OPERATOR)
        assert notified == [] and not decision.is_terminal
        app.runtime.store.transition(decision, DecisionStatus.DECLINED, caller=OPERATOR, reason="not now")
        await anyio.sleep(1.2)
        assert notified == [], "a declined flow is no completion to announce"
        assert text(await client.call_tool("connect_later", {})) == "Declined"
