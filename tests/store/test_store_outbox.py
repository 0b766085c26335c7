"""The notification outbox through the real store, on each engine: what a claim or a listing refuses to be asked,
what it reads with each row, and the escalations written with their decisions for later."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from mcp_elicit.model import ApproverRule, DecisionStatus
from mcp_elicit.store import Store, UnreadableRow
from mcp_elicit.store.protocol import TASK_JOURNAL, Delivery, DeliveryState, NotificationEvent
from tests.helpers.clock import FakeClock
from tests.helpers.corrupt_rows import corrupt
from tests.helpers.records import ALICE, Records

LEASE = timedelta(seconds=30)


def test_a_claim_needs_a_limit_a_lease_and_subscriptions(store: Store, records: Records) -> None:
    """A lease that is not ahead would hand the same delivery to the next claimer at once."""
    store.outbox_subscribe({"hook": frozenset(NotificationEvent)})
    records.form()
    with pytest.raises(ValueError, match="limit must be at least 1, got 0"):
        store.outbox_claim(["hook"], limit=0, lease=LEASE)
    for lease in (timedelta(0), -LEASE):
        with pytest.raises(ValueError, match="a claim's lease must be positive"):
            store.outbox_claim(["hook"], limit=10, lease=lease)
    assert store.outbox_claim([], limit=10, lease=LEASE) == []
    with pytest.raises(ValueError, match="limit must be at least 1, got -1"):
        store.outbox_deliveries(limit=-1)
    pending = store.outbox_deliveries(state=DeliveryState.PENDING)
    assert [(d.subscription, d.attempts) for d in pending] == [("hook", 0)]  # nothing above took it
    [claimed] = store.outbox_claim(["hook"], limit=10, lease=LEASE)
    assert (claimed.event_id, claimed.attempts) == (pending[0].event_id, 1)


def test_claims_and_listings_carry_what_the_call_is_about(store: Store, records: Records) -> None:
    """Read with the row from the decision, not copied into it: the only call content a notification may carry."""
    store.outbox_subscribe({"hook": frozenset(NotificationEvent)})
    decision = records.form()
    assert decision.about == 'deploy(service="api", note="ünïcode ✓")'
    [listed] = store.outbox_deliveries()
    [claimed] = store.outbox_claim(["hook"], limit=10, lease=LEASE)
    assert listed.about == claimed.about == decision.about
    [listed_again] = store.outbox_deliveries(elicitation_id=decision.elicitation_id, state=DeliveryState.PENDING)
    assert (listed_again.about, listed_again.attempts) == (decision.about, 1)


ESCALATING = ApproverRule(
    ("release-managers",), quorum=2, escalate_after=timedelta(minutes=5), escalate_to=("finance", "sre")
)


def test_a_decision_with_approvers_carries_its_rule_and_when_it_was_asked(store: Store, records: Records) -> None:
    """Read with the row like `about`: the wording says whose approval the decision waits for."""
    store.outbox_subscribe({"hook": frozenset({NotificationEvent.DECISION_WAITING})})
    ruled = records.form(approvers=ApproverRule(("release-managers",), quorum=2))
    plain = records.form()
    [claimed_ruled, claimed_plain] = sorted(
        store.outbox_claim(["hook"], limit=10, lease=LEASE), key=lambda d: d.elicitation_id != ruled.elicitation_id
    )
    assert (claimed_ruled.approvers, claimed_ruled.asked_at) == (ruled.approvers, ruled.created_at)
    assert (claimed_plain.approvers, claimed_plain.asked_at) == (None, plain.created_at)
    [listed] = store.outbox_deliveries(elicitation_id=ruled.elicitation_id)
    assert listed.approvers == ApproverRule(("release-managers",), quorum=2)


def test_a_task_waiting_for_approvers_is_not_announced_as_needing_its_clients_input(
    store: Store, records: Records
) -> None:
    """Its requester can give no input there: the approvers are told (`decision.waiting`), the task's client is not."""
    store.outbox_subscribe({"hook": frozenset(NotificationEvent)})
    task = records.operation()
    store.journal_record(task.operation_id, TASK_JOURNAL, {"era": "2026-07-28"}, caller=ALICE)
    approval = records.form(task, key="release", approvers=ApproverRule(("release-managers",)))
    question = records.form(task, key="plain")
    announced = {(d.elicitation_id, d.event) for d in store.outbox_deliveries()}
    assert announced == {
        (approval.elicitation_id, NotificationEvent.DECISION_WAITING),
        (question.elicitation_id, NotificationEvent.DECISION_WAITING),
        (question.elicitation_id, NotificationEvent.TASK_INPUT_REQUIRED),
    }


