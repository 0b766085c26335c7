"""A gated tool run as an MCP task: the approval is the task's input request, and the task's result carries what
the model is told of it. Both task wires (2025-11-25 core tasks, 2026-07-28 extension), real HTTP on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_elicit import ApproverRule, Flow, Gate, Grants
from mcp_elicit.approvals import APPROVAL_KEY, GRANT_FIELD
from mcp_elicit.model import Approver, DecisionStatus, Operator, Verdict
from mcp_elicit.server import Elicitation, TaskPolicy
from mcp_elicit.server.tasks.state import mailbox
from mcp_elicit.store.aio import AsyncStore
from tests.helpers.tasks_http import Served, answer, answer_task, serve, status_of, until
from tests.helpers.tasks_wire import LEGACY, MODERN

pytestmark = pytest.mark.anyio


class Scaling:
    """The gated task tool, and what its body ran."""

    def __init__(self) -> None:
        self.ran: list[dict[str, Any]] = []

    def build(self, runtime: Elicitation) -> None:
        ran = self.ran

        @runtime.tool(task=TaskPolicy.OPTIONAL, gate=Gate(editable=["replicas"]))
        async def scale(flow: Flow, service: str, replicas: int) -> str:
            ran.append({"service": service, "replicas": replicas})
            return f"{service} at {replicas}"

        @runtime.tool(task=TaskPolicy.OPTIONAL, gate=Gate(grants=Grants()))
        async def restart(flow: Flow, service: str) -> str:
            ran.append({"restart": service})
            return f"restarted {service}"


@pytest.fixture
def app(store_url: str, tmp_path: Path) -> Iterator[tuple[Served, Scaling]]:
    scaling = Scaling()
    with serve(store_url, tmp_path, tools=scaling.build) as running:
        yield running, scaling


@pytest.mark.parametrize("era", [LEGACY, MODERN])
async def test_a_gated_task_asks_for_approval_and_runs_the_edit_once(app: tuple[Served, Scaling], era: str) -> None:
    served, scaling = app
    async with served.wire(era) as wire:
        task_id = (await wire.call_as_task("scale", {"service": "web", "replicas": 12}))["taskId"]
        waiting = await until(wire, task_id, "input_required")
        if era == MODERN:
            [(key, request)] = waiting["inputRequests"].items()
            assert key == APPROVAL_KEY and request["params"]["message"].startswith("Approve this call?")
        assert scaling.ran == [], "nothing runs before the approval"
        await answer_task(wire, task_id, APPROVAL_KEY, answer(replicas=4))
        done = await until(wire, task_id, "completed")
        result = done["result"] if era == MODERN else wire.last_result
    assert [block["text"] for block in result["content"]] == [
        "The user changed the arguments before approving (replicas: 12 → 4); the tool ran with the changes.",
        "web at 4",
    ]
    assert scaling.ran == [{"service": "web", "replicas": 4}]
    [approval] = served.runtime.store.list_decisions(Operator())
    assert approval.key == APPROVAL_KEY and approval.about == 'scale(service="web", replicas=12)'


@pytest.mark.parametrize("era", [LEGACY, MODERN])
async def test_a_rejected_task_fails_with_the_persons_reason(app: tuple[Served, Scaling], era: str) -> None:
    served, scaling = app
    async with served.wire(era) as wire:
        task_id = (await wire.call_as_task("scale", {"service": "db", "replicas": 40}))["taskId"]
        await until(wire, task_id, "input_required")
        await answer_task(wire, task_id, APPROVAL_KEY, answer(approval_reject=True, approval_note="budget"))
        ended = await until(wire, task_id, "failed", "completed")
    assert scaling.ran == []
    said = str(ended)
    assert "The user rejected this call; nothing ran." in said and "Note from the user: budget" in said


@pytest.mark.parametrize("era", [LEGACY, MODERN])
async def test_a_session_grant_given_to_a_task_lets_the_next_task_run_without_an_input_request(
    app: tuple[Served, Scaling], era: str
) -> None:
    served, scaling = app
    async with served.wire(era) as wire:
        first = (await wire.call_as_task("restart", {"service": "api"}))["taskId"]
        await until(wire, first, "input_required")
        await answer_task(wire, first, APPROVAL_KEY, answer(**{GRANT_FIELD: "session"}))
        await until(wire, first, "completed")
        second = (await wire.call_as_task("restart", {"service": "web"}))["taskId"]
        ended = await until(wire, second, "completed", "input_required", "failed")
        assert ended["status"] == "completed", "the grant let the task through: nothing was asked"
        result = ended["result"] if era == MODERN else await wire.request("tasks/result", {"taskId": second})
    [told, ran] = [block["text"] for block in result["content"]]
    assert (
        told.startswith("Ran without asking: the user's session approval of restart calls") and ran == "restarted web"
    )
    assert scaling.ran == [{"restart": "api"}, {"restart": "web"}]
    [grant] = served.runtime.store.grant_page(Operator()).grants
    assert grant.tool == "restart"
    trail = served.runtime.store.audit_trail(grant.grant_id, Operator())
    assert [row.reason for row in trail] == ["session grant approved in decision " + grant.decision_id,
                                             "let a call of restart through without asking"]  # fmt: skip
    assert [d.key for d in served.runtime.store.list_decisions(Operator())] == [APPROVAL_KEY], "asked once"


class Release:
    """A task tool whose approval two release managers give, and what its body ran."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def build(self, runtime: Elicitation) -> None:
        ran = self.ran

        @runtime.tool(task=TaskPolicy.OPTIONAL, gate=Gate(approvers=ApproverRule(["release-managers"], quorum=2)))
        async def release(flow: Flow, version: str) -> str:
            ran.append(version)
            return f"released {version}"


