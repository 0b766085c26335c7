"""Standing grants on both stores: created once per approval, bound to principal, client, tool and scope, used with
an audit row per operation, revoked once by compare-and-set, listed in keyset pages."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest

from mcp_elicit.model import (
    BrowserUser,
    DecisionStatus,
    Grant,
    GrantKind,
    GrantStatus,
    Operator,
    Principal,
    SubjectKind,
    new_grant,
)
from mcp_elicit.store import GRANT_JOURNAL, GrantEnded, GrantFilter, NotFound, Store, open_store
from tests.helpers.clock import FakeClock
from tests.helpers.commands import cli
from tests.helpers.corrupt_rows import corrupt
from tests.helpers.race import race
from tests.helpers.records import ALICE, ALICE_OTHER_CLIENT, BOB, Records

HOUR = timedelta(hours=1)


def approved(records: Records, principal: Principal = ALICE) -> str:
    """An accepted approval of `principal`'s: the decision a grant is created from."""
    decision = records.form(records.operation(principal))
    records.store.transition(decision, DecisionStatus.ACCEPTED, caller=principal, content={"approve": True})
    return decision.elicitation_id


def granted(
    records: Records,
    principal: Principal = ALICE,
    *,
    tool: str = "deploy",
    scope: str | None = None,
    kind: GrantKind = GrantKind.SESSION,
    ttl: timedelta = HOUR,
) -> Grant:
    grant = new_grant(
        principal, tool=tool, scope=scope, kind=kind, decision_id=approved(records, principal),
        approved_at=records.clock(), ttl=ttl,
    )  # fmt: skip
    return records.store.create_grant(grant)


def test_a_grant_is_created_once_per_approval_and_audited(store: Store, records: Records, clock: FakeClock) -> None:
    decision_id = approved(records)
    first = new_grant(ALICE, tool="deploy", scope="env=staging", kind=GrantKind.ALWAYS, decision_id=decision_id,
                      approved_at=clock(), ttl=timedelta(days=30))  # fmt: skip
    again = new_grant(ALICE, tool="deploy", scope="env=staging", kind=GrantKind.ALWAYS, decision_id=decision_id,
                      approved_at=clock() + HOUR, ttl=timedelta(days=30))  # fmt: skip
    assert store.create_grant(first) == first
    assert store.create_grant(again) == first, "a run of the call after the first creates nothing again"
    assert store.get_grant(first.grant_id, ALICE) == first
    with pytest.raises(NotFound):
        store.get_grant(again.grant_id, Operator())
    [created] = store.audit_trail(first.grant_id, Operator())
    assert (created.subject_kind, created.from_status, created.to_status) == (SubjectKind.GRANT, None, "active")
    assert created.actor == ALICE.actor and created.details["decision_id"] == decision_id
    assert created.details["expires_at"] == first.expires_at.isoformat() and created.details["scope"] == "env=staging"


@pytest.mark.parametrize("whose", ["another principal's", "another client's", "unanswered"])
def test_a_grant_needs_an_accepted_approval_of_its_own_principal_and_client(
    store: Store, records: Records, clock: FakeClock, whose: str
) -> None:
    if whose == "unanswered":
        decision_id = records.form(records.operation(ALICE)).elicitation_id
    else:
        decision_id = approved(records, BOB if whose == "another principal's" else ALICE_OTHER_CLIENT)
    grant = new_grant(ALICE, tool="deploy", scope=None, kind=GrantKind.SESSION, decision_id=decision_id,
                      approved_at=clock(), ttl=HOUR)  # fmt: skip
    with pytest.raises(NotFound, match=f"no accepted approval {decision_id}"):
        store.create_grant(grant)
    assert store.grant_page(Operator()).grants == []


def test_a_grant_covers_only_its_principal_client_tool_and_scope(store: Store, records: Records) -> None:
    unscoped = granted(records, tool="deploy")
    staging = granted(records, tool="migrate", scope="env=staging")
    assert store.covering_grant(ALICE, "deploy", None) == unscoped
    assert store.covering_grant(ALICE, "migrate", "env=staging") == staging
    for principal, tool, scope in [
        (BOB, "deploy", None),
        (ALICE_OTHER_CLIENT, "deploy", None),
        (ALICE, "delete", None),
        (ALICE, "deploy", "env=staging"),  # a scoped call is not covered by an unscoped grant, nor the reverse
        (ALICE, "migrate", None),
        (ALICE, "migrate", "env=production"),
    ]:
        assert store.covering_grant(principal, tool, scope) is None, (principal, tool, scope)


def test_an_expired_or_revoked_grant_covers_nothing(store: Store, records: Records, clock: FakeClock) -> None:
    short = granted(records, tool="deploy", ttl=timedelta(minutes=5))
    revoked = granted(records, tool="migrate")
    store.revoke_grant(revoked.grant_id, caller=BrowserUser("alice"))
    assert store.covering_grant(ALICE, "migrate", None) is None
    assert store.covering_grant(ALICE, "deploy", None) == short
    clock.advance(timedelta(minutes=5))
    assert store.covering_grant(ALICE, "deploy", None) is None
    assert short.status(clock()) is GrantStatus.EXPIRED