def test_an_escalation_is_written_with_its_decision_and_claimed_only_once_it_is_due(
    store: Store, records: Records, clock: FakeClock
) -> None:
    store.outbox_subscribe(
        {"hook": frozenset(NotificationEvent), "waiting only": frozenset({NotificationEvent.DECISION_WAITING})}
    )
    decision = records.form(approvers=ESCALATING)
    records.form(approvers=ApproverRule(("release-managers",)))  # no escalation: nothing for later
    late = records.form(  # escalating when it has expired: nothing for later either
        approvers=ApproverRule(("ops",), escalate_after=timedelta(minutes=10), escalate_to=("finance",)),
    )
    escalates = decision.created_at + timedelta(minutes=5)
    [escalation] = [d for d in store.outbox_deliveries() if d.event is NotificationEvent.DECISION_ESCALATED]
    assert (escalation.event_id, escalation.subscription, escalation.status) == (
        f"decision.escalated:{decision.elicitation_id}", "hook", DecisionStatus.REQUESTED,
    )  # fmt: skip
    assert (escalation.occurred_at, escalation.next_attempt_at, escalation.deadline) == (
        escalates, escalates, decision.expires_at,
    )  # fmt: skip
    assert (escalation.approvers, escalation.asked_at, escalation.attempts) == (ESCALATING, decision.created_at, 0)
    assert late.elicitation_id not in {
        d.elicitation_id for d in store.outbox_deliveries() if d.event is escalation.event
    }

    asked = store.outbox_claim(["hook", "waiting only"], limit=100, lease=LEASE)
    assert NotificationEvent.DECISION_ESCALATED not in {d.event for d in asked} and len(asked) == 6
    assert all([store.outbox_delivered(delivery) for delivery in asked])
    clock.advance(timedelta(minutes=5) - timedelta(seconds=1))
    assert store.outbox_claim(["hook", "waiting only"], limit=100, lease=LEASE) == []
    clock.advance(timedelta(seconds=1))
    [due] = store.outbox_claim(["hook", "waiting only"], limit=100, lease=LEASE)
    assert (due.event_id, due.attempts, due.claimed_at, due.approvers) == (
        escalation.event_id, 1, escalates, ESCALATING,
    )  # fmt: skip


def test_an_escalation_rolled_back_with_its_decision_is_not_written(store: Store, records: Records) -> None:
    store.outbox_subscribe({"hook": frozenset(NotificationEvent)})
    operation = records.operation()

    class Abandon(Exception):
        pass

    def asked_then_abandoned() -> None:
        records.form(operation, approvers=ESCALATING)
        raise Abandon

    with pytest.raises(Abandon):
        store.atomically(asked_then_abandoned)
    assert store.outbox_deliveries() == []


def test_a_corrupt_approver_rule_makes_its_delivery_an_unreadable_row(
    store_url: str, store: Store, records: Records
) -> None:
    store.outbox_subscribe({"hook": frozenset({NotificationEvent.DECISION_WAITING})})
    decision = records.form(approvers=ESCALATING)
    corrupt(
        store_url,
        'UPDATE elicit_decisions SET approvers = \'{"roles": "ops", "quorum": 1}\''
        f" WHERE elicitation_id = '{decision.elicitation_id}'",
    )
    reads: list[Callable[[], list[Delivery]]] = [
        lambda: store.outbox_deliveries(),
        lambda: store.outbox_claim(["hook"], limit=10, lease=LEASE),
    ]
    for read in reads:
        with pytest.raises(UnreadableRow) as caught:
            read()
        assert (caught.value.record, caught.value.row_id, caught.value.column) == (
            "outbox row", f"decision.waiting:{decision.elicitation_id}", "approvers",
        )  # fmt: skip
    corrupt(
        store_url,
        'UPDATE elicit_decisions SET approvers = \'{"roles": ["ops"], "quorum": 1}\''
        f" WHERE elicitation_id = '{decision.elicitation_id}'",
    )
    [untouched] = store.outbox_deliveries()
    assert (untouched.attempts, untouched.approvers) == (0, ApproverRule(("ops",)))  # the failed claim took nothing
