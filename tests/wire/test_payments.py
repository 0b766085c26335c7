"""URL decisions completed by an external system over real HTTP: the server's page, the stand-in provider's
checkout, and its signed webhooks, applied once each, in the provider's order, bound to one decision."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import random
import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import httpx2
import pytest
from standardwebhooks import Webhook

from mcp_elicit.model import Decision, DecisionStatus, JSONValue, Operator
from mcp_elicit.reference.app import PAY_INVOICE
from mcp_elicit.reference.payments import SIGNATURE_HEADER, PaymentsConfig, signed_event
from mcp_elicit.store import StoreUnavailable, hooks
from mcp_elicit.web.external import MAX_BODY, REOPEN_AFTER, event_entry, reference_entry
from mcp_elicit.web.flows import Charge, Checkout, EventOutcome, ExternalCompletion, ProviderEvent
from mcp_elicit.web.webhooks import StandardWebhooks, sign_timestamped
from tests.helpers.audit_tamper import run_sql
from tests.helpers.pages_site import hidden
from tests.helpers.payments_site import (
    CLIENT_ID,
    CLIENT_SECRET,
    INVOICE,
    WEBHOOK_SECRET,
    PaySite,
    ask_payment,
    deliver,
    event,
    payments_site,
    post,
    reference_of,
)

OPERATOR = Operator("test")
Tweak = Callable[[ExternalCompletion], ExternalCompletion]


@pytest.fixture
def site(store_url: str) -> Iterator[PaySite]:
    with payments_site(store_url) as served:
        yield served


@contextmanager
def signed_in(site: PaySite, user: str, decision: Decision) -> Iterator[httpx2.Client]:
    with httpx2.Client(follow_redirects=False, timeout=10) as browser:
        next_path = f"/elicit/{decision.elicitation_id}"
        form = browser.get(f"{site.base}/signin", params={"next": next_path})
        signed = browser.post(
            f"{site.base}/signin",
            data={"username": user, "password": f"{user}-pw", "next": next_path, "csrf": hidden(form.text, "csrf")},
        )
        assert signed.status_code == 303, signed.text
        yield browser


def press_continue(browser: httpx2.Client, site: PaySite, decision: Decision) -> httpx2.Response:
    page = browser.get(f"{site.base}/elicit/{decision.elicitation_id}")
    assert page.status_code == 200, page.text
    return browser.post(
        f"{site.base}/elicit/{decision.elicitation_id}/continue", data={"csrf": hidden(page.text, "csrf")}
    )


def started(site: PaySite, user: str = "alice") -> tuple[Decision, str]:
    """A decision of `user`'s whose checkout was opened: the decision and its reference."""
    decision = ask_payment(site, user)
    with signed_in(site, user, decision) as browser:
        pressed = press_continue(browser, site, decision)
    assert pressed.status_code == 303 and pressed.headers["location"].startswith(f"{site.provider}/checkout/")
    reference = reference_of(site, decision)
    assert reference is not None
    return decision, reference


def status(site: PaySite, decision: Decision) -> DecisionStatus:
    return site.store.get_decision(decision.elicitation_id, OPERATOR).status


def moves_to(site: PaySite, decision: Decision, to: DecisionStatus) -> int:
    return sum(1 for row in site.store.audit_trail(decision.elicitation_id, OPERATOR) if row.to_status == to
               and row.from_status != to)  # fmt: skip


def audit_rows(site: PaySite, decision: Decision) -> int:
    return len(site.store.audit_trail(decision.elicitation_id, OPERATOR))


def test_the_page_shows_the_servers_amount_and_continue_opens_the_checkout_with_one_reference(site: PaySite) -> None:
    decision = ask_payment(site, "alice")
    with signed_in(site, "alice", decision) as browser:
        page = browser.get(f"{site.base}/elicit/{decision.elicitation_id}")
        assert page.status_code == 200
        assert INVOICE.shown in page.text and f"Invoice {INVOICE.number} from {INVOICE.vendor}" in page.text
        assert "Example Pay" in page.text and "<script" not in page.text
        first = press_continue(browser, site, decision)
        assert first.status_code == 303
        reference = reference_of(site, decision)
        checkout = browser.get(first.headers["location"])
        assert checkout.status_code == 200 and f"Pay {INVOICE.shown}" in checkout.text
        waiting = browser.get(f"{site.base}/elicit/{decision.elicitation_id}")
        assert "has not reported yet" in waiting.text and "/continue" not in waiting.text
        too_soon = press_continue(browser, site, decision)
        assert too_soon.status_code == 409 and "So that nothing is paid twice" in too_soon.text
        site.skew[0] = REOPEN_AFTER.total_seconds() + 1
        again = press_continue(browser, site, decision)
        assert again.status_code == 303 and again.headers["location"] != first.headers["location"]
    assert reference_of(site, decision) == reference
    assert status(site, decision) is DecisionStatus.EXTERNAL_PENDING


def _fifty(reference: str) -> list[dict[str, JSONValue]]:
    """50 deliveries of four events (two failed attempts, the success, a late failure), duplicated, shuffled."""
    events = [
        event(reference, "payment.failed", 1, reason="card_declined"),
        event(reference, "payment.failed", 2, reason="insufficient_funds"),
        event(reference, "payment.succeeded", 3),
        event(reference, "payment.failed", 4, event_id="evt_after"),
    ]
    deliveries = [events[i % len(events)] for i in range(50)]
    random.Random(2848).shuffle(deliveries)
    return deliveries


@pytest.mark.engines("sqlite", "postgres")
def test_a_payment_completes_once_under_50_duplicate_and_reordered_webhooks(site: PaySite) -> None:
    decision, reference = started(site)
    deliveries = _fifty(reference)
    with httpx2.Client(timeout=30) as http, ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda body: deliver(http, site, body), deliveries))
    assert {answer.status_code for answer in answers} <= {200, 409}, [a.text for a in answers if a.status_code >= 400]
    assert status(site, decision) is DecisionStatus.EXTERNAL_COMPLETED
    assert moves_to(site, decision, DecisionStatus.EXTERNAL_COMPLETED) == 1
    applied = sum(1 for answer in answers if answer.json().get("status") == "applied")
    assert applied == 1
    winner = site.store.journal_get(decision.operation_id, event_entry(decision.elicitation_id,
                                    "evt_payment.succeeded_3"), caller=decision.principal)  # fmt: skip
    assert winner is not None and isinstance(winner.value, dict) and winner.value["applied"] == "external_completed"
    for name in ("evt_payment.failed_1", "evt_payment.failed_2", "evt_payment.succeeded_3", "evt_after"):
        assert site.store.journal_get(decision.operation_id, event_entry(decision.elicitation_id, name),
                                      caller=decision.principal) is not None  # fmt: skip
    rows = audit_rows(site, decision)
    with httpx2.Client(timeout=30) as http:
        for body in deliveries[:10]:
            assert deliver(http, site, body).json() == {"status": "duplicate"}
    assert audit_rows(site, decision) == rows


