"""A canary secret never reaches an audit row, a log line or the operator CLI's output."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import pytest

from mcp_elicit.model import DecisionStatus, Operator
from mcp_elicit.store import Store, StoreError
from tests.helpers.clock import FakeClock
from tests.helpers.records import ALICE, Records

CANARY = "canary-7f3e9a1c"


def test_sensitive_answers_and_url_secrets_stay_out_of_the_audit_and_logs(
    store: Store, records: Records, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    operation = records.operation()
    form = records.form(operation, key="profile", sensitive=("nickname",))
    store.transition(
        form,
        DecisionStatus.ACCEPTED,
        caller=ALICE,
        content={"approve": True, "nickname": CANARY, "password": CANARY, "note": f"https://x.example/?k={CANARY}"},
        reason=f"answered via https://cb.example/done?code={CANARY}",
    )
    link = records.url(operation, url=f"https://idp.example/authorize?state={CANARY}#{CANARY}")
    store.transition(link, DecisionStatus.ACCEPTED_URL, caller=ALICE)
    clock.advance(timedelta(hours=2))
    store.sweep_expired()

    rows = [*store.audit_trail(form.elicitation_id, ALICE), *store.audit_trail(link.elicitation_id, ALICE)]
    assert len(rows) == 5
    dumped = json.dumps([[r.reason, r.details, r.actor] for r in rows])
    assert CANARY not in dumped
    assert CANARY not in caplog.text
    accepted = store.get_decision(form.elicitation_id, Operator())
    assert accepted.content is not None and accepted.content["nickname"] == CANARY


@pytest.mark.engines("postgres", "postgres-async")
def test_an_answer_postgresql_cannot_store_is_refused_without_quoting_it(store: Store, records: Records) -> None:
    """JSONB takes no NUL character: the refusal says why in PostgreSQL's words, but not the lines after,
    which quote the start of the answer (a secret before the NUL with it); nothing of the answer is kept."""
    form = records.form(sensitive=("password",))
    with pytest.raises(StoreError) as refused:
        store.transition(form, DecisionStatus.ACCEPTED, caller=ALICE, content={"password": f"{CANARY}\x00"})
    assert str(refused.value).endswith(": unsupported Unicode escape sequence")
    assert CANARY not in str(refused.value)
    assert store.get_decision(form.elicitation_id, ALICE).status is DecisionStatus.REQUESTED
