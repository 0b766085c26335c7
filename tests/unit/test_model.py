"""The pure domain: transition tables, factories, digests and redaction."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from mcp_elicit.model import (
    DECISION_TRANSITIONS,
    FORM_TRANSITIONS,
    REDACTED,
    TERMINAL_DECISION_STATUSES,
    URL_TRANSITIONS,
    DecisionOrigin,
    DecisionStatus,
    IllegalTransition,
    JSONObject,
    Mode,
    OperationStatus,
    Principal,
    UnencodableValue,
    check_decision_transition,
    check_operation_transition,
    looks_secret,
    new_form_decision,
    new_operation,
    new_url_decision,
    redact_content,
    redact_text,
    redact_url,
    request_digest,
)

D = DecisionStatus
NOW = datetime(2026, 11, 30, tzinfo=UTC)
ORIGIN = DecisionOrigin(
    operation_id="op", key="k", principal=Principal("p", "c"), origin_method="tools/call", origin_request_digest="d"
)


def test_form_machine_is_exactly_the_specified_one() -> None:
    assert dict(FORM_TRANSITIONS) == {D.REQUESTED: {D.ACCEPTED, D.DECLINED, D.CANCELLED, D.EXPIRED}}


def test_url_machine_is_exactly_the_specified_one() -> None:
    assert dict(URL_TRANSITIONS) == {
        D.REQUESTED: {D.ACCEPTED_URL, D.DECLINED, D.CANCELLED, D.EXPIRED},
        D.ACCEPTED_URL: {D.EXTERNAL_PENDING, D.CANCELLED, D.EXPIRED},
        D.EXTERNAL_PENDING: {D.EXTERNAL_COMPLETED, D.EXTERNAL_FAILED, D.CANCELLED, D.EXPIRED},
    }


def test_every_waiting_state_can_expire_and_terminal_states_are_final() -> None:
    for table in DECISION_TRANSITIONS.values():
        for waiting, targets in table.items():
            assert D.EXPIRED in targets, waiting
    for mode, table in DECISION_TRANSITIONS.items():
        for terminal in TERMINAL_DECISION_STATUSES:
            assert terminal not in table, (mode, terminal)


@pytest.mark.parametrize("mode", list(Mode))
def test_every_pair_outside_the_table_is_illegal_and_names_both_states(mode: Mode) -> None:
    table = DECISION_TRANSITIONS[mode]
    for source, target in itertools.product(DecisionStatus, repeat=2):
        if target in table.get(source, frozenset()):
            check_decision_transition(mode, source, target)
            continue
        with pytest.raises(IllegalTransition) as raised:
            check_decision_transition(mode, source, target)
        assert raised.value.from_status == source and raised.value.to_status == target
        assert f"{source.value} -> {target.value}" in str(raised.value)


def test_form_statuses_do_not_leak_into_url_mode_and_back() -> None:
    with pytest.raises(IllegalTransition):
        check_decision_transition(Mode.FORM, D.REQUESTED, D.ACCEPTED_URL)
    with pytest.raises(IllegalTransition):
        check_decision_transition(Mode.URL, D.REQUESTED, D.ACCEPTED)


def test_operation_machine() -> None:
    check_operation_transition(OperationStatus.OPEN, OperationStatus.COMPLETED)
    with pytest.raises(IllegalTransition, match="completed -> open"):
        check_operation_transition(OperationStatus.COMPLETED, OperationStatus.OPEN)


def test_factories_refuse_bad_input() -> None:
    with pytest.raises(ValueError, match="type 'object'"):
        new_form_decision(ORIGIN, message="m", requested_schema={"type": "string"}, now=NOW, ttl=timedelta(1))
    with pytest.raises(ValueError, match="positive TTL"):
        new_form_decision(ORIGIN, message="m", requested_schema={"type": "object"}, now=NOW, ttl=timedelta(0))
    with pytest.raises(ValueError, match="timezone-aware"):
        new_url_decision(ORIGIN, message="m", url="https://x", now=NOW.replace(tzinfo=None), ttl=timedelta(1))
    with pytest.raises(ValueError, match="http"):
        new_url_decision(ORIGIN, message="m", url="javascript:alert(1)", now=NOW, ttl=timedelta(1))
    with pytest.raises(ValueError, match="message"):
        new_url_decision(ORIGIN, message="", url="https://x", now=NOW, ttl=timedelta(1))
    with pytest.raises(ValueError, match="client_id"):
        Principal("p", "")


def test_new_records_start_requested_and_unique() -> None:
    first = new_form_decision(ORIGIN, message="m", requested_schema={"type": "object"}, now=NOW, ttl=timedelta(1))
    second = new_form_decision(ORIGIN, message="m", requested_schema={"type": "object"}, now=NOW, ttl=timedelta(1))
    assert first.status is D.REQUESTED and first.completion_version == 0
    assert first.elicitation_id != second.elicitation_id
    assert first.expires_at == NOW + timedelta(1)
    operation = new_operation(
        Principal("p", "c"), method="m", target="t", request_digest="d", now=NOW, ttl=timedelta(1)
    )
    assert operation.status is OperationStatus.OPEN and operation.principal == Principal("p", "c")


def test_request_digest_ignores_key_order_and_meta_but_not_values() -> None:
    a = request_digest("tools/call", {"name": "deploy", "arguments": {"x": 1, "y": [1, 2]}})
    b = request_digest("tools/call", {"arguments": {"y": [1, 2], "x": 1}, "name": "deploy", "_meta": {"p": 1}})
    c = request_digest("tools/call", {"name": "deploy", "arguments": {"x": 2, "y": [1, 2]}})
    assert a == b != c
    assert a.startswith("sha256:") and "deploy" not in a


def test_valid_unicode_has_a_digest() -> None:
    """Astral characters (a surrogate pair in JSON's escapes) and combining marks are text like any other."""
    assert request_digest("tools/call", {"arguments": {"title": "caf\u00e9 \U0001f680", "note": "\ufffd"}})


@pytest.mark.parametrize(
    ("arguments", "path", "reason"),
    [
        ({"title": "\ud800"}, ("arguments", "title"), "lone surrogate '\\ud800' at character 0"),
        ({"items": [{"label": "ok"}, {"label": "a\udfffb"}]}, ("arguments", "items", 1, "label"), "at character 1"),
        ({"tags": {"x\udc80": 1}}, ("arguments", "tags", "x\udc80"), "lone surrogate '\\udc80' in its name"),
        ({"ratio": float("nan")}, ("arguments", "ratio"), "nan is not a JSON number"),
        ({"limits": [1.0, float("-inf")]}, ("arguments", "limits", 1), "-inf is not a JSON number"),
    ],
)
def test_a_value_without_a_canonical_encoding_is_named(
    arguments: JSONObject, path: tuple[str | int, ...], reason: str
) -> None:
    with pytest.raises(UnencodableValue) as raised:
        request_digest("tools/call", {"name": "deploy", "arguments": arguments, "_meta": {"ignored": "\ud800"}})
    assert raised.value.path == path
    assert reason in raised.value.reason
    str(raised.value).encode()  # the message itself is valid UTF-8: it escapes what it names


def test_an_unencodable_value_is_named_by_its_path() -> None:
    error = UnencodableValue(("arguments", "items", 1, "x y", "k\ud800"), "why")
    assert str(error) == "arguments.items[1].'x y'.'k\\ud800' cannot be encoded: why"


@pytest.mark.parametrize(
    ("name", "description", "secret"),
    [
        ("password", None, True),
        ("apiKey", None, True),
        ("api_key", None, True),
        ("client-secret", None, True),
        ("cardNumber", None, True),
        ("value", "Your GitHub personal access token", True),
        ("cvv", None, True),
        ("budget", "Maximum spend in EUR", False),
        ("shipping_address", None, False),
        ("approve", "Approve the production deploy", False),
    ],
)
def test_looks_secret(name: str, description: str | None, secret: bool) -> None:
    assert looks_secret(name, description) is secret


def test_redact_content_hides_declared_and_secret_looking_fields_at_any_depth() -> None:
    content: JSONObject = {
        "note": "see https://x.example/cb?code=abc",
        "nickname": "ada",
        "password": "hunter2",
        "nested": {"token": "t0k3n", "ok": True},
        "items": [{"pin": "1234"}],
    }
    redacted = redact_content(content, ("nickname",))
    assert redacted == {
        "note": f"see https://x.example/cb?code={REDACTED}",
        "nickname": REDACTED,
        "password": REDACTED,
        "nested": {"token": REDACTED, "ok": True},
        "items": [{"pin": REDACTED}],
    }
    assert content["password"] == "hunter2"


def test_redact_url_drops_userinfo_query_values_and_fragment() -> None:
    assert redact_url("https://u:pw@h.example:8443/p?code=1&state=2#frag") == (
        f"https://h.example:8443/p?code={REDACTED}&state={REDACTED}"
    )
    assert redact_url("http://[::1]:8000/elicit/x") == "http://[::1]:8000/elicit/x"
    assert redact_text("go to https://a.example/x?t=s3cr3t now") == f"go to https://a.example/x?t={REDACTED} now"
    assert "s3cr3t" not in redact_url("https://h.example:notaport/?k=s3cr3t")
