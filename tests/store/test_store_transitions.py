"""Every legal transition through the real store, a sample of illegal ones, and the audit it leaves."""

from __future__ import annotations

from collections import deque
from dataclasses import replace

import pytest

from mcp_elicit.model import (
    DECISION_TRANSITIONS,
    Decision,
    DecisionStatus,
    IllegalTransition,
    JSONObject,
    Mode,
    OperationStatus,
    Operator,
)
from mcp_elicit.store import AlreadyExists, DecisionConflict, NotFound, OperationConflict, Store
from tests.helpers.records import ALICE, Records

D = DecisionStatus
LEGAL_EDGES = [
    (mode, source, target)
    for mode, table in DECISION_TRANSITIONS.items()
    for source, targets in table.items()
    for target in sorted(targets)
    if target is not D.EXPIRED
]


def path_to(mode: Mode, goal: DecisionStatus) -> list[DecisionStatus]:
    """The shortest sequence of moves from `requested` to `goal` in the mode's table."""
    table = DECISION_TRANSITIONS[mode]
    queue: deque[tuple[DecisionStatus, list[DecisionStatus]]] = deque([(D.REQUESTED, [])])
    while queue:
        status, path = queue.popleft()
        if status is goal:
            return path
        for target in sorted(table.get(status, frozenset())):
            queue.append((target, [*path, target]))
    raise AssertionError(f"{goal} unreachable in {mode}")


def move(store: Store, decision: Decision, target: DecisionStatus) -> Decision:
    content: JSONObject | None = {"approve": True} if target is D.ACCEPTED else None
    return store.transition(decision, target, caller=ALICE, reason=f"to {target}", content=content)


def create(records: Records, mode: Mode) -> Decision:
    return records.form() if mode is Mode.FORM else records.url()


@pytest.mark.parametrize(("mode", "source", "target"), LEGAL_EDGES, ids=lambda v: str(v))
def test_every_legal_transition(
    store: Store, records: Records, mode: Mode, source: DecisionStatus, target: DecisionStatus
) -> None:
    decision = create(records, mode)
    for step in path_to(mode, source):
        decision = move(store, decision, step)
    moved = move(store, decision, target)

    assert moved.status is target
    assert moved.completion_version == decision.completion_version + 1
    assert store.get_decision(decision.elicitation_id, ALICE) == moved
    trail = store.audit_trail(decision.elicitation_id, ALICE)
    assert [(e.from_status, e.to_status) for e in trail][-1] == (source.value, target.value)
    assert len(trail) == moved.completion_version + 1
    assert trail[-1].actor == ALICE.actor and trail[-1].reason == f"to {target}"


@pytest.mark.parametrize(
    ("mode", "source", "target"),
    [
        (Mode.FORM, D.REQUESTED, D.EXTERNAL_COMPLETED),
        (Mode.FORM, D.ACCEPTED, D.DECLINED),
        (Mode.FORM, D.DECLINED, D.ACCEPTED),
        (Mode.URL, D.REQUESTED, D.EXTERNAL_COMPLETED),
        (Mode.URL, D.ACCEPTED_URL, D.ACCEPTED),
        (Mode.URL, D.EXTERNAL_COMPLETED, D.EXTERNAL_FAILED),
        (Mode.URL, D.CANCELLED, D.ACCEPTED_URL),
    ],
)
def test_illegal_transitions_are_refused_and_change_nothing(
    store: Store, records: Records, mode: Mode, source: DecisionStatus, target: DecisionStatus
) -> None:
    decision = create(records, mode)
    for step in path_to(mode, source):
        decision = move(store, decision, step)
    with pytest.raises(IllegalTransition) as raised:
        move(store, decision, target)
    assert (raised.value.from_status, raised.value.to_status) == (source, target)
    assert store.get_decision(decision.elicitation_id, ALICE) == decision
    assert len(store.audit_trail(decision.elicitation_id, ALICE)) == decision.completion_version + 1


def test_accept_records_content_and_other_moves_refuse_it(store: Store, records: Records) -> None:
    decision = records.form()
    with pytest.raises(ValueError, match="content"):
        store.transition(decision, D.DECLINED, caller=ALICE, content={"approve": True})
    with pytest.raises(ValueError, match="content"):
        store.transition(decision, D.ACCEPTED, caller=ALICE)
    accepted = store.transition(decision, D.ACCEPTED, caller=ALICE, content={"approve": False, "note": "é✓"})
    assert store.get_decision(decision.elicitation_id, ALICE).content == {"approve": False, "note": "é✓"}
    assert accepted.content == {"approve": False, "note": "é✓"}


def test_expiry_is_not_a_caller_move(store: Store, records: Records) -> None:
    with pytest.raises(ValueError, match="clock"):
        store.transition(records.form(), D.EXPIRED, caller=ALICE)


def test_stale_snapshot_loses_with_the_current_state(store: Store, records: Records) -> None:
    decision = records.form()
    store.transition(decision, D.DECLINED, caller=ALICE)
    with pytest.raises(DecisionConflict) as raised:
        store.transition(decision, D.CANCELLED, caller=Operator("ops"))
    assert raised.value.current.status is D.DECLINED
    assert raised.value.current.completion_version == 1