def test_the_providers_own_checkout_pays_with_duplicated_out_of_order_webhooks(store_url: str) -> None:
    with payments_site(store_url, duplicates=3, jitter=0.3) as site:
        decision = ask_payment(site, "alice")
        with signed_in(site, "alice", decision) as browser:
            checkout = browser.get(press_continue(browser, site, decision).headers["location"])
            action = f"{site.provider}/checkout/{checkout.url.path.rsplit('/', 1)[-1]}"
            failed = browser.post(action, data={"csrf": hidden(checkout.text, "csrf"), "action": "fail"})
            assert failed.status_code == 200 and "declined" in failed.text
            paid = browser.post(action, data={"csrf": hidden(checkout.text, "csrf"), "action": "pay"})
            assert (
                paid.status_code == 303 and paid.headers["location"] == f"{site.base}/elicit/{decision.elicitation_id}"
            )
            deadline = time.monotonic() + 15
            while status(site, decision) is not DecisionStatus.EXTERNAL_COMPLETED and time.monotonic() < deadline:
                time.sleep(0.05)
            done = browser.get(paid.headers["location"])
        assert done.status_code == 200 and "<h1>Done</h1>" in done.text and "Example Pay confirmed it" in done.text
        time.sleep(1.5)  # every copy and retry delivered
        assert moves_to(site, decision, DecisionStatus.EXTERNAL_COMPLETED) == 1
        notes = [row.reason for row in site.store.audit_trail(decision.elicitation_id, OPERATOR)]
        assert sum(1 for reason in notes if reason.startswith("attempt failed at Example Pay")) <= 1


def test_a_failed_attempt_leaves_it_open_and_a_later_success_completes(site: PaySite) -> None:
    decision, reference = started(site)
    with httpx2.Client(timeout=10) as http:
        failed = deliver(http, site, event(reference, "payment.failed", 1, reason="card_declined"))
        assert failed.status_code == 200 and failed.json()["status"] == "recorded"
        assert status(site, decision) is DecisionStatus.EXTERNAL_PENDING
        with signed_in(site, "alice", decision) as browser:
            page = browser.get(f"{site.base}/elicit/{decision.elicitation_id}")
            assert "The last attempt at Example Pay failed: card_declined" in page.text and "Try again" in page.text
            older = deliver(http, site, event(reference, "payment.failed", 0, event_id="evt_older"))
            assert older.json()["status"] == "ignored"
            paid = deliver(http, site, event(reference, "payment.succeeded", 2))
            assert paid.status_code == 200 and paid.json() == {"status": "applied", "decision": "external_completed"}
            assert "<h1>Done</h1>" in browser.get(f"{site.base}/elicit/{decision.elicitation_id}").text
    reasons = [row.reason for row in site.store.audit_trail(decision.elicitation_id, OPERATOR)]
    assert reasons.count("attempt failed at Example Pay: card_declined") == 1
    assert not any("evt_older" in reason for reason in reasons)


@pytest.mark.parametrize("kind", ["checkout.cancelled", "checkout.expired"])
def test_abandon_or_expiry_at_the_provider_ends_it_failed(site: PaySite, kind: str) -> None:
    decision, reference = started(site)
    with httpx2.Client(timeout=10) as http:
        ended = deliver(http, site, event(reference, kind, 1, reason="abandoned at the checkout"))
        assert ended.json() == {"status": "applied", "decision": "external_failed"}
        late = deliver(http, site, event(reference, "payment.succeeded", 2))
        assert late.status_code == 409 and late.json()["error"] == "decision_ended"
    assert status(site, decision) is DecisionStatus.EXTERNAL_FAILED
    reasons = [row.reason for row in site.store.audit_trail(decision.elicitation_id, OPERATOR)]
    assert any("refund it at the provider" in reason for reason in reasons)
    with signed_in(site, "alice", decision) as browser:
        assert "That did not work" in browser.get(f"{site.base}/elicit/{decision.elicitation_id}").text


def test_abandon_pressed_at_the_checkout_fails_the_decision(site: PaySite) -> None:
    decision = ask_payment(site, "alice")
    with signed_in(site, "alice", decision) as browser:
        checkout = browser.get(press_continue(browser, site, decision).headers["location"])
        abandoned = browser.post(str(checkout.url), data={"csrf": hidden(checkout.text, "csrf"), "action": "abandon"})
        assert abandoned.status_code == 303
    deadline = time.monotonic() + 10
    while status(site, decision) is DecisionStatus.EXTERNAL_PENDING and time.monotonic() < deadline:
        time.sleep(0.05)
    assert status(site, decision) is DecisionStatus.EXTERNAL_FAILED


def test_another_principal_cannot_open_the_checkout_and_a_reference_completes_only_its_own_decision(
    site: PaySite,
) -> None:
    alices = ask_payment(site, "alice")
    with signed_in(site, "bob", alices) as browser:
        refused = press_continue_refused(browser, site, alices)
        assert refused.status_code == 403 and "belongs to another account" in refused.text
    assert reference_of(site, alices) is None and status(site, alices) is DecisionStatus.REQUESTED
    alices, alices_reference = started(site, "alice")
    bobs, bobs_reference = started(site, "bob")
    with httpx2.Client(timeout=10) as http:
        assert deliver(http, site, event(alices_reference, "payment.succeeded", 1)).status_code == 200
    assert status(site, alices) is DecisionStatus.EXTERNAL_COMPLETED
    assert status(site, bobs) is DecisionStatus.EXTERNAL_PENDING
    assert bobs_reference != alices_reference


