"""The tool-author API through the real SDK client and server, on every protocol era and both stores.

Calls go through `mcp_elicit.testing.Harness`; the SDK's client is driven directly only where the test's
subject is something the client kit never sends (an answer the form refuses, a bare round retried by hand)
or a person acting on the store while the question is on screen."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
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
from tests.helpers.results import text
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


async def test_later_question_depends_on_earlier_answer(elicit: Harness) -> None:
    called = await elicit.call(
        "greet_and_book", answers={"name": scripted.accept(name="Grace"), "seats": scripted.decline()}
    )
    assert called.text == "no seats for Grace"
    assert [question.message for question in called.asked] == ["Who is travelling?", "How many seats for Grace?"]
    assert sorted(d.status.value for d in elicit.decisions()) == ["accepted", "declined"]


async def test_identical_call_after_completion_replays_the_result(elicit: Harness, counter: Counter) -> None:
    first = await elicit.call("approve", {"scope": "prod"}, answers={"approve_scope": scripted.accept(approve=True)})
    second = await elicit.call("approve", {"scope": "prod"})
    assert first.text == second.text == "applied prod"
    elicit.assert_asked_once("approve_scope")
    assert counter.read() == {"plan": 1, "apply": 1}
    assert not first.replayed
    assert second.result.meta is not None
    operation = elicit.operation(first)
    assert second.result.meta[REPLAYED_META_KEY] == {
        "recordedAt": operation.updated_at.isoformat(),
        "operationId": operation.operation_id,
    }
    other = await elicit.call(
        "approve", {"scope": "staging"}, answers={"approve_scope": scripted.accept(approve=False)}
    )
    assert other.text == "not approved"
    assert not other.replayed


@pytest.mark.elicit_eras("2025-11-25")
async def test_legacy_client_without_elicitation_gets_a_clear_tool_error(elicit: Harness) -> None:
    called = await elicit.call("approve", {"scope": "prod"}, modes=())
    assert "form elicitation" in called.error
    [decision] = elicit.decisions()
    assert decision.status is DecisionStatus.REQUESTED


@pytest.mark.elicit_eras("2026-07-28")
async def test_modern_client_without_elicitation_gets_missing_capability(elicit: Harness) -> None:
    with pytest.raises(MCPError) as raised:
        await elicit.call("approve", {"scope": "prod"}, modes=())
    assert raised.value.code == -32021
    assert raised.value.data == {"requiredCapabilities": {"elicitation": {"form": {}}}}


async def test_arguments_fallback_lets_a_client_without_elicitation_finish(elicit: Harness) -> None:
    first = await elicit.call("book_with_fallback", {"city": "Oslo"}, modes=())
    message = first.error
    assert "elicit_answers" in message and '"seats"' in message and "How many seats to Oslo?" in message
    invalid = await elicit.call(
        "book_with_fallback", {"city": "Oslo", "elicit_answers": {"seats": {"seats": 99}}}, modes=()
    )
    assert invalid.result.is_error
    done = await elicit.call(
        "book_with_fallback", {"city": "Oslo", "elicit_answers": {"seats": {"seats": 2}}}, modes=()
    )
    assert done.text == "booked 2 to Oslo"
    [decision] = elicit.decisions()
    assert decision.status is DecisionStatus.ACCEPTED
    assert elicit.audit("seats")[-1].reason == "answered through elicit_answers"


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


@pytest.mark.elicit_eras("2025-11-25", "2026-07-28")
async def test_url_consent_refused(elicit: Harness) -> None:
    assert (await elicit.call("connect", answers={"connect_account": scripted.decline()})).text == "declined"


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


@pytest.mark.elicit_eras("2026-07-28")
async def test_after_an_expired_question_the_next_call_starts_afresh(elicit: Harness) -> None:
    """The answer comes back in the round's retry an hour late: the question expired, and the next call asks anew."""
    late = scripted.accept(approve=True).after(timedelta(hours=1))
    expired = await elicit.call("approve", {"scope": "prod"}, answers={"approve_scope": late})
    assert expired.text == "expired"
    with pytest.raises(MCPError) as again:  # a client that cannot be asked: the new question stays open
        await elicit.call("approve", {"scope": "prod"}, modes=())
    assert again.value.code == -32021
    assert sorted(d.status.value for d in elicit.decisions()) == ["expired", "requested"]
    assert elicit.times_asked("approve_scope") == 1


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
