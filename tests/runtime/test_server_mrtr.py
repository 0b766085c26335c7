"""2026-07-28 rounds driven by hand: replayed, tampered, expired and foreign requestState.

The SDK's client, not `mcp_elicit.testing.Harness`: the rounds' wire shapes (`InputRequiredResult`, the
sealed `requestState`, answers sent without one) are the subject, and the client kit never sends them wrong.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult, TextContent

from mcp_elicit.model import DecisionStatus, OperationStatus, Operator
from mcp_elicit.server import Elicitation, Flow, RequestState, Timing
from mcp_elicit.server.eras.mrtr import ROUND_LAPSE_MARGIN
from mcp_elicit.store import open_store
from mcp_elicit.testing import ControlledClock
from tests.helpers.person import Person
from tests.helpers.results import text, unwrap
from tests.helpers.server import Confirm, Counter, flow_tools

pytestmark = pytest.mark.anyio
MODERN = "2026-07-28"


STATE_TTL = 2.0


def mrtr_runtime(store_url: str, tmp_path: Path, *, state_ttl: float = STATE_TTL) -> Elicitation:
    """The runtime and its store on one `ControlledClock`: a test moves the clock past a claim's lease."""
    clock = ControlledClock()
    runtime = Elicitation(
        open_store(store_url, clock=clock),
        request_state=RequestState(keys=[b"k" * 32], ttl=timedelta(seconds=state_ttl)),
        timing=Timing(long_poll=timedelta(seconds=0.5)),
        clock=clock,
    )
    runtime.server("mrtr-server")
    flow_tools(runtime, Counter(tmp_path / "effects.json"))
    return runtime


@pytest.fixture
def elicitation(store_url: str, tmp_path: Path) -> Iterator[Elicitation]:
    runtime = mrtr_runtime(store_url, tmp_path)
    yield runtime
    runtime.close()


def client(elicitation: Elicitation) -> Client:
    return Client(elicitation.mcp_server, mode=MODERN, elicitation_callback=Person())


async def first_round(c: Client, tool: str, arguments: dict[str, object]) -> InputRequiredResult:
    result = await c.session.call_tool(tool, arguments, allow_input_required=True)
    assert isinstance(result, InputRequiredResult)
    return result


async def retry(
    c: Client, tool: str, arguments: dict[str, object], state: str | None, **responses: ElicitResult
) -> CallToolResult | InputRequiredResult:
    return await c.session.call_tool(
        tool, arguments, input_responses=dict(responses) or None, request_state=state, allow_input_required=True
    )


async def refused(c: Client, tool: str, arguments: dict[str, object], state: str, **responses: ElicitResult) -> None:
    with pytest.raises((MCPError, BaseExceptionGroup)) as raised:
        await retry(c, tool, arguments, state, **responses)
    error = unwrap(raised.value)
    assert isinstance(error, MCPError)
    assert (error.code, error.message) == (-32602, "Invalid or expired requestState")


async def test_round_carries_stable_keys_and_a_sealed_state(elicitation: Elicitation) -> None:
    async with client(elicitation) as c:
        round_one = await first_round(c, "approve", {"scope": "prod"})
    assert round_one.input_requests is not None
    assert list(round_one.input_requests) == ["approve_scope"]
    assert round_one.request_state is not None and round_one.request_state.startswith("v1.")
    [decision] = elicitation.store.list_decisions(Operator())
    assert decision.elicitation_id not in round_one.request_state


async def test_replayed_state_is_refused_and_a_fresh_call_resumes(elicitation: Elicitation) -> None:
    async with client(elicitation) as c:
        round_one = await first_round(c, "greet_and_book", {})
        state = round_one.request_state
        assert state is not None
        round_two = await retry(
            c, "greet_and_book", {}, state, name=ElicitResult(action="accept", content={"name": "Ada"})
        )
        assert isinstance(round_two, InputRequiredResult)
        assert round_two.input_requests is not None and list(round_two.input_requests) == ["seats"]

        await refused(c, "greet_and_book", {}, state, name=ElicitResult(action="accept", content={"name": "Eve"}))

        overlapping = await first_round(c, "greet_and_book", {})
        assert overlapping.input_requests is None, "the seats question is out in round two already"
        done = await retry(
            c, "greet_and_book", {}, round_two.request_state, seats=ElicitResult(action="accept", content={"seats": 3})
        )
        assert isinstance(done, CallToolResult)
        assert text(done) == "3 seats for Ada"
        again = await retry(c, "greet_and_book", {}, overlapping.request_state)
    assert isinstance(again, CallToolResult)
    assert text(again) == "3 seats for Ada"
    names = [d for d in elicitation.store.list_decisions(Operator()) if d.key == "name"]
    assert [d.content for d in names] == [{"name": "Ada"}]


