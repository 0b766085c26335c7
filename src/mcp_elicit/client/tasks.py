"""Following a tool call that the server runs as a task (the 2026-07-28 extension `io.modelcontextprotocol/tasks`).

With `ElicitingClient(tasks=True)` the kit declares the extension on every request, and a server may answer
`tools/call` with a task instead of a result. The kit then follows the task itself and `call_tool` returns
the tool's result as if the call had run on the request:

- it polls `tasks/get` at the server's `pollIntervalMs` (never faster than `MIN_POLL`, and 1 s when the
  server gives none), so a task that waits hours for a person costs one small request per interval;
- while the task is `input_required` it gives each entry of `inputRequests` to the handler exactly once
  (keys are deduplicated across polls; a server never reuses one), through the same path as any other
  question (the same trust model: a task is no higher-trust channel), and sends the answers with
  `tasks/update`;
- a `completed` task's `result` is the call's result; `failed` raises the task's JSON-RPC error as an
  `MCPError`; `cancelled` raises `TaskCancelled`; a task whose `ttlMs` ran out without an end raises
  `TaskExpired`.

With `ElicitingClient(tasks=True, tool_approval=True)` the kit also declares the experimental tool-approval
extension (a draft, SEP-2848, see `TOOL_APPROVAL_EXTENSION`): a server may then answer a call that waits on an
approval others give (people, a policy, an agent) with a task that stays `working` until it is decided. Such a
task is followed like any other; the host's wait for it is an approval wait ("Waiting for approval: TOOL", with
the server's status message). Its result says whether the tool ran; nothing of the approval reaches the client
but the task id.

`client.tasks` offers the host the tasks it follows (`following`, each with its status and the time it has
waited), `status(task_id)` and `cancel_task(task_id)`, and `attach(task_id, tool)`: after a client restart, the
host that kept the task id (the spec asks clients to keep it durably) follows the same task again, and its
outstanding questions are asked anew (nothing the person answered before the restart is asked twice: the
server no longer lists it).

On 2025-11-25 (the experimental core tasks) the kit asks for a task (`params.task`) only for a tool the
server lists with `execution.taskSupport` (so list the tools first) on a server whose handshake declared
`tasks.requests.tools.call`. It polls `tasks/get` the same way, and once the task is `input_required` (or
ended) calls `tasks/result`, which the server holds until the task ends while it sends the task's questions
on that stream as `elicitation/create` (the handler answers them like any other); its response is the
call's result. While `tasks/result` is held the server may send nothing: the client's silence watch
(`Timeouts.request`, 30 minutes by default) counts that time once nobody is being asked.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import anyio
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim, advertise
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CallToolResult,
    ElicitResult,
    ErrorData,
    InputRequest,
    InputResponse,
    Request,
    RequestParams,
    Result,
)
from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from mcp_elicit.client.calls import CallInFlight, Sleep
from mcp_elicit.client.errors import KitError, QuestionRefused
from mcp_elicit.client.pending import Wait
from mcp_elicit.model.extensions import TASKS_EXTENSION
from mcp_elicit.model.tool_approval import IMMEDIATE_RESPONSE_META, TOOL_APPROVAL_EXTENSION, TOOL_APPROVAL_VERSION

log = logging.getLogger(__name__)

EXTENSION_ERA = "2026-07-28"
MIN_POLL = 0.1
"""Seconds between two `tasks/get` at the least, whatever interval a server suggests."""
DEFAULT_POLL = 1.0
TERMINAL = frozenset({"completed", "failed", "cancelled"})
_DETAILED: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])
_INPUT_REQUEST: TypeAdapter[InputRequest] = TypeAdapter(InputRequest)


class TaskCancelled(KitError):
    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(f"the task {task_id} was cancelled")


class TaskExpired(KitError):
    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(f"the task {task_id} outlived its TTL without ending")


class CreatedTask(Result):
    """`CreateTaskResult`: the server runs the call as this task."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    result_type: Literal["task"] = Field(alias="resultType")
    task_id: str = Field(alias="taskId")
    status: str
    status_message: str | None = Field(default=None, alias="statusMessage")
    ttl_ms: int | None = Field(default=None, alias="ttlMs")
    poll_interval_ms: int | None = Field(default=None, alias="pollIntervalMs")


class _TaskParams(RequestParams):
    model_config = ConfigDict(populate_by_name=True)
    task_id: str = Field(alias="taskId")
    input_responses: dict[str, Any] | None = Field(default=None, alias="inputResponses")


class _TaskRequest(Request[_TaskParams, str]):
    name_param: ClassVar[str | None] = "taskId"
    """Over HTTP the task id rides the `Mcp-Name` header, as the extension requires."""