def press_continue_refused(browser: httpx2.Client, site: PaySite, decision: Decision) -> httpx2.Response:
    page = browser.get(f"{site.base}/elicit/{decision.elicitation_id}")
    assert page.status_code == 403
    return browser.post(f"{site.base}/elicit/{decision.elicitation_id}/continue", data={"csrf": "forged"})


def test_unknown_and_reused_references_are_refused_and_change_nothing(
    site: PaySite, caplog: pytest.LogCaptureFixture
) -> None:
    decision, reference = started(site)
    forged = reference[:-6] + ("AAAAAA" if not reference.endswith("AAAAAA") else "BBBBBB")
    with httpx2.Client(timeout=10) as http:
        for unknown in ("ref_nothing", forged, "not-even-a-reference"):
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="mcp_elicit"):
                answer = deliver(http, site, event(unknown, "payment.succeeded", 1, event_id=f"evt_{unknown[-6:]}"))
            assert answer.status_code == 404 and answer.json() == {"error": "unknown_reference"}
            assert len(caplog.records) == 1 and unknown not in caplog.text and WEBHOOK_SECRET not in caplog.text
        assert status(site, decision) is DecisionStatus.EXTERNAL_PENDING
        assert deliver(http, site, event(reference, "payment.succeeded", 1)).status_code == 200
        rows = audit_rows(site, decision)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="mcp_elicit"):
            reused = deliver(http, site, event(reference, "payment.succeeded", 2, event_id="evt_second_payment"))
        assert reused.status_code == 409
        assert [r.levelno for r in caplog.records] == [logging.WARNING] and reference not in caplog.text
    assert status(site, decision) is DecisionStatus.EXTERNAL_COMPLETED
    assert audit_rows(site, decision) == rows + 1  # the refusal is audited, nothing moved


def test_a_bad_signature_is_refused_changes_nothing_and_logs_one_line_without_secrets(
    site: PaySite, caplog: pytest.LogCaptureFixture
) -> None:
    decision, reference = started(site)
    good = event(reference, "payment.succeeded", 1)
    body, signature = signed_event(WEBHOOK_SECRET, good)
    _, foreign = signed_event("another-secret-0123456789", good)
    tampered = body.replace(str(INVOICE.amount).encode(), b"1")
    rows = audit_rows(site, decision)
    with httpx2.Client(timeout=10) as http:
        for sent, header in ((body, foreign), (tampered, signature), (body, None), (body, "t=1,v1=00")):
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="mcp_elicit"):
                answer = post(http, site, sent, header)
            assert answer.status_code == 400 and answer.json() == {"error": "bad_signature"}
            assert len(caplog.records) == 1
            assert reference not in caplog.text and WEBHOOK_SECRET not in caplog.text
            assert CLIENT_SECRET not in caplog.text and "payment.succeeded" not in caplog.text
    assert status(site, decision) is DecisionStatus.EXTERNAL_PENDING and audit_rows(site, decision) == rows


def test_a_replay_is_refused_after_the_window_and_a_duplicate_within_it(
    site: PaySite, caplog: pytest.LogCaptureFixture
) -> None:
    decision, reference = started(site)
    failed = event(reference, "payment.failed", 1, reason="card_declined")
    stale = int(time.time()) - 600
    with httpx2.Client(timeout=10) as http:
        with caplog.at_level(logging.INFO, logger="mcp_elicit"):
            replayed = deliver(http, site, event(reference, "payment.succeeded", 2), timestamp=stale)
        assert replayed.status_code == 400 and len(caplog.records) == 1 and "replay" in caplog.text
        body, signature = signed_event(WEBHOOK_SECRET, failed)
        assert post(http, site, body, signature).json()["status"] == "recorded"
        rows = audit_rows(site, decision)
        assert post(http, site, body, signature).json() == {"status": "duplicate"}
    assert status(site, decision) is DecisionStatus.EXTERNAL_PENDING and audit_rows(site, decision) == rows


def test_a_late_event_after_expiry_is_refused_changes_nothing_and_is_audited(
    site: PaySite, caplog: pytest.LogCaptureFixture
) -> None:
    decision, reference = started(site)
    site.skew[0] = timedelta(minutes=11).total_seconds()
    with httpx2.Client(timeout=10) as http, caplog.at_level(logging.INFO, logger="mcp_elicit"):
        late = deliver(http, site, event(reference, "payment.succeeded", 1))
    assert late.status_code == 410 and late.json() == {"error": "decision_expired"}
    assert len(caplog.records) == 1 and reference not in caplog.text and WEBHOOK_SECRET not in caplog.text
    current = site.store.get_decision(decision.elicitation_id, OPERATOR)
    assert (
        current.status is DecisionStatus.EXTERNAL_PENDING
        and current.completion_version == decision.completion_version + 2
    )
    last = site.store.audit_trail(decision.elicitation_id, OPERATOR)[-1]
    assert last.from_status == last.to_status == "external_pending"
    assert re.search(r"late succeeded event evt_payment\.succeeded_1 .* ended \(expired\)", last.reason)


def reasons_of(site: PaySite, decision: Decision) -> list[str]:
    return [row.reason for row in site.store.audit_trail(decision.elicitation_id, OPERATOR)]


@pytest.mark.engines("sqlite", "postgres")
@pytest.mark.parametrize("racing", [False, True])
def test_a_second_payment_for_a_paid_reference_is_audited_as_one_to_refund(
    site: PaySite, caplog: pytest.LogCaptureFixture, racing: bool
) -> None:
    decision, reference = started(site)
    payments = [event(reference, "payment.succeeded", 1), event(reference, "payment.succeeded", 2, event_id="evt_2nd")]
    with httpx2.Client(timeout=10) as http, caplog.at_level(logging.INFO, logger="mcp_elicit"):
        if racing:
            with ThreadPoolExecutor(max_workers=2) as pool:
                answers = list(pool.map(lambda body: deliver(http, site, body), payments))
        else:
            answers = [deliver(http, site, body) for body in payments]
    assert sorted(answer.status_code for answer in answers) == [200, 409]
    assert sum(1 for answer in answers if answer.json().get("status") == "applied") == 1
    refused = next(answer for answer in answers if answer.status_code == 409)
    assert refused.json()["error"] == "decision_ended"
    assert status(site, decision) is DecisionStatus.EXTERNAL_COMPLETED
    assert moves_to(site, decision, DecisionStatus.EXTERNAL_COMPLETED) == 1
    seconds = [why for why in reasons_of(site, decision) if "second payment for this reference: refund it" in why]
    assert len(seconds) == 1 and INVOICE.currency in seconds[0]
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and "second payment" in warnings[0].getMessage()
    assert reference not in caplog.text and WEBHOOK_SECRET not in caplog.text


