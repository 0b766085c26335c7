"""A gate with approvers: the call waits for others to decide, on every era, and runs exactly what they approved.

The votes are cast through the store as the decision's page casts them (`cast_vote`, the approver's roles
resolved by the page); the requester's call runs in the real server on each era, with a client that could
answer any question and is never asked. What ran is recorded by the tool itself (`Ledger`).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from typing import Final

import anyio
import pytest
from mcp import Client
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult, InputResponse

from mcp_elicit import ApproverRule, Declined, Elicitation, Flow, Gate, RequestState
from mcp_elicit.approvals import APPROVAL_KEY, NOTE_FIELD, REJECT_FIELD
from mcp_elicit.model import Approver, Decision, DecisionStatus, Operator, Verdict
from mcp_elicit.server import IdentityPolicy, Timing
from mcp_elicit.store import VoteRefused, open_store
from mcp_elicit.store.aio import AsyncStore
from mcp_elicit.testing import EraName, Harness
from mcp_elicit.testing.harness import ToolCall
from tests.helpers.http_harness import free_port, serving
from tests.helpers.ledger import Ledger
from tests.helpers.person import Person
from tests.helpers.raw_http import handshake, post

pytestmark = pytest.mark.anyio
MODERN: Final = "2026-07-28"
MANAGERS = frozenset({"release-managers"})
ALICE = Approver("alice", MANAGERS)
BOB = Approver("bob", MANAGERS)
CAROL = Approver("carol", MANAGERS)


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


@pytest.fixture
def elicit_app(elicit_store_url: str, ledger: Ledger) -> Iterator[Elicitation]:
    runtime = Elicitation(
        open_store(elicit_store_url),
        request_state=RequestState(single_process=True),
        timing=Timing(long_poll=timedelta(milliseconds=300), approver_wait=timedelta(seconds=20)),
    )
    runtime.server("approved")

    @runtime.tool(gate=Gate(editable=["replicas"], approvers=ApproverRule(["release-managers"], quorum=2)))
    async def deploy(flow: Flow, service: str, replicas: int) -> str:
        # A step: overlapping calls of one operation each run the body, and its effect once.
        await flow.step("deploy", ledger.ran.append, {"service": service, "replicas": replicas})
        return f"deployed {service} x{replicas}"

    @runtime.tool()
    async def rename(flow: Flow, name: str) -> str:
        answer = await flow.ask(f"Rename to {name}?", bool, key="rename", approvers=ApproverRule(["owners"]))
        if isinstance(answer, Declined):
            return "kept the old name"
        ledger.ran.append({"name": name})
        return f"renamed to {name}"

    yield runtime
    runtime.close()


async def waiting_decision(runtime: Elicitation, key: str = APPROVAL_KEY) -> Decision:
    """The question once the call asked it (the call runs beside the test)."""
    with anyio.fail_after(10):
        while True:
            found = [
                d for d in runtime.store.list_decisions(Operator(), status=DecisionStatus.REQUESTED) if d.key == key
            ]
            if found:
                return found[0]
            await anyio.sleep(0.02)


async def beside(call: Callable[[], Awaitable[ToolCall]], votes: Callable[[], Awaitable[None]]) -> ToolCall:
    """Make the call, and cast the votes while it waits."""
    done: list[ToolCall] = []

    async def calling() -> None:
        done.append(await call())

    async with anyio.create_task_group() as group:
        group.start_soon(calling)
        await votes()
    return done[0]


async def test_the_call_waits_for_a_quorum_of_approvers_and_runs_once(
    elicit: Harness, elicit_app: Elicitation, ledger: Ledger
) -> None:
    store = AsyncStore(elicit_app.store)

    async def votes() -> None:
        decision = await waiting_decision(elicit_app)
        first = await store.cast_vote(decision.elicitation_id, ALICE, Verdict.APPROVE, {NOTE_FIELD: "go"})
        assert first.decision.status is DecisionStatus.REQUESTED and first.tally.leading == 1
        with pytest.raises(VoteRefused):
            await store.cast_vote(decision.elicitation_id, ALICE, Verdict.APPROVE, {})
        await store.cast_vote(decision.elicitation_id, BOB, Verdict.APPROVE, {})

    called = await beside(lambda: elicit.call("deploy", {"service": "api", "replicas": 3}), votes)
    assert called.result.content[-1].text == "deployed api x3"  # type: ignore[union-attr]
    assert called.asked == (), "the requester's client is never asked for an approval others give"
    assert ledger.ran == [{"service": "api", "replicas": 3}]
    [decision] = elicit.decisions(APPROVAL_KEY)
    assert decision.status is DecisionStatus.ACCEPTED and decision.approvers is not None
    assert decision.content == {NOTE_FIELD: "alice: go"}


async def test_an_edit_restarts_the_count_and_what_runs_is_what_the_quorum_approved(
    elicit: Harness, elicit_app: Elicitation, ledger: Ledger
) -> None:
    store = AsyncStore(elicit_app.store)

    async def votes() -> None:
        decision = await waiting_decision(elicit_app)
        edited = await store.cast_vote(decision.elicitation_id, ALICE, Verdict.APPROVE, {"replicas": 2})
        as_called = await store.cast_vote(decision.elicitation_id, BOB, Verdict.APPROVE, {})
        assert as_called.decision.status is DecisionStatus.REQUESTED, "approvals of other arguments do not add up"
        assert edited.vote.proposal != as_called.vote.proposal
        await store.cast_vote(decision.elicitation_id, CAROL, Verdict.APPROVE, {"replicas": 2})

    called = await beside(lambda: elicit.call("deploy", {"service": "api", "replicas": 3}), votes)
    assert [block.text for block in called.result.content] == [  # type: ignore[union-attr]
        "The approvers changed the arguments before approving (replicas: 3 → 2); the tool ran with the changes.",
        "deployed api x2",
    ]
    assert ledger.ran == [{"service": "api", "replicas": 2}]


async def test_one_rejection_vetoes_and_the_model_reads_why(
    elicit: Harness, elicit_app: Elicitation, ledger: Ledger
) -> None:
    store = AsyncStore(elicit_app.store)

    async def votes() -> None:
        decision = await waiting_decision(elicit_app)
        await store.cast_vote(decision.elicitation_id, ALICE, Verdict.APPROVE, {})
        await store.cast_vote(
            decision.elicitation_id, BOB, Verdict.REJECT, {REJECT_FIELD: True, NOTE_FIELD: "freeze until Monday"}
        )

    called = await beside(lambda: elicit.call("deploy", {"service": "api", "replicas": 3}), votes)
    assert (
        called.error == "An approver rejected this call; nothing ran. Note from the approvers: bob: freeze until Monday"
    )
    assert ledger.ran == []


async def test_the_requester_never_approves_their_own_call(elicit: Harness, elicit_app: Elicitation) -> None:
    store = AsyncStore(elicit_app.store)
    requester = Approver(elicit.principal.principal_id, MANAGERS)

    async def votes() -> None:
        decision = await waiting_decision(elicit_app)
        with pytest.raises(VoteRefused, match="own"):
            await store.cast_vote(decision.elicitation_id, requester, Verdict.APPROVE, {})
        await store.cast_vote(decision.elicitation_id, ALICE, Verdict.REJECT, {REJECT_FIELD: True})

    called = await beside(lambda: elicit.call("deploy", {"service": "api", "replicas": 1}), votes)
    assert "rejected" in called.error


async def test_a_plain_question_may_name_its_approvers_and_a_rejection_is_a_decline(
    elicit: Harness, elicit_app: Elicitation, ledger: Ledger
) -> None:
    store = AsyncStore(elicit_app.store)
    owner = Approver("olga", frozenset({"owners"}))

    async def reject() -> None:
        decision = await waiting_decision(elicit_app, "rename")
        with pytest.raises(VoteRefused, match="owners"):
            await store.cast_vote(decision.elicitation_id, ALICE, Verdict.APPROVE, {"value": True})
        await store.cast_vote(decision.elicitation_id, owner, Verdict.REJECT, {})

    called = await beside(lambda: elicit.call("rename", {"name": "prod"}), reject)
    assert called.text == "kept the old name" and ledger.ran == []


# -- the live call stops waiting, and the identical call made later attaches --------------------------------------


@pytest.fixture
def impatient(elicit_store_url: str, ledger: Ledger) -> Iterator[Elicitation]:
    runtime = Elicitation(
        open_store(elicit_store_url),
        request_state=RequestState(keys=[b"k" * 32]),
        timing=Timing(long_poll=timedelta(milliseconds=200), approver_wait=timedelta(milliseconds=400)),
    )
    runtime.server("impatient")

    @runtime.tool(gate=Gate(approvers=ApproverRule(["release-managers"])))
    async def deploy(flow: Flow, service: str) -> str:
        ledger.ran.append({"service": service})
        return f"deployed {service}"

    yield runtime
    runtime.close()


@pytest.mark.parametrize("era", ["2025-06-18", "2025-11-25"])
async def test_a_live_call_ends_naming_the_pending_approval_and_the_same_call_later_gets_its_result(
    impatient: Elicitation, ledger: Ledger, era: str
) -> None:
    harness = Harness(impatient, era=era)  # type: ignore[arg-type]
    first = await harness.call("deploy", {"service": "api"})
    [decision] = harness.decisions(APPROVAL_KEY)
    assert first.error.startswith("Not run yet. Waiting for approval by release-managers (0 of 1): approval request ")
    assert decision.elicitation_id in first.error and "Call this tool again with the same arguments" in first.error
    assert decision.status is DecisionStatus.REQUESTED and ledger.ran == []
    await AsyncStore(impatient.store).cast_vote(decision.elicitation_id, ALICE, Verdict.APPROVE, {})
    again = await harness.call("deploy", {"service": "api"})
    assert again.text == "deployed api" and again.operation_id == first.operation_id
    assert ledger.ran == [{"service": "api"}] and harness.decisions(APPROVAL_KEY) == [harness.decision(APPROVAL_KEY)]


async def test_rounds_say_who_the_call_waits_on_and_answers_from_the_client_never_count(
    impatient: Elicitation, ledger: Ledger
) -> None:
    arguments = {"service": "api"}
    sneaked: dict[str, InputResponse] = {APPROVAL_KEY: ElicitResult(action="accept", content={})}
    async with Client(impatient.mcp_server, mode=MODERN, elicitation_callback=Person()) as client:
        first = await client.session.call_tool("deploy", arguments, allow_input_required=True)
        assert isinstance(first, InputRequiredResult) and first.input_requests is None
        assert first.meta is not None
        assert first.meta["io.github.mcp-elicit/waiting"] == "Waiting for approval by release-managers (0 of 1)"
        # Neither without a round nor with the still-waiting round's state does the client's own answer count.
        bare = await client.session.call_tool("deploy", arguments, input_responses=sneaked, allow_input_required=True)
        retried = await client.session.call_tool(
            "deploy", arguments, input_responses=sneaked, request_state=first.request_state,
            allow_input_required=True,
        )  # fmt: skip
        assert isinstance(bare, InputRequiredResult) and isinstance(retried, InputRequiredResult)
        [decision] = [d for d in impatient.store.list_decisions(Operator()) if d.key == APPROVAL_KEY]
        assert decision.status is DecisionStatus.REQUESTED and ledger.ran == []
        await AsyncStore(impatient.store).cast_vote(decision.elicitation_id, ALICE, Verdict.APPROVE, {})
        done = await client.session.call_tool(
            "deploy", arguments, request_state=retried.request_state, allow_input_required=True
        )
    assert isinstance(done, CallToolResult) and done.content[-1].text == "deployed api"  # type: ignore[union-attr]
    assert ledger.ran == [{"service": "api"}]


async def test_overlapping_identical_calls_share_one_approval(elicit_app: Elicitation, ledger: Ledger) -> None:
    harness = Harness(elicit_app, era="2025-11-25")
    calls: list[ToolCall] = []

    async def call() -> None:
        calls.append(await harness.call("deploy", {"service": "api", "replicas": 1}))

    async with anyio.create_task_group() as group:
        group.start_soon(call)
        group.start_soon(call)
        decision = await waiting_decision(elicit_app)
        await anyio.sleep(0.2)
        store = AsyncStore(elicit_app.store)
        await store.cast_vote(decision.elicitation_id, ALICE, Verdict.APPROVE, {})
        await store.cast_vote(decision.elicitation_id, BOB, Verdict.APPROVE, {})
    assert [c.text for c in calls] == ["deployed api x1"] * 2 and calls[0].operation_id == calls[1].operation_id
    assert ledger.ran == [{"service": "api", "replicas": 1}]
    assert len(harness.decisions(APPROVAL_KEY)) == 1


def test_a_gate_with_approvers_offers_no_standing_grants() -> None:
    from mcp_elicit import Grants

    with pytest.raises(ValueError, match="leave grants out"):
        Gate(approvers=ApproverRule(["ops"]), grants=Grants())
    with pytest.raises(TypeError, match="ApproverRule"):
        Gate(approvers=["ops"])  # type: ignore[arg-type]


async def test_a_fastmcp_tool_waits_for_its_approvers_on_every_era(elicit_store_url: str, ledger: Ledger) -> None:
    from mcp_elicit.fastmcp import FastMCPFlows

    runtime = Elicitation(
        open_store(elicit_store_url),
        request_state=RequestState(single_process=True),
        timing=Timing(long_poll=timedelta(milliseconds=300)),
    )
    flows = FastMCPFlows(runtime)
    server = flows.server("fast-approved")

    @flows.tool(gate=Gate(editable=["region"], approvers=ApproverRule(["release-managers"])))
    async def deploy(flow: Flow, service: str, region: str) -> str:
        await flow.step("deploy", ledger.ran.append, {"service": service, "region": region})
        return f"{service} deployed to {region}"

    store = AsyncStore(runtime.store)
    try:
        for era in ("2025-06-18", "2025-11-25", MODERN):
            harness = Harness(runtime, era=era, server=server)

            async def votes() -> None:
                decision = await waiting_decision(runtime)
                await store.cast_vote(decision.elicitation_id, ALICE, Verdict.APPROVE, {"region": "us"})

            call = functools.partial(harness.call, "deploy", {"service": f"web-{era}", "region": "eu"})
            called = await beside(call, votes)
            assert called.result.content[-1].text == f"web-{era} deployed to us"  # type: ignore[union-attr]
            assert called.asked == ()
            for decision in runtime.store.list_decisions(Operator()):
                assert decision.status is DecisionStatus.ACCEPTED  # the next era's call asks anew
        assert ledger.ran == [{"service": f"web-{era}", "region": "us"} for era in ("2025-06-18", "2025-11-25", MODERN)]
    finally:
        runtime.close()


async def test_the_kit_shows_on_whom_a_call_waits(impatient: Elicitation, ledger: Ledger) -> None:
    """A host built on the client kit lists the call's still-waiting stretch with the server's own words."""
    from mcp_elicit.client import ElicitingClient, Pacing, ScriptedHandler

    async with ElicitingClient(
        impatient.mcp_server, ScriptedHandler({}), era=MODERN, pacing=Pacing(first=0.05, cap=0.1)
    ) as kit:
        results: list[CallToolResult] = []

        async def call() -> None:
            results.append(await kit.call_tool("deploy", {"service": "api"}))

        async with anyio.create_task_group() as group:
            group.start_soon(call)
            with anyio.fail_after(10):
                while not kit.rounds.waits():
                    await anyio.sleep(0.02)
            [wait] = kit.rounds.waits()
            assert wait.message == (
                "the tool deploy is still waiting: Waiting for approval by release-managers (0 of 1)"
            )
            decision = await waiting_decision(impatient)
            await AsyncStore(impatient.store).cast_vote(decision.elicitation_id, ALICE, Verdict.APPROVE, {})
    [result] = results
    assert result.content[-1].text == "deployed api" and ledger.ran == [{"service": "api"}]  # type: ignore[union-attr]


@pytest.fixture
def brief(elicit_store_url: str, ledger: Ledger) -> Iterator[Elicitation]:
    runtime = Elicitation(
        open_store(elicit_store_url),
        request_state=RequestState(single_process=True),
        timing=Timing(long_poll=timedelta(milliseconds=200), approver_wait=timedelta(seconds=20)),
    )
    runtime.server("brief")

    @runtime.tool(gate=Gate(approvers=ApproverRule(["release-managers"]), ttl=timedelta(milliseconds=600)))
    async def deploy(flow: Flow, service: str) -> str:
        ledger.ran.append({"service": service})
        return f"deployed {service}"

    yield runtime
    runtime.close()


async def test_an_approval_nobody_gives_in_time_expires_on_every_era(
    brief: Elicitation, ledger: Ledger, elicit_era: EraName
) -> None:
    """The approval's TTL ends the wait before the call's patience does: the call says it expired, not that it
    still waits, and nothing runs."""
    called = await Harness(brief, era=elicit_era).call("deploy", {"service": "api"})
    assert called.error == "Nobody approved this call in time; nothing ran. Calling the tool again asks again."
    [decision] = [d for d in brief.store.list_decisions(Operator()) if d.key == APPROVAL_KEY]
    assert decision.status is DecisionStatus.EXPIRED and ledger.ran == []


async def test_a_question_for_approvers_may_not_use_the_approvals_own_field_names(
    elicit_store_url: str,
) -> None:
    from pydantic import BaseModel

    class Clash(BaseModel):
        approval_note: str

    runtime = Elicitation(open_store(elicit_store_url), request_state=RequestState(single_process=True))
    runtime.server("clash")

    refused: list[str] = []

    @runtime.tool()
    async def ask(flow: Flow) -> str:
        try:
            await flow.ask("Why?", Clash, approvers=ApproverRule(["owners"]))
        except ValueError as error:
            refused.append(str(error))
        return "asked"

    try:
        assert (await Harness(runtime, era="2025-11-25").call("ask", {})).text == "asked"
        assert refused and "cannot have a field named approval_note" in refused[0]
        assert runtime.store.list_decisions(Operator()) == [], "refused before anything is stored or shown"
    finally:
        runtime.close()


def test_a_vote_carries_no_grant_and_an_approval_no_rejection(elicit_store_url: str) -> None:
    store = open_store(elicit_store_url)
    try:
        with pytest.raises(ValueError, match="no standing grant"):
            store.cast_vote("any", ALICE, Verdict.APPROVE, {"approval_grant": "always"})
        with pytest.raises(ValueError, match="cast a rejection instead"):
            store.cast_vote("any", ALICE, Verdict.APPROVE, {REJECT_FIELD: True})
    finally:
        store.close()


# -- peers that cannot be asked, and progress on the live call ------------------------------------------------


@pytest.fixture
def served_impatient(elicit_store_url: str, ledger: Ledger) -> Iterator[tuple[Elicitation, str]]:
    port = free_port()
    runtime = Elicitation(
        open_store(elicit_store_url),
        request_state=RequestState(keys=[b"r" * 32]),
        public_base_url=f"http://127.0.0.1:{port}",
        identity=IdentityPolicy(allow_unauthenticated_loopback=True),
        timing=Timing(approver_wait=timedelta(milliseconds=300)),
    )
    server = runtime.server("old-peers")

    @runtime.tool(gate=Gate(approvers=ApproverRule(["release-managers"])))
    async def deploy(flow: Flow, service: str) -> str:
        ledger.ran.append({"service": service})
        return f"deployed {service}"

    with serving(server.streamable_http_app(host="127.0.0.1"), port) as base:
        yield runtime, f"{base}/mcp"
    runtime.close()


def test_a_peer_that_cannot_be_asked_still_waits_for_approvers(
    served_impatient: tuple[Elicitation, str], ledger: Ledger
) -> None:
    """A 2025-03-26 peer is never asked anything; approvers decide all the same, and the identical call attaches."""
    runtime, url = served_impatient
    session = handshake(url, "2025-03-26", {})
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "deploy", "arguments": {"service": "db"}},
    }
    _, messages = post(url, call, session)
    assert [m.get("method") for m in messages if "method" in m] == [], "no elicitation goes to such a peer"
    waiting = messages[-1]["result"]
    assert waiting["isError"] is True and waiting["content"][0]["text"].startswith("Not run yet. Waiting for approval")
    [decision] = [d for d in runtime.store.list_decisions(Operator()) if d.key == APPROVAL_KEY]
    runtime.store.cast_vote(decision.elicitation_id, ALICE, Verdict.APPROVE, {})
    _, messages = post(url, {**call, "id": 3}, session)
    assert messages[-1]["result"]["content"][0]["text"] == "deployed db" and ledger.ran == [{"service": "db"}]


async def test_a_live_call_is_told_on_whom_it_waits_through_progress_notifications(
    impatient: Elicitation, ledger: Ledger
) -> None:
    said: list[str | None] = []

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        said.append(message)

    async with Client(impatient.mcp_server, mode="legacy", elicitation_callback=Person()) as client:
        result = await client.call_tool("deploy", {"service": "api"}, progress_callback=progress)
    assert result.is_error and said == ["Waiting for approval by release-managers (0 of 1)"]
    assert ledger.ran == []
