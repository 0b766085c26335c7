"""Tool calls as MCP tasks over real HTTP, both eras, both stores: the wire as the spec writes it.

2026-07-28: `resultType: "task"`, `tasks/get` listing `inputRequests`, `tasks/update`, `tasks/cancel`,
`tasks/result` gone. 2025-11-25: `params.task`, `CreateTaskResult`, `tasks/get`, `tasks/result` carrying
`elicitation/create` with the related-task `_meta`, `tasks/cancel`.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_elicit.model import DecisionStatus, OperationStatus, Operator, Principal
from mcp_elicit.server.tasks import TaskSettings
from tests.helpers.http_harness import ISSUER
from tests.helpers.tasks_http import Served, answer, answer_task, serve, status_of, until
from tests.helpers.tasks_wire import LEGACY, MODERN, TASKS_EXTENSION, WireError

pytestmark = pytest.mark.anyio
ERAS = [LEGACY, MODERN]
ALICE = Principal(f"{ISSUER}#alice", "client-a")
RELATED = "io.modelcontextprotocol/related-task"


@pytest.fixture
def served(store_url: str, tmp_path: Path) -> Iterator[Served]:
    with serve(store_url, tmp_path) as running:
        yield running


@pytest.mark.parametrize("era", ERAS)
async def test_a_task_asks_while_input_required_and_completes_once_answered(served: Served, era: str) -> None:
    async with served.wire(era) as wire:
        created = await wire.call_as_task("deploy", {"service": "payments"})
        assert created["status"] == "working"
        task_id = created["taskId"]
        waiting = await until(wire, task_id, "input_required")
        if era == MODERN:
            assert waiting["resultType"] == "complete"
            assert waiting["inputRequests"] == {
                "approve": {
                    "method": "elicitation/create",
                    "params": {
                        "mode": "form",
                        "message": "Apply the plan for payments?",
                        "requestedSchema": waiting["inputRequests"]["approve"]["params"]["requestedSchema"],
                    },
                }
            }
            assert "approve" in waiting["inputRequests"]["approve"]["params"]["requestedSchema"]["properties"]
        else:
            assert "inputRequests" not in waiting and waiting["ttl"] > 0 and waiting["pollInterval"] == 200
        shown = await answer_task(wire, task_id, "approve", answer(approve=True))
        done = await until(wire, task_id, "completed")
        if era == MODERN:
            [text] = done["result"]["content"]
            assert text["text"].startswith("deployed payments (release-")
            assert done["result"]["isError"] is False
        else:
            [request] = shown
            assert request["method"] == "elicitation/create"
            assert request["params"]["_meta"][RELATED] == {"taskId": task_id}
            assert request["params"]["message"] == "Apply the plan for payments?"
            assert wire.last_result["_meta"][RELATED] == {"taskId": task_id}
            assert wire.last_result["content"][0]["text"].startswith("deployed payments")
            assert "resultType" not in wire.last_result
            assert "result" not in done
    store = served.runtime.store
    [decision] = store.list_decisions(Operator())
    assert decision.status is DecisionStatus.ACCEPTED and decision.principal == ALICE
    assert decision.about == 'deploy(service="payments")', "a task's question says what its call is about too"
    assert store.get_operation(task_id, Operator()).status is OperationStatus.COMPLETED
    assert [served.workspace.runs(step) for step in ("plan", "prepare", "apply")] == [1, 1, 1]
    assert [e.reason for e in store.audit_trail(decision.elicitation_id, Operator())][-1] == "answered"


@pytest.mark.parametrize("era", ERAS)
async def test_a_declined_question_completes_the_task_with_the_bodys_answer(served: Served, era: str) -> None:
    async with served.wire(era) as wire:
        task_id = (await wire.call_as_task("deploy", {"service": "search"}))["taskId"]
        await until(wire, task_id, "input_required")
        await answer_task(wire, task_id, "approve", answer("decline"))
        done = await until(wire, task_id, "completed")
        if era == MODERN:
            assert done["result"]["content"][0]["text"] == "declined"
        else:
            assert wire.last_result["content"][0]["text"] == "declined"
    [decision] = served.runtime.store.list_decisions(Operator())
    assert decision.status is DecisionStatus.DECLINED
    assert served.workspace.runs("apply") == 0


@pytest.mark.parametrize("era", ERAS)
async def test_cancelling_a_task_ends_it_and_its_question(served: Served, era: str) -> None:
    async with served.wire(era) as wire:
        task_id = (await wire.call_as_task("deploy", {"service": "billing"}))["taskId"]
        await until(wire, task_id, "input_required")
        cancelled = await wire.request("tasks/cancel", {"taskId": task_id})
        if era == LEGACY:
            assert cancelled["status"] == "cancelled" and cancelled["taskId"] == task_id
            with pytest.raises(WireError) as again:
                await wire.request("tasks/cancel", {"taskId": task_id})
            assert again.value.code == -32602
        else:
            assert cancelled["resultType"] == "complete" and "status" not in cancelled
            assert (await wire.request("tasks/cancel", {"taskId": task_id}))["resultType"] == "complete"
        assert (await status_of(wire, task_id))["status"] == "cancelled"
    store = served.runtime.store
    [decision] = store.list_decisions(Operator())
    assert decision.status is DecisionStatus.CANCELLED
    assert store.get_operation(task_id, Operator()).status is OperationStatus.CANCELLED
    assert served.workspace.runs("apply") == 0


@pytest.mark.parametrize("era", ERAS)
async def test_an_expired_task_fails_and_its_open_question_expires(store_url: str, tmp_path: Path, era: str) -> None:
    settings = TaskSettings(default_ttl=timedelta(seconds=1), poll_interval=timedelta(milliseconds=200))
    with serve(store_url, tmp_path, settings) as served:
        async with served.wire(era) as wire:
            created = await wire.call_as_task("deploy", {"service": "ttl"}, ttl=1000)
            assert created.get("ttlMs", created.get("ttl")) == 1000
            failed = await until(wire, created["taskId"], "failed", timeout=10)
            assert "TTL" in failed["statusMessage"]
            if era == MODERN:
                assert failed["error"]["code"] == -32603
            else:
                with pytest.raises(WireError) as raised:
                    await wire.request("tasks/result", {"taskId": created["taskId"]})
                assert raised.value.code == -32603
        [decision] = served.runtime.store.list_decisions(Operator())
        assert decision.status is DecisionStatus.EXPIRED
        operation = served.runtime.store.get_operation(created["taskId"], Operator())
        assert operation.status is OperationStatus.EXPIRED


@pytest.mark.parametrize("era", ERAS)
async def test_a_question_past_its_own_ttl_expires_and_the_body_goes_on(served: Served, era: str) -> None:
    async with served.wire(era) as wire:
        task_id = (await wire.call_as_task("hurry", {}))["taskId"]
        await until(wire, task_id, "completed", timeout=15)
        if era == LEGACY:
            result = await wire.request("tasks/result", {"taskId": task_id})
            assert result["content"][0]["text"] == "expired"
        else:
            assert (await status_of(wire, task_id))["result"]["content"][0]["text"] == "expired"
    [decision] = served.runtime.store.list_decisions(Operator())
    assert decision.status is DecisionStatus.EXPIRED


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("stranger", ["token-bob", "token-alice-other-client"])
async def test_another_principals_tasks_requests_find_no_task(served: Served, era: str, stranger: str) -> None:
    async with served.wire(era) as alice:
        task_id = (await alice.call_as_task("deploy", {"service": "payments"}))["taskId"]
        await until(alice, task_id, "input_required")
        async with served.wire(era, token=stranger) as other:
            methods: list[tuple[str, dict[str, Any]]] = [("tasks/get", {}), ("tasks/cancel", {})]
            if era == MODERN:
                methods.append(("tasks/update", {"inputResponses": {"approve": answer(approve=True)}}))
            else:
                methods.append(("tasks/result", {}))
            for method, extra in methods:
                with pytest.raises(WireError) as refused:
                    await other.request(method, {"taskId": task_id, **extra})
                assert refused.value.code == -32602, method
                assert "not found" in refused.value.message
        assert (await status_of(alice, task_id))["status"] == "input_required"
    [decision] = served.runtime.store.list_decisions(Operator())
    assert decision.status is DecisionStatus.REQUESTED


async def test_2026_keys_are_never_reused_and_stale_duplicate_or_unknown_answers_are_ignored(served: Served) -> None:
    async with served.wire(MODERN) as wire:
        task_id = (await wire.call_as_task("deploy", {"service": "payments"}))["taskId"]
        await until(wire, task_id, "input_required")
        unknown = {"nope": answer(approve=True)}
        assert await wire.request("tasks/update", {"taskId": task_id, "inputResponses": unknown})
        await answer_task(wire, task_id, "approve", answer(approve="maybe"))
        again = await until(wire, task_id, "input_required")
        while "approve" in again["inputRequests"]:
            again = await until(wire, task_id, "input_required")
        [(key, request)] = again["inputRequests"].items()
        assert key == "approve#2"
        assert "could not be used" in request["params"]["message"]
        await answer_task(wire, task_id, "approve", answer(approve=True))  # stale: already answered
        await answer_task(wire, task_id, key, answer(approve=True))
        await answer_task(wire, task_id, key, answer("decline"))  # a duplicate: the first answer stands
        done = await until(wire, task_id, "completed")
        assert done["result"]["content"][0]["text"].startswith("deployed payments")
    decisions = {d.key: d for d in served.runtime.store.list_decisions(Operator())}
    assert (decisions["approve"].status, decisions["approve"].content) == (DecisionStatus.CANCELLED, None)
    assert decisions["approve#2"].status is DecisionStatus.ACCEPTED
    trail = served.runtime.store.audit_trail(decisions["approve"].elicitation_id, Operator())
    assert "the answer does not fit" in trail[-1].reason  # never recorded as an answer


async def test_2026_an_answer_that_is_no_elicitation_result_is_refused_and_loses_nothing(served: Served) -> None:
    async with served.wire(MODERN) as wire:
        task_id = (await wire.call_as_task("deploy", {"service": "payments"}))["taskId"]
        await until(wire, task_id, "input_required")
        with pytest.raises(WireError) as refused:
            await wire.request("tasks/update", {"taskId": task_id, "inputResponses": {"approve": {"action": "yes"}}})
        assert refused.value.code == -32602 and "approve" in refused.value.message
        assert list((await status_of(wire, task_id))["inputRequests"]) == ["approve"]


@pytest.mark.parametrize("era", ERAS)
async def test_url_mode_inside_a_task(served: Served, era: str) -> None:
    runtime = served.runtime
    async with served.wire(era, url_mode=True) as wire:
        task_id = (await wire.call_as_task("connect", {}))["taskId"]
        waiting = await until(wire, task_id, "input_required")
        [decision] = runtime.store.list_decisions(Operator())
        page = f"{served.url.removesuffix('/mcp')}/elicit/{decision.elicitation_id}"

        def finish_the_flow() -> None:
            current = runtime.store.get_decision(decision.elicitation_id, ALICE)
            pending = runtime.store.transition(current, DecisionStatus.EXTERNAL_PENDING, caller=ALICE)
            runtime.store.transition(pending, DecisionStatus.EXTERNAL_COMPLETED, caller=ALICE, reason="callback")

        if era == MODERN:
            params = waiting["inputRequests"]["connect_account"]["params"]
            assert params == {"mode": "url", "message": "Connect your account", "url": page}
            await answer_task(wire, task_id, "connect_account", answer("accept"))
            working = await until(wire, task_id, "working")
            while "browser" not in working["statusMessage"]:  # the body applies the consent in its own time
                working = await until(wire, task_id, "working")
            assert runtime.store.get_decision(decision.elicitation_id, ALICE).status is DecisionStatus.ACCEPTED_URL
            finish_the_flow()
            done = await until(wire, task_id, "completed")
            assert done["result"]["content"][0]["text"] == "connected"
        else:
            async with anyio.create_task_group() as group:

                async def complete_soon() -> None:
                    while runtime.store.get_decision(decision.elicitation_id, ALICE).status is DecisionStatus.REQUESTED:
                        await anyio.sleep(0.05)
                    finish_the_flow()

                group.start_soon(complete_soon)
                [shown] = await answer_task(wire, task_id, "connect_account", {"action": "accept"})
            params = shown["params"]
            assert (params["mode"], params["url"], params["elicitationId"]) == ("url", page, decision.elicitation_id)
            assert params["_meta"][RELATED] == {"taskId": task_id}
            assert wire.last_result["content"][0]["text"] == "connected"
    assert runtime.store.get_decision(decision.elicitation_id, ALICE).status is DecisionStatus.EXTERNAL_COMPLETED


@pytest.mark.parametrize("era", ERAS)
async def test_questions_before_the_task_are_asked_on_the_call_in_their_own_key_space(served: Served, era: str) -> None:
    window = {"action": "accept", "content": {"window": "night"}}
    async with served.wire(era) as wire:
        if era == MODERN:
            params: dict[str, Any] = {"name": "change", "arguments": {"service": "payments"}}
            first = await wire.request("tools/call", params)
            assert first["resultType"] == "input_required" and list(first["inputRequests"]) == ["window"]
            retry = {**params, "inputResponses": {"window": window}, "requestState": first["requestState"]}
            created = await wire.request("tools/call", retry)
            assert created["resultType"] == "task"
        else:
            shown: list[dict[str, Any]] = []

            async def on_request(request: dict[str, Any]) -> dict[str, Any]:
                shown.append(request)
                return window

            params = {"name": "change", "arguments": {"service": "payments"}, "task": {}}
            created = (await wire.request("tools/call", params, on_request=on_request))["task"]
            [asked] = shown
            assert asked["params"]["message"] == "Which window for payments?"
            assert RELATED not in asked["params"].get("_meta", {})
        task_id = created["taskId"]
        waiting = await until(wire, task_id, "input_required")
        if era == MODERN:
            assert list(waiting["inputRequests"]) == ["approve"]
            assert waiting["inputRequests"]["approve"]["params"]["message"] == "Approve payments in the night window?"
        await answer_task(wire, task_id, "approve", answer(approve=True))
        done = await until(wire, task_id, "completed")
        text = done["result"] if era == MODERN else wire.last_result
        assert text["content"][0]["text"] == "payments changed in the night window"
    keys = sorted(d.key for d in served.runtime.store.list_decisions(Operator()))
    assert keys == ["approve", "window"]


@pytest.mark.parametrize("era", ERAS)
async def test_an_identical_call_while_the_task_is_open_gets_the_same_task(served: Served, era: str) -> None:
    async with served.wire(era) as wire:
        first = await wire.call_as_task("deploy", {"service": "payments"})
        second = await wire.call_as_task("deploy", {"service": "payments"})
        other = await wire.call_as_task("deploy", {"service": "search"})
    assert first["taskId"] == second["taskId"] != other["taskId"]


@pytest.mark.parametrize("era", ERAS)
async def test_a_tool_error_is_the_tasks_result(served: Served, era: str) -> None:
    async with served.wire(era) as wire:
        task_id = (await wire.call_as_task("broken", {}))["taskId"]
        if era == MODERN:
            done = await until(wire, task_id, "completed")
            assert done["result"]["isError"] is True
            assert "the deploy target is gone" in done["result"]["content"][0]["text"]
        else:
            failed = await until(wire, task_id, "failed")
            assert "the deploy target is gone" in failed["statusMessage"]
            result = await wire.request("tasks/result", {"taskId": task_id})
            assert result["isError"] is True and result["_meta"][RELATED] == {"taskId": task_id}


async def test_2025_11_25_declares_tasks_and_each_tools_support(served: Served) -> None:
    async with served.wire(LEGACY) as wire:
        assert wire.initialized["capabilities"]["tasks"] == {"cancel": {}, "requests": {"tools": {"call": {}}}}
        tools = {tool["name"]: tool for tool in (await wire.request("tools/list"))["tools"]}
        assert tools["deploy"]["execution"] == {"taskSupport": "optional"}
        assert tools["nightly"]["execution"] == {"taskSupport": "required"}
        assert "execution" not in tools["plain"]
        for tool, task in (("plain", True), ("nightly", False)):
            params: dict[str, Any] = {"name": tool, "arguments": {}} | ({"task": {}} if task else {})
            with pytest.raises(WireError) as refused:
                await wire.request("tools/call", params)
            assert refused.value.code == -32601, tool
        plain = await wire.request("tools/call", {"name": "plain", "arguments": {}})
        assert plain["content"][0]["text"] == "plain done"


async def test_2026_task_methods_and_policies(served: Served) -> None:
    async with served.wire(MODERN) as wire:
        plain = await wire.request("tools/call", {"name": "plain", "arguments": {}})
        assert plain["resultType"] == "complete" and plain["content"][0]["text"] == "plain done"
        with pytest.raises(WireError) as removed:
            await wire.request("tasks/result", {"taskId": "x"})
        assert removed.value.code == -32601
        with pytest.raises(WireError) as unknown:
            await wire.request("tasks/get", {"taskId": "nonexistent-12345"})
        assert unknown.value.code == -32602
        created = await wire.call_as_task("nightly", {})
        assert (await until(wire, created["taskId"], "completed"))["result"]["content"][0]["text"] == "nightly done"
    async with served.wire(MODERN, tasks=False) as undeclared:
        inline = await undeclared.request("tools/call", {"name": "deploy", "arguments": {"service": "x"}})
        assert inline["resultType"] == "input_required"
        with pytest.raises(WireError) as required:
            await undeclared.request("tools/call", {"name": "nightly", "arguments": {}})
        assert required.value.code == -32021
        assert isinstance(required.value.data, dict)
        assert required.value.data["requiredCapabilities"] == {"extensions": {TASKS_EXTENSION: {}}}
        with pytest.raises(WireError) as missing:
            await undeclared.request("tasks/get", {"taskId": created["taskId"]})
        assert missing.value.code == -32021
