"""A task as the store holds it: the operation is the task, its journal the task's metadata and mailbox.

No new records: a task is an operation whose journal holds `mcp-elicit/task` (written once, in the
transaction that creates it: the era, TTL, poll interval, the client's declared modes and the call's
arguments, which a resumed body needs). Its status is read off what is stored, never kept apart, so no
two records can disagree: an open operation with a question no answer was posted for is
`input_required`, any other open one `working`, and the operation's end gives the terminal status.

Answers from the client (a 2026-07-28 `tasks/update`, the response to a 2025-11-25 `elicitation/create`
sent on `tasks/result`) are posted to the task's mailbox: a journal entry per request key, written once,
so a duplicate is ignored by the store itself. Only the body that asked applies a posted answer (with its
form's validation, by compare-and-set, audited), on whichever instance runs it.

Guarantees: every read and write is made as the caller's principal, so another principal's task reads
as missing (`TaskNotFound`), exactly like one that never existed. An overdue task is ended as expired
when read, with its open decisions. Does not guarantee that a posted answer is ever applied: a task
cancelled or expired first never applies it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from mcp_elicit.model import (
    Decision,
    DecisionStatus,
    JSONObject,
    JSONValue,
    Operation,
    OperationStatus,
    Operator,
    Principal,
    Tally,
    UnencodableValue,
    check_encodable,
)
from mcp_elicit.model.tool_approval import APPROVED_EXECUTED, DENIED_NOT_EXECUTED, EXECUTION_ERROR
from mcp_elicit.server.execution import RESERVED_JOURNAL_PREFIX
from mcp_elicit.store import (
    DecisionConflict,
    DecisionExpired,
    NotFound,
    OperationConflict,
    OperationExpired,
    Store,
)
from mcp_elicit.store.aio import AsyncStore

log = logging.getLogger(__name__)

META_JOURNAL = f"{RESERVED_JOURNAL_PREFIX}task"
MAILBOX_PREFIX = f"{RESERVED_JOURNAL_PREFIX}task/answer/"
ERROR_JOURNAL = f"{RESERVED_JOURNAL_PREFIX}task/error"
DENIED_JOURNAL = f"{RESERVED_JOURNAL_PREFIX}approval/denied"
"""Recorded with the end of an approval task whose tool never ran (rejected, expired, refused on re-evaluation)."""
APPROVAL_STATUS = "Waiting for approval"
"""A tool-approval task's status message while it is `working` (`eras.tool_approval`): neutral on purpose."""
WORKING, INPUT_REQUIRED, COMPLETED, FAILED, CANCELLED = "working", "input_required", "completed", "failed", "cancelled"
TERMINAL = frozenset({COMPLETED, FAILED, CANCELLED})
EXT_ERA, LEGACY_ERA = "2026-07-28", "2025-11-25"


class TaskNotFound(LookupError):
    """No task of the caller's has this id (it never existed, or it is someone else's)."""


class TaskAlreadyEnded(ValueError):
    """The task is in a terminal status: it cannot be cancelled any more. `status` is how its operation ended
    (`expired` included, which a task reads as `failed`), for an operator who asks why nothing changed."""

    def __init__(self, task_id: str, status: OperationStatus) -> None:
        self.task_id = task_id
        self.status = status
        super().__init__(f"the task {task_id} already ended as {status.value}")


@dataclass(frozen=True, slots=True)
class TaskMeta:
    """What a task's body needs to run again anywhere, and what its client was told."""

    era: str
    ttl_ms: int
    poll_interval_ms: int
    arguments: JSONObject
    form: bool
    url: bool
    approval: bool = False
    """A task made because the call waits on an approval others give (the tool-approval extension)."""

    def dumped(self) -> JSONObject:
        dumped: JSONObject = {
            "era": self.era,
            "ttlMs": self.ttl_ms,
            "pollIntervalMs": self.poll_interval_ms,
            "arguments": self.arguments,
            "form": self.form,
            "url": self.url,
        }
        if self.approval:
            dumped["approval"] = True
        return dumped

    @classmethod
    def loaded(cls, value: JSONValue) -> TaskMeta:
        data = cast(dict[str, Any], value)
        return cls(
            era=str(data["era"]),
            ttl_ms=int(data["ttlMs"]),
            poll_interval_ms=int(data["pollIntervalMs"]),
            arguments=cast(JSONObject, data.get("arguments") or {}),
            form=bool(data.get("form")),
            url=bool(data.get("url")),
            approval=data.get("approval") is True,
        )


