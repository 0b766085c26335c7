"""The tool-approval extension (draft SEP-2848): our server and our client kit over real HTTP on loopback.

A client that declared the extension calls a tool whose approval others give; the call comes back as a task that
stays `working`, the tool does not run, and the approval is decided out of band: an approver votes through the
store as the inbox page does (`cast_vote`), a policy function rules, another agent rules. On approval the
server evaluates again and runs the tool once; the kit's `call_tool` returns the task's result. Rejected and
expired approvals end the task with a result saying nothing ran. Off by default on the server, and opt-in for the
client: either side without it gets the gate's ordinary behaviour (the live call waits in still-waiting rounds).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import anyio
import pytest
from mcp_types import CallToolResult

from mcp_elicit import ApproverRule, Elicitation, Flow, Gate, RequestState
from mcp_elicit.approvals import APPROVAL_KEY, AgentApproval, ApprovalRequest, GateRefused, Ruling
from mcp_elicit.approvals.limits import ApprovalLimits
from mcp_elicit.client import ElicitingClient, Http
from mcp_elicit.client.handler import FormReply, FormRequest, Mode, UrlReply, UrlRequest
from mcp_elicit.client.tasks import TaskCancelled
from mcp_elicit.model import (
    NOTE_FIELD,
    REJECT_FIELD,
    Approver,
    Decision,
    DecisionStatus,
    JSONObject,
    OperationStatus,
    Operator,
    Verdict,
    request_digest,
)
from mcp_elicit.server.eras.tool_approval import DISPOSITION_META, TOOL_APPROVAL_EXTENSION
from mcp_elicit.server.tasks import TaskSettings
from mcp_elicit.server.tasks.state import META_JOURNAL
from mcp_elicit.store import StoreError, open_store
from mcp_elicit.store.aio import AsyncStore
from tests.helpers.approval_site import Ledger, served

pytestmark = pytest.mark.anyio
TREASURY = Approver("carol", frozenset({"treasury"}))
LIMITS = Approver("dave", frozenset({"policy:limits"}))
"""A person holding the role `pay`'s policy votes in: they may approve, and edit the amount, as the policy could."""


class NobodyAsked:
    """The requester's client: it could show a form, and is never asked (others approve)."""

    modes = frozenset[Mode]({"form"})

    async def form(self, request: FormRequest) -> FormReply:
        raise AssertionError(f"the requester's client was asked: {request.message}")

    async def url(self, request: UrlRequest) -> UrlReply:
        raise AssertionError("no URL question expected")


def kit(url: str, *, tool_approval: bool = True) -> ElicitingClient:
    return ElicitingClient(
        Http(url, bearer_token="token-alice"), NobodyAsked(), era="2026-07-28", tasks=True, tool_approval=tool_approval
    )


async def asked(runtime: Elicitation) -> Decision:
    """The call's approval, once the server asked for it."""
    with anyio.fail_after(10):
        while True:
            found = runtime.store.list_decisions(Operator(), status=DecisionStatus.REQUESTED)
            if found:
                [approval] = found
                return approval
            await anyio.sleep(0.02)


async def calling(client: ElicitingClient, tool: str, arguments: dict[str, Any]) -> Any:
    """Start the call beside the test; `.result` holds its result once it returned."""
    box: dict[str, CallToolResult] = {}

    async def call() -> None:
        box["result"] = await client.call_tool(tool, arguments)

    return box, call


def text(result: CallToolResult) -> list[str]:
    return [block.text for block in result.content]  # type: ignore[union-attr]


def is_task(runtime: Elicitation, approval: Decision) -> bool:
    return runtime.store.journal_get(approval.operation_id, META_JOURNAL, caller=approval.principal) is not None


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


@pytest.fixture
def app(store_url: str, ledger: Ledger) -> Iterator[tuple[Elicitation, str]]:
    with served(store_url, ledger, tool_approval=True) as running:
        yield running