@pytest.fixture
def release(store_url: str, tmp_path: Path) -> Iterator[tuple[Served, Release]]:
    built = Release()
    with serve(store_url, tmp_path, tools=built.build) as running:
        yield running, built


@pytest.mark.parametrize("era", [LEGACY, MODERN])
async def test_a_task_waits_for_its_approvers_says_on_whom_and_takes_no_answer_of_its_client(
    release: tuple[Served, Release], era: str
) -> None:
    served, built = release
    store = AsyncStore(served.runtime.store)
    managers = frozenset({"release-managers"})
    async with served.wire(era) as wire:
        task_id = (await wire.call_as_task("release", {"version": "2.0"}))["taskId"]
        waiting = await until(wire, task_id, "working")
        assert "inputRequests" not in waiting, "the requester's client is never asked for others' approval"
        [approval] = served.runtime.store.list_decisions(Operator())
        await store.cast_vote(approval.elicitation_id, Approver("alice", managers), Verdict.APPROVE, {})
        with anyio.fail_after(10):
            while (await status_of(wire, task_id)).get("statusMessage") != (
                "Waiting for approval by release-managers (1 of 2)"
            ):
                await anyio.sleep(0.05)
        if era == MODERN:  # an answer the client sends for the approval is ignored: it is not outstanding
            await answer_task(wire, task_id, APPROVAL_KEY, answer())
            posted = served.runtime.store.journal_get(task_id, mailbox(APPROVAL_KEY), caller=approval.principal)
            assert posted is None, "not even posted: the body could never read it"
        current = served.runtime.store.get_decision(approval.elicitation_id, Operator())
        assert current.status is DecisionStatus.REQUESTED
        assert built.ran == []
        await store.cast_vote(approval.elicitation_id, Approver("bob", managers), Verdict.APPROVE, {})
        done = await until(wire, task_id, "completed")
        result = done["result"] if era == MODERN else await wire.request("tasks/result", {"taskId": task_id})
    assert [block["text"] for block in result["content"]] == ["released 2.0"]
    assert built.ran == ["2.0"]
