"""The tasks a server runs, era-blind: accepting a call as a task, and what `tasks/*` may do with it.

A tool call becomes a task when the tool's policy allows it and its client asked for one (each era says how,
see `eras/tasks_ext` and `eras/tasks_legacy`). The task is the call's operation, created (with its
metadata and its entry in the task index) in one transaction before the client hears of it, so a
`tasks/get` for the id it gets always resolves. An identical call while the task is open gets the same
task. The body then runs in the background (`runner`).

Every `tasks/*` request is served as its caller's principal: another principal's task is `TaskNotFound`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Protocol

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolResult, TextContent

from mcp_elicit.model import JSONObject, JSONValue, Operation, Principal, new_operation
from mcp_elicit.server.eras import Call, Declared, Target
from mcp_elicit.server.signals import Signal
from mcp_elicit.server.tasks.policy import TaskPolicy, TaskSettings
from mcp_elicit.server.tasks.runner import TaskRunner
from mcp_elicit.server.tasks.state import META_JOURNAL, TaskBook, TaskMeta, TaskView, ttl_ms
from mcp_elicit.server.waiting import Wakeups
from mcp_elicit.store import IdempotencyKeyConflict
from mcp_elicit.store.aio import AsyncStore
from mcp_elicit.telemetry import calls as telemetry
from mcp_elicit.telemetry.instruments import Ending

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TaskRequest:
    """A client's request that this call run as a task, in its era's terms."""

    era: str
    ttl_ms: int | None = None
    approval: bool = False
    """The call waits on an approval others give: the tool-approval extension's task (`eras.tool_approval`)."""


class TaskWire(Protocol):
    """One era's way of asking for a task and of refusing a call that must be one."""

    era: str

    def requested(self, call: Call) -> TaskRequest | None: ...

    def required(self, tool: str) -> MCPError:
        """The error for a call of a task-only tool whose client did not ask for a task."""
        ...

    def forbidden(self, tool: str) -> MCPError | None:
        """The error for a task asked of a tool that never runs as one, if the era has one."""
        ...


class TaskAccepted(Signal):
    """The call was accepted as a task: the era's wire code answers it with this task, not a tool result."""

    def __init__(self, view: TaskView) -> None:
        self.view = view
        super().__init__(f"task {view.task_id} accepted")

    @property
    def ends_as(self) -> Ending:
        return Ending("task", self.view.task_id)


class TaskService:
    def __init__(
        self,
        store: AsyncStore,
        runner: TaskRunner,
        book: TaskBook,
        settings: TaskSettings,
        wires: list[TaskWire],
        clock: Callable[[], datetime],
        wakeups: Wakeups,
        results: Callable[[str, JSONValue], CallToolResult],
    ) -> None:
        self._store = store
        self.runner = runner
        self.book = book
        self.settings = settings
        self._wires = wires
        self.clock = clock
        self.wakeups = wakeups
        self._results = results
        self.policies: dict[str, TaskPolicy] = {}
        """Each task-capable tool's policy, by name; a tool missing here never runs as a task."""

    def policy_of(self, tool: str) -> TaskPolicy:
        return self.policies.get(tool, TaskPolicy.NEVER)

    def requested(self, call: Call) -> TaskRequest | None:
        for wire in self._wires:
            if wire.era == call.request.protocol_version:
                return wire.requested(call)
        return None

    def decide(self, tool: str, call: Call) -> TaskRequest | None:
        """The task this call runs as, None to run it on the call; an era's error when neither may be."""
        policy, wanted = self.policy_of(tool), self.requested(call)
        wire = next((w for w in self._wires if w.era == call.request.protocol_version), None)
        if policy is TaskPolicy.NEVER:
            refusal = wire.forbidden(tool) if wire is not None and wanted is not None else None
            if refusal is not None:
                raise refusal
            return None
        if wanted is None and policy is TaskPolicy.REQUIRED:
            if wire is None:
                raise MCPError(
                    code=INVALID_PARAMS,
                    message=f"The tool {tool!r} runs only as a task, which this protocol version has no way to ask for",
                )
            raise wire.required(tool)
        return wanted

    async def accept(
        self,
        request: TaskRequest,
        principal: Principal,
        target: Target,
        key: str | None,
        arguments: JSONObject,
        declared: Declared,
        admit: Callable[[], Awaitable[None]] | None = None,
    ) -> TaskAccepted:
        """Create the task (or find the identical call's open one) durably, start its body, and say so.

        `admit` is awaited in the transaction that creates a new task, after its operation is written (so it
        counts itself) and before it commits; what it raises undoes the task. An identical call that finds the
        open task is not asked."""
        if not self.runner.running:
            raise RuntimeError("tasks run in the background of a served app: serve it with its lifespan")
        now = self.clock()
        ttl = self.settings.ttl_for(request.ttl_ms)
        meta = TaskMeta(
            era=request.era,
            ttl_ms=ttl_ms(ttl),
            poll_interval_ms=ttl_ms(self.settings.poll_interval),
            arguments=arguments,
            form=declared.form,
            url=declared.url,
            approval=request.approval,
        )
        candidate = new_operation(
            principal,
            method=target.method,
            target=target.name,
            request_digest=target.request_digest,
            now=now,
            ttl=ttl,
            idempotency_key=key,
        )
        index = await self.runner.index()

        store = self._store

        async def create() -> tuple[Operation, bool]:
            start = await store.begin_operation(candidate)
            operation = start.operation
            if key is not None and operation.request_digest != target.request_digest:
                raise IdempotencyKeyConflict(key, "the same tool with other arguments")
            if await store.journal_get(operation.operation_id, META_JOURNAL, caller=principal) is not None:
                return operation, False
            if admit is not None:
                await admit()
            # A call that began on its request (`TaskStart.FLOW`) keeps its operation, and so its TTL.
            lasts = replace(meta, ttl_ms=ttl_ms(operation.expires_at - operation.created_at))
            await store.journal_record(operation.operation_id, META_JOURNAL, lasts.dumped(), caller=principal)
            await self.runner.enlist(index, operation.operation_id)
            return operation, True

        try:
            operation, new = await store.atomically(create)
        except IdempotencyKeyConflict as conflict:
            raise MCPError(code=INVALID_PARAMS, message=str(conflict)) from None
        # The task as created: read before its body starts, which may ask at once (`input_required`) and would
        # race the answer that creates it.
        view = await self.book.view(principal, operation.operation_id)
        telemetry.in_operation(operation)
        if new:
            log.info("task %s accepted for %s %s", operation.operation_id, target.method, target.name)
            self.runner.spawn(operation.operation_id, principal)
        return TaskAccepted(view)

    def tool_result(self, view: TaskView) -> CallToolResult:
        """The tool result a completed task hands over, as the call would have returned it."""
        if view.tool_error is not None:
            return CallToolResult(content=[TextContent(type="text", text=view.tool_error)], is_error=True)
        return self._results(view.tool, view.result)

    async def cancel(self, principal: Principal, task_id: str) -> TaskView:
        view = await self.book.cancel(principal, task_id)
        self.runner.stop(task_id)
        return view
