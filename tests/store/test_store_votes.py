"""Approvers' votes on both stores: four-eyes, eligibility now (escalation included), a quorum of distinct approvers
on one proposal, a veto, every vote audited, one acceptance however the votes race, and an approver's queue."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest

from mcp_elicit.model import (
    NOTE_FIELD,
    REJECT_FIELD,
    Approver,
    ApproverRule,
    BrowserUser,
    Decision,
    DecisionStatus,
    JSONObject,
    Operation,
    Operator,
    Verdict,
    proposal_digest,
)
from mcp_elicit.store import (
    SCHEMA_VERSION,
    DecisionConflict,
    DecisionExpired,
    NotFound,
    Store,
    UnreadableRow,
    VoteCast,
    VoteRefusal,
    VoteRefused,
    hooks,
    open_store,
)
from tests.helpers.clock import FakeClock
from tests.helpers.corrupt_rows import corrupt
from tests.helpers.migrations import SINCE_SCHEMA_9, take_back
from tests.helpers.race import race
from tests.helpers.records import ALICE, BOB, Records

EVERYONE = Operator()
LONG = timedelta(hours=2)
TWO_RELEASE_MANAGERS = ApproverRule(("release-managers",), quorum=2)
APPROVE: JSONObject = {"approve": True}
CAROL = Approver("carol", frozenset({"release-managers"}))
DAVE = Approver("dave", frozenset({"release-managers", "finance"}))
ERIN = Approver("erin", frozenset({"release-managers"}))
SRE = Approver("frank", frozenset({"sre"}))


def noted(note: str, content: JSONObject = APPROVE) -> JSONObject:
    return {**content, NOTE_FIELD: note}


def asked(
    records: Records,
    rule: ApproverRule | None = TWO_RELEASE_MANAGERS,
    *,
    operation: Operation | None = None,
    sensitive: tuple[str, ...] = (),
) -> Decision:
    return records.form(operation, approvers=rule, ttl=LONG, sensitive=sensitive)


def refused(
    store: Store, decision: Decision, approver: Approver, reason: VoteRefusal, match: str | None = None
) -> None:
    """The vote is refused for `reason`, and the decision, its votes and its audit trail stay as they were."""
    before = (store.get_decision(decision.elicitation_id, EVERYONE), store.votes(decision.elicitation_id))
    trail = store.audit_trail(decision.elicitation_id, EVERYONE)
    with pytest.raises(VoteRefused, match=match) as caught:
        store.cast_vote(decision.elicitation_id, approver, Verdict.APPROVE, APPROVE)
    assert caught.value.reason is reason and caught.value.elicitation_id == decision.elicitation_id
    assert (store.get_decision(decision.elicitation_id, EVERYONE), store.votes(decision.elicitation_id)) == before
    assert store.audit_trail(decision.elicitation_id, EVERYONE) == trail


def test_two_of_three_counts_each_approver_once_and_joins_their_notes(store: Store, records: Records) -> None:
    decision = asked(records)
    [created] = store.audit_trail(decision.elicitation_id, EVERYONE)
    assert created.details["approvers"] == TWO_RELEASE_MANAGERS.dumped()
    assert store.get_decision(decision.elicitation_id, ALICE).approvers == TWO_RELEASE_MANAGERS

    first = store.cast_vote(decision.elicitation_id, CAROL, Verdict.APPROVE, noted("looks right"))
    proposal = proposal_digest(decision.origin_request_digest, APPROVE)
    assert first.decision == decision, "one approval of two moves nothing"
    assert (first.vote.approver_id, first.vote.proposal, first.vote.roles) == ("carol", proposal, ("release-managers",))
    assert first.tally.approvals == {proposal: ("carol",)} and first.tally.leading == 1
    with pytest.raises(VoteRefused, match="carol already approved") as again:
        store.cast_vote(decision.elicitation_id, CAROL, Verdict.APPROVE, noted("still right"))
    assert again.value.reason is VoteRefusal.ALREADY_VOTED
    assert store.votes(decision.elicitation_id) == [first.vote], "the same approver twice counts once"

    second = store.cast_vote(decision.elicitation_id, DAVE, Verdict.APPROVE, noted("ok"))
    accepted = store.get_decision(decision.elicitation_id, ALICE)
    assert second.decision == accepted and accepted.status is DecisionStatus.ACCEPTED
    assert accepted.content == {"approve": True, NOTE_FIELD: "carol: looks right; dave: ok"}
    assert accepted.completion_version == 1
    assert second.tally.approvals == {proposal: ("carol", "dave")}
    assert second.vote.roles == ("release-managers",), "only the roles that made dave eligible"

    trail = store.audit_trail(decision.elicitation_id, EVERYONE)
    assert [(e.from_status, e.to_status, e.actor, e.reason) for e in trail] == [
        (None, "requested", ALICE.actor, "requested"),
        ("requested", "requested", "approver:carol", "approved (1 of 2)"),
        ("requested", "requested", "approver:dave", "approved (2 of 2)"),
        ("requested", "accepted", "approver:dave", "approved by quorum"),
    ]
    assert trail[1].details == {
        "proposal": proposal, "verdict": "approve", "roles": ["release-managers"],
        "content": noted("looks right"),
    }  # fmt: skip
    assert trail[3].details["proposal"] == proposal and trail[3].details["approvers"] == ["carol", "dave"]

    with pytest.raises(DecisionConflict, match="accepted") as late:
        store.cast_vote(decision.elicitation_id, ERIN, Verdict.APPROVE, APPROVE)
    assert late.value.current == accepted
    assert len(store.votes(decision.elicitation_id)) == 2


def test_approvals_of_other_arguments_do_not_add_up(store: Store, records: Records) -> None:
    decision = asked(records)
    store.cast_vote(decision.elicitation_id, CAROL, Verdict.APPROVE, {"approve": True, "amount": 100})
    edited = store.cast_vote(
        decision.elicitation_id, DAVE, Verdict.APPROVE, noted("less", {"approve": True, "amount": 90})
    )
    assert edited.decision.status is DecisionStatus.REQUESTED, "an edit restarts the count on its own proposal"
    assert edited.tally.leading == 1 and len(edited.tally.approvals) == 2
    carried = store.cast_vote(decision.elicitation_id, ERIN, Verdict.APPROVE, {"approve": True, "amount": 90})
    assert carried.decision.status is DecisionStatus.ACCEPTED
    assert carried.decision.content == {"approve": True, "amount": 90, NOTE_FIELD: "dave: less"}
    assert carried.tally.approvals[carried.vote.proposal] == ("dave", "erin")


@pytest.mark.parametrize(
    ("content", "ends"),
    [
        ({REJECT_FIELD: True, NOTE_FIELD: "not on a Friday"}, DecisionStatus.ACCEPTED),
        ({"approve": False}, DecisionStatus.DECLINED),
    ],
    ids=["gate-rejection", "plain"],
)
def test_one_rejection_ends_the_decision(
    store: Store, records: Records, content: JSONObject, ends: DecisionStatus
) -> None:
    decision = asked(records)
    store.cast_vote(decision.elicitation_id, CAROL, Verdict.APPROVE, APPROVE)
    vetoed = store.cast_vote(decision.elicitation_id, DAVE, Verdict.REJECT, content)
    stored = store.get_decision(decision.elicitation_id, ALICE)
    assert vetoed.decision == stored and stored.status is ends
    signed = {**content, NOTE_FIELD: f"dave: {content[NOTE_FIELD]}"} if NOTE_FIELD in content else content
    assert stored.content == (signed if ends is DecisionStatus.ACCEPTED else None)
    assert vetoed.tally.rejected_by == "dave"
    *_, vote, ended = store.audit_trail(decision.elicitation_id, EVERYONE)
    assert (vote.to_status, vote.reason, vote.details["verdict"]) == ("requested", "rejected", "reject")
    assert (ended.from_status, ended.to_status, ended.actor) == ("requested", ends, "approver:dave")
    with pytest.raises(DecisionConflict):
        store.cast_vote(decision.elicitation_id, ERIN, Verdict.APPROVE, APPROVE)


def test_the_requester_never_approves_their_own_call(store: Store, records: Records) -> None:
    decision = asked(records, ApproverRule(("release-managers",)))
    myself = Approver(ALICE.principal_id, frozenset({"release-managers"}))
    refused(store, decision, myself, VoteRefusal.OWN_CALL, "alice asked for decision .* their own call")


def test_an_approver_must_hold_an_eligible_role_now_and_escalation_adds_roles(
    store: Store, records: Records, clock: FakeClock
) -> None:
    rule = ApproverRule(("release-managers",), escalate_after=timedelta(minutes=30), escalate_to=("sre",))
    decision = asked(records, rule)
    refused(store, decision, SRE, VoteRefusal.NOT_ELIGIBLE, "only members of release-managers may now")
    refused(store, decision, Approver("zed"), VoteRefusal.NOT_ELIGIBLE, "zed may not vote")
    clock.advance(timedelta(minutes=29))
    refused(store, decision, SRE, VoteRefusal.NOT_ELIGIBLE)
    clock.advance(timedelta(minutes=1))
    cast = store.cast_vote(decision.elicitation_id, SRE, Verdict.APPROVE, APPROVE)
    assert cast.decision.status is DecisionStatus.ACCEPTED and cast.vote.roles == ("sre",)


def test_a_vote_on_a_decision_without_approvers_is_refused(store: Store, records: Records) -> None:
    refused(store, asked(records, None), CAROL, VoteRefusal.NOT_APPROVERS, "names no approvers")


def test_a_vote_after_the_decision_is_a_conflict(store: Store, records: Records) -> None:
    decision = asked(records)
    declined = store.transition(decision, DecisionStatus.CANCELLED, caller=ALICE)
    with pytest.raises(DecisionConflict) as caught:
        store.cast_vote(decision.elicitation_id, CAROL, Verdict.APPROVE, APPROVE)
    assert caught.value.current == declined
    assert store.votes(decision.elicitation_id) == []


def test_a_vote_after_the_ttl_expires_the_decision(store: Store, records: Records, clock: FakeClock) -> None:
    decision = asked(records)
    clock.advance(LONG)
    with pytest.raises(DecisionExpired) as caught:
        store.cast_vote(decision.elicitation_id, CAROL, Verdict.APPROVE, APPROVE)
    expired = store.get_decision(decision.elicitation_id, ALICE)
    assert expired.status is DecisionStatus.EXPIRED and caught.value.current == expired
    assert store.votes(decision.elicitation_id) == []
    last = store.audit_trail(decision.elicitation_id, EVERYONE)[-1]
    assert (last.to_status, last.reason) == ("expired", "late vote after the TTL")
    with pytest.raises(DecisionExpired):
        store.cast_vote(decision.elicitation_id, CAROL, Verdict.APPROVE, APPROVE)


def test_no_such_decision(store: Store) -> None:
    with pytest.raises(NotFound, match="no decision nope"):
        store.cast_vote("nope", CAROL, Verdict.APPROVE, APPROVE)
    with pytest.raises(NotFound, match="no decision nope"):
        store.votes("nope")


def test_a_vote_audits_its_content_redacted(store: Store, records: Records) -> None:
    decision = asked(records, sensitive=("pin",))
    store.cast_vote(decision.elicitation_id, CAROL, Verdict.APPROVE, {"approve": True, "pin": "4321"})
    [vote] = store.votes(decision.elicitation_id)
    assert vote.content == {"approve": True, "pin": "4321"}, "the vote keeps what was approved"
    audited = store.audit_trail(decision.elicitation_id, EVERYONE)[-1]
    assert audited.details["content"] == {"approve": True, "pin": "[redacted]"}


class Told(hooks.StoreHooks):
    def __init__(self) -> None:
        self.told: list[hooks.Committed] = []

    def committed(self, change: hooks.Committed) -> None:
        self.told.append(change)


def test_every_vote_wakes_listeners_and_hooks_hear_the_end_once(store: Store, records: Records) -> None:
    decision = asked(records)
    heard: list[str] = []
    store.add_change_listener(heard.append)
    observer, before = Told(), hooks.installed()
    hooks.install(observer)
    try:
        store.cast_vote(decision.elicitation_id, CAROL, Verdict.APPROVE, APPROVE)
        assert heard == [decision.elicitation_id], "a waiting call may tell its requester the new count"
        assert observer.told == []
        carried = store.cast_vote(decision.elicitation_id, DAVE, Verdict.APPROVE, APPROVE)
    finally:
        hooks.install(before)
    assert heard == [decision.elicitation_id] * 2
    assert observer.told == [hooks.DecisionEnded(carried.decision)]


@contextmanager
def contenders(store_url: str, store: Store, clock: FakeClock, count: int) -> Iterator[list[Store]]:
    """One store per approver on PostgreSQL (separate connections, as instances), the shared store on SQLite."""
    if store_url.startswith("sqlite"):
        yield [store] * count
        return
    opened = [open_store(store_url, clock=clock) for _ in range(count)]
    try:
        yield opened
    finally:
        for each in opened:
            each.close()


def test_concurrent_approvals_accept_the_decision_exactly_once(
    store_url: str, store: Store, records: Records, clock: FakeClock
) -> None:
    decision = asked(records)
    approvers = [Approver(f"approver-{i}", frozenset({"release-managers"})) for i in range(6)]
    with contenders(store_url, store, clock, len(approvers)) as stores:
        outcomes = race(
            stores,
            lambda each, i: each.cast_vote(decision.elicitation_id, approvers[i], Verdict.APPROVE, noted(f"#{i}")),
        )
    cast = [o for o in outcomes if isinstance(o, VoteCast)]
    assert len(cast) == 2, outcomes
    assert all(isinstance(o, DecisionConflict) for o in outcomes if not isinstance(o, VoteCast)), outcomes
    assert sorted(c.decision.status for c in cast) == [DecisionStatus.ACCEPTED, DecisionStatus.REQUESTED]
    stored = store.get_decision(decision.elicitation_id, ALICE)
    assert stored.status is DecisionStatus.ACCEPTED and stored.completion_version == 1
    trail = store.audit_trail(decision.elicitation_id, EVERYONE)
    assert [e.reason for e in trail[1:]] == ["approved (1 of 2)", "approved (2 of 2)", "approved by quorum"]
    assert len(store.votes(decision.elicitation_id)) == 2


def test_an_approvers_queue_holds_what_their_roles_may_vote_on_now(
    store: Store, records: Records, clock: FakeClock
) -> None:
    def waiting(roles: list[str], principal_id: str, limit: int = 100) -> list[str]:
        return [d.elicitation_id for d in store.approvals_waiting(roles, principal_id=principal_id, limit=limit)]

    release = asked(records)
    clock.advance(timedelta(seconds=1))
    bobs = asked(records, ApproverRule(("finance",)), operation=records.operation(BOB))
    clock.advance(timedelta(seconds=1))
    escalating = asked(records, ApproverRule(("finance",), escalate_after=timedelta(minutes=30), escalate_to=("sre",)))
    clock.advance(timedelta(seconds=1))
    asked(records, None)
    ended = asked(records)
    store.transition(ended, DecisionStatus.CANCELLED, caller=ALICE)

    assert waiting(["release-managers"], "carol") == [release.elicitation_id]
    assert waiting(["finance"], "carol") == [escalating.elicitation_id, bobs.elicitation_id]
    assert waiting(["finance"], "bob") == [escalating.elicitation_id], "never their own call"
    assert waiting(["release-managers", "finance"], "carol", limit=2) == [
        escalating.elicitation_id, bobs.elicitation_id,
    ]  # fmt: skip
    assert waiting(["release-managers"], ALICE.principal_id) == []
    assert waiting(["sre"], "frank") == []
    clock.advance(timedelta(minutes=30))
    assert waiting(["sre"], "frank") == [escalating.elicitation_id]
    store.cast_vote(release.elicitation_id, CAROL, Verdict.APPROVE, APPROVE)
    assert waiting(["release-managers"], "erin") == [release.elicitation_id], "waiting for its second approval"
    store.cast_vote(release.elicitation_id, DAVE, Verdict.APPROVE, APPROVE)
    assert waiting(["release-managers"], "erin") == []
    clock.advance(LONG)
    assert waiting(["finance"], "carol") == [], "overdue decisions wait for nobody"
    with pytest.raises(TypeError, match="not one string"):
        store.approvals_waiting("finance", principal_id="carol")


def test_an_approvers_queue_is_paged_past_a_cursor_in_its_order(
    store: Store, records: Records, clock: FakeClock
) -> None:
    mine = []
    for step in range(5):
        mine.append(asked(records))
        asked(records, ApproverRule(("finance",)))
        if step % 2:
            clock.advance(timedelta(seconds=1))  # two of a kind at one instant: ties go by id
    newest_first = [d.elicitation_id for d in store.approvals_waiting(["release-managers"], principal_id="carol")]
    assert sorted(newest_first) == sorted(d.elicitation_id for d in mine)
    pages, after = [], None
    while True:
        page = store.approval_page(["release-managers"], principal_id="carol", after=after, limit=2)
        pages.append([d.elicitation_id for d in page.decisions])
        if page.after is None:
            break
        after = page.after
    assert pages == [newest_first[0:2], newest_first[2:4], newest_first[4:]]
    exact = store.approval_page(["release-managers"], principal_id="carol", limit=5)
    assert len(exact.decisions) == 5 and exact.after is None, "no cursor when nothing follows"
    with pytest.raises(ValueError, match="not a cursor"):
        store.approval_page(["release-managers"], principal_id="carol", after="made-up")


def test_a_corrupt_approver_rule_is_an_unreadable_row(store_url: str, store: Store, records: Records) -> None:
    decision = asked(records)
    corrupt(
        store_url,
        'UPDATE elicit_decisions SET approvers = \'{"roles": ["ops"], "quorum": 0}\''
        f" WHERE elicitation_id = '{decision.elicitation_id}'",
    )
    with pytest.raises(UnreadableRow) as caught:
        store.get_decision(decision.elicitation_id, EVERYONE)
    assert (caught.value.record, caught.value.row_id, caught.value.column) == (
        "decision", decision.elicitation_id, "approvers",
    )  # fmt: skip
    assert "not an approver rule (quorum is a number of approvers" in str(caught.value)
    with pytest.raises(UnreadableRow):
        store.cast_vote(decision.elicitation_id, CAROL, Verdict.APPROVE, APPROVE)


def test_schema_10_keeps_the_decisions_of_schema_9(store_url: str, clock: FakeClock) -> None:
    store = open_store(store_url, clock=clock)
    try:
        records = Records(store, clock)
        before = records.form()
        answered = store.transition(records.form(), DecisionStatus.ACCEPTED, caller=ALICE, content=APPROVE)
    finally:
        store.close()
    take_back(store_url, SINCE_SCHEMA_9)
    store = open_store(store_url, clock=clock)
    try:
        assert store.schema_version() == SCHEMA_VERSION == 11
        assert store.get_decision(before.elicitation_id, ALICE) == before
        assert store.get_decision(answered.elicitation_id, ALICE) == answered
        assert before.approvers is None
        decision = asked(Records(store, clock), ApproverRule(("release-managers",)))
        cast = store.cast_vote(decision.elicitation_id, CAROL, Verdict.APPROVE, APPROVE)
        assert cast.decision.status is DecisionStatus.ACCEPTED
        assert store.votes(decision.elicitation_id) == [cast.vote]
    finally:
        store.close()


def test_only_votes_decide_a_decision_with_approvers_and_its_requester_may_withdraw_it(
    store: Store, records: Records
) -> None:
    """The requester's own page, inbox or client cannot answer it (four-eyes holds below the web layer too); an
    operator cannot either. Cancelling (withdrawing the request, deciding nothing) stays open to both."""
    decision = asked(records)
    for caller, to, content in (
        (ALICE, DecisionStatus.ACCEPTED, APPROVE),
        (BrowserUser(ALICE.principal_id), DecisionStatus.DECLINED, None),
        (EVERYONE, DecisionStatus.ACCEPTED, APPROVE),
    ):
        with pytest.raises(VoteRefused, match="decided only by the votes of its approvers") as caught:
            store.transition(decision, to, caller=caller, content=content)
        assert caught.value.reason is VoteRefusal.VOTES_ONLY
    assert store.get_decision(decision.elicitation_id, EVERYONE) == decision
    withdrawn = store.transition(decision, DecisionStatus.CANCELLED, caller=ALICE, reason="withdrawn")
    assert withdrawn.status is DecisionStatus.CANCELLED
    plain = asked(records, None)
    assert store.transition(plain, DecisionStatus.DECLINED, caller=ALICE).status is DecisionStatus.DECLINED
