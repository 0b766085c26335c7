"""An operator cancels a task (`cancel_task`, what `mcp-elicit decisions cancel` runs): a waiting task ends with
its open questions; a task that already ended is refused as such, by its id and how it ended, and left as it is."""

from __future__ import annotations

from datetime import timedelta

import pytest

from mcp_elicit.model import DecisionStatus, JSONValue, Operation, OperationStatus, Operator
from mcp_elicit.server.tasks import TaskAlreadyEnded
from mcp_elicit.server.tasks.state import META_JOURNAL, TaskMeta, cancel_task
from mcp_elicit.store import Store
from tests.helpers.clock import FakeClock
from tests.helpers.records import Records

ONCALL = Operator("oncall")


def a_task(store: Store, records: Records) -> Operation:
    operation = records.operation(ttl=timedelta(hours=1))
    meta = TaskMeta(era="2026-07-28", ttl_ms=3_600_000, poll_interval_ms=1_000, arguments={}, form=True, url=False)
    store.journal_record(operation.operation_id, META_JOURNAL, meta.dumped(), caller=operation.principal)
    return operation


def test_a_waiting_task_is_cancelled_with_its_open_question(store: Store, records: Records) -> None:
    task = a_task(store, records)
    question = records.form(task)
    cancelled = cancel_task(store, task.operation_id, ONCALL, "wrong environment")
    assert cancelled.status is OperationStatus.CANCELLED
    assert store.get_decision(question.elicitation_id, ONCALL).status is DecisionStatus.CANCELLED


@pytest.mark.parametrize("ended", [OperationStatus.CANCELLED, OperationStatus.COMPLETED, OperationStatus.FAILED])
def test_a_task_that_ended_is_refused_by_its_id_and_how_it_ended(
    store: Store, records: Records, ended: OperationStatus
) -> None:
    task = a_task(store, records)
    records.form(task)
    if ended is OperationStatus.CANCELLED:
        cancel_task(store, task.operation_id, ONCALL, "first")
    else:
        result: JSONValue = {"ok": True} if ended is OperationStatus.COMPLETED else None
        store.finish_operation(task, ended, caller=task.principal, result=result, reason="the body ended")
    trail = store.audit_trail(task.operation_id, ONCALL)

    with pytest.raises(TaskAlreadyEnded) as refused:
        cancel_task(store, task.operation_id, ONCALL, "again")
    assert str(refused.value) == f"the task {task.operation_id} already ended as {ended.value}"
    assert (refused.value.task_id, refused.value.status) == (task.operation_id, ended)
    assert store.get_operation(task.operation_id, ONCALL).status is ended
    assert store.audit_trail(task.operation_id, ONCALL) == trail


def test_a_task_past_its_ttl_is_refused_as_expired(store: Store, records: Records, clock: FakeClock) -> None:
    task = a_task(store, records)
    question = records.form(task)
    clock.advance(timedelta(hours=2))
    with pytest.raises(TaskAlreadyEnded) as refused:
        cancel_task(store, task.operation_id, ONCALL, "too late")
    assert str(refused.value) == f"the task {task.operation_id} already ended as expired"
    assert store.get_decision(question.elicitation_id, ONCALL).status is DecisionStatus.REQUESTED  # all rolled back
