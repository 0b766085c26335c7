"""Who holds which approver role: `ApproverRoles` (the configured members, a sign-in's claim) and the
`MCP_ELICIT_APPROVER_ROLES` setting that `mcp-elicit serve` reads them from; every bad value refused, named."""

from __future__ import annotations

import base64

import pytest

from mcp_elicit.reference.deployment import http_settings
from mcp_elicit.settings import Settings, SettingsError
from mcp_elicit.web import ApproverRoles
from mcp_elicit.web.roles import MAX_CLAIMED_ROLES, claimed_roles

KEY = base64.urlsafe_b64encode(b"k" * 32).decode()


def read(value: str) -> dict[str, tuple[str, ...]]:
    return Settings.read({"MCP_ELICIT_APPROVER_ROLES": value}, only=["approver_roles"]).approver_roles


def test_the_setting_maps_each_role_to_its_members_blanks_ignored() -> None:
    assert read(" release-managers = alice, bob ;; finance=carol ") == {
        "release-managers": ("alice", "bob"),
        "finance": ("carol",),
    }
    assert Settings.read({}, only=["approver_roles"]).approver_roles == {}


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("release-managers", "part 1 ('release-managers') is not role=member,member"),
        ("release-managers=", "part 1 ('release-managers=') is not role=member,member"),
        ("=alice", "part 1 ('=alice') is not role=member,member"),
        ("finance=carol;release managers=alice", "part 2 names the role 'release managers'"),
        ("finance=carol;finance=dave", "the role finance is named twice"),
    ],
)
def test_a_malformed_setting_is_refused_naming_the_variable_and_the_part(value: str, problem: str) -> None:
    with pytest.raises(SettingsError) as raised:
        read(value)
    [said] = raised.value.problems
    assert said.startswith(f"MCP_ELICIT_APPROVER_ROLES: {problem}"), said


def test_the_deployment_refuses_members_who_are_not_among_its_users() -> None:
    environ = {
        "MCP_ELICIT_USERS": "alice:wonderland,bob:builder",
        "MCP_ELICIT_AUTH_KEYS": KEY,
        "MCP_ELICIT_STATE_KEYS": KEY,
        "MCP_ELICIT_VAULT_KEYS": f"v1:{KEY}",
        "MCP_ELICIT_APPROVER_ROLES": "release-managers=bob",
    }
    assert http_settings(environ, "https://elicit.example").approver_roles == {"release-managers": ("bob",)}
    with pytest.raises(SettingsError) as raised:
        http_settings(
            {**environ, "MCP_ELICIT_APPROVER_ROLES": "release-managers=bob,zed;finance=yan"}, "https://e.example"
        )
    assert raised.value.problems == (
        "MCP_ELICIT_APPROVER_ROLES names yan, zed, not among the users of MCP_ELICIT_USERS; add them there",
    )


def test_approver_roles_refuse_what_cannot_name_a_role_or_a_member() -> None:
    with pytest.raises(TypeError, match="not one string"):
        ApproverRoles({"finance": "carol"})
    with pytest.raises(ValueError, match="is not a role name"):
        ApproverRoles({"-finance": ["carol"]})
    with pytest.raises(ValueError, match="has no members"):
        ApproverRoles({"finance": []})
    with pytest.raises(ValueError, match="without blanks"):
        ApproverRoles({"finance": [" carol"]})
    with pytest.raises(ValueError, match="names the ID token claim"):
        ApproverRoles(claim=" ")


def test_a_claims_roles_are_a_list_or_a_blank_separated_string_of_role_names_and_bounded() -> None:
    assert claimed_roles(["finance", "release-managers", "finance", "not a role", 7]) == ["finance", "release-managers"]
    assert claimed_roles("staff  finance") == ["staff", "finance"]
    assert claimed_roles({"finance": True}) == [] and claimed_roles(None) == []
    many = [f"role-{n}" for n in range(MAX_CLAIMED_ROLES + 5)]
    assert claimed_roles(many) == many[:MAX_CLAIMED_ROLES]