async def test_an_approver_voting_in_the_store_lets_the_task_run_the_tool_once(
    app: tuple[Elicitation, str], ledger: Ledger
) -> None:
    runtime, url = app
    async with kit(url) as client, anyio.create_task_group() as group:
        box, call = await calling(client, "transfer", {"to": "acct-991", "amount": 50000})
        group.start_soon(call)
        approval = await asked(runtime)
        assert is_task(runtime, approval), "the call came back as a task"
        said = "transfer: Waiting for approval"  # the draft: the status message never names who approves
        with anyio.fail_after(10):
            while [(w.id, w.approval, w.message) for w in client.tasks.waits()] != [(approval.operation_id, True,
                                                                                     said)]:  # fmt: skip
                await anyio.sleep(0.02)
        seen = await client.tasks.status(approval.operation_id)
        assert seen["status"] == "working" and seen["statusMessage"] == "Waiting for approval"
        assert approval.elicitation_id not in json.dumps(seen), "nothing of the approval crosses the wire"
        assert ledger.ran == [], "nothing runs before the approval"
        await AsyncStore(runtime.store).cast_vote(approval.elicitation_id, TREASURY, Verdict.APPROVE, {})
    result = box["result"]
    assert text(result) == ["sent 50000 to acct-991"] and not result.is_error
    assert result.meta is not None and result.meta[DISPOSITION_META] == "approved-executed"
    assert ledger.ran == ["transfer 50000 to acct-991"]
    operation = runtime.store.get_operation(approval.operation_id, Operator())
    assert operation.status is OperationStatus.COMPLETED


async def test_a_policy_function_approves_once_its_condition_clears(
    app: tuple[Elicitation, str], ledger: Ledger
) -> None:
    runtime, url = app
    ledger.policy = [None, None, Verdict.APPROVE]
    async with kit(url) as client:
        result = await client.call_tool("refund", {"order": "A-17"})
    assert text(result) == ["refunded A-17"]
    assert result.meta is not None and result.meta[DISPOSITION_META] == "approved-executed"
    assert ledger.ran == ["refund A-17"]
    assert len(ledger.asked) == 4, "asked until it approved, then once more before the tool ran"
    request = ledger.asked[0]
    assert request.tool == "refund" and request.arguments == {"order": "A-17"}
    [approval] = runtime.store.list_decisions(Operator())
    assert approval.key == APPROVAL_KEY and approval.status is DecisionStatus.ACCEPTED
    assert is_task(runtime, approval)
    actors = [row.actor for row in runtime.store.audit_trail(approval.elicitation_id, Operator())]
    assert "approver:policy:refunds" in actors, "the policy's ruling is its vote, audited as such"


async def test_a_policy_that_changed_its_mind_denies_the_approved_call_when_evaluated_again(
    app: tuple[Elicitation, str], ledger: Ledger
) -> None:
    _, url = app
    ledger.policy = [Verdict.APPROVE, Verdict.REJECT]
    async with kit(url) as client:
        result = await client.call_tool("refund", {"order": "B-2"})
    assert result.is_error
    assert "evaluated again just before running it is no longer allowed; nothing ran" in " ".join(text(result))
    assert result.meta is not None and result.meta[DISPOSITION_META] == "denied-not-executed"
    assert ledger.ran == []


async def test_another_agent_approves_and_the_model_reads_its_note(
    app: tuple[Elicitation, str], ledger: Ledger
) -> None:
    runtime, url = app
    async with kit(url) as client:
        result = await client.call_tool("scale", {"replicas": 8})
    assert text(result)[-1] == "scaled to 8"
    assert "agent:supervisor: within this week's budget" in " ".join(text(result))
    assert ledger.ran == ["scale 8"]
    [request] = ledger.asked
    assert request.arguments == {"replicas": 8}
    [approval] = runtime.store.list_decisions(Operator())
    actors = [row.actor for row in runtime.store.audit_trail(approval.elicitation_id, Operator())]
    assert "approver:agent:supervisor" in actors


async def test_a_rejected_approval_completes_the_task_saying_nothing_ran(
    app: tuple[Elicitation, str], ledger: Ledger
) -> None:
    runtime, url = app
    async with kit(url) as client, anyio.create_task_group() as group:
        box, call = await calling(client, "transfer", {"to": "acct-7", "amount": 90000})
        group.start_soon(call)
        approval = await asked(runtime)
        content: JSONObject = {REJECT_FIELD: True, NOTE_FIELD: "over the quarterly limit"}
        await AsyncStore(runtime.store).cast_vote(approval.elicitation_id, TREASURY, Verdict.REJECT, content)
    result = box["result"]
    assert result.is_error
    said = " ".join(text(result))
    assert "An approver rejected this call; nothing ran." in said and "over the quarterly limit" in said
    assert result.meta is not None and result.meta[DISPOSITION_META] == "denied-not-executed"
    assert ledger.ran == []
    assert is_task(runtime, approval)


