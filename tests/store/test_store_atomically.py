"""`Store.atomically`: several store calls, one transaction, on both engines."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import timedelta

import pytest

from mcp_elicit.model import (
    Decision,
    DecisionOrigin,
    DecisionStatus,
    Operation,
    OperationStatus,
    new_form_decision,
    new_operation,
)
from mcp_elicit.store import AlreadyExists, Consumption, DecisionConflict, NotFound, Store, open_store
from tests.helpers.clock import FakeClock
from tests.helpers.records import ALICE, FORM_SCHEMA, Records


class Boom(Exception):
    pass


def _operation_and_decision(records: Records) -> tuple[Operation, Decision]:
    operation = new_operation(
        ALICE, method="tools/call", target="deploy", request_digest="sha256:x", now=records.clock(), ttl=timedelta(1)
    )
    decision = new_form_decision(
        DecisionOrigin(
            operation_id=operation.operation_id,
            key="approve",
            principal=ALICE,
            origin_method="tools/call",
            origin_request_digest="sha256:x",
        ),
        message="Deploy?",
        requested_schema=FORM_SCHEMA,
        now=records.clock(),
        ttl=timedelta(minutes=10),
    )
    return operation, decision


def test_all_calls_commit_together_and_later_calls_see_earlier_writes(store: Store, records: Records) -> None:
    operation, decision = _operation_and_decision(records)

    def work() -> DecisionStatus:
        store.create_operation(operation)
        store.create_decision(decision)
        accepted = store.transition(
            store.get_decision(decision.elicitation_id, ALICE),
            DecisionStatus.ACCEPTED,
            caller=ALICE,
            content={"approve": True},
        )
        store.finish_operation(operation, OperationStatus.COMPLETED, caller=ALICE, result="done")
        return accepted.status

    assert store.atomically(work) is DecisionStatus.ACCEPTED
    assert store.get_decision(decision.elicitation_id, ALICE).status is DecisionStatus.ACCEPTED
    assert store.get_operation(operation.operation_id, ALICE).result == "done"


def test_an_exception_rolls_every_call_back(store: Store, records: Records) -> None:
    operation, decision = _operation_and_decision(records)

    def work() -> None:
        store.create_operation(operation)
        store.create_decision(decision)
        store.consume_token("round-1", expires_at=records.clock() + timedelta(minutes=5))
        raise Boom

    with pytest.raises(Boom):
        store.atomically(work)
    with pytest.raises(NotFound):
        store.get_operation(operation.operation_id, ALICE)
    assert not store.token_consumed("round-1")


def test_a_store_error_inside_rolls_back_what_came_before(store: Store, records: Records) -> None:
    existing = records.operation()
    operation, _ = _operation_and_decision(records)

    def work() -> None:
        store.create_operation(operation)
        store.create_operation(existing)

    with pytest.raises(AlreadyExists):
        store.atomically(work)
    with pytest.raises(NotFound):
        store.get_operation(operation.operation_id, ALICE)
    store.create_operation(operation)
    assert store.consume_token("after", expires_at=records.clock() + timedelta(minutes=5)) is Consumption.FIRST


def test_listeners_hear_of_url_moves_after_the_commit_only(store: Store, records: Records) -> None:
    heard: list[str] = []
    store.add_change_listener(heard.append)
    committed, rolled_back = records.url(), records.url()

    def move(decision: Decision, fail: bool) -> None:
        before = list(heard)
        store.transition(decision, DecisionStatus.ACCEPTED_URL, caller=ALICE)
        assert heard == before
        if fail:
            raise Boom

    store.atomically(lambda: move(committed, False))
    assert heard == [committed.elicitation_id]
    with pytest.raises(Boom):
        store.atomically(lambda: move(rolled_back, True))
    assert heard == [committed.elicitation_id]
    assert store.get_decision(rolled_back.elicitation_id, ALICE).status is DecisionStatus.REQUESTED


def test_nested_atomically_joins_the_outer_transaction(store: Store, records: Records) -> None:
    def inner() -> None:
        store.consume_token("inner", expires_at=records.clock() + timedelta(minutes=5))

    def outer() -> None:
        store.atomically(inner)
        raise Boom

    with pytest.raises(Boom):
        store.atomically(outer)
    assert not store.token_consumed("inner")


def test_another_store_on_the_same_database_sees_nothing_before_the_commit(store_url: str, clock: FakeClock) -> None:
    writer, reader = open_store(store_url, clock=clock), open_store(store_url, clock=clock)
    try:

        def work() -> None:
            writer.consume_token("pending", expires_at=clock() + timedelta(minutes=5))
            assert writer.token_consumed("pending")
            assert not reader.token_consumed("pending")

        writer.atomically(work)
        assert reader.token_consumed("pending")
    finally:
        writer.close()
        reader.close()


class Replayed(Exception):
    pass


def test_a_lost_compare_and_set_inside_undoes_the_unit_with_what_came_before_it(store: Store, records: Records) -> None:
    """The token spent before the lost compare-and-set is undone with it."""
    decision = records.form()
    stale = decision
    store.transition(decision, DecisionStatus.DECLINED, caller=ALICE, reason="no")  # another writer moves it

    def work() -> None:
        store.consume_token("round-2", expires_at=records.clock() + timedelta(minutes=5))
        store.transition(stale, DecisionStatus.ACCEPTED, caller=ALICE, content={"approve": True})
        store.release_claim(decision.operation_id, "ask:approve", caller=ALICE)

    with pytest.raises(DecisionConflict) as lost:
        store.atomically(work)
    assert lost.value.current.status is DecisionStatus.DECLINED
    assert not store.token_consumed("round-2")
    assert [e.to_status for e in store.audit_trail(decision.elicitation_id, ALICE)] == ["requested", "declined"]


def test_the_first_failed_check_of_a_unit_is_the_one_raised(store: Store, records: Records) -> None:
    """Each write's result is there where it is made: a spent token ends the unit before the stale
    compare-and-set after it runs."""
    decision = records.form()
    expires = records.clock() + timedelta(minutes=5)
    store.consume_token("round-3", expires_at=expires)
    store.transition(decision, DecisionStatus.DECLINED, caller=ALICE, reason="no")

    def work() -> None:
        if store.consume_token("round-3", expires_at=expires) is Consumption.ALREADY_USED:
            raise Replayed
        store.transition(decision, DecisionStatus.ACCEPTED, caller=ALICE, content={"approve": True})

    with pytest.raises(Replayed):
        store.atomically(work)
    assert store.consume_token("round-3", expires_at=expires) is Consumption.ALREADY_USED
    assert store.get_decision(decision.elicitation_id, ALICE).status is DecisionStatus.DECLINED


def test_a_spent_token_an_answer_and_a_freed_claim_inside_a_unit_commit_with_it(store: Store, records: Records) -> None:
    decision = records.form()
    operation_id = decision.operation_id
    holder = "call:one"
    store.claim(operation_id, "ask:approve", holder=holder, lease_until=records.clock() + timedelta(1), caller=ALICE)
    heard: list[str] = []
    store.add_change_listener(heard.append)

    def work() -> Decision:
        assert store.consume_token("round-4", expires_at=records.clock() + timedelta(minutes=5)) is Consumption.FIRST
        accepted = store.transition(decision, DecisionStatus.ACCEPTED, caller=ALICE, content={"approve": True})
        store.release_claim(operation_id, "ask:approve", caller=ALICE, holder=holder)
        return accepted

    accepted = store.atomically(work)

    assert store.get_decision(decision.elicitation_id, ALICE) == accepted
    assert store.claims(operation_id, caller=ALICE) == []
    assert store.token_consumed("round-4")
    assert operation_id in heard  # the released claim is announced with the commit


def test_a_question_under_a_taken_key_inside_undoes_the_unit(store: Store, records: Records) -> None:
    first = records.form()
    operation = store.get_operation(first.operation_id, ALICE)
    again = replace(first, elicitation_id=str(uuid.uuid4()))

    def work() -> None:
        store.consume_token("round-5", expires_at=records.clock() + timedelta(minutes=5))
        store.create_decision(again)
        store.get_operation(operation.operation_id, ALICE)

    with pytest.raises(AlreadyExists, match="already has a question under key 'approve'"):
        store.atomically(work)
    assert not store.token_consumed("round-5")
    assert store.list_decisions(ALICE, operation_id=operation.operation_id) == [first]


def test_a_question_of_a_missing_operation_inside_is_not_found(store: Store, records: Records) -> None:
    _, decision = _operation_and_decision(records)

    def work() -> None:
        store.create_decision(decision)
        store.token_consumed("anything")

    with pytest.raises(NotFound, match="no operation"):
        store.atomically(work)


def test_the_same_question_twice_inside_is_refused(store: Store, records: Records) -> None:
    operation, decision = _operation_and_decision(records)

    def work() -> None:
        store.create_operation(operation)
        store.create_decision(decision)
        store.create_decision(replace(decision, key="other"))

    with pytest.raises(AlreadyExists, match=f"decision {decision.elicitation_id} already exists"):
        store.atomically(work)
    with pytest.raises(NotFound):
        store.get_operation(operation.operation_id, ALICE)


def test_a_unit_that_handles_a_lost_compare_and_set_sees_it_where_it_was_made(store: Store, records: Records) -> None:
    """Every write is checked where it is made: work that catches a conflict and goes on (as a task's end does
    for each of its questions) commits the rest."""
    first, second = records.form(), records.form()
    store.transition(first, DecisionStatus.DECLINED, caller=ALICE, reason="no")
    lost: list[DecisionStatus] = []

    def work() -> None:
        for decision in (first, second):
            try:
                store.transition(decision, DecisionStatus.CANCELLED, caller=ALICE, reason="ending")
            except DecisionConflict as conflict:
                lost.append(conflict.current.status)
        store.token_consumed("anything")

    store.atomically(work)
    assert lost == [DecisionStatus.DECLINED]
    assert store.get_decision(second.elicitation_id, ALICE).status is DecisionStatus.CANCELLED


def test_a_failed_check_comes_before_a_later_statement_s_own_error(store: Store, records: Records) -> None:
    """The operation's begin created nothing (an identical call's operation is open); the INSERT after it
    would clash. The earlier write's check is what the unit ends with: the INSERT never runs."""
    open_one = records.operation()
    late = replace(open_one, operation_id=str(uuid.uuid4()))
    taken = records.operation()

    def work() -> None:
        if not store.begin_operation(late).created:
            raise Lost
        store.create_operation(taken)

    with pytest.raises(Lost):
        store.atomically(work)
    with pytest.raises(NotFound):
        store.get_operation(late.operation_id, ALICE)


class Lost(Exception):
    pass


def test_the_audit_trail_inside_a_unit_shows_the_units_own_moves(store: Store, records: Records) -> None:
    """The unit's audit rows are held back to be written together; a look at the trail inside it writes them
    first, so it reads what the unit did, and a failing unit takes them back with everything else."""
    decision = records.form()

    def accept_and_look() -> list[str]:
        store.transition(decision, DecisionStatus.ACCEPTED, caller=ALICE, content={"approve": True})
        return [entry.to_status for entry in store.audit_trail(decision.elicitation_id, ALICE)]

    def accept_look_and_fail() -> None:
        seen.append(accept_and_look())
        raise Boom

    seen: list[list[str]] = []
    with pytest.raises(Boom):
        store.atomically(accept_look_and_fail)
    assert seen == [["requested", "accepted"]]
    assert [entry.to_status for entry in store.audit_trail(decision.elicitation_id, ALICE)] == ["requested"]
    assert store.atomically(accept_and_look) == ["requested", "accepted"]
    assert [entry.to_status for entry in store.audit_trail(decision.elicitation_id, ALICE)] == ["requested", "accepted"]
