"""A task outlives the instance running it: SIGKILLed mid-body, another instance (or the restarted process)
resumes it from its journal, and no journaled step runs again."""

from __future__ import annotations

import signal
from pathlib import Path

import anyio
import pytest

from mcp_elicit.model import DecisionStatus, OperationStatus, Operator
from mcp_elicit.store import open_store
from tests.helpers.commands import Forked
from tests.helpers.server import Workspace
from tests.helpers.tasks_http import answer, answer_task, instance, until
from tests.helpers.tasks_wire import LEGACY, MODERN, Wire

pytestmark = pytest.mark.anyio


async def stalled(workspace: Path) -> None:
    with anyio.fail_after(20):
        while not Workspace(workspace).stalled("prepare"):
            await anyio.sleep(0.05)


def kill(process: Forked) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)


@pytest.mark.postgres
@pytest.mark.parametrize("era", [MODERN, LEGACY])
async def test_another_instance_finishes_the_task_of_one_sigkilled_mid_body(
    pg_schema_url: str, tmp_path: Path, era: str
) -> None:
    root = tmp_path / "workspace"
    with instance(pg_schema_url, root) as (steady, _), instance(pg_schema_url, root, stall="prepare") as doomed:
        doomed_url, doomed_process = doomed
        async with Wire(doomed_url, era) as on_doomed, Wire(steady, era) as on_steady:
            task_id = (await on_doomed.call_as_task("deploy", {"service": "payments"}))["taskId"]
            await until(on_steady, task_id, "input_required")
            async with anyio.create_task_group() as group:
                # 2026-07-28: tasks/update on the survivor. 2025-11-25: tasks/result on the survivor carries
                # the question, then blocks until the task ends, wherever its body runs.
                group.start_soon(answer_task, on_steady, task_id, "approve", answer(approve=True))
                await stalled(root)
                kill(doomed_process)
            done = await until(on_steady, task_id, "completed", timeout=30)
        if era == MODERN:
            assert done["result"]["content"][0]["text"].startswith("deployed payments")
        else:
            assert on_steady.last_result["content"][0]["text"].startswith("deployed payments")
    workspace = Workspace(root)
    assert workspace.runs("plan") == 1, "a step journaled before the crash ran again"
    assert workspace.runs("prepare") == 2, "the step the crash cut short runs again, once"
    assert workspace.runs("apply") == 1
    assert len(workspace.ledger()) == 1
    store = open_store(pg_schema_url)
    try:
        [decision] = store.list_decisions(Operator())
        assert decision.status is DecisionStatus.ACCEPTED
        assert store.get_operation(task_id, Operator()).status is OperationStatus.COMPLETED
    finally:
        store.close()


async def test_on_sqlite_a_restarted_process_resumes_its_tasks(tmp_path: Path) -> None:
    store, root = f"sqlite://{tmp_path / 'tasks.db'}", tmp_path / "workspace"
    with instance(store, root, stall="prepare") as (first, process):
        async with Wire(first, MODERN) as wire:
            task_id = (await wire.call_as_task("deploy", {"service": "search"}))["taskId"]
            await until(wire, task_id, "input_required")
            await answer_task(wire, task_id, "approve", answer(approve=True))
            await stalled(root)
        kill(process)
    with instance(store, root) as (restarted, _):
        async with Wire(restarted, MODERN) as wire:
            done = await until(wire, task_id, "completed", timeout=30)
    assert done["result"]["content"][0]["text"].startswith("deployed search")
    workspace = Workspace(root)
    assert [workspace.runs(step) for step in ("plan", "prepare", "apply")] == [1, 2, 1]