@pytest.mark.parametrize("kind", ["checkout.expired", "checkout.cancelled"])
def test_an_old_checkouts_final_failure_does_not_end_a_decision_a_newer_attempt_reported_on(
    site: PaySite, kind: str
) -> None:
    decision, reference = started(site)
    with httpx2.Client(timeout=10) as http:
        assert deliver(http, site, event(reference, "payment.failed", 2, reason="card_declined")).status_code == 200
        older = deliver(http, site, event(reference, kind, 1, reason="the first checkout lapsed"))
        assert older.status_code == 200 and older.json()["status"] == "ignored"
        assert status(site, decision) is DecisionStatus.EXTERNAL_PENDING
        entry = site.store.journal_get(decision.operation_id, event_entry(decision.elicitation_id, f"evt_{kind}_1"),
                                       caller=decision.principal)  # fmt: skip
        assert entry is not None and isinstance(entry.value, dict) and entry.value["applied"] == "older"
        paid = deliver(http, site, event(reference, "payment.succeeded", 3))
        assert paid.json() == {"status": "applied", "decision": "external_completed"}


def test_a_final_event_the_deadline_overtakes_while_it_is_applied_is_refused_as_expired(site: PaySite) -> None:
    decision = ask_payment(site, "alice", ttl=timedelta(seconds=5))
    with signed_in(site, "alice", decision) as browser:
        assert press_continue(browser, site, decision).status_code == 303
    reference = reference_of(site, decision)
    assert reference is not None
    time.sleep(max(0.0, (decision.expires_at - datetime.now(UTC)).total_seconds()) + 0.2)
    site.skew[0] = -120  # the pages' clock still sees it open; the store's own clock expires it at the move
    with httpx2.Client(timeout=10) as http:
        late = deliver(http, site, event(reference, "payment.succeeded", 1))
    assert late.status_code == 410 and late.json() == {"error": "decision_expired"}
    assert status(site, decision) is DecisionStatus.EXPIRED
    entry = site.store.journal_get(decision.operation_id, event_entry(decision.elicitation_id,
                                   "evt_payment.succeeded_1"), caller=decision.principal)  # fmt: skip
    assert entry is not None and isinstance(entry.value, dict) and entry.value["applied"] == "late"
    assert any("refund it at the provider" in reason for reason in reasons_of(site, decision))


def test_malformed_deliveries_are_a_clear_400_and_change_nothing(
    site: PaySite, caplog: pytest.LogCaptureFixture
) -> None:
    decision, reference = started(site)
    body, _ = signed_event(WEBHOOK_SECRET, event(reference, "payment.succeeded", 1))
    now = int(time.time())
    deep = b"[" * 100_000
    sent: list[tuple[bytes, bytes, str]] = [
        (body, f"t={now},v1=".encode() + "\u00e9t\u00e9".encode("latin-1"), "bad_signature"),
        (body, b"t=" + b"9" * 5000 + b",v1=00", "bad_signature"),
        (deep, sign_timestamped(WEBHOOK_SECRET, deep).encode(), "unreadable_event"),
    ]
    rows = audit_rows(site, decision)
    with httpx2.Client(timeout=10) as http:
        for content, header, error in sent:
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="mcp_elicit"):
                headers = {b"content-type": b"application/json", SIGNATURE_HEADER.encode(): header}
                answer = http.post(f"{site.base}/elicit/hooks/{PAY_INVOICE}", content=content, headers=headers)
            assert answer.status_code == 400 and answer.json() == {"error": error}
            assert len(caplog.records) == 1 and WEBHOOK_SECRET not in caplog.text
    assert status(site, decision) is DecisionStatus.EXTERNAL_PENDING and audit_rows(site, decision) == rows


def test_the_flow_key_from_the_path_cannot_forge_a_log_line(site: PaySite, caplog: pytest.LogCaptureFixture) -> None:
    with httpx2.Client(timeout=10) as http, caplog.at_level(logging.INFO, logger="mcp_elicit"):
        refused = http.post(f"{site.base}/elicit/hooks/{PAY_INVOICE}%0AWARNING forged", content=b"x" * (MAX_BODY + 1))
    assert refused.status_code == 413
    assert len(caplog.records) == 1 and "\n" not in caplog.records[0].getMessage()


# -- the page's side: a charge or reference it cannot trust opens no checkout ----------------------------------------


def press_continue_without_page(browser: httpx2.Client, site: PaySite, decision: Decision) -> httpx2.Response:
    """Continue, as a page opened earlier would post it (the page itself may now show no form)."""
    return browser.post(
        f"{site.base}/elicit/{decision.elicitation_id}/continue", data={"csrf": site.form_token(decision)}
    )


def test_a_decision_whose_charge_cannot_be_computed_is_refused_before_it_moves_and_stays_answerable(
    site: PaySite,
) -> None:
    decision = ask_payment(site, "alice", journaled=False)
    rows = audit_rows(site, decision)
    with signed_in(site, "alice", decision) as browser:
        page = browser.get(f"{site.base}/elicit/{decision.elicitation_id}")
        assert page.status_code == 409 and "cannot say what this step charges" in page.text
        pressed = press_continue_without_page(browser, site, decision)
        assert pressed.status_code == 502 and "cannot say what this step charges" in pressed.text
        assert reference_of(site, decision) is None, "no reference, so nothing can be paid"
        assert status(site, decision) is DecisionStatus.REQUESTED and audit_rows(site, decision) == rows
        site.store.journal_record(decision.operation_id, "invoice", INVOICE.model_dump(), caller=decision.principal)
        later = press_continue(browser, site, decision)
    assert later.status_code == 303 and later.headers["location"].startswith(f"{site.provider}/checkout/")


def _raises(decision: Decision, steps: Mapping[str, JSONValue]) -> Charge:
    raise RuntimeError("the pricing service is down")


def _gives_none(decision: Decision, steps: Mapping[str, JSONValue]) -> Charge:
    return None  # type: ignore[return-value]  # a deployer's charge that forgets to return


