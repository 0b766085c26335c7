"""Binding: a record belongs to its principal *and* client; anyone else sees nothing at all."""

from __future__ import annotations

import pytest

from mcp_elicit.model import DecisionStatus, OperationStatus, Operator, Principal
from mcp_elicit.store import NotFound, Store
from tests.helpers.records import ALICE, ALICE_OTHER_CLIENT, BOB, Records

STRANGERS = [BOB, ALICE_OTHER_CLIENT]


@pytest.mark.parametrize("stranger", STRANGERS, ids=["other-principal", "same-subject-other-client"])
def test_strangers_cannot_read_transition_or_cancel(store: Store, records: Records, stranger: Principal) -> None:
    decision = records.form()
    with pytest.raises(NotFound):
        store.get_decision(decision.elicitation_id, stranger)
    with pytest.raises(NotFound):
        store.transition(decision, DecisionStatus.ACCEPTED, caller=stranger, content={"approve": True})
    with pytest.raises(NotFound):
        store.transition(decision, DecisionStatus.CANCELLED, caller=stranger)
    with pytest.raises(NotFound):
        store.audit_trail(decision.elicitation_id, stranger)
    assert store.list_decisions(stranger) == []
    assert store.get_decision(decision.elicitation_id, ALICE) == decision
    assert len(store.audit_trail(decision.elicitation_id, ALICE)) == 1


@pytest.mark.parametrize("stranger", STRANGERS, ids=["other-principal", "same-subject-other-client"])
def test_strangers_cannot_touch_operations_or_their_journal(
    store: Store, records: Records, stranger: Principal
) -> None:
    operation = records.operation()
    store.journal_record(operation.operation_id, "plan", {"files": 3}, caller=ALICE)
    with pytest.raises(NotFound):
        store.get_operation(operation.operation_id, stranger)
    with pytest.raises(NotFound):
        store.finish_operation(operation, OperationStatus.COMPLETED, caller=stranger)
    with pytest.raises(NotFound):
        store.journal_record(operation.operation_id, "apply", "done", caller=stranger)
    assert store.journal_get(operation.operation_id, "plan", caller=stranger) is None
    assert (
        store.find_operations(
            stranger, method=operation.method, target=operation.target, request_digest=operation.request_digest
        )
        == []
    )
    entry = store.journal_get(operation.operation_id, "plan", caller=ALICE)
    assert entry is not None and entry.value == {"files": 3}
    assert store.journal_get(operation.operation_id, "apply", caller=ALICE) is None


def test_a_missing_record_and_someone_elses_look_the_same(store: Store, records: Records) -> None:
    decision = records.form()
    with pytest.raises(NotFound) as foreign:
        store.get_decision(decision.elicitation_id, BOB)
    with pytest.raises(NotFound) as missing:
        store.get_decision("00000000-0000-0000-0000-000000000000", BOB)
    assert str(foreign.value).replace(decision.elicitation_id, "X") == str(missing.value).replace(
        "00000000-0000-0000-0000-000000000000", "X"
    )


def test_operator_sees_and_cancels_across_principals(store: Store, records: Records) -> None:
    mine = records.form(records.operation(ALICE))
    theirs = records.form(records.operation(BOB))
    ops = Operator("oncall")
    assert {d.elicitation_id for d in store.list_decisions(ops)} == {mine.elicitation_id, theirs.elicitation_id}
    assert store.list_decisions(ops, principal_id="bob") == [theirs]
    assert store.list_decisions(BOB) == [theirs]
    cancelled = store.transition(theirs, DecisionStatus.CANCELLED, caller=ops, reason="stale")
    assert cancelled.status is DecisionStatus.CANCELLED
    assert store.audit_trail(theirs.elicitation_id, BOB)[-1].actor == "operator:oncall"
