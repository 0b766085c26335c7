"""`[[gate]]` tables of the gateway's config file: what each key means, what is refused with the file, and what is
checked once the upstream's tool is known."""

from __future__ import annotations

import tomllib
from datetime import timedelta
from typing import Any

import pytest
from mcp_types import Tool
from pydantic import ValidationError

from mcp_elicit.approvals import GateRefused
from mcp_elicit.gateway.gates import GateTable

PAY = Tool(
    name="pay",
    input_schema={
        "type": "object",
        "properties": {
            "amount": {"type": "number", "minimum": 1},
            "currency": {"type": "string", "enum": ["EUR", "USD"]},
            "api_token": {"type": "string"},
            "lines": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["amount"],
    },
)


def gates(text: str) -> list[GateTable]:
    return [GateTable.model_validate(table) for table in tomllib.loads(text)["gate"]]


def test_a_tool_alone_gates_every_call_with_every_argument_a_form_can_show_editable() -> None:
    (gate,) = gates('[[gate]]\ntool = "pay"')
    bound = gate.bind(PAY)
    assert list(bound.fields) == ["amount", "currency"]  # not the secret-looking token, not the list
    assert gate.gate_for([]).applies({"amount": 1}, "pay")
    assert bound.gate.ttl == gate.ttl


def test_every_key_of_a_full_table_reaches_the_gate() -> None:
    (gate,) = gates(
        """
        [[gate]]
        tool = "pay"
        upstream = "billing"
        when = "amount > 100 and currency == 'EUR'"
        editable = ["amount"]
        message = "Pay this invoice?"
        ttl = "1h30m"
        fallback = "web"
        grants = { session = "2h", always = "30d", scope = "currency" }
        """
    )
    bound = gate.bind(PAY)
    assert list(bound.fields) == ["amount"]
    assert bound.gate.ttl == timedelta(hours=1, minutes=30)
    assert bound.gate.message == "Pay this invoice?"
    assert bound.gate.applies({"amount": 150, "currency": "EUR"}, "pay")
    assert not bound.gate.applies({"amount": 150, "currency": "USD"}, "pay")
    assert bound.gate.applies({"currency": "EUR"}, "pay")  # undecidable: it fails closed
    grants = bound.gate.grants
    assert grants is not None
    assert (grants.session, grants.always) == (timedelta(hours=2), timedelta(days=30))
    assert grants.scope is not None and grants.scope({"currency": "EUR"}) == "EUR"
    assert gate.fallback == "web"


def test_approvers_with_quorum_and_escalation() -> None:
    (gate,) = gates(
        '[[gate]]\ntool = "pay"\napprovers = { roles = ["finance"], quorum = 2, escalate_after = 3600,'
        ' escalate_to = ["cfo"] }'
    )
    rule = gate.bind(PAY).gate.approvers
    assert rule is not None
    assert (rule.roles, rule.quorum, rule.escalate_after, rule.escalate_to) == (
        ("finance",),
        2,
        timedelta(hours=1),
        ("cfo",),
    )


def test_edits_are_checked_against_the_tools_input_schema() -> None:
    bound = gates('[[gate]]\ntool = "pay"')[0].bind(PAY)
    assert bound.validate({"amount": 5}) == {"amount": 5}
    with pytest.raises(ValidationError) as refused:
        bound.validate({"amount": 0, "currency": "GBP"})
    problems = {error["loc"]: error["msg"] for error in refused.value.errors()}
    assert problems == {
        ("amount",): "0 is less than the minimum of 1",
        ("currency",): "'GBP' is not one of ['EUR', 'USD']",
    }


@pytest.mark.parametrize(
    ("table", "where", "said"),
    [
        ({"tool": "pay", "whne": "amount > 1"}, ("whne",), "Extra inputs are not permitted"),
        ({"tool": ""}, ("tool",), "at least 1 character"),
        ({"tool": "pay", "when": "amount.real > 1"}, ("when",), "attributes and methods are not available"),
        ({"tool": "pay", "when": "amount >"}, ("when",), "is not an expression"),
        ({"tool": "pay", "ttl": "5 minutes"}, ("ttl",), "a duration such as '90s'"),
        ({"tool": "pay", "ttl": "0s"}, (), "positive TTL"),
        ({"tool": "pay", "editable": "some"}, ("editable", "literal['all']"), "Input should be 'all'"),
        ({"tool": "pay", "fallback": "arguments"}, ("fallback",), "'error' or 'web'"),
        ({"tool": "pay", "approvers": {"roles": []}}, ("approvers",), "at least one role"),
        ({"tool": "pay", "approvers": {"roles": ["a b"]}}, ("approvers",), "is not a role name"),
        ({"tool": "pay", "grants": {"session": False}}, ("grants",), "offers nothing"),
        ({"tool": "pay", "grants": {"scope": "lower("}}, ("grants", "scope"), "is not an expression"),
        ({"tool": "pay", "approvers": {"roles": ["ops"]}, "grants": {}}, (), "leave grants out"),
    ],
)
def test_a_table_gate_refuses_is_refused_with_its_key(table: dict[str, Any], where: tuple[str, ...], said: str) -> None:
    with pytest.raises(ValidationError) as refused:
        GateTable.model_validate(table)
    error = refused.value.errors()[0]
    assert error["loc"] == where
    assert said in error["msg"]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('tool = "pay"\neditable = ["amount", "memo"]', "editable names ['memo'], not arguments of the tool"),
        ('tool = "pay"\neditable = ["lines"]', "only plain strings, numbers"),
        ('tool = "pay"\neditable = ["api_token"]', "looks like a secret"),
        ('tool = "pay"\nwhen = "amout > 1"', "when reads ['amout'], not arguments of the tool"),
    ],
)
def test_what_only_the_tool_can_tell_is_refused_when_it_is_bound(text: str, said: str) -> None:
    (gate,) = gates(f"[[gate]]\n{text}")
    with pytest.raises(GateRefused) as refused:
        gate.bind(PAY)
    assert said in str(refused.value)


