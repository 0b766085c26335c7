"""Approvers: who decides a decision that its requester may not answer, and the votes they cast.

A decision with an `ApproverRule` is answered only by signed-in approvers: people whose authoritative identity
(their sign-in's claims, or the server's configured mapping) puts them in one of the rule's roles when they
vote, and never the principal the decision was asked for (four-eyes). Each approval names a proposal: the
digest of the answer without its remarks, bound to the digest of the call it answers, so approvals of other
arguments never add up. The decision is accepted once `quorum` distinct approvers approved one proposal; any
rejection ends it (veto). After `escalate_after`, the roles of `escalate_to` may vote too.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Final

from mcp_elicit.model.digest import canonical_json
from mcp_elicit.model.json import JSONObject, JSONValue

REJECT_FIELD: Final = "approval_reject"
NOTE_FIELD: Final = "approval_note"
GRANT_FIELD: Final = "approval_grant"
REMARKS: Final = frozenset({NOTE_FIELD, GRANT_FIELD})
"""Fields of an answer that say something besides it: approvals that differ only there approve the same thing."""
WAITING_META_KEY: Final = "io.github.mcp-elicit/waiting"
"""In a still-waiting 2026-07-28 round's `_meta`: what the call waits on ("Waiting for approval by …"), for the
client to show, since the protocol gives such a round no message of its own."""
MAX_QUORUM: Final = 20
ROLE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@/-]{0,63}$")


class Verdict(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"


@dataclass(frozen=True, slots=True)
class ApproverRule:
    """Who may answer: members of `roles` (any of them), `quorum` of them on one proposal; after `escalate_after`,
    members of `escalate_to` as well."""

    roles: Sequence[str]
    quorum: int = 1
    escalate_after: timedelta | None = None
    escalate_to: Sequence[str] = ()

    def __post_init__(self) -> None:
        for name in ("roles", "escalate_to"):
            value = getattr(self, name)
            if isinstance(value, str):
                raise TypeError(f"{name} is a list of role names, not one string: write [{value!r}]")
            roles = tuple(value)
            for role in roles:
                if not isinstance(role, str) or not ROLE.fullmatch(role):
                    raise ValueError(
                        f"{name}: {role!r} is not a role name (1-64 letters, digits and _.:@/-, "
                        "starting with a letter or digit)"
                    )
            if len(set(roles)) != len(roles):
                raise ValueError(f"{name} names a role twice: {list(roles)}")
            object.__setattr__(self, name, roles)
        if not self.roles:
            raise ValueError("approvers need at least one role")
        if type(self.quorum) is not int or not 1 <= self.quorum <= MAX_QUORUM:
            raise ValueError(f"quorum is a number of approvers from 1 to {MAX_QUORUM}, got {self.quorum!r}")
        if (self.escalate_after is None) != (not self.escalate_to):
            raise ValueError("escalate_after and escalate_to go together: after how long, to which roles")
        if self.escalate_after is not None and self.escalate_after <= timedelta(0):
            raise ValueError(f"escalate_after must be positive, got {self.escalate_after}")
        if set(self.escalate_to) & set(self.roles):
            raise ValueError("escalate_to names a role that decides from the start; name only the further roles")

    def escalates_at(self, asked_at: datetime) -> datetime | None:
        return None if self.escalate_after is None else asked_at + self.escalate_after

    def eligible_roles(self, asked_at: datetime, now: datetime) -> tuple[str, ...]:
        """The roles whose members may vote now, on a decision asked at `asked_at`."""
        escalation = self.escalates_at(asked_at)
        if escalation is not None and now >= escalation:
            return (*self.roles, *self.escalate_to)
        return tuple(self.roles)

    def waiting_on(self, asked_at: datetime, now: datetime) -> str:
        """The roles as the requester is told of them: "release-managers", or "release-managers or finance"."""
        return _either(self.eligible_roles(asked_at, now))

    @property
    def named(self) -> str:
        """The roles that decide from the start, as `waiting_on` says them."""
        return _either(tuple(self.roles))

    def dumped(self) -> JSONObject:
        dumped: JSONObject = {"roles": list(self.roles), "quorum": self.quorum}
        if self.escalate_after is not None:
            dumped["escalate_after_s"] = self.escalate_after.total_seconds()
            dumped["escalate_to"] = list(self.escalate_to)
        return dumped

    @classmethod
    def loaded(cls, value: JSONValue) -> ApproverRule:
        """The rule as stored; `ValueError` (or `TypeError`) naming what is wrong with a row that is not one."""
        if not isinstance(value, dict):
            raise ValueError("an approver rule is a JSON object")
        roles, quorum = value.get("roles"), value.get("quorum")
        after, to = value.get("escalate_after_s"), value.get("escalate_to", [])
        if not isinstance(roles, list) or not isinstance(to, list):
            raise ValueError("an approver rule's roles are lists of names")
        if after is not None and (isinstance(after, bool) or not isinstance(after, int | float)):
            raise ValueError("an approver rule's escalate_after_s is a number of seconds")
        return cls(
            tuple(str(role) for role in roles),
            quorum if type(quorum) is int else -1,
            None if after is None else timedelta(seconds=after),
            tuple(str(role) for role in to),
        )


@dataclass(frozen=True, slots=True)
class Approver:
    """A signed-in person casting a vote, with the roles their authoritative identity gives them now."""

    principal_id: str
    roles: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if not self.principal_id:
            raise ValueError("principal_id must not be empty: a vote names who cast it")
        object.__setattr__(self, "roles", frozenset(self.roles))

    @property
    def actor(self) -> str:
        return f"approver:{self.principal_id}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Vote:
    """One approver's vote on one proposal of a decision, as stored."""

    elicitation_id: str
    approver_id: str
    verdict: Verdict
    proposal: str
    """The digest of what was approved or rejected (`proposal_digest`)."""
    content: JSONObject
    roles: tuple[str, ...]
    """The roles that made the approver eligible when they voted."""
    cast_at: datetime

    @property
    def note(self) -> str | None:
        note = self.content.get(NOTE_FIELD)
        return note if isinstance(note, str) and note else None


