"""`ApproverRule`: what a rule of approvers may say, how it is stored and read back, and the tally of its votes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mcp_elicit.model import ApproverRule, Tally, Verdict, Vote, proposal_digest
from mcp_elicit.model.approvers import NOTE_FIELD, REJECT_FIELD

ASKED = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("arguments", "error", "said"),
    [
        ({"roles": "ops"}, TypeError, "not one string"),
        ({"roles": ["ops", "ops"]}, ValueError, "names a role twice"),
        ({"roles": ["-ops"]}, ValueError, "is not a role name"),
        ({"roles": [""]}, ValueError, "is not a role name"),
        ({"roles": []}, ValueError, "at least one role"),
        ({"roles": ["ops"], "quorum": 0}, ValueError, "quorum is a number of approvers from 1 to 20"),
        ({"roles": ["ops"], "quorum": 21}, ValueError, "from 1 to 20"),
        ({"roles": ["ops"], "quorum": True}, ValueError, "quorum"),
        ({"roles": ["ops"], "escalate_to": ["cto"]}, ValueError, "go together"),
        ({"roles": ["ops"], "escalate_after": timedelta(hours=1)}, ValueError, "go together"),
        ({"roles": ["ops"], "escalate_after": timedelta(0), "escalate_to": ["cto"]}, ValueError, "must be positive"),
        (
            {"roles": ["ops"], "escalate_after": timedelta(hours=1), "escalate_to": ["ops"]},
            ValueError,
            "from the start",
        ),
    ],
)
def test_a_rule_that_cannot_be_meant_is_refused_naming_why(
    arguments: dict[str, Any], error: type[Exception], said: str
) -> None:
    with pytest.raises(error, match=said):
        ApproverRule(**arguments)


def test_escalation_widens_who_may_vote_at_its_moment_and_the_rule_round_trips() -> None:
    rule = ApproverRule(["release-managers"], quorum=2, escalate_after=timedelta(hours=1), escalate_to=["cto", "vp"])
    assert rule.roles == ("release-managers",) and rule.named == "release-managers"
    assert rule.eligible_roles(ASKED, ASKED + timedelta(minutes=59)) == ("release-managers",)
    assert rule.eligible_roles(ASKED, ASKED + timedelta(hours=1)) == ("release-managers", "cto", "vp")
    assert rule.waiting_on(ASKED, ASKED + timedelta(hours=2)) == "release-managers, cto or vp"
    assert ApproverRule.loaded(rule.dumped()) == rule
    assert ApproverRule.loaded(ApproverRule(["ops"]).dumped()) == ApproverRule(["ops"])


@pytest.mark.parametrize(
    "stored",
    [
        ["ops"],
        {"roles": "ops", "quorum": 1},
        {"roles": ["ops"], "quorum": "2"},
        {"roles": ["ops"], "quorum": 1, "escalate_after_s": True, "escalate_to": ["cto"]},
        {"roles": ["ops"], "quorum": 1, "escalate_after_s": "60", "escalate_to": ["cto"]},
    ],
)
def test_a_stored_rule_that_is_not_one_is_refused(stored: Any) -> None:
    with pytest.raises(ValueError):
        ApproverRule.loaded(stored)


def vote(who: str, verdict: Verdict, content: dict[str, Any], minute: int) -> Vote:
    return Vote(
        elicitation_id="d", approver_id=who, verdict=verdict, proposal=proposal_digest("sha256:call", content),
        content=content, roles=("ops",), cast_at=ASKED + timedelta(minutes=minute),
    )  # fmt: skip


def test_the_tally_counts_each_approver_once_per_proposal_and_notes_do_not_split_a_proposal() -> None:
    rule = ApproverRule(["ops"], quorum=2)
    as_called, edited = proposal_digest("sha256:call", {}), proposal_digest("sha256:call", {"amount": 5})
    assert proposal_digest("sha256:call", {NOTE_FIELD: "fine", REJECT_FIELD: False}) == as_called
    assert proposal_digest("sha256:other", {}) != as_called, "bound to the call it answers"
    tally = Tally.of(
        rule,
        [
            vote("alice", Verdict.APPROVE, {NOTE_FIELD: "fine"}, 1),
            vote("bob", Verdict.APPROVE, {"amount": 5}, 2),
            vote("alice", Verdict.APPROVE, {}, 3),
        ],
    )
    assert tally.approvals == {as_called: ("alice",), edited: ("bob",)} and tally.leading == 1
    assert tally.voted("bob") and not tally.voted("carol") and tally.rejected_by is None
    assert tally.waiting(rule, ASKED, ASKED) == "Waiting for approval by ops (1 of 2)"
    vetoed = Tally.of(rule, [vote("carol", Verdict.REJECT, {REJECT_FIELD: True}, 4)])
    assert vetoed.rejected_by == "carol" and vetoed.voted("carol") and vetoed.leading == 0