@pytest.mark.parametrize("charge", [_raises, _gives_none], ids=["raises", "gives-none"])
def test_a_flow_whose_charge_raises_or_gives_no_charge_is_refused_before_the_decision_moves(
    store_url: str, charge: Callable[[Decision, Mapping[str, JSONValue]], Charge]
) -> None:
    with payments_site(store_url, tweak=lambda flow: replace(flow, charge=charge)) as site:
        decision = ask_payment(site, "alice")
        rows = audit_rows(site, decision)
        with signed_in(site, "alice", decision) as browser:
            pressed = press_continue_without_page(browser, site, decision)
        assert pressed.status_code == 502 and "cannot say what this step charges" in pressed.text
        assert status(site, decision) is DecisionStatus.REQUESTED and audit_rows(site, decision) == rows
        assert reference_of(site, decision) is None


@pytest.mark.parametrize(
    ("stored", "said"),
    [
        ("not an object", "The stored reference of this step cannot be read; nothing was charged."),
        ({"reference": 7}, "The stored reference of this step cannot be read; nothing was charged."),
        ({"reference": "ref_x", "amount": 1, "currency": INVOICE.currency}, "What this step charges changed"),
    ],
)
def test_a_stored_reference_that_is_unreadable_or_for_another_charge_opens_no_checkout(
    site: PaySite, stored: JSONValue, said: str
) -> None:
    decision = ask_payment(site, "alice")
    site.store.journal_record(decision.operation_id, reference_entry(decision.elicitation_id), stored,
                              caller=decision.principal)  # fmt: skip
    with signed_in(site, "alice", decision) as browser:
        pressed = press_continue(browser, site, decision)
    assert pressed.status_code == 502 and said in pressed.text
    assert "/checkout/" not in pressed.headers.get("location", "")


# -- the provider's side: deliveries the site refuses or ignores, and why ---------------------------------------------


def test_a_delivery_for_a_flow_the_site_does_not_have_is_404(site: PaySite) -> None:
    body, signature = signed_event(WEBHOOK_SECRET, event("ref_x", "payment.succeeded", 1))
    with httpx2.Client(timeout=10) as http:
        answer = http.post(f"{site.base}/elicit/hooks/no_such_flow", content=body,
                           headers={"content-type": "application/json", SIGNATURE_HEADER: signature})  # fmt: skip
    assert answer.status_code == 404 and answer.json() == {"error": "unknown_flow"}


def test_an_event_of_no_concern_is_ignored_and_changes_nothing(site: PaySite) -> None:
    decision, reference = started(site)
    rows = audit_rows(site, decision)
    with httpx2.Client(timeout=10) as http:
        answer = deliver(http, site, event(reference, "customer.updated", 1))
    assert answer.status_code == 200 and answer.json()["status"] == "ignored"
    assert status(site, decision) is DecisionStatus.EXTERNAL_PENDING and audit_rows(site, decision) == rows


@pytest.mark.parametrize(
    "broken",
    [
        {"data": "not an object"},
        {"sequence": "3"},
        {"sequence": True},
        {"data": {"amount": "12.00"}},
        {"data": {"amount": False}},
        {"id": ""},
        {"id": "x" * 201},
        {"id": "evt\nforged"},
    ],
    ids=["data", "sequence-text", "sequence-bool", "amount-text", "amount-bool", "id-empty", "id-long", "id-newline"],
)
def test_an_event_read_wrong_is_a_400_and_changes_nothing(site: PaySite, broken: dict[str, JSONValue]) -> None:
    decision, reference = started(site)
    sent = event(reference, "payment.succeeded", 1)
    for name, value in broken.items():
        if name == "data" and isinstance(value, dict):
            sent["data"] = {**sent["data"], **value}  # type: ignore[dict-item]
        else:
            sent[name] = value
    rows = audit_rows(site, decision)
    with httpx2.Client(timeout=10) as http:
        answer = deliver(http, site, sent)
    assert answer.status_code == 400 and answer.json() == {"error": "unreadable_event"}
    assert status(site, decision) is DecisionStatus.EXTERNAL_PENDING and audit_rows(site, decision) == rows


def test_a_success_for_another_amount_is_refused_audited_and_the_right_one_still_completes(
    site: PaySite, caplog: pytest.LogCaptureFixture
) -> None:
    decision, reference = started(site)
    with httpx2.Client(timeout=10) as http:
        with caplog.at_level(logging.INFO, logger="mcp_elicit"):
            short = deliver(http, site, event(reference, "payment.succeeded", 1, amount=INVOICE.amount - 1))
        assert short.status_code == 422 and short.json() == {"error": "amount_mismatch"}
        assert status(site, decision) is DecisionStatus.EXTERNAL_PENDING
        assert any("reports another amount than the one charged" in why for why in reasons_of(site, decision))
        assert [r.levelno for r in caplog.records] == [logging.WARNING] and reference not in caplog.text
        paid = deliver(http, site, event(reference, "payment.succeeded", 2))
    assert paid.json() == {"status": "applied", "decision": "external_completed"}


# -- the stand-in provider's own API and checkout refuse what a real one would ----------------------------------------

CHECKOUT: dict[str, JSONValue] = {
    "reference": "ref_x", "amount": 1200, "currency": "EUR", "description": "Invoice 1",
    "return_url": "https://shop.example/back", "expires_at": 4_000_000_000,
}  # fmt: skip


def test_the_providers_checkout_api_refuses_unknown_clients_and_bad_requests(site: PaySite) -> None:
    api = f"{site.provider}/api/checkouts"
    with httpx2.Client(timeout=10) as http:
        for headers in (
            {},
            {"authorization": "Bearer x"},
            {"authorization": "Basic !!!not-base64"},
            {"authorization": "Basic " + base64.b64encode(f"{CLIENT_ID}:wrong".encode()).decode()},
            {"authorization": "Basic " + base64.b64encode(b"someone:" + CLIENT_SECRET.encode()).decode()},
        ):
            refused = http.post(api, json=CHECKOUT, headers=headers)
            assert refused.status_code == 401 and refused.json() == {"error": "invalid_client"}, headers
        auth = (CLIENT_ID, CLIENT_SECRET)
        without_reference = {name: value for name, value in CHECKOUT.items() if name != "reference"}
        for asked in ({**CHECKOUT, "amount": 0}, {**CHECKOUT, "amount": True}, {**CHECKOUT, "amount": "12"},
                      {**CHECKOUT, "expires_at": "soon"}, without_reference):  # fmt: skip
            refused = http.post(api, json=asked, auth=auth)
            assert refused.status_code == 400 and refused.json()["error"] == "invalid_request", asked
        assert http.post(api, content=b"{not json", auth=auth).status_code == 400
        elsewhere = http.post(api, json={**CHECKOUT, "return_url": "javascript:alert(1)"}, auth=auth)
        assert elsewhere.status_code == 400 and elsewhere.json()["error_description"] == "return_url"
        made = http.post(api, json=CHECKOUT, auth=auth)
    assert made.status_code == 201 and made.json()["url"].startswith(f"{site.provider}/checkout/cs_")