async def test_a_question_out_in_a_lapsed_round_is_asked_in_the_next(elicitation: Elicitation) -> None:
    async with client(elicitation) as c:
        round_one = await first_round(c, "greet_and_book", {})
        assert round_one.input_requests is not None and list(round_one.input_requests) == ["name"]
        overlapping = await first_round(c, "greet_and_book", {})
        assert overlapping.input_requests is None
        lapsed = timedelta(seconds=STATE_TTL) + ROUND_LAPSE_MARGIN + timedelta(seconds=0.5)
        clock = elicitation.clock
        assert isinstance(clock, ControlledClock)
        clock.advance(lapsed)
        later = await first_round(c, "greet_and_book", {})
        assert later.input_requests is not None and list(later.input_requests) == ["name"]
        done = await retry(
            c, "greet_and_book", {}, later.request_state, name=ElicitResult(action="accept", content={"name": "Ada"})
        )
    assert isinstance(done, InputRequiredResult) and done.input_requests is not None
    assert list(done.input_requests) == ["seats"]
    [name] = [d for d in elicitation.store.list_decisions(Operator()) if d.key == "name"]
    assert name.content == {"name": "Ada"}


async def test_a_call_waiting_on_a_question_puts_it_out_again_once_the_round_holding_it_had_its_time(
    elicitation: Elicitation,
) -> None:
    clock = elicitation.clock
    assert isinstance(clock, ControlledClock)
    results: list[InputRequiredResult] = []
    async with client(elicitation) as c:
        round_one = await first_round(c, "greet_and_book", {})
        assert round_one.input_requests is not None and list(round_one.input_requests) == ["name"]

        async def overlapping() -> None:
            results.append(await first_round(c, "greet_and_book", {}))

        async with anyio.create_task_group() as group:
            group.start_soon(overlapping)
            await anyio.sleep(0.2)
            assert results == [], "the identical call waits on the question round one holds"
            clock.advance(timedelta(seconds=STATE_TTL) + ROUND_LAPSE_MARGIN + timedelta(seconds=0.5))
        [again] = results
        assert again.input_requests is not None and list(again.input_requests) == ["name"]
        done = await retry(
            c, "greet_and_book", {}, again.request_state, name=ElicitResult(action="accept", content={"name": "Ada"})
        )
    assert isinstance(done, InputRequiredResult) and done.input_requests is not None
    assert list(done.input_requests) == ["seats"]
    [name] = [d for d in elicitation.store.list_decisions(Operator()) if d.key == "name"]
    assert name.content == {"name": "Ada"}, "one decision, put out twice, answered once"


async def test_an_answer_whose_question_and_operation_were_ended_meanwhile_is_noted_late_and_the_call_told(
    elicitation: Elicitation,
) -> None:
    store, operator = elicitation.store, Operator("ops")
    async with client(elicitation) as c:
        round_one = await first_round(c, "approve", {"scope": "prod"})
        [decision] = store.list_decisions(operator)
        store.transition(decision, DecisionStatus.DECLINED, caller=operator, reason="declined on the page")
        operation = store.get_operation(decision.operation_id, operator)
        store.finish_operation(operation, OperationStatus.CANCELLED, caller=operator, reason="called off")
        answer = ElicitResult(action="accept", content={"approve": True})
        ended = await retry(c, "approve", {"scope": "prod"}, round_one.request_state, approve_scope=answer)
    assert isinstance(ended, CallToolResult) and ended.is_error
    [said] = ended.content
    assert isinstance(said, TextContent)
    assert said.text.endswith("ended its operation as cancelled while this call waited; call again to start afresh")
    [*_, noted] = store.audit_trail(decision.elicitation_id, operator)
    assert noted.reason == "a later answer from another round was superseded: the decision was already declined"
    assert store.get_decision(decision.elicitation_id, operator).status is DecisionStatus.DECLINED


