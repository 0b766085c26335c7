"""Which approver roles the person at the browser holds: from the server's configuration, or their sign-in's claim.

A decision with an `ApproverRule` names roles; who holds them comes from the authoritative identity only, never
from what a client says: `ApproverRoles.members` maps a role to the people in it (a bare username is that user
of the pages' sign-in, an entry with `#` a full principal id), and with `claim` the roles an OpenID Connect
provider put in that claim of the person's ID token (kept in their signed session at sign-in) count too. Roles
are resolved again at every page and every vote: a person taken out of a role in the configured mapping cannot
vote from a page they opened before. Roles from the claim are those the session kept when the person signed in:
one taken out of a role at the provider keeps it until they sign in again or the session ends (`session_ttl`,
8 hours by default, of `OidcSignIn`); signing them out sooner is the provider's and the session keys' matter.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol, runtime_checkable

from starlette.requests import Request

from mcp_elicit.model.approvers import ROLE

__all__ = ["MAX_CLAIMED_ROLES", "ApproverRoles", "ClaimsRoles", "NamesUsers", "claimed_roles"]

log = logging.getLogger(__name__)

MAX_CLAIMED_ROLES: Final = 32
"""At most this many roles of a claim are kept in a session: a session is a cookie, and cookies are small."""


@runtime_checkable
class NamesUsers(Protocol):
    """A sign-in that names its users' principals: `principal_id("alice")` is alice's principal id."""

    def principal_id(self, username: str) -> str: ...


@runtime_checkable
class ClaimsRoles(Protocol):
    """A sign-in that keeps a roles claim of the person's identity in their session (`OidcSignIn`)."""

    roles_claim: str | None

    def claimed_roles(self, request: Request) -> frozenset[str]: ...


@dataclass(frozen=True, slots=True)
class ApproverRoles:
    """Who holds which approver role: `members` by role, and the sign-in's `claim` naming more roles, if any."""

    members: Mapping[str, Sequence[str]] = field(default_factory=dict)
    claim: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.members, str) or not isinstance(self.members, Mapping):
            raise TypeError("members maps a role name to the people in it: {'release-managers': ['alice', 'bob']}")
        kept: dict[str, tuple[str, ...]] = {}
        for role, people in self.members.items():
            if not isinstance(role, str) or not ROLE.fullmatch(role):
                raise ValueError(
                    f"{role!r} is not a role name (1-64 letters, digits and _.:@/-, starting with a letter or digit)"
                )
            if isinstance(people, str):
                raise TypeError(f"the members of {role} are a list of people, not one string: write [{people!r}]")
            names = tuple(people)
            for name in names:
                if not isinstance(name, str) or not name.strip() or name != name.strip():
                    raise ValueError(f"the members of {role} name {name!r}: a username or principal id, without blanks")
            if not names:
                raise ValueError(f"the role {role} has no members: name at least one, or leave the role out")
            kept[role] = names
        object.__setattr__(self, "members", kept)
        if self.claim is not None and (not isinstance(self.claim, str) or not self.claim.strip()):
            raise ValueError("claim names the ID token claim that lists a person's roles (e.g. 'groups'), or is None")

    def roles_of(self, principal: str, sign_in: object, request: Request) -> frozenset[str]:
        """The roles `principal` (signed in with `sign_in` on `request`) holds now."""
        held = {role for role, people in self.members.items() if principal in _principals(people, sign_in)}
        if self.claim is not None and isinstance(sign_in, ClaimsRoles):
            held |= sign_in.claimed_roles(request)
        return frozenset(held)

    def problems_with(self, sign_in: object) -> list[str]:
        """What keeps these roles from being resolved with `sign_in` (checked when the pages are mounted)."""
        problems = []
        bare = sorted({name for people in self.members.values() for name in people if "#" not in name})
        if bare and not isinstance(sign_in, NamesUsers):
            problems.append(
                f"the approver roles name users ({', '.join(bare)}) of a sign-in that does not name its users' "
                "principals; give full principal ids (issuer#subject)"
            )
        if self.claim is not None and not isinstance(sign_in, ClaimsRoles):
            problems.append(
                f"the approver roles are read from the claim {self.claim!r} of a sign-in that keeps no claims; "
                "sign people in with OidcSignIn, or name the members"
            )
        return problems


def _principals(people: Iterable[str], sign_in: object) -> set[str]:
    return {
        name if "#" in name or not isinstance(sign_in, NamesUsers) else sign_in.principal_id(name) for name in people
    }


def claimed_roles(value: object) -> list[str]:
    """The role names of a claim's value: a list of strings, or one string of names separated by blanks (as
    `scope` is); names that cannot be roles are left out, and at most `MAX_CLAIMED_ROLES` are kept."""
    if isinstance(value, str):
        names = value.split()
    elif isinstance(value, list):
        names = [name for name in value if isinstance(name, str)]
    else:
        return []
    roles = list(dict.fromkeys(name for name in names if ROLE.fullmatch(name)))
    if len(roles) > MAX_CLAIMED_ROLES:
        log.warning("a roles claim lists %d roles; the first %d are kept", len(roles), MAX_CLAIMED_ROLES)
    return roles[:MAX_CLAIMED_ROLES]