def test_the_providers_checkout_page_refuses_what_it_cannot_take_and_closes_when_it_lapses(site: PaySite) -> None:
    auth = (CLIENT_ID, CLIENT_SECRET)
    with httpx2.Client(timeout=10) as http:
        assert http.get(f"{site.provider}/checkout/cs_none").status_code == 404
        assert http.post(f"{site.provider}/checkout/cs_none", data={"csrf": "x", "action": "pay"}).status_code == 404
        url = http.post(f"{site.provider}/api/checkouts", json=CHECKOUT, auth=auth).json()["url"]
        page = http.get(url)
        assert page.status_code == 200 and "EUR 12.00" in page.text
        assert http.post(url, data={"csrf": "forged", "action": "pay"}).status_code == 403
        unknown = http.post(url, data={"csrf": hidden(page.text, "csrf"), "action": "refund"})
        assert unknown.status_code == 400 and "Unknown action" in unknown.text
        assert http.get(url).status_code == 200, "still open"
        lapsing = http.post(f"{site.provider}/api/checkouts", json={**CHECKOUT, "expires_at": 1}, auth=auth)
        lapsed_url = lapsing.json()["url"]
        lapsed = http.get(lapsed_url)
        assert lapsed.status_code == 409 and "It was expired" in lapsed.text
        token = hidden(page.text, "csrf")
        closed = http.post(url, data={"csrf": token, "action": "abandon"})
        assert closed.status_code == 303 and closed.headers["location"] == CHECKOUT["return_url"]
        again = http.post(url, data={"csrf": token, "action": "pay"})
        assert again.status_code == 409 and "It was cancelled" in again.text


def test_payments_config_refuses_what_cannot_deliver_a_webhook() -> None:
    with pytest.raises(ValueError, match="absolute http"):
        PaymentsConfig("/hooks", WEBHOOK_SECRET)
    with pytest.raises(ValueError, match="absolute http"):
        PaymentsConfig("ftp://example.invalid/hooks", WEBHOOK_SECRET)
    with pytest.raises(ValueError, match="at least 16 characters"):
        PaymentsConfig("https://example.invalid/hooks", "short")
    with pytest.raises(ValueError, match="duplicates is at least 1"):
        PaymentsConfig("https://example.invalid/hooks", WEBHOOK_SECRET, duplicates=0)
    with pytest.raises(ValueError, match="jitter at least 0"):
        PaymentsConfig("https://example.invalid/hooks", WEBHOOK_SECRET, jitter=-1)


# -- races at the page, readers' mistakes and crashed deliveries --------------------------------------------------


def _gated(entered: threading.Event, release: threading.Event, calls: list[str]) -> Tweak:
    """The flow with a `start` that holds its first call at the provider until `release` is set."""

    def tweak(flow: ExternalCompletion) -> ExternalCompletion:
        async def start(checkout: Checkout) -> str:
            calls.append(checkout.reference)
            if len(calls) == 1:
                entered.set()
                await asyncio.to_thread(release.wait, 10)
            return await flow.start(checkout)

        return replace(flow, start=start)

    return tweak


@pytest.mark.engines("sqlite", "postgres")  # the opening's claim is the store's insert-once, on each engine
def test_two_continues_at_once_open_one_checkout_and_only_an_event_after_it_lets_another_open(store_url: str) -> None:
    entered, release, calls = threading.Event(), threading.Event(), list[str]()
    with payments_site(store_url, tweak=_gated(entered, release, calls)) as site:
        decision = ask_payment(site, "alice")
        with signed_in(site, "alice", decision) as browser, ThreadPoolExecutor(max_workers=1) as pool:
            first = pool.submit(press_continue, browser, site, decision)
            assert entered.wait(10), "the first Continue reached the provider"
            second = press_continue_without_page(browser, site, decision)
            release.set()
            opened = first.result(timeout=20)
            assert opened.status_code == 303 and opened.headers["location"].startswith(f"{site.provider}/checkout/")
            assert second.status_code == 409 and "So that nothing is paid twice" in second.text
            assert len(calls) == 1, "the provider was asked for one checkout"
            reference = reference_of(site, decision)
            assert reference is not None
            with httpx2.Client(timeout=10) as http:
                failed = deliver(http, site, event(reference, "payment.failed", 1, reason="card_declined"))
            assert failed.json()["status"] == "recorded"
            assert press_continue(browser, site, decision).status_code == 303, "the checkout reported: open again"
            again = press_continue_without_page(browser, site, decision)
            assert again.status_code == 409, "the event before this opening does not count for it"
    assert len(calls) == 2


def test_a_checkout_the_provider_could_not_open_can_be_opened_again_at_once(store_url: str) -> None:
    failures = [ConnectionError("the provider is down")]

    def tweak(flow: ExternalCompletion) -> ExternalCompletion:
        async def start(checkout: Checkout) -> str:
            if failures:
                raise failures.pop()
            return await flow.start(checkout)

        return replace(flow, start=start)

    with payments_site(store_url, tweak=tweak) as site:
        decision = ask_payment(site, "alice")
        with signed_in(site, "alice", decision) as browser:
            down = press_continue(browser, site, decision)
            assert down.status_code == 502 and "could not be reached" in down.text
            page = browser.get(f"{site.base}/elicit/{decision.elicitation_id}")
            assert "has not reported yet" not in page.text and "/continue" in page.text
            up = press_continue(browser, site, decision)
        assert up.status_code == 303 and up.headers["location"].startswith(f"{site.provider}/checkout/")