async def test_an_approval_nobody_gives_in_time_expires_and_nothing_runs(
    app: tuple[Elicitation, str], ledger: Ledger
) -> None:
    runtime, url = app
    async with kit(url) as client:
        result = await client.call_tool("wire_out", {"to": "acct-3"})
    assert result.is_error
    assert text(result) == ["Nobody approved this call in time; nothing ran. Calling the tool again asks again."]
    assert result.meta is not None and result.meta[DISPOSITION_META] == "denied-not-executed"
    assert ledger.ran == []
    [approval] = runtime.store.list_decisions(Operator())
    assert approval.status is DecisionStatus.EXPIRED and is_task(runtime, approval)


async def ordinary_round_trip(runtime: Elicitation, client: ElicitingClient, ledger: Ledger) -> None:
    """The gate's ordinary behaviour on 2026-07-28: the live call waits in still-waiting rounds, no task is made,
    and the approval lets that same call run the tool."""
    async with anyio.create_task_group() as group:
        box, call = await calling(client, "transfer", {"to": "acct-5", "amount": 700})
        group.start_soon(call)
        approval = await asked(runtime)
        with anyio.fail_after(10):
            while not client.rounds.waits():
                await anyio.sleep(0.02)
        assert client.tasks.following == [] and not is_task(runtime, approval)
        await AsyncStore(runtime.store).cast_vote(approval.elicitation_id, TREASURY, Verdict.APPROVE, {})
    result = box["result"]
    assert text(result) == ["sent 700 to acct-5"]
    assert DISPOSITION_META not in (result.meta or {})
    assert ledger.ran == ["transfer 700 to acct-5"]


async def test_off_by_default_a_client_declaring_it_gets_the_ordinary_gate(store_url: str, ledger: Ledger) -> None:
    with served(store_url, ledger, tool_approval=False) as (runtime, url):
        async with kit(url) as client:
            offered = client.session.server_capabilities
            assert offered is not None and TOOL_APPROVAL_EXTENSION not in (offered.extensions or {})
            await ordinary_round_trip(runtime, client, ledger)


async def test_a_client_not_declaring_it_gets_the_ordinary_gate(app: tuple[Elicitation, str], ledger: Ledger) -> None:
    runtime, url = app
    async with kit(url, tool_approval=False) as client:
        offered = client.session.server_capabilities
        assert offered is not None and (offered.extensions or {}).get(TOOL_APPROVAL_EXTENSION) == {"version": "0.1"}
        await ordinary_round_trip(runtime, client, ledger)


async def test_an_identical_call_while_the_task_is_open_gets_the_same_task(
    app: tuple[Elicitation, str], ledger: Ledger
) -> None:
    runtime, url = app
    async with kit(url) as first, kit(url) as second, anyio.create_task_group() as group:
        box, call = await calling(first, "transfer", {"to": "acct-2", "amount": 300})
        group.start_soon(call)
        approval = await asked(runtime)
        again, call_again = await calling(second, "transfer", {"to": "acct-2", "amount": 300})
        group.start_soon(call_again)
        with anyio.fail_after(10):
            while not second.tasks.following:
                await anyio.sleep(0.02)
        assert [state.task_id for state in second.tasks.following] == [approval.operation_id]
        await AsyncStore(runtime.store).cast_vote(approval.elicitation_id, TREASURY, Verdict.APPROVE, {})
    assert text(box["result"]) == text(again["result"]) == ["sent 300 to acct-2"]
    assert ledger.ran == ["transfer 300 to acct-2"], "one approval, one run"