def test_a_tool_whose_input_schema_is_not_a_schema_cannot_be_gated() -> None:
    broken = Tool(name="pay", input_schema={"type": "object", "properties": {"amount": {"type": "money"}}})
    with pytest.raises(GateRefused, match="not a valid JSON Schema"):
        gates('[[gate]]\ntool = "pay"\neditable = []')[0].bind(broken)


def test_when_reads_the_tools_default_for_an_argument_the_call_leaves_out() -> None:
    deploy = Tool(
        name="deploy",
        input_schema={"type": "object", "properties": {"env": {"type": "string", "default": "prod"}, "app": {}}},
    )
    bound = gates('[[gate]]\ntool = "deploy"\nwhen = "env == \'prod\'"')[0].bind(deploy)
    assert bound.gate.applies({"app": "api"}, "deploy")  # the upstream runs it in prod: gated
    assert not bound.gate.applies({"app": "api", "env": "staging"}, "deploy")


def test_arguments_a_form_cannot_show_are_left_out_of_all_not_refused() -> None:
    nullable = Tool(
        name="note",
        input_schema={
            "type": "object",
            "properties": {"text": {"type": ["string", "null"]}, "count": {"type": "integer"}},
        },
    )
    assert list(gates('[[gate]]\ntool = "note"')[0].bind(nullable).fields) == ["count"]


def test_the_name_a_gate_is_shown_and_its_grants_kept_under_is_the_one_its_clients_see() -> None:
    (gate,) = gates('[[gate]]\ntool = "pay"')
    assert gate.bind(PAY).tool == "pay"
    assert gate.bind(PAY, "billing_pay").tool == "billing_pay"
    assert "Tool: billing_pay" in gate.bind(PAY, "billing_pay").message({"amount": 1})


@pytest.mark.parametrize("ttl", [1e300, float("inf"), "999999999999d", -5, "3651d"])
def test_a_duration_out_of_range_is_refused_with_its_key(ttl: object) -> None:
    with pytest.raises(ValidationError) as refused:
        GateTable.model_validate({"tool": "pay", "ttl": ttl})
    error = refused.value.errors()[0]
    assert error["loc"] == ("ttl",)
    assert "a duration from 0 to 3650 days" in error["msg"] or "a duration such as" in error["msg"]
