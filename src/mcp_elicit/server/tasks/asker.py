"""How a task's body asks: it puts the task in `input_required` and waits for the answer posted to the mailbox.

The body runs in the background, on no request. A question it asks is a decision like any other; while it
is `requested` with nothing posted for its key, the task reads as `input_required` with that question
outstanding (see `state`). The answer arrives in the task's mailbox from whichever instance served the
client's `tasks/update` or `tasks/result`; the body applies it here exactly as a 2026-07-28 round applies
an `inputResponses` entry: decline and cancel closed by compare-and-set, a form answer recorded only once
its form's validation passes. An answer that does not fit is recorded for what it is and the question is
asked again under a new key (`flow.ask`'s own re-ask), since a task's keys are never reused. The inbox
page may answer the same decision meanwhile; the compare-and-set lets one answer in.

A URL question's consent moves it to `accepted_url`; the body then waits for the flow to finish (the
server's page and callback), up to the decision's TTL, as on a legacy call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from datetime import timedelta
from typing import Any

import anyio
from mcp_types import ElicitResult
from pydantic import ValidationError

from mcp_elicit.model import Decision, DecisionStatus, Operation, OperationStatus, Principal
from mcp_elicit.server.eras import Declared, Need, Target
from mcp_elicit.server.eras.capabilities import legacy_missing_capability
from mcp_elicit.server.execution import A, ClientQuery, Execution, UnusableAnswer
from mcp_elicit.server.forms import FormSpec, InvalidAnswer
from mcp_elicit.server.signals import Suspended
from mcp_elicit.server.tasks.state import TaskBook
from mcp_elicit.server.waiting import Backoff
from mcp_elicit.server.writes import HeldWrites, OperationEnded
from mcp_elicit.store import OperationRecords
from mcp_elicit.store.aio import AsyncStore


class TaskEra:
    """The era adapter of a task's background run: the operation is the task's, asked through the mailbox."""

    def __init__(self, operation: Operation, declared: Declared, book: TaskBook, poll: timedelta) -> None:
        self._operation = operation
        self._declared = declared
        self._book = book
        self._poll = poll

    async def resume(
        self, store: AsyncStore, principal: Principal, target: Target, writes: HeldWrites
    ) -> OperationRecords | None:
        records = await store.get_operation_records(self._operation.operation_id, principal)
        if records.operation.status is not OperationStatus.OPEN:
            raise OperationEnded(records.operation)
        return records

    def asker(self) -> TaskAsker:
        return TaskAsker(self._declared, self._book, self._poll)

    async def suspended(self, signal: Suspended, run: Execution) -> Any:
        raise TypeError(f"{type(signal).__name__} cannot end a task's turn: a task waits instead")

    def missing_capability(self, needs: frozenset[Need], *, tool: bool) -> Exception:
        return legacy_missing_capability(needs, tool=tool)


class TaskAsker:
    def __init__(self, declared: Declared, book: TaskBook, poll: timedelta) -> None:
        self._declared = declared
        self._book = book
        self._poll = poll

    def can(self, need: Need) -> bool:
        return need in (Need.FORM, Need.URL) and self._declared.allows(need)

    async def query(self, run: Execution, key: str, query: ClientQuery, answer: type[A]) -> A:
        raise AssertionError("a task declares neither sampling nor roots, so nothing queries the client")

    async def gather(self, run: Execution, items: Sequence[Awaitable[Any]]) -> list[Any]:
        """Every item at once: a task lists all the questions of a `gather` together, answerable in any order."""
        results: list[Any] = [None] * len(items)

        async def one(index: int, item: Awaitable[Any]) -> None:
            results[index] = await item

        try:
            async with anyio.create_task_group() as group:
                for index, item in enumerate(items):
                    group.start_soon(one, index, item)
        except BaseExceptionGroup as failed:
            raise failed.exceptions[0] from None
        return results

    async def await_approvers(self, run: Execution, decision: Decision) -> Decision:
        """A task waits as long as the decision is open; its status says who it waits on (see `state`)."""
        return await run.wait_for_approvers(decision, patience=None)

    async def ask(self, run: Execution, decision: Decision, form: FormSpec[Any] | None) -> Decision:
        backoff = Backoff()
        while not decision.is_terminal:
            if decision.status is DecisionStatus.REQUESTED:
                posted = await self._book.posted(run.principal, run.operation.operation_id, decision.key)
                if posted is not None:
                    decision = await _apply(run, decision, form, posted)
                    await run.commit_taking_lease_back()
                    if decision.is_terminal or decision.status is DecisionStatus.ACCEPTED_URL:
                        backoff = Backoff()
                        continue
            run.release_lease()  # no call waits on the run lease while a person thinks
            await run.commit()
            until = min(decision.expires_at, run.now() + self._poll)
            await run.pause([decision.elicitation_id, run.operation.operation_id], until=until, backoff=backoff)
            decision = await run.refresh(decision)
        return decision


async def _apply(run: Execution, decision: Decision, form: FormSpec[Any] | None, posted: object) -> Decision:
    """Record a posted answer the way every other path does (see `Execution.apply_answer`). One that does not
    fit is never recorded as an answer: the question is closed, its content dropped, and asked again under the
    next key, since a task's keys are never reused."""
    try:
        response = ElicitResult.model_validate(posted)
    except ValidationError:
        return await run.record(decision, DecisionStatus.CANCELLED, reason="the task's answer was malformed")
    applied = await run.apply_answer(decision, form, response)
    if isinstance(applied, InvalidAnswer):
        await run.record(decision, DecisionStatus.CANCELLED, reason=f"the answer does not fit: {applied}")
        raise UnusableAnswer(applied)
    return applied
