"""The commands and the reference server with tasks: `call` follows a task, `decisions ls` shows task status,
`decisions cancel` on a task's question cancels the task."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from mcp_elicit.model import OperationStatus, Operator, Principal, request_digest
from mcp_elicit.server.tasks.state import task_status
from mcp_elicit.store import open_store
from tests.helpers.cli_terminal import COMMAND
from tests.helpers.commands import run
from tests.helpers.tasks_http import instance, serve, until
from tests.helpers.tasks_wire import MODERN, Wire

pytestmark = pytest.mark.anyio
LOOPBACK = Principal("loopback-dev", "loopback")


@pytest.mark.parametrize("era", ["2025-11-25", MODERN])
def test_call_runs_the_reference_deploy_as_a_task_and_the_script_answers_it(tmp_path: Path, era: str) -> None:
    store = f"sqlite://{tmp_path / 'elicit.db'}"
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps([{"match": "to production?", "reply": "accept", "content": {"approve": True}}]))
    server = f"{shlex.quote(COMMAND)} serve --workspace {shlex.quote(str(tmp_path / 'workspace'))}"
    done = run(
        "call", server, "deploy", "--arg", "service=payments", "--script", str(answers), "--era", era,
        env={"MCP_ELICIT_STORE": store},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Deployed payments to staging and production" in done.stdout
    opened = open_store(store)
    try:
        [decision] = opened.list_decisions(Operator())
        assert task_status(opened, decision.operation_id, Operator()) == "completed"
    finally:
        opened.close()
    listed = run("decisions", "ls", "--json", env={"MCP_ELICIT_STORE": store})
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert row["task"] == "completed"
    refused = run("decisions", "cancel", row["elicitation_id"], env={"MCP_ELICIT_STORE": store})
    assert refused.returncode == 1, refused.stderr
    assert refused.stderr == f"not cancelled: the task {row['operation_id']} already ended as completed\n"


async def test_decisions_ls_shows_a_waiting_task_and_cancel_cancels_it(tmp_path: Path) -> None:
    store = f"sqlite://{tmp_path / 'elicit.db'}"
    with serve(store, tmp_path) as served:
        async with served.wire(MODERN) as wire:
            task_id = (await wire.call_as_task("deploy", {"service": "payments"}))["taskId"]
            await until(wire, task_id, "input_required")
            env = {"MCP_ELICIT_STORE": store}
            [row] = json.loads(run("decisions", "ls", "--json", env=env).stdout)
            assert (row["operation_id"], row["task"], row["status"]) == (task_id, "input_required", "requested")
            plain = run("decisions", "ls", env=env).stdout.splitlines()
            header, line = plain[0].split("\t"), plain[1].split("\t")
            assert dict(zip(header, line, strict=True))["task"] == "input_required"
            cancelled = run("decisions", "cancel", row["elicitation_id"], "--as", "oncall", env=env)
            assert cancelled.returncode == 0, cancelled.stderr
            assert f"Cancelled the task {task_id}" in cancelled.stdout
            assert (await until(wire, task_id, "cancelled"))["status"] == "cancelled"
            again = run("decisions", "cancel", task_id, env=env)
            assert again.returncode == 1, again.stderr
            assert again.stderr == f"not cancelled: the task {task_id} already ended as cancelled\n"
    assert served.workspace.runs("apply") == 0


async def test_a_client_without_tasks_is_not_shown_a_task(tmp_path: Path) -> None:
    store = f"sqlite://{tmp_path / 'elicit.db'}"
    with serve(store, tmp_path) as served:
        async with Wire(served.url, MODERN, token="token-alice", tasks=False) as wire:
            inline = await wire.request("tools/call", {"name": "deploy", "arguments": {"service": "x"}})
            assert inline["resultType"] == "input_required"
        [row] = json.loads(run("decisions", "ls", "--json", env={"MCP_ELICIT_STORE": store}).stdout)
        assert "task" not in row


def test_call_shows_a_working_task_as_a_wait_with_its_elapsed_time_and_stop_cancels_it(tmp_path: Path) -> None:
    store = f"sqlite://{tmp_path / 'tasks.db'}"
    stop = tmp_path / "stop.json"
    stop.write_text(json.dumps([{"match": "the task of slow", "reply": "stop"}]))
    with instance(store, tmp_path / "workspace") as (url, _):
        done = run("call", url, "slow", "--arg", "seconds=600", "--script", str(stop), "--era", MODERN)
    assert done.returncode == 1, done.stderr
    assert "Waiting for the server: the task of slow is working" in done.stdout
    assert "elapsed" in done.stdout
    assert "Answered by the script: stop (stop the call)" in done.stdout
    assert "was cancelled" in done.stderr
    opened = open_store(store)
    try:
        digest = request_digest("tools/call", {"name": "slow", "arguments": {"seconds": 600.0}})
        [task] = opened.find_operations(LOOPBACK, method="tools/call", target="slow", request_digest=digest)
        assert task.status is OperationStatus.CANCELLED
    finally:
        opened.close()
