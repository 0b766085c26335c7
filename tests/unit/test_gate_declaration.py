"""What a gate and its grants refuse when they are declared, and what a gate makes of a tool's input schema.

Pure: no server, no store. The runtime tests call gated tools; here each refusal is named, and each schema shape
an editable argument can come in (pydantic's `$ref` and `allOf` for an Enum, formats, bounds) is read.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mcp_elicit.approvals import Gate, GateRefused, Grants
from mcp_elicit.model import GrantKind, Principal
from mcp_elicit.model.grant import new_grant


def no_check(arguments: dict[str, Any]) -> dict[str, Any]:
    return arguments


@pytest.mark.parametrize(
    ("make", "error", "said"),
    [
        (lambda: Gate(when=5), TypeError, "a function of the call's arguments"),  # type: ignore[arg-type]
        (lambda: Gate(editable=[""]), TypeError, "non-empty names"),
        (lambda: Gate(editable=["a", "a"]), ValueError, "names an argument twice"),
        (lambda: Gate(message="  "), ValueError, "leave it out rather than empty"),
        (lambda: Grants(session="8h"), TypeError, "is a timedelta"),  # type: ignore[arg-type]
        (lambda: Grants(session=None), ValueError, "offers nothing"),
        (lambda: Grants(session=timedelta(hours=2), always=timedelta(hours=1)), ValueError, "shorter than"),
        (lambda: Grants(scope="env"), TypeError, "a function of the call's arguments"),  # type: ignore[arg-type]
    ],
)
def test_a_gate_or_grants_declared_wrong_says_what_is_wrong(make: Any, error: type[Exception], said: str) -> None:
    with pytest.raises(error, match=said):
        make()


def test_a_kind_the_gate_does_not_offer_has_no_ttl() -> None:
    with pytest.raises(ValueError, match="offers no always grant"):
        Grants().ttl(GrantKind.ALWAYS)


@pytest.mark.parametrize(
    ("scope", "logged"),
    [
        (lambda a: 42, "no short printable text"),
        (lambda a: "x" * 500, "no short printable text"),
        (lambda a: "env\x1b[2J", "no short printable text"),
        (lambda a: "ghp_abcdefghijklmnopqrstuvwxyz0123", "credential-shaped"),
        (lambda a: a["missing"], "raised KeyError"),
    ],
)
def test_a_scope_that_cannot_be_told_offers_no_grant(scope: Any, logged: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="mcp_elicit.approvals.gate")
    assert Grants(scope=scope).offer({"env": "prod"}, "deploy") is None
    assert logged in caplog.text


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "region": {"allOf": [{"$ref": "#/$defs/Region"}], "description": "Where it runs"},
        "tier": {"$ref": "#/$defs/Tier"},
        "lost": {"$ref": "#/$defs/Gone"},
        "email": {"type": "string", "format": "email", "pattern": "^.+$", "maxLength": 80},
        "size": {"type": "integer", "enum": [1, 2, 3]},
        "flags": {"type": "string", "enum": ["a", 1]},
        "broken": {"type": "string", "minLength": 9, "maxLength": 2},
    },
    "$defs": {
        "Region": {"type": "string", "enum": ["eu", "us"], "title": "Region"},
        "Tier": {"type": "string", "enum": ["free", "pro"]},
    },
}


def test_an_editable_argument_is_read_from_the_tools_schema_as_pydantic_writes_it() -> None:
    gated = Gate(editable=["region", "tier", "email"]).bind("deploy", SCHEMA, no_check)
    assert dict(gated.fields) == {
        "region": {"type": "string", "title": "Region", "description": "Where it runs", "enum": ["eu", "us"]},
        "tier": {"type": "string", "title": "tier", "enum": ["free", "pro"]},
        "email": {"type": "string", "title": "email", "maxLength": 80, "format": "email"},
    }, "the pattern is left to the tool's own validation: a form cannot show it"


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("lost", "of type None"),
        ("size", "an enum of integer values"),
        ("flags", "values are not all strings"),
        ("broken", "cannot be a form field"),
    ],
)
def test_an_argument_a_form_cannot_hold_is_refused_naming_why(name: str, said: str) -> None:
    with pytest.raises(GateRefused, match=said):
        Gate(editable=[name]).bind("deploy", SCHEMA, no_check)


def test_a_tool_without_properties_has_no_argument_to_edit() -> None:
    with pytest.raises(GateRefused, match=r"is not an argument of the tool \(it has \[\]\)"):
        Gate(editable=["x"]).bind("ping", {"type": "object"}, no_check)


@pytest.mark.parametrize(
    ("ttl", "approved_at", "tool", "said"),
    [
        (timedelta(0), datetime.now(UTC), "t", "positive TTL"),
        (timedelta(hours=1), datetime(2026, 1, 1), "t", "timezone-aware"),
        (timedelta(hours=1), datetime.now(UTC), "", "names the tool"),
    ],
)
def test_a_grant_is_made_only_whole(ttl: timedelta, approved_at: datetime, tool: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        new_grant(
            Principal("alice", "app"), tool=tool, scope=None, kind=GrantKind.SESSION, decision_id="d",
            approved_at=approved_at, ttl=ttl,
        )  # fmt: skip