def proposal_digest(request_digest: str, content: Mapping[str, JSONValue]) -> str:
    """What an approval approves: the answer without its remarks, bound to the call it answers. Two approvals of
    one call that differ only in their notes approve the same thing; an edit is another proposal."""
    kept = {name: value for name, value in content.items() if name not in REMARKS and name != REJECT_FIELD}
    return hashlib.sha256(f"{request_digest}\x00{canonical_json(kept)}".encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Tally:
    """Where the votes on a decision stand: approvals per proposal, the leading one, and who voted."""

    quorum: int
    approvals: Mapping[str, tuple[str, ...]]
    """Per proposal digest, the approvers who approved it, in the order they voted."""
    rejected_by: str | None = None

    @classmethod
    def of(cls, rule: ApproverRule, votes: Iterable[Vote]) -> Tally:
        approvals: dict[str, list[str]] = {}
        rejected_by = None
        for vote in sorted(votes, key=lambda vote: vote.cast_at):
            if vote.verdict is Verdict.REJECT:
                rejected_by = rejected_by or vote.approver_id
            elif vote.approver_id not in approvals.setdefault(vote.proposal, []):
                approvals[vote.proposal].append(vote.approver_id)
        return cls(rule.quorum, {proposal: tuple(who) for proposal, who in approvals.items()}, rejected_by)

    @property
    def leading(self) -> int:
        """The most approvals any one proposal has."""
        return max((len(who) for who in self.approvals.values()), default=0)

    def voted(self, approver_id: str) -> bool:
        return approver_id == self.rejected_by or any(approver_id in who for who in self.approvals.values())

    def waiting(self, rule: ApproverRule, asked_at: datetime, now: datetime) -> str:
        """What the requester is told: "Waiting for approval by release-managers (1 of 2)"."""
        return f"Waiting for approval by {rule.waiting_on(asked_at, now)} ({self.leading} of {self.quorum})"


def joined_notes(votes: Sequence[Vote]) -> str | None:
    """The notes of the approvals that carried a decision, each after its approver, for the one record it keeps."""
    notes = [f"{vote.approver_id.rpartition('#')[2]}: {vote.note}" for vote in votes if vote.note]
    return "; ".join(notes) if notes else None


def _either(roles: Sequence[str]) -> str:
    return ", ".join(roles[:-1]) + (" or " if len(roles) > 1 else "") + roles[-1]