def test_a_use_is_journaled_and_audited_once_per_operation(store: Store, records: Records) -> None:
    grant = granted(records)
    operation = records.operation()
    assert store.grant_used(grant, operation.operation_id, caller=ALICE) is True
    assert store.grant_used(grant, operation.operation_id, caller=ALICE) is False, "a second run records nothing"
    entry = store.journal_get(operation.operation_id, GRANT_JOURNAL, caller=ALICE)
    assert entry is not None and entry.value == grant.grant_id
    _, used = store.audit_trail(grant.grant_id, Operator())
    assert (used.from_status, used.to_status, used.actor) == ("active", "active", ALICE.actor)
    assert used.details == {"operation_id": operation.operation_id}


def test_a_use_of_a_grant_revoked_meanwhile_writes_nothing_and_rolls_the_commit_back(
    store: Store, records: Records
) -> None:
    grant = granted(records)
    store.revoke_grant(grant.grant_id, caller=Operator("ops"), reason="left the team")
    operation = records.operation()
    decision = records.form(operation)

    def commit() -> None:
        store.transition(decision, DecisionStatus.CANCELLED, caller=ALICE)
        store.grant_used(grant, operation.operation_id, caller=ALICE)

    with pytest.raises(GrantEnded, match=r"was revoked at .* by operator:ops"):
        store.atomically(commit)
    assert store.get_decision(decision.elicitation_id, ALICE).status is DecisionStatus.REQUESTED
    assert store.journal_get(operation.operation_id, GRANT_JOURNAL, caller=ALICE) is None
    assert [entry.to_status for entry in store.audit_trail(grant.grant_id, Operator())] == ["active", "revoked"]
    with pytest.raises(NotFound):
        store.grant_used(grant, operation.operation_id, caller=BOB)


def test_revoking_twice_says_so_and_changes_nothing(store: Store, records: Records, clock: FakeClock) -> None:
    grant = granted(records)
    revoked = store.revoke_grant(grant.grant_id, caller=BrowserUser("alice"), reason="done for today")
    when = clock()
    assert (revoked.revoked_at, revoked.revoked_by) == (when, "browser:alice")
    clock.advance(timedelta(minutes=1))
    with pytest.raises(GrantEnded) as again:
        store.revoke_grant(grant.grant_id, caller=Operator("ops"))
    assert str(again.value) == f"grant {grant.grant_id} was revoked at {when.isoformat()} by browser:alice"
    assert again.value.current == revoked == store.get_grant(grant.grant_id, Operator())
    trail = store.audit_trail(grant.grant_id, ALICE)
    assert [(row.to_status, row.actor, row.reason) for row in trail] == [
        ("active", ALICE.actor, f"session grant approved in decision {grant.decision_id}"),
        ("revoked", "browser:alice", "done for today"),
    ]


def test_an_expired_grant_is_not_revoked_and_another_persons_is_not_found(
    store: Store, records: Records, clock: FakeClock
) -> None:
    grant = granted(records, ttl=timedelta(minutes=1))
    with pytest.raises(NotFound):
        store.revoke_grant(grant.grant_id, caller=BrowserUser("bob"))
    with pytest.raises(NotFound):
        store.revoke_grant(grant.grant_id, caller=Principal("alice", "client-b"))
    clock.advance(timedelta(minutes=1))
    with pytest.raises(GrantEnded, match=re.escape(f"expired at {grant.expires_at.isoformat()}")):
        store.revoke_grant(grant.grant_id, caller=Operator())
    assert store.get_grant(grant.grant_id, Operator()).revoked_at is None
    assert len(store.audit_trail(grant.grant_id, Operator())) == 1


def test_listings_are_keyset_pages_of_what_the_caller_may_see(store: Store, records: Records, clock: FakeClock) -> None:
    alices = []
    for index in range(5):
        alices.append(granted(records, ALICE if index % 2 else ALICE_OTHER_CLIENT, tool=f"tool{index}"))
        clock.advance(timedelta(seconds=1))
    bobs = granted(records, BOB)
    store.revoke_grant(alices[0].grant_id, caller=Operator())
    newest_first = [bobs, *reversed(alices)]

    seen: list[Grant] = []
    after = None
    while True:
        page = store.grant_page(Operator(), after=after, limit=2)
        seen.extend(page.grants)
        after = page.after
        if after is None:
            break
    assert [g.grant_id for g in seen] == [g.grant_id for g in newest_first]
    own = store.grant_page(BrowserUser("alice")).grants
    assert [g.grant_id for g in own] == [g.grant_id for g in reversed(alices)], "every client of the person's"
    assert [g.tool for g in store.grant_page(ALICE).grants] == ["tool3", "tool1"]
    active = store.grant_page(Operator(), GrantFilter(principal_id="alice", active=True)).grants
    assert [g.tool for g in active] == ["tool4", "tool3", "tool2", "tool1"]
    prefix = alices[2].grant_id[:8]
    assert [g.grant_id for g in store.grant_page(Operator(), GrantFilter(id_prefix=prefix)).grants] == [
        alices[2].grant_id
    ]
    assert store.grant_page(Operator(), GrantFilter(id_prefix="no such id")).grants == []
    with pytest.raises(ValueError, match="not a cursor of a grant listing"):
        store.grant_page(Operator(), after="yesterday")


