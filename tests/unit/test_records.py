"""The records' factories and rules: what a new decision or operation holds, what they refuse, and when a
waiting decision is overdue."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from mcp_elicit.model import (
    BrowserUser,
    DecisionOrigin,
    DecisionStatus,
    JSONObject,
    Mode,
    Principal,
    ResumePolicy,
    new_form_decision,
    new_operation,
    new_url_decision,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ALICE = Principal("alice", "client-a")
ORIGIN = DecisionOrigin(
    operation_id="op-1",
    key="approve",
    principal=ALICE,
    origin_method="tools/call",
    origin_request_digest="sha256:d",
    resume_policy=ResumePolicy.MANUAL,
    sensitive_fields=("note",),
)
SCHEMA: JSONObject = {"type": "object", "properties": {"approve": {"type": "boolean"}}}


def test_a_form_decision_holds_its_question_and_its_origin() -> None:
    decision = new_form_decision(ORIGIN, message="Deploy?", requested_schema=SCHEMA, now=NOW, ttl=timedelta(hours=1))
    assert (decision.operation_id, decision.key, decision.principal) == ("op-1", "approve", ALICE)
    assert (decision.origin_method, decision.origin_request_digest) == ("tools/call", "sha256:d")
    assert (decision.mode, decision.status, decision.resume_policy) == (
        Mode.FORM,
        DecisionStatus.REQUESTED,
        ResumePolicy.MANUAL,
    )
    assert (decision.message, decision.requested_schema, decision.url) == ("Deploy?", SCHEMA, None)
    assert decision.sensitive_fields == ("note",) and decision.content is None
    assert (decision.created_at, decision.updated_at, decision.expires_at) == (NOW, NOW, NOW + timedelta(hours=1))


def test_a_url_decision_holds_its_url_and_may_be_named_by_it() -> None:
    page = "http://127.0.0.1:8000/elicit/e-1"
    named = new_url_decision(ORIGIN, message="Connect", url=page, now=NOW, ttl=timedelta(1), elicitation_id="e-1")
    assert (named.elicitation_id, named.mode, named.url) == ("e-1", Mode.URL, page)
    assert named.requested_schema is None
    unnamed = new_url_decision(ORIGIN, message="Connect", url="https://x.example/", now=NOW, ttl=timedelta(1))
    assert unnamed.elicitation_id not in ("", "e-1") and unnamed.url == "https://x.example/"


def test_a_url_decision_refuses_other_schemes_quoting_at_most_forty_characters() -> None:
    url = "ftp://files.example/" + "a" * 40
    with pytest.raises(ValueError) as raised:
        new_url_decision(ORIGIN, message="m", url=url, now=NOW, ttl=timedelta(1))
    assert str(raised.value) == f"a URL decision needs an http(s) URL, got {url[:40]!r}"


@pytest.mark.parametrize(
    ("message", "now", "ttl", "refusal"),
    [
        ("m", NOW, timedelta(0), "a decision needs a positive TTL, got 0:00:00"),
        ("m", NOW, timedelta(seconds=-1), "a decision needs a positive TTL, got -1 day, 23:59:59"),
        ("m", NOW.replace(tzinfo=None), timedelta(1), "timestamps must be timezone-aware"),
        ("", NOW, timedelta(1), "a decision needs a message for the person asked"),
    ],
)
def test_both_kinds_of_decision_refuse_what_no_question_can_be(
    message: str, now: datetime, ttl: timedelta, refusal: str
) -> None:
    with pytest.raises(ValueError) as form:
        new_form_decision(ORIGIN, message=message, requested_schema=SCHEMA, now=now, ttl=ttl)
    with pytest.raises(ValueError) as url:
        new_url_decision(ORIGIN, message=message, url="https://x.example/", now=now, ttl=ttl)
    assert str(form.value) == str(url.value) == refusal


def test_a_form_decision_refuses_a_schema_that_is_no_object() -> None:
    with pytest.raises(ValueError) as raised:
        new_form_decision(ORIGIN, message="m", requested_schema={"type": "string"}, now=NOW, ttl=timedelta(1))
    assert str(raised.value) == "a form decision needs a requested_schema of type 'object'"


def test_a_waiting_decision_is_overdue_from_its_expiry_on_and_a_settled_one_never() -> None:
    decision = new_form_decision(ORIGIN, message="m", requested_schema=SCHEMA, now=NOW, ttl=timedelta(minutes=5))
    expiry = decision.expires_at
    assert not decision.is_overdue(expiry - timedelta(microseconds=1))
    assert decision.is_overdue(expiry)
    for settled in (DecisionStatus.ACCEPTED, DecisionStatus.EXPIRED):
        assert not replace(decision, status=settled).is_overdue(expiry + timedelta(days=1))
    pending = replace(decision, mode=Mode.URL, status=DecisionStatus.EXTERNAL_PENDING)
    assert pending.is_overdue(expiry) and not pending.is_overdue(expiry - timedelta(seconds=1))


def test_an_operation_holds_its_call() -> None:
    operation = new_operation(
        ALICE,
        method="tools/call",
        target="deploy",
        request_digest="sha256:d",
        now=NOW,
        ttl=timedelta(hours=2),
        idempotency_key="key-1",
    )
    assert (operation.principal, operation.method, operation.target) == (ALICE, "tools/call", "deploy")
    assert (operation.request_digest, operation.idempotency_key, operation.result, operation.version) == (
        "sha256:d",
        "key-1",
        None,
        0,
    )
    assert (operation.created_at, operation.updated_at, operation.expires_at) == (NOW, NOW, NOW + timedelta(hours=2))


@pytest.mark.parametrize(
    ("now", "ttl", "message"),
    [
        (NOW, timedelta(0), "an operation needs a positive TTL, got 0:00:00"),
        (NOW, timedelta(seconds=-5), "an operation needs a positive TTL, got -1 day, 23:59:55"),
        (NOW.replace(tzinfo=None), timedelta(1), "timestamps must be timezone-aware"),
    ],
)
def test_an_operation_refuses_a_lifetime_that_is_not_positive_or_a_naive_timestamp(
    now: datetime, ttl: timedelta, message: str
) -> None:
    with pytest.raises(ValueError) as raised:
        new_operation(ALICE, method="tools/call", target="deploy", request_digest="d", now=now, ttl=ttl)
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("principal_id", "client_id", "message"),
    [
        ("", "client-a", "principal_id must not be empty: a record needs an owner"),
        ("alice", "", "client_id must not be empty: state is bound to a client, not to a subject alone"),
    ],
)
def test_a_principal_needs_a_subject_and_a_client(principal_id: str, client_id: str, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        Principal(principal_id, client_id)
    assert str(raised.value) == message


def test_a_browser_user_is_a_person_whose_browser_stores_as_its_own_client() -> None:
    assert BrowserUser("alice").as_owner() == Principal("alice", "browser")
    with pytest.raises(ValueError) as raised:
        BrowserUser("")
    assert str(raised.value) == "principal_id must not be empty"