async def test_a_cancelled_task_cancels_its_approval_and_a_late_vote_runs_nothing(
    app: tuple[Elicitation, str], ledger: Ledger
) -> None:
    runtime, url = app
    stopped: list[TaskCancelled] = []

    async with kit(url) as client:

        async def call() -> None:
            with pytest.raises(TaskCancelled) as cancelled:
                await client.call_tool("transfer", {"to": "acct-8", "amount": 1200})
            stopped.append(cancelled.value)

        async with anyio.create_task_group() as group:
            group.start_soon(call)
            approval = await asked(runtime)
            with anyio.fail_after(10):
                while not client.tasks.waits():
                    await anyio.sleep(0.02)
            assert client.tasks.cancel(approval.operation_id, "the user changed their mind")
    assert [error.task_id for error in stopped] == [approval.operation_id]
    current = runtime.store.get_decision(approval.elicitation_id, Operator())
    assert current.status is DecisionStatus.CANCELLED, "cancelling the task cancels the approval request"
    with pytest.raises(StoreError):
        await AsyncStore(runtime.store).cast_vote(approval.elicitation_id, TREASURY, Verdict.APPROVE, {})
    assert runtime.store.get_operation(approval.operation_id, Operator()).status is OperationStatus.CANCELLED
    assert ledger.ran == []


async def test_a_task_waiting_on_an_agent_does_not_name_it_in_its_status(
    app: tuple[Elicitation, str], ledger: Ledger
) -> None:
    runtime, url = app
    ledger.agent_holds = True
    async with kit(url) as client:

        async def call() -> None:
            with pytest.raises(TaskCancelled):
                await client.call_tool("scale", {"replicas": 3})

        async with anyio.create_task_group() as group:
            group.start_soon(call)
            approval = await asked(runtime)
            with anyio.fail_after(10):
                while not ledger.asked:
                    await anyio.sleep(0.02)
            seen = await client.tasks.status(approval.operation_id)
            assert seen["status"] == "working" and seen["statusMessage"] == "Waiting for approval"
            assert "supervisor" not in json.dumps(seen) and "agent:" not in json.dumps(seen)
            assert client.tasks.cancel(approval.operation_id, "seen enough")
    assert ledger.ran == []


@pytest.mark.parametrize(
    ("called", "approved", "runs"),
    [(50, 5000, False), (500, 80, True)],
    ids=["an edit over the limit is denied", "an edit within the limit runs"],
)
async def test_the_policy_re_evaluates_the_arguments_the_approver_edited_not_the_call_s_own(
    app: tuple[Elicitation, str], ledger: Ledger, called: int, approved: int, runs: bool
) -> None:
    runtime, url = app
    async with kit(url) as client, anyio.create_task_group() as group:
        box, call = await calling(client, "pay", {"to": "acct-4", "amount": called})
        group.start_soon(call)
        approval = await asked(runtime)
        with anyio.fail_after(10):
            while not ledger.limited:
                await anyio.sleep(0.02)
        edit: JSONObject = {"amount": approved}
        await AsyncStore(runtime.store).cast_vote(approval.elicitation_id, LIMITS, Verdict.APPROVE, edit)
    result = box["result"]
    waiting, again = ledger.limited
    assert waiting.arguments == {"to": "acct-4", "amount": called} and waiting.edited == frozenset()
    assert waiting.arguments_digest == approval.origin_request_digest
    assert again.arguments == {"to": "acct-4", "amount": approved}, "asked about what runs, not what was called"
    assert again.edited == {"amount"}
    ran_digest = request_digest("tools/call", {"name": "pay", "arguments": {"to": "acct-4", "amount": approved}})
    assert again.arguments_digest == ran_digest != approval.origin_request_digest
    if runs:
        assert text(result)[-1] == f"paid {approved} to acct-4" and ledger.ran == [f"pay {approved} to acct-4"]
    else:
        assert result.is_error and ledger.ran == []
        assert result.meta is not None and result.meta[DISPOSITION_META] == "denied-not-executed"


OPEN_BOUND = (
    "Too many of your calls are waiting for approval already (1 at most): nothing ran and no approval was "
    "requested. Try again once one of them has been decided or has expired."
)


