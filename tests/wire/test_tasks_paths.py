"""How a task ends when its body goes wrong, asks several things at once, outlives its TTL or loses its metadata."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from mcp_elicit.model import DecisionStatus, OperationStatus, Operator
from mcp_elicit.server import Accepted, Elicitation, Flow, RequestState, Timing
from mcp_elicit.server.tasks import TaskPolicy, TaskSettings
from mcp_elicit.server.tasks.state import task_status
from mcp_elicit.testing import ControlledClock, Harness
from tests.helpers.corrupt_rows import corrupt
from tests.helpers.http_harness import StaticTokenVerifier, auth_settings, free_port, serving
from tests.helpers.server import Approval, Workspace, task_tools
from tests.helpers.tasks_http import answer, status_of, until
from tests.helpers.tasks_wire import LEGACY, MODERN, Wire, WireError

pytestmark = pytest.mark.anyio
OPERATOR = Operator("ops")


class Region(BaseModel):
    region: str


@dataclass
class App:
    runtime: Elicitation
    clock: ControlledClock
    port: int
    url: str

    def wire(self, **options: Any) -> Wire:
        return Wire(self.url, MODERN, token="token-alice", **options)

    @contextmanager
    def serving(self) -> Iterator[None]:
        """Serve the app (its lifespan runs the task runner) until the block ends."""
        with serving(self.runtime.mcp_server.streamable_http_app(), self.port):
            yield


@contextmanager
def instance(
    store_url: str, workspace: Path, clock: ControlledClock, tools: Callable[[Elicitation], None] | None = None
) -> Iterator[App]:
    """One instance of the tasks server on the shared store; a second one is the same app restarted."""
    port = free_port()
    runtime = Elicitation(
        store_url,
        clock=clock,
        request_state=RequestState(keys=[b"p" * 32]),
        public_base_url=f"http://127.0.0.1:{port}",
        timing=Timing(lease=timedelta(seconds=2)),
        tasks=TaskSettings(poll_interval=timedelta(milliseconds=200)),
    )
    runtime.server("tasks-paths", token_verifier=StaticTokenVerifier(), auth=auth_settings(port))
    if tools is None:
        task_tools(runtime, Workspace(workspace))
        odd_tools(runtime)
    else:
        tools(runtime)
    try:
        yield App(runtime, clock, port, f"http://127.0.0.1:{port}/mcp")
    finally:
        runtime.close()


def odd_tools(elicitation: Elicitation) -> None:
    @elicitation.tool(task=TaskPolicy.OPTIONAL)
    async def crash(flow: Flow) -> str:
        """Fails with an exception no tool should let out."""
        raise RuntimeError("the disk caught fire")

    @elicitation.tool(task=TaskPolicy.OPTIONAL)
    async def refuse(flow: Flow, region: str) -> str:
        """Refuses its arguments with a JSON-RPC error of its own."""
        raise MCPError(code=-32602, message=f"no such region: {region}")

    @elicitation.tool(task=TaskPolicy.OPTIONAL)
    async def both(flow: Flow) -> str:
        """Asks two questions together, answerable in any order."""
        approval, region = await flow.gather(
            flow.ask("Approve?", Approval, key="approve"), flow.ask("Which region?", Region, key="region")
        )
        if isinstance(approval, Accepted) and isinstance(region, Accepted):
            return f"approved={approval.data.approve} in {region.data.region}"
        return "not both"

    @elicitation.tool(task=TaskPolicy.OPTIONAL)
    async def consent(flow: Flow) -> str:
        """One yes/no question."""
        outcome = await flow.ask("Approve?", Approval, key="approve")
        return type(outcome).__name__

    def gone() -> str:
        raise ToolError("the target is gone")

    @elicitation.tool(task=TaskPolicy.OPTIONAL)
    async def half(flow: Flow) -> str:
        """Asks and does a step together; the step fails with a tool error."""
        await flow.gather(flow.ask("Approve?", Approval, key="approve"), flow.step("look", gone))
        return "unreachable"


@pytest.fixture
def app(store_url: str, tmp_path: Path) -> Iterator[App]:
    with instance(store_url, tmp_path / "workspace", ControlledClock()) as running:
        yield running


async def test_a_body_that_crashes_fails_its_task_with_an_internal_error_naming_no_detail(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mcp_elicit.telemetry.calls")
    with app.serving():
        async with app.wire() as wire:
            task_id = (await wire.call_as_task("crash", {}))["taskId"]
            failed = await until(wire, task_id, "failed", "completed")
    ended = [r.getMessage() for r in caplog.records if r.name == "mcp_elicit.telemetry.calls"]
    [accepted] = [line for line in ended if "(era task," not in line]
    assert accepted.startswith(f"tools/call crash ended: task ({task_id}) after "), "the call's own end"
    assert accepted.endswith(f"operation {task_id})")
    [background] = [line for line in ended if "(era task," in line]
    assert background.startswith("tools/call crash ended: error (RuntimeError) after "), "the task body's own end"
    assert background.endswith(f"(era task, operation {task_id})")
    assert failed["status"] == "failed"
    assert failed["error"] == {"code": -32603, "message": "The tool 'crash' failed unexpectedly"}
    assert "fire" not in str(failed)
    assert task_status(app.runtime.store, task_id, OPERATOR) == "failed"


async def test_a_json_rpc_error_of_the_body_is_the_tasks_error(app: App) -> None:
    with app.serving():
        async with app.wire() as wire:
            task_id = (await wire.call_as_task("refuse", {"region": "mars"}))["taskId"]
            failed = await until(wire, task_id, "failed", "completed")
    assert failed["error"] == {"code": -32602, "message": "no such region: mars"}
    assert failed["statusMessage"] == "no such region: mars"


async def test_a_gather_in_a_task_lists_every_question_at_once_and_takes_answers_in_any_order(app: App) -> None:
    with app.serving():
        async with app.wire() as wire:
            task_id = (await wire.call_as_task("both", {}))["taskId"]
            waiting = await until(wire, task_id, "input_required")
            if set(waiting["inputRequests"]) != {"approve", "region"}:  # the second question may lag a poll
                waiting = await until_asking(wire, task_id, {"approve", "region"})
            await wire.request("tasks/update", {"taskId": task_id, "inputResponses": {"region": answer(region="eu")}})
            still = await until_asking(wire, task_id, {"approve"})
            assert still["status"] == "input_required"
            await wire.request("tasks/update", {"taskId": task_id, "inputResponses": {"approve": answer(approve=True)}})
            done = await until(wire, task_id, "completed", "failed")
    assert done["result"]["content"][0]["text"] == "approved=True in eu"


async def test_a_tool_error_inside_a_gather_is_the_tasks_tool_error_not_a_crash(app: App) -> None:
    with app.serving():
        async with app.wire() as wire:
            task_id = (await wire.call_as_task("half", {}))["taskId"]
            done = await until(wire, task_id, "completed", "failed")
    assert done["status"] == "completed"
    assert done["result"]["isError"] is True
    assert done["result"]["content"][0]["text"] == "the target is gone"


async def test_a_task_overdue_when_the_app_comes_back_is_ended_without_running_its_body(
    app: App, store_url: str, tmp_path: Path
) -> None:
    with app.serving():
        async with app.wire() as wire:
            task_id = (await wire.call_as_task("deploy", {"service": "payments"}))["taskId"]
            await until(wire, task_id, "input_required")
    # The app stopped with the task open (its claim let go); two days later it is started again.
    app.clock.advance(timedelta(days=2))
    with instance(store_url, tmp_path / "workspace", app.clock) as restarted, restarted.serving():
        operation = await until_stored(restarted, task_id)
        async with restarted.wire() as wire:
            failed = await status_of(wire, task_id)
    assert operation.status is OperationStatus.EXPIRED
    assert failed["status"] == "failed" and failed["error"]["message"] == "The task's TTL elapsed before it finished"
    [decision] = app.runtime.store.list_decisions(OPERATOR, operation_id=task_id)
    assert decision.is_terminal
    assert Workspace(tmp_path / "workspace").runs("plan") == 1, "the overdue body never ran again"


async def test_a_task_whose_metadata_is_unreadable_is_no_task(app: App, store_url: str) -> None:
    with app.serving():
        async with app.wire() as wire:
            task_id = (await wire.call_as_task("deploy", {"service": "payments"}))["taskId"]
            await until(wire, task_id, "input_required")
            corrupt(
                store_url,
                f"UPDATE elicit_journal SET value = '{{\"era\": 7}}' "
                f"WHERE operation_id = '{task_id}' AND name LIKE '%task'",
            )
            with pytest.raises(WireError) as missing:
                await status_of(wire, task_id)
    assert missing.value.code == -32602


async def until_asking(wire: Wire, task_id: str, keys: set[str]) -> dict[str, Any]:
    with anyio.fail_after(10):
        while True:
            task = await status_of(wire, task_id)
            if set(task.get("inputRequests", {})) == keys:
                return task
            await anyio.sleep(0.1)


async def until_stored(app: App, task_id: str) -> Any:
    """The task's operation once the runner ended it, read from the store (no `tasks/get` expires it)."""
    with anyio.fail_after(10):
        while True:
            operation = app.runtime.store.get_operation(task_id, OPERATOR)
            if operation.status is not OperationStatus.OPEN:
                return operation
            await anyio.sleep(0.1)