_OUTCOMES = {
    "payment.succeeded": EventOutcome.SUCCEEDED,
    "payment.failed": EventOutcome.FAILED,
    "checkout.cancelled": EventOutcome.CANCELLED,
}


def _trusting_reader(body: bytes) -> ProviderEvent | None:
    """The stand-in's events read as a careless reader does: amount, currency and reason passed on as they come."""
    sent = json.loads(body)
    data = sent["data"]
    return ProviderEvent(
        event_id=sent["id"],
        reference=data["reference"],
        order=sent["sequence"],
        outcome=_OUTCOMES[sent["type"]],
        amount=data["amount"],
        currency=data["currency"],
        said=data["reason"],
    )


@pytest.mark.engines("sqlite", "postgres")  # a refused event writes nothing, on each engine
@pytest.mark.parametrize(
    ("field", "wrong", "kind", "answered"),
    [
        ("reason", 404, "payment.failed", "recorded"),
        ("amount", "12.00", "payment.succeeded", "applied"),
        ("currency", 978, "payment.succeeded", "applied"),
        ("currency", "eur", "payment.succeeded", "applied"),
    ],
    ids=["said-int", "amount-text", "currency-int", "currency-lower"],
)
def test_an_event_its_reader_filled_wrongly_is_a_400_that_spends_nothing_and_its_corrected_retry_applies(
    store_url: str, caplog: pytest.LogCaptureFixture, field: str, wrong: JSONValue, kind: str, answered: str
) -> None:
    with payments_site(store_url, tweak=lambda flow: replace(flow, read_event=_trusting_reader)) as site:
        decision, reference = started(site)
        sent = event(reference, kind, 1, reason="card_declined")
        sent["data"] = {**sent["data"], field: wrong}  # type: ignore[dict-item]
        rows = audit_rows(site, decision)
        with httpx2.Client(timeout=10) as http:
            with caplog.at_level(logging.INFO, logger="mcp_elicit"):
                refused = deliver(http, site, sent)
            assert refused.status_code == 400 and refused.json() == {"error": "unreadable_event"}
            said = {"reason": "said"}.get(field, field)
            assert len(caplog.records) == 1 and PAY_INVOICE in caplog.text and f"wrong {said}" in caplog.text
            assert str(wrong) not in caplog.text and reference not in caplog.text
            assert status(site, decision) is DecisionStatus.EXTERNAL_PENDING and audit_rows(site, decision) == rows
            entry = event_entry(decision.elicitation_id, str(sent["id"]))
            assert site.store.journal_get(decision.operation_id, entry, caller=decision.principal) is None
            corrected = deliver(http, site, event(reference, kind, 1, reason="card_declined"))
        assert corrected.status_code == 200 and corrected.json()["status"] == answered


# -- deliveries held up, killed midway, or racing: each event applied once, with its effect ---------------------------


class _Held(hooks.StoreHooks):
    """Holds the first two moves to `external_completed` before their compare-and-set until the test lets each
    go: two deliveries held up between reading the decision and moving it, for as long as the test likes. The
    site's store calls run in worker threads (PostgreSQL outside a served lifespan), so a held one blocks only
    its own delivery."""

    def __init__(self) -> None:
        self.entered = [threading.Event(), threading.Event()]
        self.go = [threading.Event(), threading.Event()]
        self._arrived = iter(range(2))
        self._lock = threading.Lock()

    async def transitioning(
        self, snapshot: Decision, to: DecisionStatus, transition: Callable[[], Awaitable[Decision]]
    ) -> Decision:
        if to is DecisionStatus.EXTERNAL_COMPLETED:
            with self._lock:
                arrival = next(self._arrived, None)
            if arrival is not None:
                self.entered[arrival].set()
                self.go[arrival].wait(20)
        return await transition()


@pytest.mark.engines("postgres")  # SQLite's calls run inline on the loop: nothing can be held between them
@pytest.mark.parametrize("first", [0, 1], ids=["the-first-moves-first", "the-second-moves-first"])
def test_two_payments_held_up_before_their_moves_complete_it_once_and_the_other_is_a_second_payment(
    site: PaySite, first: int
) -> None:
    decision, reference = started(site)
    payments = [event(reference, "payment.succeeded", n, event_id=f"evt_pay_{n}") for n in (1, 2)]
    held, before = _Held(), hooks.installed()
    hooks.install(held)
    try:
        with httpx2.Client(timeout=30) as http, ThreadPoolExecutor(max_workers=2) as pool:
            try:
                answers = [pool.submit(deliver, http, site, payments[0])]
                assert held.entered[0].wait(10), "the first payment reached its move"
                site.skew[0] = 120  # held up for two minutes
                answers.append(pool.submit(deliver, http, site, payments[1]))
                assert held.entered[1].wait(10), "the second payment reached its move too"
                held.go[first].set()
                moved = answers[first].result(timeout=20)
                held.go[1 - first].set()
                refused = answers[1 - first].result(timeout=20)
            finally:
                for go in held.go:
                    go.set()
    finally:
        hooks.install(before)
    assert moved.json() == {"status": "applied", "decision": "external_completed"}, moved.text
    assert refused.status_code == 409 and refused.json()["error"] == "decision_ended", refused.text
    assert moves_to(site, decision, DecisionStatus.EXTERNAL_COMPLETED) == 1
    seconds = [why for why in reasons_of(site, decision) if "second payment for this reference: refund it" in why]
    assert len(seconds) == 1 and f"event evt_pay_{2 - first} " in seconds[0], seconds


class _Killed(hooks.StoreHooks):
    """The store lost in the middle of the first move to `to`: the delivery making it dies there."""

    def __init__(self, to: DecisionStatus) -> None:
        self.to = to
        self.killed = False

    async def transitioning(
        self, snapshot: Decision, to: DecisionStatus, transition: Callable[[], Awaitable[Decision]]
    ) -> Decision:
        if to is self.to and not self.killed:
            self.killed = True
            raise StoreUnavailable("the connection to the database was lost")
        return await transition()


