"""The notification outbox through the real store: what a claim or a listing refuses to be asked, on each engine."""

from __future__ import annotations

from datetime import timedelta

import pytest

from mcp_elicit.store import Store
from mcp_elicit.store.protocol import DeliveryState, NotificationEvent
from tests.helpers.records import Records

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