async def test_a_task_whose_tool_the_restarted_app_no_longer_serves_fails_saying_so(
    app: App, store_url: str, tmp_path: Path
) -> None:
    with app.serving():
        async with app.wire() as wire:
            task_id = (await wire.call_as_task("deploy", {"service": "payments"}))["taskId"]
            await until(wire, task_id, "input_required")
    with instance(store_url, tmp_path / "workspace", app.clock, tools=odd_tools) as restarted, restarted.serving():
        await until_stored(restarted, task_id)
        async with restarted.wire() as wire:
            failed = await status_of(wire, task_id)
    assert failed["status"] == "failed"
    assert failed["error"] == {"code": -32603, "message": "The tool 'deploy' is not served as a task here"}
    [decision] = app.runtime.store.list_decisions(OPERATOR, operation_id=task_id)
    assert decision.is_terminal, "its question is closed with it"


async def test_a_routing_header_naming_another_task_is_refused(app: App) -> None:
    with app.serving():
        async with app.wire() as wire:
            task_id = (await wire.call_as_task("slow", {"seconds": 0.1}))["taskId"]
            with pytest.raises(WireError) as mismatch:
                await wire.request("tasks/get", {"taskId": task_id}, override={"mcp-name": "another-task"})
            assert (await status_of(wire, task_id))["taskId"] == task_id
    assert "header does not match params.taskId" in mismatch.value.message