def test_pending_url_flow_can_extend_its_ttl_and_be_cancelled(store: Store, records: Records) -> None:
    decision = records.url()
    consented = store.transition(decision, D.ACCEPTED_URL, caller=ALICE)
    later = consented.expires_at.replace(year=consented.expires_at.year + 1)
    pending = store.transition(consented, D.EXTERNAL_PENDING, caller=ALICE, expires_at=later)
    assert store.get_decision(decision.elicitation_id, ALICE).expires_at == later
    with pytest.raises(ValueError, match="terminal"):
        store.transition(pending, D.EXTERNAL_COMPLETED, caller=ALICE, expires_at=later)
    cancelled = store.transition(pending, D.CANCELLED, caller=Operator("ops"), reason="user gave up")
    assert cancelled.status is D.CANCELLED
    assert store.audit_trail(decision.elicitation_id, ALICE)[-1].actor == "operator:ops"


def test_duplicate_ids_and_dangling_operations_are_refused(store: Store, records: Records) -> None:
    decision = records.form()
    with pytest.raises(AlreadyExists):
        store.create_decision(decision)
    orphan = replace(decision, elicitation_id="orphan", operation_id="no-such-operation")
    with pytest.raises(NotFound, match="no-such-operation"):
        store.create_decision(orphan)
    operation = store.get_operation(decision.operation_id, ALICE)
    with pytest.raises(AlreadyExists):
        store.create_operation(operation)


def test_operation_finishes_once_with_its_result(store: Store, records: Records) -> None:
    operation = records.operation()
    done = store.finish_operation(operation, OperationStatus.COMPLETED, caller=ALICE, result={"deployed": 3})
    assert store.get_operation(operation.operation_id, ALICE) == done
    assert done.result == {"deployed": 3} and done.version == 1
    with pytest.raises(OperationConflict):
        store.finish_operation(operation, OperationStatus.FAILED, caller=ALICE)
    with pytest.raises(IllegalTransition):
        store.finish_operation(done, OperationStatus.CANCELLED, caller=ALICE)
    trail = store.audit_trail(operation.operation_id, ALICE)
    assert [(e.from_status, e.to_status) for e in trail] == [(None, "open"), ("open", "completed")]


def test_find_operations_by_digest_or_idempotency_key(store: Store, records: Records) -> None:
    first = records.operation()
    second = records.operation()
    found = store.find_operations(ALICE, method="tools/call", target="deploy", request_digest=first.request_digest)
    assert found == [first]
    assert store.find_operations(ALICE, method="tools/call", target="other", request_digest=second.request_digest) == []
    with pytest.raises(ValueError, match="exactly one"):
        store.find_operations(ALICE, method="tools/call", target="deploy")


def test_list_filters(store: Store, records: Records) -> None:
    operation = records.operation()
    waiting = records.form(operation, key="a")
    declined = store.transition(records.form(operation, key="b"), D.DECLINED, caller=ALICE)
    everyone = Operator()
    assert {d.elicitation_id for d in store.list_decisions(everyone)} == {
        waiting.elicitation_id,
        declined.elicitation_id,
    }
    assert store.list_decisions(everyone, status=D.DECLINED) == [declined]
    assert store.list_decisions(everyone, principal_id="nobody") == []
    assert len(store.list_decisions(everyone, operation_id=operation.operation_id, limit=1)) == 1
    assert store.list_decisions(everyone, id_prefix=waiting.elicitation_id[:13]) == [waiting]
    assert store.list_decisions(everyone, id_prefix="%") == []
    soon = waiting.expires_at.replace(year=waiting.expires_at.year + 1)
    assert store.list_decisions(everyone, expiring_before=soon) == [waiting]
    with pytest.raises(ValueError, match="limit"):
        store.list_decisions(everyone, limit=0)


def test_records_are_created_at_their_start_and_expiry_is_left_to_the_clock(store: Store, records: Records) -> None:
    """What a caller cannot claim: a decision or an operation born further along, or an operation it expires."""
    operation = records.operation()
    decision = records.form(operation)
    with pytest.raises(ValueError, match="created requested, at version 0"):
        store.create_decision(replace(decision, elicitation_id="born-accepted", status=D.ACCEPTED))
    with pytest.raises(ValueError, match="created requested, at version 0"):
        store.create_decision(replace(decision, elicitation_id="born-later", completion_version=3))
    with pytest.raises(ValueError, match="an operation is created open"):
        store.create_operation(replace(operation, operation_id="born-done", status=OperationStatus.COMPLETED))
    with pytest.raises(ValueError, match="expiry is decided by the clock"):
        store.finish_operation(operation, OperationStatus.EXPIRED, caller=ALICE)
    with pytest.raises(NotFound):
        store.get_decision("born-accepted", ALICE)
    with pytest.raises(NotFound):
        store.get_operation("born-done", ALICE)
    assert store.get_operation(operation.operation_id, ALICE) == operation


def test_a_caller_of_another_kind_is_refused_not_taken_for_the_operator(store: Store, records: Records) -> None:
    """Binding is by the caller's type: anything but a principal, a browser user or the operator sees nothing."""
    decision = records.form()
    with pytest.raises(TypeError, match="a Principal, a BrowserUser or an Operator, not str"):
        store.get_decision(decision.elicitation_id, "operator")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not NoneType"):
        store.list_decisions(None)  # type: ignore[arg-type]
