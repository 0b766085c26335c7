"""Approvers answer from the decision page, the inbox and a signed link: four-eyes, roles, quorum, escalation.

Real HTTP on loopback (local sign-in, the decision pages and the inbox in one app), httpx2 as each person's
browser; decisions with approvers are recorded as the runtime records an approval's. alice asks, bob, carol and
dave are release-managers, erin is in finance, mallory holds no role; for roles from a claim, the stand-in OpenID
Connect provider signs people in and `mount_web` serves the pages.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from html import unescape

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.requests import Request

from mcp_elicit.model import (
    Decision,
    DecisionOrigin,
    DecisionStatus,
    JSONObject,
    Operator,
    Principal,
    new_form_decision,
    new_operation,
)
from mcp_elicit.model.approvers import NOTE_FIELD, REJECT_FIELD, Approver, ApproverRule, Verdict
from mcp_elicit.model.decision import new_elicitation_id
from mcp_elicit.server import Elicitation, RequestState
from mcp_elicit.store import Store, open_store
from mcp_elicit.web import (
    ApproverRoles,
    LocalAuthorizationServer,
    LocalUsers,
    OidcClient,
    OidcSignIn,
    WebPages,
    mount_web,
)
from mcp_elicit.web.jwks import ExternalIdentityProvider, JwksTokenVerifier
from tests.helpers.approvers_site import (
    GATE_SCHEMA,
    QUESTION_SCHEMA,
    ApproversSite,
    approvers_site,
    said,
    signed_in,
    vote,
)
from tests.helpers.http_harness import free_port, serving
from tests.helpers.identity_provider import WEB_CLIENT, WEB_SECRET, OidcProvider, Provider, sign_in_at_provider
from tests.helpers.pages_site import hidden

pytestmark = pytest.mark.anyio

TWO_OF_THREE = ApproverRule(("release-managers",), quorum=2)
PICKED_UP = "when the requester's call picks it up (at once if it is still waiting)."
RUNS_AS_MADE = f"Approved: the call runs as made {PICKED_UP}"
RUNS_250 = f"Approved: the call runs with amount 250 (changed from 400), the rest as called, {PICKED_UP}"


@pytest.fixture
def site(store_url: str) -> Iterator[ApproversSite]:
    with approvers_site(store_url) as served:
        yield served


def current(store: Store, decision: Decision) -> Decision:
    return store.get_decision(decision.elicitation_id, Operator())


def trail(store: Store, decision: Decision) -> list[tuple[str, str | None, str]]:
    return [(e.actor, e.from_status, e.to_status) for e in store.audit_trail(decision.elicitation_id, Operator())]


# -- who may see and vote ------------------------------------------------------------------------------------


def test_the_requester_may_not_approve_their_own_call_and_is_told_whom_it_waits_on(site: ApproversSite) -> None:
    decision = site.ask(TWO_OF_THREE)
    with signed_in(site, "alice") as alice:
        page = alice.get(site.page(decision))
        assert page.status_code == 403
        assert "You asked for this call; another person must approve it" in said(page.text)
        assert "Waiting for approval by release-managers (0 of 2)" in said(page.text)
        assert 'name="action"' not in page.text
        posted = alice.post(f"{site.page(decision)}/answer", data={"csrf": "x", "action": "approve", "f.amount": "400"})
        assert posted.status_code == 403
        own_token = site.pages.form_token(decision.elicitation_id, site.principal("alice"))
        pressed = alice.post(
            f"{site.page(decision)}/answer", data={"csrf": own_token, "action": "approve", "f.amount": "400"}
        )
        assert pressed.status_code == 403 and "another person must approve it" in said(pressed.text)
        listed = alice.get(f"{site.base}/inbox").text
        assert f"/inbox/{decision.elicitation_id}/" not in listed, "the requester's own approval offers no move"
        cancelled = alice.post(f"{site.page(decision)}/cancel", data={"csrf": "x"})
        assert cancelled.status_code == 403 and "Approvers decide this" in cancelled.text
    assert current(site.store, decision).status is DecisionStatus.REQUESTED
    assert site.store.votes(decision.elicitation_id) == []
    noted = [
        (entry.actor, entry.reason)
        for entry in site.store.audit_trail(decision.elicitation_id, Operator())
        if entry.actor == f"browser:{site.principal('alice')}"
    ]
    assert noted == [(f"browser:{site.principal('alice')}", "a vote by its requester on their own call (four-eyes)")], (
        "the press is audited once; opening the page and a post without her token are not votes"
    )


def test_a_person_in_no_eligible_role_is_refused_the_roles_named_and_the_attempt_audited(site: ApproversSite) -> None:
    decision = site.ask(TWO_OF_THREE)
    with signed_in(site, "mallory") as mallory:
        page = mallory.get(site.page(decision))
        assert page.status_code == 403
        text = said(page.text)
        assert "You are signed in as mallory" in text and "It needs an approver in release-managers" in text
        assert "Sign out and switch account" in page.text and "Approve this refund?" not in page.text
        forged = mallory.post(
            f"{site.page(decision)}/answer",
            data={"csrf": hidden(page.text, "csrf"), "action": "approve", "f.amount": "400"},
        )
        assert forged.status_code == 403, "the switch form's token is no vote's token"
        own_token = site.pages.form_token(decision.elicitation_id, site.principal("mallory"))
        pressed = mallory.post(
            f"{site.page(decision)}/answer", data={"csrf": own_token, "action": "approve", "f.amount": "400"}
        )
        assert pressed.status_code == 403 and "It needs an approver in release-managers" in said(pressed.text)
    assert current(site.store, decision).status is DecisionStatus.REQUESTED
    assert site.store.votes(decision.elicitation_id) == []
    noted = [entry for entry in trail(site.store, decision) if entry[0] == f"browser:{site.principal('mallory')}"]
    assert noted == [(f"browser:{site.principal('mallory')}", "requested", "requested")] * 2, "the page and the vote"


def test_an_eligible_approver_sees_the_call_and_a_form_without_the_grant_and_votes(site: ApproversSite) -> None:
    decision = site.ask(TWO_OF_THREE)
    with signed_in(site, "bob") as bob:
        page = bob.get(site.page(decision))
        assert page.status_code == 200, page.text
        text = said(page.text)
        assert "Refund desk asks for your approval" in text and "Approve this refund?" in text
        assert "Tool refund" in text and 'refund(order="A-17", amount=400)' in text and "For Alice (alice)" in text
        assert "No approvals yet; 2 needed." in text
        assert re.search(r'<input [^>]*name="f\.amount"[^>]*value="400"', page.text)
        assert "approval_grant" not in page.text and "approval_reject" not in page.text
        assert ">Approve</button>" in page.text and ">Reject</button>" in page.text and ">Cancel<" not in page.text
        done = vote(bob, site, decision, "approve", page.text, amount="400", **{NOTE_FIELD: "fine by me"})
        assert done.status_code == 200, done.text
        assert "Your approval was recorded: 1 of 2" in said(done.text)
        again = bob.get(site.page(decision))
        assert "You approved amount: 400" in said(again.text) and "Approved 1 of 2: Bob (bob)" in said(again.text)
        assert ">Approve</button>" not in again.text
    [cast] = site.store.votes(decision.elicitation_id)
    assert (cast.approver_id, cast.verdict, cast.roles) == (
        site.principal("bob"),
        Verdict.APPROVE,
        ("release-managers",),
    )
    assert current(site.store, decision).status is DecisionStatus.REQUESTED


@pytest.mark.engines("sqlite", "postgres")
def test_two_of_three_where_the_same_approver_twice_counts_once(site: ApproversSite) -> None:
    decision = site.ask(TWO_OF_THREE)
    with signed_in(site, "bob") as bob:
        page = bob.get(site.page(decision)).text
        first = vote(bob, site, decision, "approve", page, amount="400")
        replayed = vote(bob, site, decision, "approve", page, amount="400")
    assert first.status_code == 200 and replayed.status_code == 409
    assert "You already voted" in said(replayed.text) and "counts once" in said(replayed.text)
    assert current(site.store, decision).status is DecisionStatus.REQUESTED
    assert len(site.store.votes(decision.elicitation_id)) == 1
    with signed_in(site, "carol") as carol:
        shown = carol.get(site.page(decision))
        assert "Approved 1 of 2: Bob (bob)" in said(shown.text)
        done = vote(carol, site, decision, "approve", shown.text, amount="400")
    assert done.status_code == 200 and RUNS_AS_MADE in said(done.text)
    ended = current(site.store, decision)
    assert ended.status is DecisionStatus.ACCEPTED and ended.content is not None and ended.content["amount"] == 400


def test_an_edit_is_a_new_proposal_and_restarts_the_count(site: ApproversSite) -> None:
    decision = site.ask(TWO_OF_THREE)
    with signed_in(site, "bob") as bob:
        assert vote(bob, site, decision, "approve", amount="400").status_code == 200
    with signed_in(site, "carol") as carol:
        edited = vote(carol, site, decision, "approve", amount="250")
    assert edited.status_code == 200 and "Your approval was recorded: 1 of 2" in said(edited.text)
    assert current(site.store, decision).status is DecisionStatus.REQUESTED, "votes for other values do not add up"
    with signed_in(site, "dave") as dave:
        page = dave.get(site.page(decision))
        text = said(page.text)
        assert "Approved 1 of 2: Bob (bob), the call as made." in text
        assert "Approved 1 of 2: carol. carol changed amount: 400 → 250." in text
        assert re.search(r'<input [^>]*name="f\.amount"[^>]*value="250"', page.text), "the leading proposal prefills"
        assert "Approve approves: amount 250 (changed from 400), the rest as called." in text
        done = vote(dave, site, decision, "approve", page.text, amount="250")
    assert done.status_code == 200 and RUNS_250 in said(done.text)
    ended = current(site.store, decision)
    assert ended.status is DecisionStatus.ACCEPTED and ended.content is not None and ended.content["amount"] == 250


def test_the_next_approver_is_told_of_a_change_before_approving_it(site: ApproversSite) -> None:
    decision = site.ask(TWO_OF_THREE)
    with signed_in(site, "bob") as bob:
        first = said(bob.get(site.page(decision)).text)
        assert "Approve approves: the call as made." in first
        assert vote(bob, site, decision, "approve", amount="250").status_code == 200
    with signed_in(site, "carol") as carol:
        page = carol.get(site.page(decision))
        text = said(page.text)
        assert 'refund(order="A-17", amount=400)' in text, "the facts show the call as made"
        assert "Approved 1 of 2: Bob (bob). Bob (bob) changed amount: 400 → 250." in text
        assert "Approve approves: amount 250 (changed from 400), the rest as called." in text
        assert text.index("Approve approves:") < text.index("Approve Reject"), "said above the buttons"
        done = vote(carol, site, decision, "approve", page.text, amount="250")
    assert RUNS_250 in said(done.text)
    ended = current(site.store, decision)
    assert ended.status is DecisionStatus.ACCEPTED and ended.content is not None and ended.content["amount"] == 250


def test_a_value_the_question_hid_is_shown_as_unknown_not_as_unchanged(site: ApproversSite) -> None:
    hidden_amount = {**GATE_SCHEMA["properties"]}  # type: ignore[dict-item]
    hidden_amount["amount"] = {"type": "integer", "title": "Amount", "minimum": 1, "maximum": 500}
    decision = site.ask(TWO_OF_THREE, schema={"type": "object", "properties": hidden_amount})
    with signed_in(site, "bob") as bob:
        assert "Approve approves: the call as made." in said(bob.get(site.page(decision)).text)
        assert vote(bob, site, decision, "approve", amount="250").status_code == 200
    with signed_in(site, "carol") as carol:
        text = said(carol.get(site.page(decision)).text)
    assert "Bob (bob) changed amount: (not shown) → 250." in text
    assert "Approve approves: amount 250 (its value in the call is not shown), the rest as called." in text


def test_an_invalid_edit_shows_the_page_back_and_records_nothing(site: ApproversSite) -> None:
    decision = site.ask(TWO_OF_THREE)
    with signed_in(site, "bob") as bob:
        refused = vote(bob, site, decision, "approve", amount="9000")
    assert refused.status_code == 400 and "nothing was recorded" in said(refused.text)
    assert site.store.votes(decision.elicitation_id) == []


def test_a_rejection_ends_a_gate_with_the_note_and_a_plain_question_declined(site: ApproversSite) -> None:
    gate = site.ask(TWO_OF_THREE)
    with signed_in(site, "bob") as bob:
        rejected = vote(bob, site, gate, "reject", amount="1", **{NOTE_FIELD: "not this quarter"})
    assert rejected.status_code == 200 and "It was rejected by Bob (bob): nothing runs" in said(rejected.text)
    ended = current(site.store, gate)
    assert ended.status is DecisionStatus.ACCEPTED and ended.content is not None
    assert ended.content[REJECT_FIELD] is True and "amount" not in ended.content

    question = site.ask(TWO_OF_THREE, schema=QUESTION_SCHEMA)
    with signed_in(site, "carol") as carol:
        page = carol.get(site.page(question)).text
        declined = vote(carol, site, question, "reject", page)
    assert declined.status_code == 200 and "Rejected" in said(declined.text)
    assert current(site.store, question).status is DecisionStatus.DECLINED


def test_a_vote_after_the_decision_is_refused_and_changes_nothing(site: ApproversSite) -> None:
    decision = site.ask(ApproverRule(("release-managers",)))
    with signed_in(site, "dave") as dave:
        page = dave.get(site.page(decision)).text  # opened before bob decides
        with signed_in(site, "bob") as bob:
            assert vote(bob, site, decision, "approve", amount="400").status_code == 200
        late = vote(dave, site, decision, "approve", page, amount="300")
        assert late.status_code == 409 and "Your vote was not recorded" in said(late.text)
        reopened = dave.get(site.page(decision))
        assert reopened.status_code == 409 and "Approved" in said(reopened.text)
    ended = current(site.store, decision)
    assert ended.status is DecisionStatus.ACCEPTED and ended.content is not None and ended.content["amount"] == 400
    assert [cast.approver_id for cast in site.store.votes(decision.elicitation_id)] == [site.principal("bob")]


def test_a_tampered_post_is_refused_and_records_nothing(site: ApproversSite) -> None:
    decision = site.ask(TWO_OF_THREE)
    with signed_in(site, "bob") as bob:
        page = bob.get(site.page(decision)).text
        granted = vote(bob, site, decision, "approve", page, amount="400", approval_grant="session")
        assert granted.status_code == 400 and "fields the question does not have" in said(granted.text)
        forged = bob.post(
            f"{site.page(decision)}/answer", data={"csrf": "made-up", "action": "approve", "f.amount": "400"}
        )
        assert forged.status_code == 403
        with signed_in(site, "carol") as carol:
            carols = hidden(carol.get(site.page(decision)).text, "csrf")
        borrowed = bob.post(
            f"{site.page(decision)}/answer", data={"csrf": carols, "action": "approve", "f.amount": "400"}
        )
        assert borrowed.status_code == 403, "a token is bound to the approver it was made for"
        unknown = bob.post(f"{site.page(decision)}/answer", data={"csrf": hidden(page, "csrf"), "action": "cancel"})
        assert unknown.status_code == 400
    assert site.store.votes(decision.elicitation_id) == []
    assert current(site.store, decision).status is DecisionStatus.REQUESTED


def test_a_signed_link_opened_without_a_session_changes_nothing_and_leads_an_approver_to_vote(
    site: ApproversSite,
) -> None:
    decision = site.ask(ApproverRule(("release-managers",)))
    before = trail(site.store, decision)
    link = site.link(decision)
    with signed_in(site, "mallory") as scanner:
        scanner.cookies.clear()
        opened = scanner.get(link)
        assert opened.status_code == 303 and opened.headers["location"].startswith("/signin?next=")
        unfurled = scanner.post(f"{site.page(decision)}/answer", data={"action": "approve", "f.amount": "400"})
        assert unfurled.status_code == 303
    assert trail(site.store, decision) == before and site.store.votes(decision.elicitation_id) == []
    assert current(site.store, decision).status is DecisionStatus.REQUESTED
    with signed_in(site, "carol") as carol:
        page = carol.get(link)
        assert page.status_code == 200 and "asks for your approval" in said(page.text)
        done = vote(carol, site, decision, "approve", page.text, amount="120")
    assert done.status_code == 200 and "Approved: the call runs with amount 120 (changed from 400)" in said(done.text)
    assert current(site.store, decision).content == {"amount": 120}


def test_an_escalation_role_may_vote_only_after_the_timeout(site: ApproversSite) -> None:
    rule = ApproverRule(("release-managers",), escalate_after=timedelta(hours=1), escalate_to=("finance",))
    decision = site.ask(rule)
    with signed_in(site, "erin") as erin:
        early = erin.get(site.page(decision))
        assert early.status_code == 403 and "It needs an approver in release-managers" in said(early.text)
        site.clock.advance(timedelta(minutes=61))
        page = erin.get(site.page(decision))
        assert page.status_code == 200, page.text
        done = vote(erin, site, decision, "approve", page.text, amount="400")
    assert done.status_code == 200, done.text
    assert current(site.store, decision).status is DecisionStatus.ACCEPTED
    [cast] = site.store.votes(decision.elicitation_id)
    assert cast.roles == ("finance",)


# -- the inbox -----------------------------------------------------------------------------------------------


def test_the_inbox_queues_what_waits_for_the_approvers_roles_and_shows_the_requester_whom_it_waits_on(
    site: ApproversSite,
) -> None:
    decision = site.ask(TWO_OF_THREE)
    other = site.ask(ApproverRule(("finance",)))
    with signed_in(site, "bob") as bob:
        inbox = bob.get(f"{site.base}/inbox")
        assert inbox.status_code == 200
        text = said(inbox.text)
        assert "Waiting for your approval" in text and "refund waits for your approval" in text
        assert f'href="/elicit/{decision.elicitation_id}"' in inbox.text
        assert f'href="/elicit/{other.elicitation_id}"' not in inbox.text, "finance's queue is not bob's"
        assert "Waiting for approval by release-managers (0 of 2)." in text and "For Alice (alice)" in text
        vote(bob, site, decision, "approve", amount="400")
        listed = said(bob.get(f"{site.base}/inbox").text)
        assert "You voted. Waiting for approval by release-managers (1 of 2)." in listed
    with signed_in(site, "alice") as alice:
        mine = alice.get(f"{site.base}/inbox")
        text = said(mine.text)
        assert "Waiting for your approval" not in text
        assert "Waiting for approval by release-managers (1 of 2)." in text and "cancelled only by an operator" in text
        assert f"/inbox/{decision.elicitation_id}/cancel" not in mine.text
        refused = alice.post(
            f"{site.base}/inbox/{decision.elicitation_id}/cancel",
            data={"csrf": site.pages.form_token(decision.elicitation_id, site.principal("alice"))},
        )
        assert refused.status_code == 403 and "cancelled only by an operator" in said(refused.text)
    with signed_in(site, "mallory") as mallory:
        assert "Waiting for your approval" not in mallory.get(f"{site.base}/inbox").text
    assert current(site.store, decision).status is DecisionStatus.REQUESTED


def test_the_approvals_queue_pages_past_the_inbox_page_size(store_url: str) -> None:
    with approvers_site(store_url, page_size=2) as site:
        asked = []
        for _ in range(5):
            asked.append(site.ask(TWO_OF_THREE))
            site.clock.advance(timedelta(seconds=1))
        newest_first = [decision.elicitation_id for decision in reversed(asked)]
        with signed_in(site, "bob") as bob:
            inbox = bob.get(f"{site.base}/inbox").text
            listed = re.findall(r'href="/elicit/([^"]+)"', inbox)
            assert listed == newest_first[:2]
            seen, link = (
                list(listed),
                re.search(r'<a href="([^"]+)" rel="next">More waiting for your approval</a>', inbox),
            )
            while link is not None:
                more = bob.get(site.base + unescape(link.group(1)))
                assert more.status_code == 200 and "Back to the inbox" in more.text
                seen += re.findall(r'href="/elicit/([^"]+)"', more.text)
                link = re.search(r'<a href="([^"]+)" rel="next">More</a>', more.text)
            assert seen == newest_first, "every call waiting, once each, newest first"
            bad = bob.get(f"{site.base}/inbox/approvals", params={"after": "made-up"})
            assert bad.status_code == 400 and "not valid" in bad.text
        with signed_in(site, "mallory") as mallory:
            none = mallory.get(f"{site.base}/inbox/approvals")
            assert none.status_code == 200 and "You hold no approver role" in said(none.text)


# -- roles from an OpenID Connect claim, through mount_web -----------------------------------------------------


@dataclass
class OidcApprovers:
    provider: OidcProvider
    base: str
    store: Store

    def ask(self, rule: ApproverRule, requester: str = "alice") -> Decision:
        principal = Principal(f"{self.provider.issuer}#{requester}", "client-x")
        now = datetime.now(UTC)
        operation = self.store.create_operation(
            new_operation(principal, method="tools/call", target="deploy",
                          request_digest="sha256:" + new_elicitation_id(), now=now, ttl=timedelta(hours=1))
        )  # fmt: skip
        origin = DecisionOrigin(operation_id=operation.operation_id, key="approval", principal=principal,
                                origin_method="tools/call", origin_request_digest=operation.request_digest,
                                approvers=rule)  # fmt: skip
        return self.store.create_decision(
            new_form_decision(origin, message="Deploy v2?", requested_schema=GATE_SCHEMA, now=now,
                              ttl=timedelta(hours=1))
        )  # fmt: skip


@pytest.fixture
def oidc_approvers(store_url: str) -> Iterator[OidcApprovers]:
    idp_port, port = free_port(), free_port()
    base = f"http://127.0.0.1:{port}"
    keys = Provider(f"http://127.0.0.1:{idp_port}/realms/staff", audience=f"{base}/mcp")
    keys.add_rsa("k1")
    provider = OidcProvider(keys)
    store = open_store(store_url)
    elicitation = Elicitation(store, request_state=RequestState(keys=[b"o" * 32]), public_base_url=base)
    # The MCP calls are verified against the same provider the pages sign people in with (four-eyes needs one issuer).
    verifier = JwksTokenVerifier(
        ExternalIdentityProvider(
            issuer=keys.issuer,
            jwks_url=f"http://127.0.0.1:{idp_port}/realms/staff/protocol/openid-connect/certs",
            audience=f"{base}/mcp",
        )
    )
    server = elicitation.server("oidc-approvers", **verifier.mcp_server_kwargs())
    client = OidcClient(
        issuer=keys.issuer, client_id=WEB_CLIENT, client_secret=WEB_SECRET, redirect_uri=f"{base}/signin/callback"
    )
    sign_in = OidcSignIn(client, [b"s" * 32])
    roles = ApproverRoles({"release-managers": [f"{keys.issuer}#carol"]}, claim="groups")
    mount_web(server, elicitation, WebPages(sign_in=sign_in, page_key=b"p" * 32, approvers=roles))
    assert sign_in.roles_claim == "groups"
    try:
        with serving(Starlette(routes=provider.routes()), idp_port), serving(server.streamable_http_app(), port):
            yield OidcApprovers(provider, base, store)
    finally:
        store.close()


async def test_roles_come_from_the_id_tokens_claim_kept_in_the_session_and_from_the_mapping(
    oidc_approvers: OidcApprovers,
) -> None:
    site, provider = oidc_approvers, oidc_approvers.provider
    decision = site.ask(ApproverRule(("release-managers",), quorum=2))
    url = f"{site.base}/elicit/{decision.elicitation_id}"
    provider.id_claims = {"groups": ["staff", "release-managers", "not a role"]}
    async with httpx2.AsyncClient(timeout=30) as browser:
        page = await sign_in_at_provider(browser, url, "bob")
        assert page.status_code == 200 and "asks for your approval" in said(page.text), page.text
        done = await browser.post(
            f"{url}/answer", data={"csrf": hidden(page.text, "csrf"), "action": "approve", "f.amount": "400"}
        )
        assert done.status_code == 200 and "1 of 2" in said(done.text)
    provider.id_claims = {"groups": "staff"}
    async with httpx2.AsyncClient(timeout=30) as browser:
        requester = await sign_in_at_provider(browser, url, "alice")
        assert requester.status_code == 403 and "another person must approve it" in said(requester.text)
    provider.id_claims = {"groups": "staff release-managers"}
    async with httpx2.AsyncClient(timeout=30) as browser:
        refused = await sign_in_at_provider(browser, url, "alice")
        assert refused.status_code == 403, "a role in the claim does not lift four-eyes"
    [cast] = site.store.votes(decision.elicitation_id)
    assert cast.approver_id == f"{provider.issuer}#bob" and cast.roles == ("release-managers",)


async def test_without_the_claim_a_person_is_refused_and_a_mapped_one_votes(oidc_approvers: OidcApprovers) -> None:
    site, provider = oidc_approvers, oidc_approvers.provider
    decision = site.ask(ApproverRule(("release-managers",)))
    url = f"{site.base}/elicit/{decision.elicitation_id}"
    provider.id_claims = {"groups": None}
    async with httpx2.AsyncClient(timeout=30) as browser:
        refused = await sign_in_at_provider(browser, url, "bob")
        assert refused.status_code == 403 and "It needs an approver in release-managers" in said(refused.text)
    assert site.store.votes(decision.elicitation_id) == []
    async with httpx2.AsyncClient(timeout=30) as browser:
        page = await sign_in_at_provider(browser, url, "carol")
        assert page.status_code == 200, page.text
        done = await browser.post(
            f"{url}/answer", data={"csrf": hidden(page.text, "csrf"), "action": "approve", "f.amount": "75"}
        )
        assert done.status_code == 200 and "Approved: the call runs with amount 75 (changed from 400)" in said(
            done.text
        )
    ended = site.store.get_decision(decision.elicitation_id, Operator())
    assert ended.status is DecisionStatus.ACCEPTED and ended.content == {"amount": 75}


def test_approver_roles_the_sign_in_cannot_resolve_are_refused_at_mount(store_url: str) -> None:
    store = open_store(store_url)
    try:
        elicitation = Elicitation(
            store, request_state=RequestState(keys=[b"o" * 32]), public_base_url="http://127.0.0.1:1"
        )
        auth = LocalAuthorizationServer("http://127.0.0.1:1", LocalUsers.from_text("bob:pw"), store,
                                        signing_keys=[b"a" * 32])  # fmt: skip
        server = elicitation.server("refused", **auth.mcp_server_kwargs("http://127.0.0.1:1/mcp"))
        with pytest.raises(ValueError, match="claim 'groups' of a sign-in that keeps no claims"):
            mount_web(server, elicitation, WebPages(sign_in=auth, page_key=b"p" * 32,
                                                    approvers=ApproverRoles(claim="groups")))  # fmt: skip
    finally:
        store.close()


def test_approvers_need_mcp_calls_authenticated_by_the_pages_issuer(store_url: str) -> None:
    """Four-eyes compares principals: a requester under an unauthenticated or foreign id would pass it (fail open)."""
    store = open_store(store_url)
    try:
        elicitation = Elicitation(
            store, request_state=RequestState(keys=[b"o" * 32]), public_base_url="http://127.0.0.1:1"
        )
        auth = LocalAuthorizationServer("http://127.0.0.1:1", LocalUsers.from_text("bob:pw"), store,
                                        signing_keys=[b"a" * 32])  # fmt: skip
        other = LocalAuthorizationServer("http://127.0.0.1:2", LocalUsers.from_text("bob:pw"), store,
                                         signing_keys=[b"b" * 32])  # fmt: skip
        roles = ApproverRoles({"release-managers": ["bob"]})
        for server, refusal in (
            (elicitation.server("open"), "need authenticated MCP calls"),
            (elicitation.server("foreign", **other.mcp_server_kwargs("http://127.0.0.1:1/mcp")), "the same"),
        ):
            with pytest.raises(ValueError, match=refusal):
                mount_web(server, elicitation, WebPages(sign_in=auth, page_key=b"p" * 32, approvers=roles))
        same = elicitation.server("same", **auth.mcp_server_kwargs("http://127.0.0.1:1/mcp"))
        mount_web(same, elicitation, WebPages(sign_in=auth, page_key=b"p" * 32, approvers=roles))
    finally:
        store.close()


# -- edges: what the page says when the decision, its question or the clock is not as expected ---------------------

UNSHOWABLE_GATE: JSONObject = {
    "type": "object",
    "properties": {"amount": {"title": "Amount (no type)"}, REJECT_FIELD: {"type": "boolean", "default": False}},
}


def test_an_unknown_id_is_no_approval_and_shows_the_persons_own_not_found(site: ApproversSite) -> None:
    with signed_in(site, "bob") as bob:
        missing = bob.get(f"{site.base}/elicit/{new_elicitation_id()}")
        assert missing.status_code == 404, missing.text
        assert "asks for your approval" not in missing.text and 'name="action"' not in missing.text


def test_a_question_the_page_cannot_show_is_neither_shown_nor_voted_on(site: ApproversSite) -> None:
    decision = site.ask(TWO_OF_THREE, schema=UNSHOWABLE_GATE)
    with signed_in(site, "bob") as bob:
        page = bob.get(site.page(decision))
        assert page.status_code == 409 and "This question cannot be shown here" in said(page.text)
        assert 'name="action"' not in page.text
        token = site.pages.form_token(decision.elicitation_id, site.principal("bob"))
        pressed = bob.post(f"{site.page(decision)}/answer", data={"csrf": token, "action": "approve", "f.amount": "1"})
        assert pressed.status_code == 409 and "This question cannot be shown here" in said(pressed.text)
    assert site.store.votes(decision.elicitation_id) == []
    assert current(site.store, decision).status is DecisionStatus.REQUESTED


def test_a_gate_approved_elsewhere_whose_question_the_page_cannot_read_says_it_runs_with_the_values_recorded(
    site: ApproversSite,
) -> None:
    decision = site.ask(ApproverRule(("release-managers",)), schema=UNSHOWABLE_GATE)
    carol = Approver(site.principal("carol"), frozenset({"release-managers"}))
    site.store.cast_vote(decision.elicitation_id, carol, Verdict.APPROVE, {"amount": 7})  # not through the page
    with signed_in(site, "bob") as bob:
        page = bob.get(site.page(decision))
    assert page.status_code == 409
    assert "Approved: the call runs with the values recorded," in said(page.text)
    assert "Your vote was not recorded." in said(page.text)


def test_a_plain_questions_votes_show_the_values_answered_and_an_empty_answer_plainly(site: ApproversSite) -> None:
    optional: JSONObject = {"type": "object", "properties": {"seats": {"type": "integer", "minimum": 1}}}
    decision = site.ask(TWO_OF_THREE, schema=optional)
    with signed_in(site, "bob") as bob:
        assert "Approve answers with the values in the form." in said(bob.get(site.page(decision)).text)
        assert vote(bob, site, decision, "approve").status_code == 200
        again = said(bob.get(site.page(decision)).text)
    assert "Approved 1 of 2: Bob (bob)." in again and "You approved." in again
    with signed_in(site, "carol") as carol:
        page = carol.get(site.page(decision)).text
        assert "Approved 1 of 2: Bob (bob)." in said(page)
        edited = vote(carol, site, decision, "approve", page, seats="3")
        assert edited.status_code == 200 and "1 of 2" in said(edited.text)
    with signed_in(site, "dave") as dave:
        text = said(dave.get(site.page(decision)).text)
        assert "Approved 1 of 2: carol, answering seats: 3." in text
        done = vote(dave, site, decision, "approve", seats="3")
    assert done.status_code == 200 and "Approved: the answer goes to the tool that asked." in said(done.text)
    assert current(site.store, decision).content == {"seats": 3}


def test_an_approval_past_its_deadline_is_expired_on_the_page_and_at_the_vote(site: ApproversSite) -> None:
    decision = site.ask(TWO_OF_THREE, ttl=timedelta(minutes=30))
    with signed_in(site, "bob") as bob:
        page = bob.get(site.page(decision)).text
        site.clock.advance(timedelta(minutes=31))
        opened = bob.get(site.page(decision))
        assert opened.status_code == 410 and "This approval has expired" in said(opened.text)
        late = vote(bob, site, decision, "approve", page, amount="400")
        assert late.status_code == 410 and "Nobody decided in time. Nothing was recorded." in said(late.text)
    assert site.store.votes(decision.elicitation_id) == []


def test_a_vote_the_deadline_overtakes_at_the_store_is_refused_as_expired(site: ApproversSite) -> None:
    decision = site.ask(TWO_OF_THREE, ttl=timedelta(minutes=30))
    with signed_in(site, "bob") as bob:
        page = bob.get(site.page(decision)).text
        site.clock.advance(timedelta(minutes=31))
        site.page_skew[0] = timedelta(minutes=-2)  # the page still sees it open; the store's clock is past it
        late = vote(bob, site, decision, "approve", page, amount="400")
    assert late.status_code == 410 and "This approval has expired" in said(late.text)
    assert site.store.votes(decision.elicitation_id) == []
    assert current(site.store, decision).status is DecisionStatus.EXPIRED


def test_a_cancelled_approval_says_so_and_takes_no_vote(site: ApproversSite) -> None:
    decision = site.ask(TWO_OF_THREE)
    with signed_in(site, "bob") as bob:
        page = bob.get(site.page(decision)).text
        site.store.transition(decision, DecisionStatus.CANCELLED, caller=Operator("ops"), reason="withdrawn")
        opened = bob.get(site.page(decision))
        assert opened.status_code == 409 and "It was cancelled without a decision." in said(opened.text)
        late = vote(bob, site, decision, "approve", page, amount="400")
        assert late.status_code == 409 and "Your vote was not recorded." in said(late.text)
    assert site.store.votes(decision.elicitation_id) == []


async def test_a_vote_on_a_decision_that_moved_after_the_page_read_it_is_told_where_it_stands(
    site: ApproversSite,
) -> None:
    decision = site.ask(TWO_OF_THREE)
    read = current(site.store, decision)  # the page's read, before an operator cancels
    site.store.transition(read, DecisionStatus.CANCELLED, caller=Operator("ops"), reason="withdrawn")
    request = Request({"type": "http", "method": "POST", "path": "/", "headers": [], "query_string": b""})
    posted = FormData([("action", "approve"), ("f.amount", "400")])
    answer = await site.pages.approvers.vote(request, site.principal("bob"), read, posted)
    assert answer.status_code == 409 and b"It was cancelled without a decision." in bytes(answer.body)
    assert site.store.votes(decision.elicitation_id) == []


def test_the_stores_eligibility_at_the_vote_is_final(site: ApproversSite) -> None:
    rule = ApproverRule(("release-managers",), escalate_after=timedelta(hours=1), escalate_to=("finance",))
    decision = site.ask(rule)
    site.page_skew[0] = timedelta(minutes=61)  # the page sees the escalation; the store, at the vote, does not yet
    with signed_in(site, "erin") as erin:
        page = erin.get(site.page(decision))
        assert page.status_code == 200, page.text
        refused = vote(erin, site, decision, "approve", page.text, amount="400")
    assert refused.status_code == 403
    assert "You are signed in as erin. It needs an approver in release-managers" in said(refused.text)
    assert "Nothing was recorded." in said(refused.text) and "Sign out and switch account" in refused.text
    assert site.store.votes(decision.elicitation_id) == []
    assert current(site.store, decision).status is DecisionStatus.REQUESTED


def test_the_approver_pages_refuse_to_read_a_rule_off_a_decision_without_approvers(site: ApproversSite) -> None:
    decision = dataclasses.replace(site.ask(TWO_OF_THREE), approvers=None)
    with pytest.raises(ValueError, match=f"decision {decision.elicitation_id} names no approvers"):
        site.pages.approvers.eligible(decision, frozenset({"release-managers"}))
