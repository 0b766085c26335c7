"""The tool-author API through the real SDK client and server, on both protocol eras and both stores."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ElicitResult

import mcp_elicit.testing as scripted
from mcp_elicit.model import DecisionStatus, Operator, Principal
from mcp_elicit.server import REPLAYED_META_KEY, Elicitation, RequestState, Timing
from mcp_elicit.store import open_store
from mcp_elicit.testing import ControlledClock, Harness, Reply, UrlOutcome
from tests.helpers.person import Person, accept
from tests.helpers.results import error_text, text, unwrap
from tests.helpers.server import Counter, flow_tools

pytestmark = pytest.mark.anyio

ERAS = ["legacy", "2026-07-28"]
LOCAL = Principal("local-user", "stdio")


@pytest.fixture
def counter(tmp_path: Path) -> Counter:
    return Counter(tmp_path / "effects.json")


@pytest.fixture
def elicitation(store_url: str, counter: Counter, elicit_clock: ControlledClock) -> Iterator[Elicitation]:
    runtime = Elicitation(
        open_store(store_url, clock=elicit_clock),
        request_state=RequestState(single_process=True),
        clock=elicit_clock,
        public_base_url="http://127.0.0.1:8765",
    )
    runtime.server("test-server")
    flow_tools(runtime, counter)
    yield runtime
    runtime.close()


@pytest.fixture
def elicit_app(elicitation: Elicitation) -> Elicitation:
    """The app the `elicit` harness (mcp_elicit.testing) calls, on every era."""
    return elicitation


async def call(
    elicitation: Elicitation, era: str, person: Person | None, tool: str, **arguments: object
) -> CallToolResult:
    async with Client(elicitation.mcp_server, mode=era, elicitation_callback=person) as client:
        return await client.call_tool(tool, dict(arguments))


async def test_accept_applies_once_and_records_the_answer(elicit: Harness, counter: Counter) -> None:
    answers = {"approve_scope": scripted.accept(approve=True, note="ship it")}
    called = await elicit.call("approve", {"scope": "prod"}, answers=answers)
    assert called.text == "applied prod (ship it)"
    assert counter.read() == {"plan": 1, "apply": 1}
    assert elicit.assert_asked_once("approve_scope").message == "Apply plan for prod?"
    elicit.assert_journal(called, {"plan": "plan for prod", "apply": 1})
    [decision] = elicit.decisions()
    assert decision.key == "approve_scope"
    assert decision.status is DecisionStatus.ACCEPTED
    assert decision.content == {"approve": True, "note": "ship it"}
    assert decision.principal == LOCAL


@pytest.mark.parametrize(
    ("reply", "expected"), [(scripted.decline(), "declined"), (scripted.cancel(), "cancelled")], ids=str
)
async def test_decline_and_cancel_stay_distinct(elicit: Harness, counter: Counter, reply: Reply, expected: str) -> None:
    called = await elicit.call("approve", {"scope": "prod"}, answers={"approve_scope": reply})
    assert called.text == expected
    assert counter.read() == {"plan": 1}
    elicit.assert_not_journaled(called, "apply")
    elicit.assert_audit("approve_scope", ["requested", expected])


@pytest.mark.parametrize("era", ERAS)
async def test_invalid_answers_are_asked_again_never_completed(elicitation: Elicitation, era: str) -> None:
    person = Person([accept(name="Ada"), accept(seats=0), accept(seats="two"), accept(seats=2)])
    result = await call(elicitation, era, person, "greet_and_book")
    assert text(result) == "2 seats for Ada"
    messages = [params.message for params in person.asked]
    assert messages[0] == "Who is travelling?"
    assert messages[1] == "How many seats for Ada?"
    assert messages[2].startswith("How many seats for Ada?") and "could not be used" in messages[2]
    assert len(messages) == 4


@pytest.mark.parametrize("era", ERAS)
async def test_later_question_depends_on_earlier_answer(elicitation: Elicitation, era: str) -> None:
    person = Person([accept(name="Grace"), ElicitResult(action="decline")])
    assert text(await call(elicitation, era, person, "greet_and_book")) == "no seats for Grace"
    statuses = sorted(d.status.value for d in elicitation.store.list_decisions(Operator()))
    assert statuses == ["accepted", "declined"]


@pytest.mark.parametrize("era", ERAS)
async def test_identical_call_after_completion_replays_the_result(
    elicitation: Elicitation, counter: Counter, era: str
) -> None:
    person = Person([accept(approve=True)])
    first = await call(elicitation, era, person, "approve", scope="prod")
    second = await call(elicitation, era, person, "approve", scope="prod")
    assert text(first) == text(second) == "applied prod"
    assert len(person.asked) == 1
    assert counter.read() == {"plan": 1, "apply": 1}
    assert first.meta is None or REPLAYED_META_KEY not in first.meta
    assert second.meta is not None
    [decision] = elicitation.store.list_decisions(Operator())
    operation = elicitation.store.get_operation(decision.operation_id, Operator())
    assert second.meta[REPLAYED_META_KEY] == {
        "recordedAt": operation.updated_at.isoformat(),
        "operationId": operation.operation_id,
    }
    other = await call(elicitation, era, Person([accept(approve=False)]), "approve", scope="staging")
    assert text(other) == "not approved"
    assert other.meta is None or REPLAYED_META_KEY not in other.meta


async def test_legacy_client_without_elicitation_gets_a_clear_tool_error(elicitation: Elicitation) -> None:
    result = await call(elicitation, "legacy", None, "approve", scope="prod")
    assert "form elicitation" in error_text(result)
    [decision] = elicitation.store.list_decisions(Operator())
    assert decision.status is DecisionStatus.REQUESTED


async def test_modern_client_without_elicitation_gets_missing_capability(elicitation: Elicitation) -> None:
    with pytest.raises((MCPError, BaseExceptionGroup)) as raised:
        await call(elicitation, "2026-07-28", None, "approve", scope="prod")
    error = unwrap(raised.value)
    assert isinstance(error, MCPError)
    assert error.code == -32021
    assert error.data == {"requiredCapabilities": {"elicitation": {"form": {}}}}


@pytest.mark.parametrize("era", ERAS)
async def test_arguments_fallback_lets_a_client_without_elicitation_finish(elicitation: Elicitation, era: str) -> None:
    first = await call(elicitation, era, None, "book_with_fallback", city="Oslo")
    message = error_text(first)
    assert "elicit_answers" in message and '"seats"' in message and "How many seats to Oslo?" in message
    invalid = await call(
        elicitation, era, None, "book_with_fallback", city="Oslo", elicit_answers={"seats": {"seats": 99}}
    )
    assert invalid.is_error
    done = await call(elicitation, era, None, "book_with_fallback", city="Oslo", elicit_answers={"seats": {"seats": 2}})
    assert text(done) == "booked 2 to Oslo"
    [decision] = elicitation.store.list_decisions(Operator())
    assert decision.status is DecisionStatus.ACCEPTED
    trail = elicitation.store.audit_trail(decision.elicitation_id, Operator())
    assert trail[-1].reason == "answered through elicit_answers"


@pytest.mark.elicit_eras("2025-11-25", "2026-07-28")
@pytest.mark.parametrize(("outcome", "expected"), [("completed", "connected"), ("failed", "failed")])
async def test_url_decision_waits_for_the_external_flow(elicit: Harness, outcome: UrlOutcome, expected: str) -> None:
    called = await elicit.call("connect", answers={"connect_account": scripted.consent(outcome)})
    assert called.text == expected
    asked = elicit.assert_asked_once("connect_account")
    assert asked.mode == "url"
    [decision] = elicit.decisions()
    assert asked.url == f"http://127.0.0.1:8765/elicit/{decision.elicitation_id}"
    assert decision.status is DecisionStatus(f"external_{outcome}")


@pytest.mark.parametrize("era", ERAS)
async def test_url_consent_refused(elicitation: Elicitation, era: str) -> None:
    person = Person([ElicitResult(action="decline")])
    assert text(await call(elicitation, era, person, "connect")) == "declined"


async def test_modern_retry_before_completion_gets_a_still_waiting_round(store_url: str, tmp_path: Path) -> None:
    from datetime import timedelta

    from mcp_types import InputRequiredResult, InputResponses

    runtime = Elicitation(
        open_store(store_url), request_state=RequestState(single_process=True), public_base_url="https://elicit.example",
        timing=Timing(long_poll=timedelta(milliseconds=300)),
    )  # fmt: skip
    server = runtime.server("waiting-server")
    flow_tools(runtime, Counter(tmp_path / "effects.json"))
    try:
        async with Client(server, mode="2026-07-28", elicitation_callback=Person()) as client:
            first = await client.session.call_tool("connect", {}, allow_input_required=True)
            assert isinstance(first, InputRequiredResult)
            consent: InputResponses = {"connect_account": ElicitResult(action="accept")}
            waiting = await client.session.call_tool(
                "connect", {}, input_responses=consent, request_state=first.request_state, allow_input_required=True
            )
            assert isinstance(waiting, InputRequiredResult)
            assert waiting.input_requests is None and waiting.request_state is not None
            [decision] = runtime.store.list_decisions(Operator())
            assert decision.status is DecisionStatus.ACCEPTED_URL
            pending = runtime.store.transition(decision, DecisionStatus.EXTERNAL_PENDING, caller=LOCAL)
            runtime.store.transition(pending, DecisionStatus.EXTERNAL_COMPLETED, caller=LOCAL)
            done = await client.session.call_tool(
                "connect", {}, request_state=waiting.request_state, allow_input_required=True
            )
        assert isinstance(done, CallToolResult) and text(done) == "connected"
    finally:
        runtime.close()


async def test_after_an_expired_question_the_next_call_starts_afresh(store_url: str, tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from mcp_types import InputRequiredResult

    from tests.helpers.clock import FakeClock

    clock = FakeClock(datetime.now(UTC))
    runtime = Elicitation(
        open_store(store_url, clock=clock), request_state=RequestState(single_process=True), clock=clock
    )
    server = runtime.server("expiry-server")
    flow_tools(runtime, Counter(tmp_path / "effects.json"))
    try:
        async with Client(server, mode="2026-07-28", elicitation_callback=Person()) as client:
            first = await client.session.call_tool("approve", {"scope": "prod"}, allow_input_required=True)
            assert isinstance(first, InputRequiredResult)
            clock.advance(timedelta(hours=1))
            late = await client.session.call_tool(
                "approve",
                {"scope": "prod"},
                input_responses={"approve_scope": ElicitResult(action="accept", content={"approve": True})},
                request_state=first.request_state,
                allow_input_required=True,
            )
            assert isinstance(late, CallToolResult) and text(late) == "expired"
            again = await client.session.call_tool("approve", {"scope": "prod"}, allow_input_required=True)
            assert isinstance(again, InputRequiredResult)
        statuses = sorted(d.status.value for d in runtime.store.list_decisions(Operator()))
        assert statuses == ["expired", "requested"]
    finally:
        runtime.close()


def test_decision_urls_refuse_anything_but_a_decision_id(tmp_path: Path) -> None:
    runtime = Elicitation(
        f"sqlite://{tmp_path / 'urls.db'}",
        request_state=RequestState(single_process=True),
        public_base_url="https://elicit.example",
    )
    try:
        good = "0b9d3a4e-3c1f-4a53-9b0e-6f1f2a3b4c5d"
        assert runtime.decision_url(good) == f"https://elicit.example/elicit/{good}"
        for bad in (f"{good}?token=s3cret", "../admin", f"{good}#x", good.upper(), "alice@example.com"):
            with pytest.raises(ValueError, match="only the decision's id"):
                runtime.decision_url(bad)
    finally:
        runtime.close()


async def test_an_answer_that_loses_to_an_operator_cancel_runs_the_body_again_on_the_cancel(
    elicitation: Elicitation, counter: Counter
) -> None:
    """The answer is held until the next commit; the operator's cancel landed first, so the apply never runs."""

    def cancel_then_accept(params: object) -> ElicitResult:
        [asked] = elicitation.store.list_decisions(Operator())
        elicitation.store.transition(asked, DecisionStatus.CANCELLED, caller=Operator(), reason="operator")
        return accept(approve=True)

    person = Person([cancel_then_accept])
    assert text(await call(elicitation, "legacy", person, "approve", scope="prod")) == "cancelled"
    assert counter.read() == {"plan": 1}
    [decision] = elicitation.store.list_decisions(Operator())
    assert decision.status is DecisionStatus.CANCELLED
    [operation] = elicitation.store.find_operations(
        LOCAL, method="tools/call", target="approve", request_digest=decision.origin_request_digest
    )
    assert operation.result == "cancelled"
    trail = elicitation.store.audit_trail(decision.elicitation_id, Operator())
    assert [(entry.to_status, entry.reason) for entry in trail] == [
        ("requested", "requested"),
        ("cancelled", "operator"),
    ]