@dataclass
class TaskState:
    """A task as the kit last saw it; `elapsed` counts on the client's clock since the kit first saw it."""

    task_id: str
    tool: str
    status: str
    message: str | None
    poll_interval: float
    ttl: float | None
    seen_at: float
    checked_at: float
    asked: set[str] = field(default_factory=set)
    """The input request keys already given to the handler: each is asked once."""
    pause: anyio.CancelScope | None = None
    """The pause before the next poll, which the host's "retry now" or cancel cuts short."""
    cancelling: str | None = None
    """Why the host cancelled the task, once it did."""
    hurry: bool = False
    """The host asked to poll now while a poll was under way: the next pause is skipped."""
    approval: bool = False
    """The server made the call a task because it waits on an approval (the tool-approval extension)."""

    def elapsed(self, now: float) -> float:
        return now - self.seen_at


Dispatch = Callable[[CallInFlight, str, InputRequest], Awaitable[InputResponse | ErrorData]]
SessionOf = Callable[[], Any]


class Tasks:
    """`client.tasks`: the tasks this client follows, and the host's controls on them.

    It is also a status line's wait source (`pending.WaitSource`): a task the server works on without
    asking anything is a wait on the server, with the time elapsed and the task's TTL as its deadline;
    "retry now" polls at once, cancel cancels the task on the server and stops the call (`TaskCancelled`).
    """

    def __init__(
        self,
        session: SessionOf,
        dispatch: Dispatch,
        clock: Callable[[], float],
        sleep: Sleep,
        server: Callable[[], str] = lambda: "the server",
        protocol: Callable[[], str] = lambda: EXTENSION_ERA,
        approval: bool = False,
    ) -> None:
        self._session = session
        self._dispatch = dispatch
        self._clock = clock
        self._sleep = sleep
        self._server = server
        self._protocol = protocol
        self._following: dict[str, TaskState] = {}
        self._approval = approval

    @property
    def following(self) -> Sequence[TaskState]:
        return list(self._following.values())

    def waits(self) -> Sequence[Wait]:
        return [
            Wait(
                id=state.task_id,
                server=self._server(),
                message=_said(state),
                since=state.seen_at,
                started=state.seen_at,
                deadline=state.seen_at + state.ttl if state.ttl is not None else None,
                kind="server",
                approval=state.approval,
            )
            for state in self._following.values()
            if state.status == "working" and state.cancelling is None
        ]

    def retry_now(self, wait_id: str) -> bool:
        state = self._following.get(wait_id)
        if state is None:
            return False
        if state.pause is not None:
            state.pause.cancel()
        else:
            state.hurry = True
        return True

    def cancel(self, wait_id: str, reason: str) -> bool:
        state = self._following.get(wait_id)
        if state is None:
            return False
        state.cancelling = reason
        if state.pause is not None:
            state.pause.cancel()
        return True

    def extension(self) -> ClientExtension:
        """What `Client(extensions=...)` needs to declare tasks and read a `resultType: "task"` result."""
        return _TasksExtension(self)

    def extensions(self) -> list[ClientExtension]:
        """Every extension this client declares for tasks: the tasks extension, and tool approval if asked."""
        if not self._approval:
            return [self.extension()]
        return [self.extension(), advertise(TOOL_APPROVAL_EXTENSION, {"version": TOOL_APPROVAL_VERSION})]

    async def status(self, task_id: str) -> dict[str, Any]:
        """The task as the server shows it now (`tasks/get`)."""
        return await self._request("tasks/get", task_id)

    async def cancel_task(self, task_id: str) -> None:
        """Ask the server to cancel the task (`tasks/cancel`); cancellation is cooperative and may lose to the end."""
        await self._request("tasks/cancel", task_id)

    async def attach(self, task_id: str, tool: str) -> CallToolResult:
        """Follow a task this client (or its previous process) was given, to its end."""
        call = CallInFlight("tool", tool)
        if self._protocol() == EXTENSION_ERA:
            return await self.follow(task_id, call)
        return await self.follow_legacy({"taskId": task_id}, call)

    async def follow(self, task_id: str, call: CallInFlight, first: CreatedTask | None = None) -> CallToolResult:
        now = self._clock()
        state = TaskState(
            task_id=task_id,
            tool=call.name,
            status=first.status if first is not None else "working",
            message=first.status_message if first is not None else None,
            poll_interval=_interval(first.poll_interval_ms if first is not None else None),
            ttl=first.ttl_ms / 1000 if first is not None and first.ttl_ms is not None else None,
            seen_at=now,
            checked_at=now,
            approval=self._approval and first is not None and IMMEDIATE_RESPONSE_META in (first.meta or {}),
        )
        self._following[task_id] = state
        try:
            while True:
                detailed = await self.status(task_id)
                self._update(state, detailed)
                if state.status in TERMINAL:
                    return _ended(task_id, detailed)
                if state.status == "input_required":
                    await self._answer(state, call, detailed.get("inputRequests") or {})
                if state.ttl is not None and state.elapsed(self._clock()) > state.ttl:
                    raise TaskExpired(task_id)
                await self._pause(state)
                if state.cancelling is not None:
                    log.info("task %s: cancelled by the host (%s)", task_id, state.cancelling)
                    await self.cancel_task(task_id)
                    raise TaskCancelled(task_id)
        finally:
            self._following.pop(task_id, None)

    async def follow_legacy(self, created: dict[str, Any], call: CallInFlight) -> CallToolResult:
        """A 2025-11-25 task to its end: `tasks/get` until there is something to ask or a result, then
        `tasks/result`, whose stream carries the questions."""
        task_id = str(created.get("taskId"))
        now = self._clock()
        state = TaskState(task_id, call.name, "working", None, DEFAULT_POLL, None, now, now)
        self._update(state, created)
        self._following[task_id] = state
        try:
            while True:
                self._update(state, await self.status(task_id))
                if state.status == "cancelled":
                    raise TaskCancelled(task_id)
                if state.status in TERMINAL or state.status == "input_required":
                    result = await self._request("tasks/result", task_id)
                    return CallToolResult.model_validate(result)
                if state.ttl is not None and state.elapsed(self._clock()) > state.ttl:
                    raise TaskExpired(task_id)
                await self._pause(state)
                if state.cancelling is not None:
                    await self.cancel_task(task_id)
                    raise TaskCancelled(task_id)
        finally:
            self._following.pop(task_id, None)

    async def _pause(self, state: TaskState) -> None:
        """Until the next poll, unless the host asked to poll now or cancelled meanwhile."""
        if state.hurry or state.cancelling is not None:
            state.hurry = False
            return
        with anyio.CancelScope() as state.pause:
            await self._sleep(state.poll_interval)
        state.pause = None

    def _update(self, state: TaskState, detailed: dict[str, Any]) -> None:
        """Read a task (2026-07-28 field names, or 2025-11-25's `ttl` and `pollInterval`)."""
        state.status = str(detailed.get("status"))
        state.message = detailed.get("statusMessage")
        state.poll_interval = _interval(detailed.get("pollIntervalMs", detailed.get("pollInterval")))
        ttl = detailed.get("ttlMs", detailed.get("ttl"))
        state.ttl = ttl / 1000 if isinstance(ttl, int | float) else None
        state.checked_at = self._clock()

    async def _answer(self, state: TaskState, call: CallInFlight, requests: dict[str, Any]) -> None:
        for key, raw in requests.items():
            if key in state.asked:
                continue
            state.asked.add(key)
            try:
                request = _INPUT_REQUEST.validate_python(raw)
            except ValidationError:
                log.warning("task %s: input request %r is malformed; answering cancel", state.task_id, key)
                await self._respond(state.task_id, key, ElicitResult(action="cancel"))
                continue
            try:
                response = await self._dispatch(call, key, request)
            except QuestionRefused:
                await self._respond(state.task_id, key, ElicitResult(action="cancel"))
                raise
            if isinstance(response, ErrorData):
                response = ElicitResult(action="cancel")
            await self._respond(state.task_id, key, response)

    async def _respond(self, task_id: str, key: str, response: InputResponse) -> None:
        dumped = response.model_dump(by_alias=True, mode="json", exclude_none=True)
        dumped.pop("resultType", None)
        await self._request("tasks/update", task_id, {key: dumped})

    async def _request(self, method: str, task_id: str, responses: dict[str, Any] | None = None) -> dict[str, Any]:
        params = _TaskParams.model_validate({"taskId": task_id, "inputResponses": responses})
        request = _TaskRequest(method=method, params=params)
        result: dict[str, Any] = await self._session().send_request(request, _DETAILED)
        return result