async def test_a_late_answer_read_while_the_operation_was_open_is_noted_when_the_operation_completes_first(
    store_url: str, tmp_path: Path
) -> None:
    """Two rounds put one question out; the first answer wins and the operation runs on. The second round's
    answer comes while the operation is still open, and the operation completes between that call's reads and
    its first commit, which so loses (the run lease of an ended operation): the call gets the recorded result,
    and its answer is still noted as superseded, not dropped with the commit."""
    clock = ControlledClock()
    runtime = Elicitation(
        open_store(store_url, clock=clock),
        request_state=RequestState(keys=[b"k" * 32], ttl=timedelta(seconds=60)),
        timing=Timing(long_poll=timedelta(seconds=0.5), reask_after=timedelta(seconds=1)),
        clock=clock,
    )
    runtime.server("late-server")
    in_last_step, finish_last_step = anyio.Event(), anyio.Event()
    late_waits, let_late_on, first_done = anyio.Event(), anyio.Event(), anyio.Event()

    async def last_step() -> str:
        in_last_step.set()
        await finish_last_step.wait()
        return "sealed"

    @runtime.tool()
    async def job(flow: Flow) -> str:
        await flow.ask("Run the job?", Confirm, key="confirm")
        worked = await flow.step("work", lambda: "worked")
        if in_last_step.is_set():  # the late call: it has read the decision and the journal, committed nothing
            late_waits.set()
            await let_late_on.wait()
        sealed = await flow.step("seal", last_step, returns=str)
        return f"{worked} {sealed}"

    yes = ElicitResult(action="accept", content={"confirm": True})
    results: dict[str, CallToolResult | InputRequiredResult] = {}
    try:
        async with client(runtime) as c:
            one = await first_round(c, "job", {})
            clock.advance(timedelta(seconds=1.5))
            two = await first_round(c, "job", {})
            assert one.input_requests is not None and two.input_requests is not None
            assert list(two.input_requests) == list(one.input_requests) == ["confirm"], "put out twice"

            async def answer(name: str, state: str | None) -> None:
                results[name] = await retry(c, "job", {}, state, confirm=yes)
                if name == "first":
                    first_done.set()

            with anyio.fail_after(30):
                async with anyio.create_task_group() as group:
                    group.start_soon(answer, "first", one.request_state)
                    await in_last_step.wait()
                    group.start_soon(answer, "late", two.request_state)
                    await late_waits.wait()
                    finish_last_step.set()
                    await first_done.wait()
                    let_late_on.set()
        [decision] = runtime.store.list_decisions(Operator())
        trail = runtime.store.audit_trail(decision.elicitation_id, Operator())
    finally:
        runtime.close()
    assert [text(unwrap_result(results[name])) for name in ("first", "late")] == ["worked sealed"] * 2
    assert decision.status is DecisionStatus.ACCEPTED
    noted = [entry.reason for entry in trail if "superseded" in entry.reason]
    assert noted == ["a later answer from another round was superseded: the decision was already accepted"], trail


def unwrap_result(result: CallToolResult | InputRequiredResult) -> CallToolResult:
    assert isinstance(result, CallToolResult), result
    return result


@pytest.mark.parametrize(
    "responses",
    [
        {},
        {"other_key": ElicitResult(action="accept", content={"approve": True})},
        {"approve_scope": ElicitResult(action="accept", content={"approve": "yes"})},
        {"approve_scope": ElicitResult(action="accept", content=None)},
    ],
    ids=["missing", "extra-only", "invalid", "accept-without-content"],
)
async def test_missing_extra_or_invalid_responses_ask_again(
    elicitation: Elicitation, responses: dict[str, ElicitResult]
) -> None:
    async with client(elicitation) as c:
        round_one = await first_round(c, "approve", {"scope": "prod"})
        again = await retry(c, "approve", {"scope": "prod"}, round_one.request_state, **responses)
    assert isinstance(again, InputRequiredResult)
    assert again.input_requests is not None and list(again.input_requests) == ["approve_scope"]
    assert again.request_state != round_one.request_state
    [decision] = elicitation.store.list_decisions(Operator())
    assert decision.status is DecisionStatus.REQUESTED


async def test_tampered_state_is_refused(elicitation: Elicitation) -> None:
    async with client(elicitation) as c:
        round_one = await first_round(c, "approve", {"scope": "prod"})
        state = round_one.request_state
        assert state is not None
        flipped = state[:-3] + ("A" if state[-3] != "A" else "B") + state[-2:]
        answer = ElicitResult(action="accept", content={"approve": True})
        await refused(c, "approve", {"scope": "prod"}, flipped, approve_scope=answer)
        await refused(c, "approve", {"scope": "prod"}, "not-a-token", approve_scope=answer)


async def test_state_for_other_arguments_is_refused(elicitation: Elicitation) -> None:
    async with client(elicitation) as c:
        round_one = await first_round(c, "approve", {"scope": "prod"})
        assert round_one.request_state is not None
        answer = ElicitResult(action="accept", content={"approve": True})
        await refused(c, "approve", {"scope": "staging"}, round_one.request_state, approve_scope=answer)


async def test_expired_state_is_refused(store_url: str, tmp_path: Path) -> None:
    """The SDK seals the state's expiry on the wall clock (`time.time()`), not the runtime's: real time must pass,
    so this runtime's state lives a fifth of a second."""
    ttl = 0.2
    elicitation = mrtr_runtime(store_url, tmp_path, state_ttl=ttl)
    try:
        async with client(elicitation) as c:
            round_one = await first_round(c, "approve", {"scope": "prod"})
            assert round_one.request_state is not None
            await anyio.sleep(ttl + 0.1)
            answer = ElicitResult(action="accept", content={"approve": True})
            await refused(c, "approve", {"scope": "prod"}, round_one.request_state, approve_scope=answer)
        [decision] = elicitation.store.list_decisions(Operator())
        assert decision.status is DecisionStatus.REQUESTED
    finally:
        elicitation.close()