async def test_one_idempotency_key_for_a_task_with_other_arguments_is_refused(app: App) -> None:
    key = {"io.github.mcp-elicit/idempotencyKey": "deploy-42"}
    with app.serving():
        async with app.wire() as wire:
            first = await wire.request("tools/call", {"name": "slow", "arguments": {"seconds": 0.1}, "_meta": key})
            with pytest.raises(WireError) as conflict:
                await wire.request("tools/call", {"name": "slow", "arguments": {"seconds": 5}, "_meta": key})
            await until(wire, first["taskId"], "completed")
    assert conflict.value.code == -32602
    assert "deploy-42" in conflict.value.message


async def test_a_2025_11_25_result_of_a_cancelled_task_is_an_error_saying_so(app: App) -> None:
    with app.serving():
        async with Wire(app.url, LEGACY, token="token-alice") as wire:
            task_id = (await wire.call_as_task("slow", {"seconds": 30}))["taskId"]
            await wire.request("tasks/cancel", {"taskId": task_id})
            with pytest.raises(WireError) as no_result:
                await wire.request("tasks/result", {"taskId": task_id})
    assert no_result.value.code == -32602
    assert no_result.value.message == "The task was cancelled; it has no result"


async def test_a_2025_11_25_question_the_client_leaves_unanswered_past_its_ttl_expires_once(app: App) -> None:
    asked: list[str] = []

    async def too_late(request: dict[str, Any]) -> dict[str, Any]:
        asked.append(request["params"]["message"])
        await anyio.sleep(1.5)  # the question's TTL is a second
        return answer(approve=True)

    with app.serving():
        async with Wire(app.url, LEGACY, token="token-alice") as wire:
            task_id = (await wire.call_as_task("hurry", {}))["taskId"]
            await until(wire, task_id, "input_required")
            result = await wire.request("tasks/result", {"taskId": task_id}, on_request=too_late)
    assert result["content"][0]["text"] == "expired"
    assert asked == ["Quick: approve?"], "asked once on the stream, not again while the body expires it"


async def test_a_tool_that_runs_only_as_a_task_is_refused_where_the_era_cannot_ask_for_one(app: App) -> None:
    with pytest.raises(MCPError) as refused:
        await Harness(app.runtime, era="2025-06-18").call("nightly")
    assert refused.value.error.code == -32602
    assert "runs only as a task, which this protocol version has no way to ask for" in refused.value.error.message


