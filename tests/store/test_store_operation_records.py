"""`get_operation_records`: a resuming call's one read of its operation and decisions, bound like every read."""

from __future__ import annotations

from datetime import timedelta

import pytest

from mcp_elicit.model import DecisionStatus, Operator, Principal
from mcp_elicit.store import NotFound, Store
from tests.helpers.clock import FakeClock
from tests.helpers.records import ALICE, ALICE_OTHER_CLIENT, BOB, Records


def test_an_operation_without_decisions_comes_alone(store: Store, records: Records) -> None:
    operation = records.operation()

    found = store.get_operation_records(operation.operation_id, ALICE)

    assert found.operation == operation
    assert found.decisions == []


def test_decisions_come_newest_first_as_listed(store: Store, records: Records, clock: FakeClock) -> None:
    operation = records.operation()
    first = records.form(operation, key="first")
    clock.advance(timedelta(seconds=1))
    second = records.form(operation, key="second")
    answered = store.transition(second, DecisionStatus.DECLINED, caller=ALICE, reason="no")
    records.form(records.operation(), key="elsewhere")

    found = store.get_operation_records(operation.operation_id, ALICE)

    assert found.decisions == [answered, first]
    assert found.decisions == store.list_decisions(ALICE, operation_id=operation.operation_id)
    assert found.operation == store.get_operation(operation.operation_id, ALICE)


@pytest.mark.parametrize("caller", [BOB, ALICE_OTHER_CLIENT], ids=["other principal", "other client"])
def test_another_caller_finds_nothing(store: Store, records: Records, caller: Principal) -> None:
    decision = records.form()

    with pytest.raises(NotFound):
        store.get_operation_records(decision.operation_id, caller)


def test_an_operator_sees_the_records(store: Store, records: Records) -> None:
    decision = records.form()

    found = store.get_operation_records(decision.operation_id, Operator("ops"))

    assert found.decisions == [decision]


def test_an_unknown_operation_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound, match="no operation"):
        store.get_operation_records("00000000-0000-4000-8000-000000000000", ALICE)