async def test_state_from_another_instance_with_the_same_keys_is_accepted(store_url: str, tmp_path: Path) -> None:
    instances = []
    for _ in range(2):
        runtime = Elicitation(open_store(store_url), request_state=RequestState(keys=[b"k" * 32]))
        runtime.server("shared-name")
        flow_tools(runtime, Counter(tmp_path / "effects.json"))
        instances.append(runtime)
    try:
        async with client(instances[0]) as a:
            round_one = await first_round(a, "approve", {"scope": "prod"})
        async with client(instances[1]) as b:
            done = await retry(
                b,
                "approve",
                {"scope": "prod"},
                round_one.request_state,
                approve_scope=ElicitResult(action="accept", content={"approve": True}),
            )
        assert isinstance(done, CallToolResult) and text(done) == "applied prod"
    finally:
        for runtime in instances:
            runtime.close()


async def test_answers_sent_without_state_are_read_by_key_for_the_questions_asked(
    elicitation: Elicitation,
) -> None:
    """As a stateless server would read them: by key, unknown keys ignored, validated, audited as such."""
    name = ElicitResult(action="accept", content={"name": "Ada"})
    extra = ElicitResult(action="accept", content={"foo": "bar"})
    async with client(elicitation) as c:
        round_one = await retry(c, "greet_and_book", {}, None, name=name, unknown_extra_key=extra)
        assert isinstance(round_one, InputRequiredResult)
        assert round_one.input_requests is not None and list(round_one.input_requests) == ["seats"]
    decisions = {d.key: d for d in elicitation.store.list_decisions(Operator())}
    assert decisions["name"].status is DecisionStatus.ACCEPTED
    assert decisions["name"].content == {"name": "Ada"}
    reasons = [e.reason for e in elicitation.store.audit_trail(decisions["name"].elicitation_id, Operator())]
    assert reasons == ["requested", "answered with the request, without a round's state"]
    assert decisions["seats"].status is DecisionStatus.REQUESTED


async def test_an_answer_without_state_for_an_open_question_applies_once(elicitation: Elicitation) -> None:
    """A call that attaches to its open operation may answer the question an earlier round asked."""
    async with client(elicitation) as c:
        await first_round(c, "greet_and_book", {})
        name = ElicitResult(action="accept", content={"name": "Ada"})
        again = await retry(c, "greet_and_book", {}, None, name=name)
        assert isinstance(again, InputRequiredResult)
        assert again.input_requests is not None and list(again.input_requests) == ["seats"]
        other = ElicitResult(action="accept", content={"name": "Bob"})
        seats = ElicitResult(action="accept", content={"seats": 2})
        done = await retry(c, "greet_and_book", {}, None, name=other, seats=seats)
    assert isinstance(done, CallToolResult)
    assert text(done) == "2 seats for Ada"


async def test_a_url_consent_without_state_counts_for_nothing(store_url: str, tmp_path: Path) -> None:
    runtime = Elicitation(
        open_store(store_url), request_state=RequestState(keys=[b"k" * 32]), public_base_url="http://127.0.0.1:9"
    )
    runtime.server("urls")
    flow_tools(runtime, Counter(tmp_path / "effects.json"))
    try:
        async with client(runtime) as c:
            again = await retry(c, "connect", {}, None, connect_account=ElicitResult(action="accept"))
        assert isinstance(again, InputRequiredResult)
        [decision] = runtime.store.list_decisions(Operator())
        assert decision.status is DecisionStatus.REQUESTED
    finally:
        runtime.close()


async def test_an_invalid_answer_without_state_asks_again(elicitation: Elicitation) -> None:
    async with client(elicitation) as c:
        again = await retry(c, "greet_and_book", {}, None, name=ElicitResult(action="accept", content={"name": ""}))
    assert isinstance(again, InputRequiredResult)
    assert again.input_requests is not None and list(again.input_requests) == ["name"]


async def test_answers_without_state_can_be_turned_off(store_url: str, tmp_path: Path) -> None:
    runtime = Elicitation(
        open_store(store_url), request_state=RequestState(keys=[b"k" * 32], answers_without_state=False)
    )
    runtime.server("strict")
    flow_tools(runtime, Counter(tmp_path / "effects.json"))
    try:
        async with client(runtime) as c:
            name = ElicitResult(action="accept", content={"name": "Ada"})
            again = await retry(c, "greet_and_book", {}, None, name=name)
        assert isinstance(again, InputRequiredResult)
        assert again.input_requests is not None and list(again.input_requests) == ["name"]
    finally:
        runtime.close()