def _said(state: TaskState) -> str:
    """A followed task as its wait reads (an approval wait is titled so: `Wait.approval`)."""
    if state.approval:
        return state.tool + (f": {state.message}" if state.message else "")
    return f"the task of {state.tool} is {state.status}" + (f": {state.message}" if state.message else "")


def _interval(milliseconds: object) -> float:
    if not isinstance(milliseconds, int | float) or isinstance(milliseconds, bool) or milliseconds <= 0:
        return DEFAULT_POLL
    return max(milliseconds / 1000, MIN_POLL)


def _ended(task_id: str, detailed: dict[str, Any]) -> CallToolResult:
    status = detailed.get("status")
    if status == "completed":
        return CallToolResult.model_validate(detailed.get("result") or {})
    if status == "cancelled":
        raise TaskCancelled(task_id)
    error = detailed.get("error") or {}
    raise MCPError(
        code=int(error.get("code", -32603)), message=str(error.get("message") or detailed.get("statusMessage"))
    )


class _TasksExtension(ClientExtension):
    identifier = TASKS_EXTENSION

    def __init__(self, tasks: Tasks) -> None:
        self._tasks = tasks

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self._resolve)]

    async def _resolve(self, created: CreatedTask, context: ClaimContext) -> CallToolResult:
        """For a plain `Client.call_tool`: follow the task like the kit's own calls do."""
        return await self._tasks.follow(created.task_id, CallInFlight("tool", context.tool_name), created)