async def test_a_task_still_working_when_its_ttl_passes_is_stopped_and_expired_by_its_watch(app: App) -> None:
    with app.serving():
        async with app.wire() as wire:
            task_id = (await wire.call_as_task("slow", {"seconds": 30}))["taskId"]
            assert (await status_of(wire, task_id))["status"] == "working"
            app.clock.advance(timedelta(days=2))  # the body still sleeps: only its watch sees the TTL pass
            with anyio.fail_after(10):
                operation = await until_stored(app, task_id)
            failed = await status_of(wire, task_id)
    assert operation.status is OperationStatus.EXPIRED
    assert failed["status"] == "failed" and failed["error"]["message"] == "The task's TTL elapsed before it finished"


async def test_a_2025_11_25_question_the_client_refuses_with_an_error_reads_as_cancel(app: App) -> None:
    asked: list[str] = []

    async def refusing(request: dict[str, Any]) -> dict[str, Any]:
        asked.append(request["params"]["message"])
        raise WireError({"code": -32600, "message": "this client shows no forms today"})

    with app.serving():
        async with Wire(app.url, LEGACY, token="token-alice") as wire:
            task_id = (await wire.call_as_task("hurry", {}))["taskId"]
            await until(wire, task_id, "input_required")
            result = await wire.request("tasks/result", {"taskId": task_id}, on_request=refusing)
    assert result["content"][0]["text"] == "answered", "the body got an answer, not an expiry"
    assert asked == ["Quick: approve?"]
    [decision] = app.runtime.store.list_decisions(OPERATOR, operation_id=task_id)
    assert decision.status is DecisionStatus.CANCELLED


async def test_an_answer_to_a_question_the_task_is_not_asking_is_ignored(app: App) -> None:
    with app.serving():
        async with app.wire() as wire:
            task_id = (await wire.call_as_task("both", {}))["taskId"]
            await until_asking(wire, task_id, {"approve", "region"})
            stray = {"taskId": task_id, "inputResponses": {"budget": answer(amount=5)}}
            await wire.request("tasks/update", stray)
            still = await until_asking(wire, task_id, {"approve", "region"})
    assert still["status"] == "input_required"
    keys = {decision.key for decision in app.runtime.store.list_decisions(OPERATOR, operation_id=task_id)}
    assert keys == {"approve", "region"}, "no question was made up for the stray answer"


async def test_cancelling_a_task_closes_its_open_questions_and_keeps_the_answered_ones(app: App) -> None:
    with app.serving():
        async with app.wire() as wire:
            task_id = (await wire.call_as_task("both", {}))["taskId"]
            await until_asking(wire, task_id, {"approve", "region"})
            await wire.request("tasks/update", {"taskId": task_id, "inputResponses": {"region": answer(region="eu")}})
            await until_asking(wire, task_id, {"approve"})
            await wire.request("tasks/cancel", {"taskId": task_id})
            cancelled = await status_of(wire, task_id)
    assert cancelled["status"] == "cancelled"
    statuses = {d.key: d.status for d in app.runtime.store.list_decisions(OPERATOR, operation_id=task_id)}
    assert statuses == {"region": DecisionStatus.ACCEPTED, "approve": DecisionStatus.CANCELLED}


async def test_a_task_question_answered_three_times_with_what_does_not_fit_ends_cancelled(app: App) -> None:
    messages: list[str] = []
    with app.serving():
        async with app.wire() as wire:
            task_id = (await wire.call_as_task("consent", {}))["taskId"]
            for key in ("approve", "approve#2", "approve#3"):
                asking = await until_asking(wire, task_id, {key})
                messages.append(asking["inputRequests"][key]["params"]["message"])
                unfit = {"taskId": task_id, "inputResponses": {key: answer(approve="maybe")}}
                await wire.request("tasks/update", unfit)
            done = await until(wire, task_id, "completed", "failed")
    assert done["result"]["content"][0]["text"] == "Cancelled"
    assert messages[0] == "Approve?"
    assert all(m.startswith("Approve?\n\n(The previous answer could not be used: ") for m in messages[1:])
    statuses = {d.key: d.status for d in app.runtime.store.list_decisions(OPERATOR, operation_id=task_id)}
    assert statuses == dict.fromkeys(("approve", "approve#2", "approve#3"), DecisionStatus.CANCELLED)
