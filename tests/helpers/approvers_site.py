"""A served site where approvers answer decisions: local sign-in, the decision pages and the inbox, on loopback.

alice asks (her calls name approvers), bob, carol and dave are release-managers, erin is in finance (the role a
decision escalates to), mallory holds no role. The store and the pages read one clock the test moves, so an
escalation comes without waiting for it. Decisions are recorded as the runtime records an approval's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from html import unescape
from typing import Any

import httpx2
from starlette.applications import Starlette

from mcp_elicit.model import (
    Decision,
    DecisionOrigin,
    JSONObject,
    Principal,
    new_form_decision,
    new_operation,
)
from mcp_elicit.model.approvers import GRANT_FIELD, NOTE_FIELD, REJECT_FIELD, ApproverRule
from mcp_elicit.model.decision import new_elicitation_id
from mcp_elicit.server import DecisionLinks, Elicitation, RequestState
from mcp_elicit.store import Store, open_store
from mcp_elicit.web import ApproverRoles, LocalAuthorizationServer, LocalUsers, UrlPages
from mcp_elicit.web.inbox import INBOX_PATH, DecisionInbox, InboxSettings
from tests.helpers.clock import FakeClock
from tests.helpers.http_harness import free_port, serving
from tests.helpers.pages_site import hidden

USERS = "alice:alice-pw:Alice,bob:bob-pw:Bob,carol:carol-pw,dave:dave-pw,erin:erin-pw,mallory:mallory-pw"
ROLES = {"release-managers": ["bob", "carol", "dave"], "finance": ["erin"]}
PAGE_KEY = b"p" * 32
GATE_SCHEMA: JSONObject = {
    "type": "object",
    "properties": {
        "amount": {"type": "integer", "title": "Amount", "minimum": 1, "maximum": 500, "default": 400},
        NOTE_FIELD: {"type": "string", "title": "Note to the assistant (optional)", "maxLength": 200},
        REJECT_FIELD: {"type": "boolean", "title": "Reject this call", "default": False},
        GRANT_FIELD: {
            "type": "string",
            "title": "Approve",
            "oneOf": [{"const": "once", "title": "Just this call"}, {"const": "session", "title": "For a session"}],
            "default": "once",
        },
    },
}
QUESTION_SCHEMA: JSONObject = {
    "type": "object",
    "properties": {"seats": {"type": "integer", "minimum": 1}},
    "required": ["seats"],
}


@dataclass
class ApproversSite:
    base: str
    store: Store
    clock: FakeClock
    links: DecisionLinks
    pages: UrlPages
    page_skew: list[timedelta]
    """Added to the pages' clock only (the store keeps the test's): the page and the store disagree on `now`, as
    they do when a vote races a deadline or an escalation."""

    def principal(self, user: str) -> str:
        return f"{self.base}#{user}"

    def ask(
        self,
        rule: ApproverRule | None,
        *,
        requester: str = "alice",
        schema: JSONObject = GATE_SCHEMA,
        tool: str = "refund",
        ttl: timedelta = timedelta(hours=4),
    ) -> Decision:
        """A decision of `requester`'s call to `tool` that the approvers of `rule` answer (`requester`, for None)."""
        principal = Principal(self.principal(requester), "client-x")
        now = self.clock()
        operation = self.store.create_operation(
            new_operation(principal, method="tools/call", target=tool,
                          request_digest="sha256:" + new_elicitation_id(), now=now, ttl=ttl)
        )  # fmt: skip
        origin = DecisionOrigin(
            operation_id=operation.operation_id, key="approval", principal=principal, origin_method="tools/call",
            origin_request_digest=operation.request_digest, about=f'{tool}(order="A-17", amount=400)', approvers=rule,
        )  # fmt: skip
        return self.store.create_decision(
            new_form_decision(origin, message="Approve this refund?", requested_schema=schema, now=now, ttl=ttl)
        )

    def page(self, decision: Decision) -> str:
        return f"{self.base}/elicit/{decision.elicitation_id}"

    def link(self, decision: Decision) -> str:
        return self.links.link(decision.elicitation_id, decision.expires_at)


@contextmanager
def approvers_site(
    store_url: str, roles: ApproverRoles | None = None, *, page_size: int = 20
) -> Iterator[ApproversSite]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    clock = FakeClock(datetime.now(UTC))
    skew = [timedelta(0)]
    store = open_store(store_url, clock=clock)
    elicitation = Elicitation(store, request_state=RequestState(keys=[b"w" * 32]), public_base_url=base)
    auth = LocalAuthorizationServer(base, LocalUsers.from_text(USERS), store, signing_keys=[b"a" * 32])
    links = DecisionLinks(base, PAGE_KEY)
    pages = UrlPages(
        elicitation=elicitation,
        sign_in=auth,
        vault=None,
        flows={},
        page_key=PAGE_KEY,
        server_title="Refund desk",
        public_base_url=base,
        clock=lambda: (clock() + skew[0]).timestamp(),
        links=links,
        inbox=INBOX_PATH,
        approver_roles=roles or ApproverRoles(ROLES),
    )
    auth.sign_in_reason = pages.sign_in_reason
    inbox = DecisionInbox(pages, InboxSettings(operators=frozenset({f"{base}#carol"}), page_size=page_size))
    try:
        with serving(Starlette(routes=[*auth.routes(), *pages.routes(), *inbox.routes()]), port):
            yield ApproversSite(base, store, clock, links, pages, skew)
    finally:
        store.close()


@contextmanager
def signed_in(site: ApproversSite, user: str) -> Iterator[httpx2.Client]:
    """A browser with `user` signed in on the site."""
    with httpx2.Client(timeout=30) as browser:
        form = browser.get(f"{site.base}/signin", params={"next": "/inbox"})
        signed = browser.post(
            f"{site.base}/signin",
            data={"username": user, "password": f"{user}-pw", "next": "/inbox", "csrf": hidden(form.text, "csrf")},
        )
        assert signed.status_code == 303, signed.text
        yield browser


def vote(
    browser: httpx2.Client, site: ApproversSite, decision: Decision, action: str, page: str | None = None, **fields: Any
) -> httpx2.Response:
    """Press `action` (approve, reject) on the decision page (`page`, else opened now) with `fields` as typed."""
    shown = page if page is not None else browser.get(site.page(decision)).text
    data: dict[str, Any] = {"csrf": hidden(shown, "csrf"), "action": action}
    data.update({f"f.{name}": value for name, value in fields.items()})
    return browser.post(f"{site.page(decision)}/answer", data=data)


def said(html: str) -> str:
    """A page's text as a person reads it: markup out, entities decoded, blanks folded."""
    return " ".join(unescape(re.sub(r"<[^>]*>", " ", html)).split())
