"""The 2026-07-28 tasks extension (`io.modelcontextprotocol/tasks`) on the wire, and the `tasks/*` binding.

A client opts in per request (`_meta.io.modelcontextprotocol/clientCapabilities.extensions`); a tool
whose policy allows it then answers `tools/call` with `resultType: "task"` and the task's fields. The
client polls `tasks/get`: while a question is outstanding the task is `input_required` and lists every
outstanding question under `inputRequests` (`elicitation/create`, form or URL, without `elicitationId`,
each keyed by its decision's key, never reused in the task's lifetime). It answers with `tasks/update`
(acknowledged at once, applied by the body, eventually visible; keys that are not outstanding are
ignored) and may `tasks/cancel`. `tasks/result` does not exist here (-32601) and a `task` request param
is ignored. A client that did not declare the extension gets -32021 from every `tasks/*` method, and an
`Mcp-Name` header naming another task than `params.taskId` gets -32020.

This module also holds the MCP `Extension` through which the server serves `tasks/*` on both eras: the
methods of 2025-11-25 (`eras/tasks_legacy`) are bound here too, gated to their protocol version.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding, RequestHandler
from mcp.server.mcpserver.server import require_client_extension
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp_types import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    CallToolRequestParams,
    ClientCapabilities,
    ElicitResult,
    MissingRequiredClientCapabilityErrorData,
    RequestParams,
)
from pydantic import ConfigDict, Field, ValidationError

from mcp_elicit.model import Decision, JSONObject, Mode, Principal
from mcp_elicit.model.extensions import TASKS_EXTENSION
from mcp_elicit.server.eras import Call
from mcp_elicit.server.eras.tool_approval import DISPOSITION_META, IMMEDIATE_RESPONSE, IMMEDIATE_RESPONSE_META
from mcp_elicit.server.tasks.service import TaskAccepted, TaskRequest, TaskService
from mcp_elicit.server.tasks.state import (
    COMPLETED,
    EXT_ERA,
    FAILED,
    INPUT_REQUIRED,
    TaskAlreadyEnded,
    TaskNotFound,
    TaskView,
)

log = logging.getLogger(__name__)

EXT_VERSIONS = frozenset({EXT_ERA})

PrincipalOf = Callable[[ServerRequestContext[Any, Any]], Principal]


class TaskIdParams(RequestParams):
    model_config = ConfigDict(populate_by_name=False, extra="allow")
    task_id: str = Field(alias="taskId", min_length=1, max_length=200)


class UpdateParams(TaskIdParams):
    input_responses: dict[str, Any] = Field(alias="inputResponses")


class ExtWire:
    """How a 2026-07-28 client asks for tasks: by declaring the extension on the request."""

    era = EXT_ERA

    def requested(self, call: Call) -> TaskRequest | None:
        capabilities = call.request.session.client_capabilities
        declared = capabilities.extensions if capabilities is not None else None
        return TaskRequest(EXT_ERA) if declared and TASKS_EXTENSION in declared else None

    def required(self, tool: str) -> MCPError:
        data = MissingRequiredClientCapabilityErrorData(
            required_capabilities=ClientCapabilities(extensions={TASKS_EXTENSION: {}})
        ).model_dump(by_alias=True, mode="json", exclude_none=True)
        return MCPError(
            code=MISSING_REQUIRED_CLIENT_CAPABILITY,
            message=f"The tool {tool!r} runs only as a task: declare the {TASKS_EXTENSION} extension",
            data=data,
        )

    def forbidden(self, tool: str) -> MCPError | None:
        return None  # the server decides; a client never asks a 2026-07-28 call to be a task


def timestamp(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def ext_task(view: TaskView, service: TaskService) -> dict[str, Any]:
    """The task as `tasks/get` shows it (the `DetailedTask` of its status)."""
    task: dict[str, Any] = {
        "taskId": view.task_id,
        "status": view.status,
        "createdAt": timestamp(view.created_at),
        "lastUpdatedAt": timestamp(view.updated_at),
        "ttlMs": view.meta.ttl_ms,
        "pollIntervalMs": view.meta.poll_interval_ms,
    }
    if view.message:
        task["statusMessage"] = view.message
    if view.status == INPUT_REQUIRED:
        task["inputRequests"] = {decision.key: input_request(decision) for decision in view.asking}
    elif view.status == COMPLETED:
        result = service.tool_result(view).model_dump(by_alias=True, mode="json", exclude_none=True)
        if view.disposition is not None:
            result["_meta"] = {**(result.get("_meta") or {}), DISPOSITION_META: view.disposition}
        task["result"] = result
    elif view.status == FAILED and view.error is not None:
        task["error"] = view.error
    return task


def input_request(decision: Decision, meta: JSONObject | None = None) -> dict[str, Any]:
    """The `elicitation/create` request of an outstanding question (`meta` for 2025-11-25's related task)."""
    params: dict[str, Any] = {"message": decision.message}
    if decision.mode is Mode.FORM:
        params |= {"mode": "form", "requestedSchema": decision.requested_schema}
    else:
        params |= {"mode": "url", "url": decision.url}
    if meta is not None:
        params["_meta"] = meta
    return {"method": "elicitation/create", "params": params}


class ExtMethods:
    """`tasks/get`, `tasks/update`, `tasks/cancel` at 2026-07-28."""

    def __init__(self, service: TaskService, principal_of: PrincipalOf) -> None:
        self._service = service
        self._principal_of = principal_of

    def bindings(self) -> list[MethodBinding]:
        return [
            MethodBinding("tasks/get", TaskIdParams, self.get, protocol_versions=EXT_VERSIONS),
            MethodBinding("tasks/update", UpdateParams, self.update, protocol_versions=EXT_VERSIONS),
            MethodBinding("tasks/cancel", TaskIdParams, self.cancel, protocol_versions=EXT_VERSIONS),
        ]

    def _caller(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> Principal:
        require_client_extension(ctx, TASKS_EXTENSION)
        headers = getattr(ctx.request, "headers", None)  # the HTTP request's, case-insensitive; None on stdio
        routed = headers.get(MCP_NAME_HEADER) if headers is not None else None
        if routed is not None and decode_header_value(routed) != params.task_id:
            raise MCPError(code=HEADER_MISMATCH, message=f"the {MCP_NAME_HEADER} header does not match params.taskId")
        return self._principal_of(ctx)

    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> HandlerResult:
        principal = self._caller(ctx, params)
        try:
            view = await self._service.book.view(principal, params.task_id)
        except TaskNotFound:
            raise not_found() from None
        return {"resultType": "complete", **ext_task(view, self._service)}

    async def update(self, ctx: ServerRequestContext[Any, Any], params: UpdateParams) -> HandlerResult:
        principal = self._caller(ctx, params)
        try:
            outstanding = {
                decision.key for decision in (await self._service.book.view(principal, params.task_id)).asking
            }
        except TaskNotFound:
            raise not_found() from None
        responses: dict[str, JSONObject] = {}
        for key, value in params.input_responses.items():
            if key not in outstanding:
                log.info("task %s: ignoring an answer to %r, which is not outstanding", params.task_id, key)
                continue
            try:
                response = ElicitResult.model_validate(value)
            except ValidationError:
                raise MCPError(
                    code=INVALID_PARAMS, message=f"inputResponses[{key!r}] is not an elicitation result"
                ) from None
            responses[key] = response.model_dump(by_alias=True, mode="json", exclude_none=True)
        try:
            await self._service.book.post(principal, params.task_id, responses)
        except TaskNotFound:
            raise not_found() from None
        return {"resultType": "complete"}

    async def cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> HandlerResult:
        principal = self._caller(ctx, params)
        try:
            await self._service.cancel(principal, params.task_id)
        except TaskNotFound:
            raise not_found() from None
        except TaskAlreadyEnded:
            log.info("task %s: cancel after it ended; acknowledged, nothing changes", params.task_id)
        return {"resultType": "complete"}


def not_found() -> MCPError:
    return MCPError(code=INVALID_PARAMS, message="Failed to retrieve task: Task not found")


class TasksExtension(Extension):
    """Serves `tasks/*` on both eras and turns an accepted 2026-07-28 call into its `CreateTaskResult`."""

    identifier = TASKS_EXTENSION

    def __init__(self, service: TaskService, bindings: Sequence[MethodBinding]) -> None:
        self._service = service
        self._bindings = _per_method(bindings)

    def methods(self) -> Sequence[MethodBinding]:
        return self._bindings

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        try:
            return await call_next(ctx)
        except TaskAccepted as accepted:
            if ctx.protocol_version not in EXT_VERSIONS:
                raise
            created = {"resultType": "task", **ext_task(accepted.view, self._service)}
            if accepted.view.meta.approval and not accepted.view.terminal:
                created["_meta"] = {IMMEDIATE_RESPONSE_META: IMMEDIATE_RESPONSE}
            return created


def _per_method(bindings: Sequence[MethodBinding]) -> list[MethodBinding]:
    """One binding per method (the SDK takes one handler each), handing each request to its version's handler."""
    by_method: dict[str, list[MethodBinding]] = {}
    for binding in bindings:
        by_method.setdefault(binding.method, []).append(binding)
    merged = []
    for method, versions in by_method.items():
        handlers = {version: b.handler for b in versions for version in b.protocol_versions or ()}

        async def dispatch(
            ctx: ServerRequestContext[Any, Any], params: Any, handlers: dict[str, RequestHandler] = handlers
        ) -> HandlerResult:
            return await handlers[ctx.protocol_version](ctx, params)

        params_type = versions[0].params_type
        merged.append(MethodBinding(method, params_type, dispatch, protocol_versions=frozenset(handlers)))
    return merged