@pytest.mark.engines("sqlite", "postgres")
async def test_open_approval_tasks_are_bounded_per_principal_across_instances(store_url: str, ledger: Ledger) -> None:
    limits = ApprovalLimits(open_per_principal=1)
    ledger.policy = [Verdict.APPROVE]
    with (
        served(store_url, ledger, tool_approval=True, limits=limits) as (runtime, url),
        served(store_url, ledger, tool_approval=True, limits=limits) as (_, other_url),
    ):
        async with kit(url) as client, kit(other_url) as other:
            async with anyio.create_task_group() as group:
                box, call = await calling(client, "transfer", {"to": "acct-1", "amount": 10})
                group.start_soon(call)
                approval = await asked(runtime)
                with anyio.fail_after(10):
                    refused = await other.call_tool("transfer", {"to": "acct-2", "amount": 20})
                assert refused.is_error and text(refused) == [OPEN_BOUND], "counted in the store both instances share"
                assert other.tasks.following == [] and DISPOSITION_META not in (refused.meta or {})
                joined, join = await calling(other, "transfer", {"to": "acct-1", "amount": 10})
                group.start_soon(join)
                with anyio.fail_after(10):
                    while not other.tasks.following:
                        await anyio.sleep(0.02)
                assert [state.task_id for state in other.tasks.following] == [approval.operation_id], (
                    "an identical call joins the open task: no new request, nothing refused"
                )
                await AsyncStore(runtime.store).cast_vote(approval.elicitation_id, TREASURY, Verdict.APPROVE, {})
            assert text(box["result"]) == text(joined["result"]) == ["sent 10 to acct-1"]
            with anyio.fail_after(10):
                after = await other.call_tool("refund", {"order": "D-1"})
            assert text(after) == ["refunded D-1"], "once the open task ended, a new request is admitted"
    assert ledger.ran == ["transfer 10 to acct-1", "refund D-1"]


async def test_new_approval_requests_are_rate_limited_per_principal(store_url: str, ledger: Ledger) -> None:
    ledger.policy = [Verdict.APPROVE]
    limits = ApprovalLimits(requests_per_minute=1, burst=1)
    with served(store_url, ledger, tool_approval=True, limits=limits) as (runtime, url):
        async with kit(url) as client:
            first = await client.call_tool("refund", {"order": "C-1"})
            with anyio.fail_after(10):
                second = await client.call_tool("refund", {"order": "C-2"})
        assert len(runtime.store.list_decisions(Operator())) == 1, "the refused call asked nobody"
    assert text(first) == ["refunded C-1"]
    assert second.is_error and client.tasks.following == []
    [said] = text(second)
    found = re.fullmatch(
        r"Too many approval requests in a short time \(at most 1 at once, then 1 a minute\): nothing ran and no "
        r"approval was requested\. Try again in (\d+) s at the earliest\.",
        said,
    )
    assert found is not None, said
    assert 45 <= int(found[1]) <= 60
    assert ledger.ran == ["refund C-1"]


async def undecided(request: ApprovalRequest) -> Ruling | None:
    return None


async def test_a_gate_waiting_longer_than_the_longest_task_is_refused_at_registration(store_url: str) -> None:
    runtime = Elicitation(
        open_store(store_url),
        request_state=RequestState(keys=[b"t" * 32]),
        tasks=TaskSettings(max_ttl=timedelta(hours=1)),
        tool_approval=True,
    )
    runtime.server("approvals")
    try:
        for gate in (
            Gate(approvers=ApproverRule(["treasury"]), ttl=timedelta(hours=2)),
            Gate(approval=AgentApproval(undecided, name="slow"), ttl=timedelta(hours=1)),
        ):
            with pytest.raises(GateRefused) as refused:

                @runtime.tool(gate=gate)
                async def wire(flow: Flow, to: str) -> str:
                    return to

            said = str(refused.value)
            assert f"Gate(ttl={gate.ttl})" in said and "TaskSettings(max_ttl=1:00:00)" in said, said

        @runtime.tool(gate=Gate(approvers=ApproverRule(["treasury"]), ttl=timedelta(minutes=59)))
        async def settle(flow: Flow, to: str) -> str:
            return to

        @runtime.tool(gate=Gate(ttl=timedelta(hours=2)))
        async def own(flow: Flow, to: str) -> str:
            """The requester approves this one on the call itself: no approval task, nothing to outlive."""
            return to
    finally:
        runtime.close()
