"""The 2025-11-25 experimental core tasks on the wire.

The server declares `capabilities.tasks` (tool calls, cancel; no `tasks/list`: there is no listing of a
principal's tasks) and each task-capable tool's `execution.taskSupport` (`optional` or `required`). A
`tools/call` with `params.task` (an optional `ttl`, capped by the server) is answered with
`CreateTaskResult` once the task is durable; one without it, for a `required` tool, gets -32601, as does a
task asked of a tool that never runs as one. `tasks/get` and `tasks/cancel` answer the task itself
(cancel refuses a task already ended with -32602). `tasks/result` blocks until the task ends and returns
exactly what the call would have returned (its result, with the related-task `_meta`, or its JSON-RPC
error); while it waits, every outstanding question goes to the client on that very stream as an
`elicitation/create` carrying the related-task `_meta` (a URL one with its `elicitationId`), once per
stream, and the client's answer is posted to the task's mailbox for the body to apply.

A task whose tool reported an error is `failed` here (the 2025-11-25 rule for tool calls), and its
`tasks/result` is the `isError` result.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import MethodBinding
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import CONNECTION_CLOSED, INVALID_PARAMS, METHOD_NOT_FOUND, ElicitRequest, ElicitResult

from mcp_elicit.model import Decision, JSONObject
from mcp_elicit.server.eras import Call
from mcp_elicit.server.eras.tasks_ext import PrincipalOf, TaskIdParams, input_request, not_found, timestamp
from mcp_elicit.server.tasks.policy import TaskPolicy
from mcp_elicit.server.tasks.service import TaskAccepted, TaskRequest, TaskService
from mcp_elicit.server.tasks.state import COMPLETED, FAILED, LEGACY_ERA, TaskAlreadyEnded, TaskNotFound, TaskView

log = logging.getLogger(__name__)

RELATED_TASK = "io.modelcontextprotocol/related-task"
LEGACY_VERSIONS = frozenset({LEGACY_ERA})
SERVER_TASKS_CAPABILITY: JSONObject = {"cancel": {}, "requests": {"tools": {"call": {}}}}


class LegacyWire:
    """How a 2025-11-25 client asks for a task: `params.task` on the call."""

    era = LEGACY_ERA

    def requested(self, call: Call) -> TaskRequest | None:
        params = getattr(call.request, "params", None)
        task = params.get("task") if isinstance(params, dict) else None
        if not isinstance(task, dict):
            return None
        ttl = task.get("ttl")
        return TaskRequest(LEGACY_ERA, ttl if isinstance(ttl, int) and not isinstance(ttl, bool) else None)

    def required(self, tool: str) -> MCPError:
        return MCPError(
            code=METHOD_NOT_FOUND, message=f"The tool {tool!r} must be called as a task (params.task is required)"
        )

    def forbidden(self, tool: str) -> MCPError | None:
        return MCPError(code=METHOD_NOT_FOUND, message=f"The tool {tool!r} does not run as a task")


def related(task_id: str) -> JSONObject:
    return {RELATED_TASK: {"taskId": task_id}}


def legacy_status(view: TaskView) -> str:
    return FAILED if view.tool_error is not None else view.status


def legacy_task(view: TaskView) -> dict[str, Any]:
    task: dict[str, Any] = {
        "taskId": view.task_id,
        "status": legacy_status(view),
        "createdAt": timestamp(view.created_at),
        "lastUpdatedAt": timestamp(view.updated_at),
        "ttl": view.meta.ttl_ms,
        "pollInterval": view.meta.poll_interval_ms,
    }
    message = view.tool_error if view.tool_error is not None else view.message
    if message:
        task["statusMessage"] = message
    return task


class LegacyTasksMiddleware:
    """Declares tasks in the 2025-11-25 handshake and tool list, and answers an accepted call with its task."""

    def __init__(self, service: TaskService) -> None:
        self._service = service

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "initialize":
            result = await call_next(ctx)
            if isinstance(result, dict) and result.get("protocolVersion") == LEGACY_ERA and self._service.policies:
                result["capabilities"] = {**result.get("capabilities", {}), "tasks": SERVER_TASKS_CAPABILITY}
            return result
        if ctx.protocol_version != LEGACY_ERA:
            return await call_next(ctx)
        if ctx.method == "tools/list":
            result = await call_next(ctx)
            if isinstance(result, dict):
                for tool in result.get("tools", []):
                    policy = self._service.policy_of(str(tool.get("name")))
                    if policy is not TaskPolicy.NEVER:
                        tool["execution"] = {**tool.get("execution", {}), "taskSupport": policy.value}
            return result
        if ctx.method == "tools/call":
            try:
                return await call_next(ctx)
            except TaskAccepted as accepted:
                return {"task": legacy_task(accepted.view)}
        return await call_next(ctx)


class LegacyMethods:
    """`tasks/get`, `tasks/result`, `tasks/cancel` at 2025-11-25."""

    def __init__(self, service: TaskService, principal_of: PrincipalOf) -> None:
        self._service = service
        self._principal_of = principal_of

    def bindings(self) -> list[MethodBinding]:
        return [
            MethodBinding("tasks/get", TaskIdParams, self.get, protocol_versions=LEGACY_VERSIONS),
            MethodBinding("tasks/result", TaskIdParams, self.result, protocol_versions=LEGACY_VERSIONS),
            MethodBinding("tasks/cancel", TaskIdParams, self.cancel, protocol_versions=LEGACY_VERSIONS),
        ]

    async def _view(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> TaskView:
        try:
            return await self._service.book.view(self._principal_of(ctx), task_id)
        except TaskNotFound:
            raise not_found() from None

    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> HandlerResult:
        return legacy_task(await self._view(ctx, params.task_id))

    async def cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> HandlerResult:
        try:
            view = await self._service.cancel(self._principal_of(ctx), params.task_id)
        except TaskNotFound:
            raise not_found() from None
        except TaskAlreadyEnded:
            raise MCPError(code=INVALID_PARAMS, message="The task has already ended; it cannot be cancelled") from None
        return legacy_task(view)

    async def result(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> HandlerResult:
        """Block until the task ends, putting its questions to the client on this stream meanwhile."""
        principal, task_id = self._principal_of(ctx), params.task_id
        sent: set[str] = set()
        poll = 0.05
        while True:
            view = await self._view(ctx, task_id)
            if view.terminal:
                return self._final(view)
            for decision in view.asking:
                if decision.key in sent:
                    continue
                sent.add(decision.key)
                response = await self._ask(ctx, task_id, decision)
                if response is not None:
                    await self._service.book.post(principal, task_id, {decision.key: response})
                poll = 0.05
            limit = view.meta.poll_interval_ms / 1000
            await self._service.wakeups.wait([task_id], min(poll, limit))
            poll = min(poll * 2, limit)

    def _final(self, view: TaskView) -> HandlerResult:
        if view.status == FAILED and view.error is not None:
            raise MCPError(code=int(str(view.error.get("code", -32603))), message=str(view.error.get("message")))
        if view.status == COMPLETED:
            result = self._service.tool_result(view).model_dump(by_alias=True, mode="json", exclude_none=True)
            result.pop("resultType", None)  # a 2026-07-28 field; 2025-11-25 results have none
            result["_meta"] = {**result.get("_meta", {}), **related(view.task_id)}
            return result
        raise MCPError(code=INVALID_PARAMS, message=f"The task was {view.status}; it has no result")

    async def _ask(self, ctx: ServerRequestContext[Any, Any], task_id: str, decision: Decision) -> JSONObject | None:
        """The client's answer to one question, sent on this `tasks/result` stream; an error reads as cancel,
        and no answer before the question's TTL is none (the body expires the question)."""
        wire = input_request(decision, related(task_id))
        if decision.url is not None:
            wire["params"]["elicitationId"] = decision.elicitation_id
        request = ElicitRequest.model_validate(wire)
        metadata = ServerMessageMetadata(related_request_id=ctx.request_id)
        with anyio.move_on_after(max((decision.expires_at - self._service.clock()).total_seconds(), 0.0)):
            try:
                result = await ctx.session.send_request(request, ElicitResult, metadata=metadata)
            except MCPError as error:
                if error.code == CONNECTION_CLOSED:
                    return None  # the client went away: the question stays open for the next tasks/result
                log.info("task %s: the client refused question %s: %s", task_id, decision.key, error.code)
                return {"action": "cancel"}
            return result.model_dump(by_alias=True, mode="json", exclude_none=True)
        return None