@pytest.mark.engines("sqlite", "postgres")  # the move and its record are one transaction, on each engine
def test_a_final_event_whose_delivery_died_midway_keeps_no_other_out_and_its_retry_is_late(site: PaySite) -> None:
    decision, reference = started(site)
    cancelled = event(reference, "checkout.cancelled", 1)
    killed, before = _Killed(DecisionStatus.EXTERNAL_FAILED), hooks.installed()
    hooks.install(killed)
    try:
        with httpx2.Client(timeout=10) as http:
            died = deliver(http, site, cancelled)
            assert died.status_code == 503 and killed.killed
            rows = audit_rows(site, decision)
            assert status(site, decision) is DecisionStatus.EXTERNAL_PENDING
            paid = deliver(http, site, event(reference, "payment.succeeded", 2))
            assert paid.json() == {"status": "applied", "decision": "external_completed"}, paid.text
            retried = deliver(http, site, cancelled)
    finally:
        hooks.install(before)
    assert retried.status_code == 409 and retried.json()["error"] == "decision_ended"
    assert moves_to(site, decision, DecisionStatus.EXTERNAL_FAILED) == 0
    assert audit_rows(site, decision) == rows + 2  # the payment's move and the cancellation's refusal
    entry = site.store.journal_get(decision.operation_id, event_entry(decision.elicitation_id,
                                   "evt_checkout.cancelled_1"), caller=decision.principal)  # fmt: skip
    assert entry is not None and isinstance(entry.value, dict) and entry.value["applied"] == "late"


def _lose_entries(store_url: str, event_id: str, *, lost: bool) -> None:
    """While `lost`, the database refuses to write the entry of `event_id` (as when it is lost mid-call)."""
    if store_url.startswith("sqlite"):
        statements = [f"CREATE TRIGGER lose_entry BEFORE INSERT ON elicit_journal WHEN instr(NEW.name, "
                      f"'/event/{event_id}') > 0 BEGIN SELECT RAISE(ABORT, 'the disk went away'); END"]  # fmt: skip
        undo = ["DROP TRIGGER lose_entry"]
    else:
        statements = [
            "CREATE FUNCTION lose_entry() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION "
            "'the disk went away' USING ERRCODE = '53100'; END $$",
            f"CREATE TRIGGER lose_entry BEFORE INSERT ON elicit_journal FOR EACH ROW WHEN (strpos(NEW.name, "
            f"'/event/{event_id}') > 0) EXECUTE FUNCTION lose_entry()",
        ]
        undo = ["DROP TRIGGER lose_entry ON elicit_journal", "DROP FUNCTION lose_entry()"]
    run_sql(store_url, [(sql, ()) for sql in (statements if lost else undo)])


@pytest.mark.engines("sqlite", "postgres")  # the entry and the event's effect are one transaction, on each engine
@pytest.mark.parametrize(
    ("kind", "amount", "answered", "noted"),
    [
        ("payment.failed", INVOICE.amount, (200, {"status": "recorded", "decision": "external_pending"}),
         "attempt failed at Example Pay: card_declined"),
        ("payment.succeeded", INVOICE.amount - 1, (422, {"error": "amount_mismatch"}),
         "reports another amount than the one charged"),
        ("payment.succeeded", INVOICE.amount, (200, {"status": "applied", "decision": "external_completed"}),
         "reports it done"),
    ],
    ids=["failed-attempt", "wrong-amount", "paid"],
)  # fmt: skip
def test_an_event_whose_delivery_failed_midway_is_applied_once_by_the_providers_retry(
    site: PaySite, store_url: str, kind: str, amount: int, answered: tuple[int, JSONValue], noted: str
) -> None:
    decision, reference = started(site)
    sent = event(reference, kind, 1, event_id="evt_lost", amount=amount, reason="card_declined")
    rows = audit_rows(site, decision)
    _lose_entries(store_url, "evt_lost", lost=True)
    with httpx2.Client(timeout=10) as dying:  # the server closes a connection a 500 was answered on
        died = deliver(dying, site, sent)
    _lose_entries(store_url, "evt_lost", lost=False)
    assert died.status_code >= 500
    with httpx2.Client(timeout=10) as http:
        assert status(site, decision) is DecisionStatus.EXTERNAL_PENDING and audit_rows(site, decision) == rows
        retried = deliver(http, site, sent)
        assert (retried.status_code, retried.json()) == answered
        assert deliver(http, site, sent).json() == {"status": "duplicate"}
    assert sum(1 for why in reasons_of(site, decision) if noted in why) == 1
    assert audit_rows(site, decision) == rows + 1
    entry = site.store.journal_get(decision.operation_id, event_entry(decision.elicitation_id, "evt_lost"),
                                   caller=decision.principal)  # fmt: skip
    assert entry is not None


STANDARD_SECRET = "whsec_" + base64.b64encode(b"s" * 32).decode()


def test_a_provider_signing_with_the_standard_webhooks_library_completes_the_decision_end_to_end(
    store_url: str,
) -> None:
    """The other built-in verifier over real HTTP: deliveries signed by the `standardwebhooks` library itself."""
    sender = Webhook(STANDARD_SECRET)

    def signed(body: bytes, message_id: str) -> dict[str, str]:
        now = datetime.now(UTC)
        return {
            "content-type": "application/json",
            "webhook-id": message_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": sender.sign(message_id, now, body),
        }

    standard: Tweak = lambda flow: replace(flow, verifier=StandardWebhooks(STANDARD_SECRET))  # noqa: E731
    with payments_site(store_url, tweak=standard) as site:
        decision, reference = started(site)
        url = f"{site.base}/elicit/hooks/{PAY_INVOICE}"
        paid = json.dumps(event(reference, "payment.succeeded", 1)).encode()
        with httpx2.Client(timeout=10) as http:
            forged = http.post(url, content=paid, headers=signed(paid.replace(b"succeeded", b"failed"), "msg_1"))
            assert forged.status_code == 400 and forged.json() == {"error": "bad_signature"}
            assert status(site, decision) is DecisionStatus.EXTERNAL_PENDING
            hmac_signed = deliver(http, site, event(reference, "payment.succeeded", 1))
            assert hmac_signed.status_code == 400  # the site takes this flow's scheme only
            applied = http.post(url, content=paid, headers=signed(paid, "msg_1"))
            assert applied.json() == {"status": "applied", "decision": "external_completed"}, applied.text
            again = http.post(url, content=paid, headers=signed(paid, "msg_2"))
            assert again.status_code == 200 and again.json()["status"] == "duplicate", again.text
        assert status(site, decision) is DecisionStatus.EXTERNAL_COMPLETED
        assert moves_to(site, decision, DecisionStatus.EXTERNAL_COMPLETED) == 1