def test_an_unreadable_grant_is_named_and_hides_no_other(
    store: Store, store_url: str, records: Records, clock: FakeClock
) -> None:
    older = granted(records, tool="backup")
    clock.advance(timedelta(seconds=1))
    damaged = granted(records, tool="restart")
    clock.advance(timedelta(seconds=1))
    newer = granted(records, tool="deploy")
    if store_url.startswith("sqlite:"):
        corrupt(store_url, f"UPDATE elicit_grants SET expires_at = 'never' WHERE grant_id = '{damaged.grant_id}'")
        column = "expires_at"
    else:
        corrupt(store_url, "ALTER TABLE elicit_grants DROP CONSTRAINT elicit_grants_kind_check")
        corrupt(store_url, f"UPDATE elicit_grants SET kind = 'forever' WHERE grant_id = '{damaged.grant_id}'")
        column = "kind"
    page = store.grant_page(Operator())
    assert [g.grant_id for g in page.grants] == [newer.grant_id, older.grant_id]
    [row] = page.unreadable
    assert (row.record, row.row_id, row.column) == ("grant", damaged.grant_id, column)
    listed = cli("grants", "ls", "--all", "--store", store_url)
    assert listed.returncode == 2, listed.stderr
    assert [line.split("\t")[0] for line in listed.stdout.splitlines()[1:]] == [newer.grant_id, older.grant_id]
    assert f"grant {damaged.grant_id}: column {column} holds" in listed.stderr


def test_a_new_grant_of_a_key_replaces_the_active_one_and_touches_no_other_key(
    store: Store, records: Records, clock: FakeClock
) -> None:
    first = granted(records, scope="env=staging")
    others = [
        granted(records, scope="env=production"),
        granted(records, tool="restart", scope="env=staging"),
        granted(records, ALICE_OTHER_CLIENT, scope="env=staging"),
        granted(records, BOB, scope="env=staging"),
    ]
    clock.advance(timedelta(minutes=5))
    second = granted(records, scope="env=staging", kind=GrantKind.ALWAYS, ttl=timedelta(days=30))
    replaced = store.get_grant(first.grant_id, Operator())
    assert replaced.status(clock()) is GrantStatus.REVOKED and replaced.revoked_by == ALICE.actor
    assert store.covering_grant(ALICE, "deploy", "env=staging") == second
    *_, row = store.audit_trail(first.grant_id, Operator())
    assert (row.from_status, row.to_status, row.actor) == ("active", "revoked", ALICE.actor)
    assert row.reason == f"replaced by grant {second.grant_id}" and row.details["replaced_by"] == second.grant_id
    for other in others:
        assert store.get_grant(other.grant_id, Operator()).revoked_at is None, other
    active = store.grant_page(Operator(), GrantFilter(principal_id=ALICE.principal_id, active=True)).grants
    keys = [(g.client_id, g.tool, g.scope) for g in active]
    assert len(keys) == len(set(keys)) == 4, "one active grant per key"
    assert store.create_grant(second) == second, "created again (a run after the first): replaces nothing more"
    assert store.get_grant(second.grant_id, Operator()).revoked_at is None


@contextmanager
def contenders(store_url: str, store: Store, clock: FakeClock, count: int) -> Iterator[list[Store]]:
    """One store per contender on PostgreSQL (separate connections, as instances), the shared store on SQLite."""
    if store_url.startswith("sqlite"):
        yield [store] * count
        return
    opened = [open_store(store_url, clock=clock) for _ in range(count)]
    try:
        yield opened
    finally:
        for each in opened:
            each.close()


def test_grants_of_one_key_created_at_once_leave_one_active(
    store_url: str, store: Store, records: Records, clock: FakeClock
) -> None:
    decisions = [approved(records) for _ in range(6)]
    grants = [
        new_grant(ALICE, tool="deploy", scope=None, kind=GrantKind.SESSION, decision_id=decision_id,
                  approved_at=clock(), ttl=HOUR)
        for decision_id in decisions
    ]  # fmt: skip
    with contenders(store_url, store, clock, len(grants)) as stores:
        outcomes = race(stores, lambda each, i: each.create_grant(grants[i]))
    assert all(isinstance(outcome, Grant) for outcome in outcomes), outcomes
    active = store.grant_page(Operator(), GrantFilter(active=True)).grants
    assert len(active) == 1 and store.covering_grant(ALICE, "deploy", None) == active[0]
    revoked = [row for g in grants for row in store.audit_trail(g.grant_id, Operator()) if row.to_status == "revoked"]
    assert len(revoked) == len(grants) - 1