@dataclass(frozen=True, slots=True)
class TaskView:
    """A task as its client sees it now; the era adapters put it on the wire."""

    task_id: str
    tool: str
    status: str
    message: str | None
    created_at: datetime
    updated_at: datetime
    meta: TaskMeta
    asking: tuple[Decision, ...] = ()
    """The outstanding questions, each under its decision's key (unique over the task's lifetime)."""
    result: JSONValue = None
    """The tool body's recorded return value, when it completed."""
    tool_error: str | None = None
    """The tool error the body ended with (the tool's result is then an `isError` one)."""
    error: JSONObject | None = None
    """The JSON-RPC error the task failed with."""
    disposition: str | None = None
    """An approval task's outcome once completed: whether the tool ran (`eras.tool_approval`)."""

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


@dataclass(frozen=True, slots=True)
class _Base:
    task_id: str
    tool: str
    created_at: datetime
    updated_at: datetime
    meta: TaskMeta

    def fields(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "tool": self.tool,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "meta": self.meta,
        }


def mailbox(key: str) -> str:
    return MAILBOX_PREFIX + key


class TaskBook:
    """Reads and writes tasks in the store, always as the caller."""

    def __init__(self, store: AsyncStore, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._clock = clock

    async def found(self, principal: Principal, task_id: str) -> tuple[Operation, TaskMeta]:
        try:
            operation = await self._store.get_operation(task_id, principal)
        except NotFound:
            raise TaskNotFound(task_id) from None
        entry = await self._store.journal_get(task_id, META_JOURNAL, caller=principal)
        if entry is None:
            raise TaskNotFound(task_id)
        try:
            return operation, TaskMeta.loaded(entry.value)
        except (KeyError, TypeError, ValueError) as unreadable:
            log.error("task %s: its metadata cannot be read (%r); treating it as no task", task_id, unreadable)
            raise TaskNotFound(task_id) from None

    async def view(self, principal: Principal, task_id: str) -> TaskView:
        operation, meta = await self.found(principal, task_id)
        if operation.status is OperationStatus.OPEN and self._clock() >= operation.expires_at:
            operation = await self.expire(operation, principal)
        return await self._viewed(operation, meta, principal)

    async def _viewed(self, operation: Operation, meta: TaskMeta, principal: Principal) -> TaskView:
        decisions = await self._store.list_decisions(principal, operation_id=operation.operation_id, limit=1000)
        updated = max([operation.updated_at, *(d.updated_at for d in decisions)])
        base = _Base(operation.operation_id, operation.target, operation.created_at, updated, meta)
        status = operation.status
        if status is OperationStatus.OPEN:
            asking = []
            approvals = []
            for decision in reversed(decisions):
                if decision.status is not DecisionStatus.REQUESTED:
                    continue
                if decision.approvers is not None:  # others answer it: never an input request of the task's client
                    approvals.append(decision)
                    continue
                name = mailbox(decision.key)
                posted = await self._store.journal_get(operation.operation_id, name, caller=principal)
                if posted is None:
                    asking.append(decision)
            if asking:
                return TaskView(
                    status=INPUT_REQUIRED, message="Waiting for an answer", asking=tuple(asking), **base.fields()
                )
            flows = [d for d in decisions if d.status in (DecisionStatus.ACCEPTED_URL, DecisionStatus.EXTERNAL_PENDING)]
            message = "Waiting for the browser flow to finish" if flows else "Working"
            if meta.approval:
                # The draft's MUST NOT: a tool-approval task's status message leaks nothing of who approves (not
                # their roles, nor a backend's `agent:NAME`), nor how far their votes went.
                message = APPROVAL_STATUS
            elif approvals:
                message = "; ".join([await self._waiting(decision) for decision in approvals])
            return TaskView(status=WORKING, message=message, **base.fields())
        if status is OperationStatus.COMPLETED or (status is OperationStatus.FAILED and operation.result is not None):
            ran = APPROVED_EXECUTED if meta.approval else None
            return TaskView(
                status=COMPLETED, message="Completed", result=operation.result, disposition=ran, **base.fields()
            )
        if status is OperationStatus.CANCELLED:
            return TaskView(status=CANCELLED, message="Cancelled", **base.fields())
        if status is OperationStatus.EXPIRED:
            error: JSONObject = {"code": -32603, "message": "The task's TTL elapsed before it finished"}
            return TaskView(status=FAILED, message=str(error["message"]), error=error, **base.fields())
        failure = await self._store.journal_get(operation.operation_id, ERROR_JOURNAL, caller=principal)
        if failure is not None:
            error = cast(JSONObject, failure.value)
            return TaskView(status=FAILED, message=str(error.get("message")), error=error, **base.fields())
        trail = await self._store.audit_trail(operation.operation_id, principal)
        reason = next((e.reason for e in reversed(trail) if e.to_status == OperationStatus.FAILED), "") or "failed"
        disposition = None
        if meta.approval:
            denied = await self._store.journal_get(operation.operation_id, DENIED_JOURNAL, caller=principal)
            disposition = EXECUTION_ERROR if denied is None else DENIED_NOT_EXECUTED
        return TaskView(
            status=COMPLETED,
            message="The tool reported an error",
            tool_error=reason,
            disposition=disposition,
            **base.fields(),
        )

    async def _waiting(self, decision: Decision) -> str:
        """Who a question with approvers waits on, and how far their votes went: the task's status message."""
        assert decision.approvers is not None
        tally = Tally.of(decision.approvers, await self._store.votes(decision.elicitation_id))
        return tally.waiting(decision.approvers, decision.created_at, self._clock())

    async def post(self, principal: Principal, task_id: str, responses: Mapping[str, JSONObject]) -> list[str]:
        """Post the answers to questions still outstanding; every other key is ignored (the spec's SHOULD).

        Returns the keys posted. A key posted already is not posted again: the first answer stands.
        """
        view = await self.view(principal, task_id)
        outstanding = {decision.key for decision in view.asking}
        posted = []
        for key, response in responses.items():
            if key not in outstanding:
                log.info("task %s: ignoring an answer to %r, which is not outstanding", task_id, key)
                continue
            try:
                check_encodable(response)
            except UnencodableValue as unencodable:  # it stays outstanding: asked again, as for an invalid answer
                log.info("task %s: ignoring an answer to %r: %s", task_id, key, unencodable)
                continue
            await self._store.journal_record(task_id, mailbox(key), response, caller=principal)
            posted.append(key)
        return posted

    async def posted(self, principal: Principal, task_id: str, key: str) -> JSONObject | None:
        entry = await self._store.journal_get(task_id, mailbox(key), caller=principal)
        return None if entry is None else cast(JSONObject, entry.value)

    async def cancel(self, principal: Principal, task_id: str, *, reason: str = "cancelled by its client") -> TaskView:
        operation, meta = await self.found(principal, task_id)
        if operation.status is not OperationStatus.OPEN:
            raise TaskAlreadyEnded(task_id, operation.status)
        ended = await self._end(operation, principal, OperationStatus.CANCELLED, DecisionStatus.CANCELLED, reason)
        if ended.status is not OperationStatus.CANCELLED:
            raise TaskAlreadyEnded(task_id, ended.status)
        return await self._viewed(ended, meta, principal)

    async def expire(self, operation: Operation, principal: Principal) -> Operation:
        return await self._end(
            operation, principal, OperationStatus.EXPIRED, DecisionStatus.CANCELLED, "the task's TTL elapsed"
        )

    async def fail(self, operation: Operation, principal: Principal, error: JSONObject) -> Operation:
        """End the task as failed with a JSON-RPC error (recorded first, so no reader sees a failure without it)."""
        await self._store.journal_record(operation.operation_id, ERROR_JOURNAL, error, caller=principal)
        current = await self._store.get_operation(operation.operation_id, principal)
        return await self._end(
            current, principal, OperationStatus.FAILED, DecisionStatus.CANCELLED, str(error.get("message"))
        )

    async def _end(
        self, operation: Operation, principal: Principal, to: OperationStatus, closing: DecisionStatus, reason: str
    ) -> Operation:
        """End the operation and close its open decisions, in one transaction; the first end written wins."""
        store = self._store

        async def end() -> Operation:
            listed = await store.list_decisions(principal, operation_id=operation.operation_id, limit=1000)
            for decision in listed:
                if decision.is_terminal:
                    continue
                if to is OperationStatus.EXPIRED:
                    # A question never outlives its operation (`Execution._within_operation`): it is due now.
                    decision = await store.expire_if_overdue(decision.elicitation_id, principal, reason=reason)
                    if decision.is_terminal:
                        continue
                try:
                    await store.transition(decision, closing, caller=principal, reason=reason)
                except (DecisionConflict, DecisionExpired) as lost:
                    log.info("decision %s moved while its task ended: %s", decision.elicitation_id, lost)
            # Expiry is the store's to decide: a move at or after the TTL ends the operation as expired.
            final = OperationStatus.FAILED if to is OperationStatus.EXPIRED else to
            try:
                return await store.finish_operation(operation, final, caller=principal, reason=reason)
            except (OperationConflict, OperationExpired) as lost:
                return lost.current

        return await store.atomically(end)


def ttl_ms(ttl: timedelta) -> int:
    return int(ttl.total_seconds() * 1000)


def task_status(store: Store, operation_id: str, caller: Operator) -> str | None:
    """An operator's view of an operation as a task (from a synchronous store): its task status, None when
    it is no task. The same rules as `TaskBook.view`, without its details or its expiring on the way."""
    operation = store.get_operation(operation_id, caller)
    owner = operation.principal
    if store.journal_get(operation_id, META_JOURNAL, caller=owner) is None:
        return None
    if operation.status is OperationStatus.OPEN:
        for decision in store.list_decisions(owner, operation_id=operation_id, limit=1000):
            if decision.status is DecisionStatus.REQUESTED and (
                store.journal_get(operation_id, mailbox(decision.key), caller=owner) is None
            ):
                return INPUT_REQUIRED
        return WORKING
    if operation.status is OperationStatus.COMPLETED or operation.result is not None:
        return COMPLETED
    if operation.status is OperationStatus.CANCELLED:
        return CANCELLED
    return FAILED


def cancel_task(store: Store, operation_id: str, caller: Operator, reason: str) -> Operation:
    """An operator cancels a task (from a synchronous store): its open questions and the operation, in one
    transaction; the body stops at its next look (`runner`). A task that ended, before or while this ran,
    raises `TaskAlreadyEnded` with how it ended, and nothing is written: the store would take an ended snapshot
    for a caller's mistake (`IllegalTransition`), and a lost race reads to an operator as the same refusal."""

    def cancel() -> Operation:
        operation = store.get_operation(operation_id, caller)
        if operation.status is not OperationStatus.OPEN:
            raise TaskAlreadyEnded(operation_id, operation.status)
        for decision in store.list_decisions(caller, operation_id=operation_id, limit=1000):
            if decision.is_terminal:
                continue
            try:
                store.transition(decision, DecisionStatus.CANCELLED, caller=caller, reason=reason)
            except (DecisionConflict, DecisionExpired) as lost:
                log.info("decision %s moved while its task was cancelled: %s", decision.elicitation_id, lost)
        try:
            return store.finish_operation(operation, OperationStatus.CANCELLED, caller=caller, reason=reason)
        except (OperationConflict, OperationExpired) as lost:
            raise TaskAlreadyEnded(operation_id, lost.current.status) from lost

    return store.atomically(cancel)
