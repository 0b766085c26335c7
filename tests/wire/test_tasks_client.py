"""The client kit follows a task over real HTTP: declared on request, polled at the server's pace, each
question asked once, answered with `tasks/update`; `client.tasks` shows and cancels; a new client
re-attaches to a task id after the first one went away."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_elicit.client import ElicitingClient, Http
from mcp_elicit.client.handler import Accept, FormReply, FormRequest, Mode, UrlReply, UrlRequest
from mcp_elicit.client.tasks import TaskCancelled
from mcp_elicit.model import DecisionStatus, OperationStatus, Operator
from mcp_elicit.server.tasks import TaskNotFound, TaskSettings
from tests.helpers.tasks_http import Served, serve

pytestmark = pytest.mark.anyio


class Approver:
    """Approves every form, noting each question; `hold` keeps it from answering until set."""

    modes = frozenset[Mode]({"form"})

    def __init__(self, hold: anyio.Event | None = None) -> None:
        self.asked: list[FormRequest] = []
        self._hold = hold

    async def form(self, request: FormRequest) -> FormReply:
        self.asked.append(request)
        if self._hold is not None:
            await self._hold.wait()
        return Accept({"approve": True})

    async def url(self, request: UrlRequest) -> UrlReply:
        raise AssertionError("no URL question expected")


@pytest.fixture
def served(store_url: str, tmp_path: Path) -> Any:
    settings = TaskSettings(poll_interval=timedelta(milliseconds=300))
    with serve(store_url, tmp_path, settings) as running:
        yield running


def client(served: Served, handler: Any, era: Any = "2026-07-28") -> ElicitingClient:
    return ElicitingClient(Http(served.url, bearer_token="token-alice"), handler, era=era, tasks=True)


async def test_the_kit_follows_a_task_to_its_result_asking_once(served: Served) -> None:
    approver = Approver()
    sleeps: list[float] = []

    async def paced(seconds: float) -> None:
        sleeps.append(seconds)
        await anyio.sleep(seconds)

    kit = ElicitingClient(
        Http(served.url, bearer_token="token-alice"), approver, era="2026-07-28", tasks=True, sleep=paced
    )
    async with kit:
        result = await kit.call_tool("deploy", {"service": "payments"})
    assert result.content[0].text.startswith("deployed payments")  # type: ignore[union-attr]
    assert [request.message for request in approver.asked] == ["Apply the plan for payments?"]
    assert sleeps and all(seconds == pytest.approx(0.3) for seconds in sleeps), "polled at the server's interval"
    operations = {d.operation_id for d in served.runtime.store.list_decisions(Operator())}
    [task_id] = operations
    assert served.runtime.store.get_operation(task_id, Operator()).status is OperationStatus.COMPLETED


async def test_without_opting_in_the_same_call_runs_on_the_request(served: Served) -> None:
    approver = Approver()
    async with ElicitingClient(Http(served.url, bearer_token="token-alice"), approver, era="2026-07-28") as kit:
        result = await kit.call_tool("deploy", {"service": "search"})
    assert result.content[0].text.startswith("deployed search")  # type: ignore[union-attr]
    [decision] = served.runtime.store.list_decisions(Operator())
    with pytest.raises(TaskNotFound):
        await served.runtime.tasks.book.found(decision.principal, decision.operation_id)


async def test_the_host_sees_and_cancels_a_waiting_task(served: Served) -> None:
    hold = anyio.Event()
    approver = Approver(hold)
    async with client(served, approver) as kit:
        failure: list[BaseException] = []

        async def call() -> None:
            try:
                await kit.call_tool("deploy", {"service": "billing"})
            except TaskCancelled as cancelled:
                failure.append(cancelled)

        async with anyio.create_task_group() as group:
            group.start_soon(call)
            with anyio.fail_after(20):
                while not approver.asked:
                    await anyio.sleep(0.05)
            [following] = kit.tasks.following
            assert following.tool == "deploy" and following.status == "input_required"
            assert following.elapsed(time.monotonic()) >= 0
            shown = await kit.tasks.status(following.task_id)
            assert shown["status"] == "input_required" and list(shown["inputRequests"]) == ["approve"]
            await kit.tasks.cancel_task(following.task_id)
            hold.set()
        assert len(failure) == 1
    [decision] = served.runtime.store.list_decisions(Operator())
    assert decision.status is DecisionStatus.CANCELLED
    assert served.workspace.runs("apply") == 0


async def test_a_new_client_re_attaches_to_the_task_of_one_that_went_away(served: Served) -> None:
    gone = Approver(anyio.Event())  # never answers: its process "dies" while asking
    async with client(served, gone) as first, anyio.create_task_group() as group:
        group.start_soon(first.call_tool, "deploy", {"service": "payments"})
        with anyio.fail_after(20):
            while not gone.asked:
                await anyio.sleep(0.05)
        [following] = first.tasks.following
        task_id = following.task_id
        group.cancel_scope.cancel()
    approver = Approver()
    async with client(served, approver) as second:
        result = await second.tasks.attach(task_id, "deploy")
    assert result.content[0].text.startswith("deployed payments")  # type: ignore[union-attr]
    assert len(approver.asked) == 1
    assert served.workspace.runs("apply") == 1


async def test_a_working_task_is_a_wait_on_the_server_that_the_host_can_poll_now_or_cancel(served: Served) -> None:
    async with client(served, Approver()) as kit:
        stopped: list[TaskCancelled] = []

        async def call() -> None:
            try:
                await kit.call_tool("slow", {"seconds": 60})
            except TaskCancelled as cancelled:
                stopped.append(cancelled)

        async with anyio.create_task_group() as group:
            group.start_soon(call)
            with anyio.fail_after(20):
                while not kit.tasks.waits():
                    await anyio.sleep(0.05)
            [wait] = kit.tasks.waits()
            assert wait.kind == "server" and "the task of slow is working" in wait.message
            assert wait.deadline is not None and wait.deadline - wait.since == pytest.approx(24 * 3600, abs=5)
            assert kit.tasks.retry_now(wait.id)
            assert kit.tasks.cancel(wait.id, "the host stopped it")
        assert [error.task_id for error in stopped] == [wait.id]
        assert (await kit.tasks.status(wait.id))["status"] == "cancelled"


async def test_on_2025_11_25_the_kit_asks_a_listed_task_tool_for_a_task_and_answers_on_tasks_result(
    served: Served,
) -> None:
    approver = Approver()
    async with client(served, approver, "2025-11-25") as kit:
        listing = await kit.list_tools()
        assert {t.name: t.execution.task_support for t in listing.tools if t.execution}["deploy"] == "optional"
        result = await kit.call_tool("deploy", {"service": "payments"})
        plain = await kit.call_tool("plain", {})
    assert result.content[0].text.startswith("deployed payments")  # type: ignore[union-attr]
    assert plain.content[0].text == "plain done"  # type: ignore[union-attr]
    assert [request.message for request in approver.asked] == ["Apply the plan for payments?"]
    [decision] = served.runtime.store.list_decisions(Operator())
    assert await served.runtime.tasks.book.found(decision.principal, decision.operation_id)


async def test_on_2025_11_25_a_tool_not_listed_as_a_task_tool_runs_on_the_call(served: Served) -> None:
    approver = Approver()
    async with client(served, approver, "2025-11-25") as kit:
        result = await kit.call_tool("deploy", {"service": "search"})  # never listed: no params.task
    assert result.content[0].text.startswith("deployed search")  # type: ignore[union-attr]
    [decision] = served.runtime.store.list_decisions(Operator())
    with pytest.raises(TaskNotFound):
        await served.runtime.tasks.book.found(decision.principal, decision.operation_id)


async def test_on_2025_11_25_a_new_client_re_attaches_to_a_task(served: Served) -> None:
    gone = Approver(anyio.Event())
    async with client(served, gone, "2025-11-25") as first, anyio.create_task_group() as group:
        await first.list_tools()
        group.start_soon(first.call_tool, "deploy", {"service": "payments"})
        with anyio.fail_after(20):
            while not gone.asked:
                await anyio.sleep(0.05)
        [following] = first.tasks.following
        group.cancel_scope.cancel()
    approver = Approver()
    async with client(served, approver, "2025-11-25") as second:
        result = await second.tasks.attach(following.task_id, "deploy")
    assert result.content[0].text.startswith("deployed payments")  # type: ignore[union-attr]
    assert len(approver.asked) == 1
