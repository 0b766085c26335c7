"""The signed link a "decision waiting" notification carries, opened in a browser: it authorizes nothing and opening
it changes nothing; a tampered or lapsed one says so; the right person, once signed in, gets the decision's page.

Real parts: a server of one's own with `mount_web` on loopback (uvicorn), whose lifespan delivers the outbox to a
Slack-style receiver on loopback; httpx2 as the browser, redirects followed by hand so each step shows; the store
on both engines; and the reference deployment (`mcp-elicit serve --transport http`'s wiring), whose links are
signed with its auth key ring.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import anyio
import httpx2
import pytest

from mcp_elicit.model import (
    AuditEntry,
    Decision,
    DecisionOrigin,
    DecisionStatus,
    Operator,
    Principal,
    new_form_decision,
    new_operation,
)
from mcp_elicit.reference.deployment import build_http_deployment, http_settings
from mcp_elicit.server import DecisionLinks, Elicitation, Notifications, RequestState, Timing, Webhook
from mcp_elicit.store import Store, open_store
from mcp_elicit.store.protocol import NotificationEvent
from mcp_elicit.web import LocalAuthorizationServer, LocalUsers, WebPages, mount_web
from mcp_elicit.web.formpage import FIELD_PREFIX
from tests.helpers.balancer import shared_settings
from tests.helpers.http_harness import free_port, serving
from tests.helpers.pages_site import ask, hidden, served_site
from tests.helpers.receiver import Receiver
from tests.helpers.records import FORM_SCHEMA

pytestmark = pytest.mark.engines("sqlite", "postgres")

USERS = "alice:wonderland:Alice Liddell,bob:builder:Bob"
PASSWORDS = {"alice": "wonderland", "bob": "builder"}
PAGE_KEY = b"k" * 32
MESSAGE = "Deploy api to production?"


def link_for(receiver: Receiver, decision: Decision, seconds: float = 30) -> str:
    """The button's link in the Slack message about `decision`, once it has come."""

    async def wait() -> str:
        with anyio.fail_after(seconds):
            while True:
                for posted in receiver.posted():
                    if posted.headers["webhook-id"].endswith(decision.elicitation_id):
                        [actions] = [block for block in posted.json["blocks"] if block["type"] == "actions"]
                        url: str = actions["elements"][0]["url"]
                        return url
                await anyio.sleep(0.05)

    return anyio.run(wait)


@dataclass
class Site:
    base: str
    store: Store
    receiver: Receiver

    def ask(self, user: str, *, ttl: timedelta = timedelta(minutes=10)) -> Decision:
        """A form decision of `user`'s, asked by the tool deploy, as the runtime records one."""
        principal = Principal(f"{self.base}#{user}", "client-x")
        now = datetime.now(UTC)
        operation = self.store.create_operation(
            new_operation(principal, method="tools/call", target="deploy", request_digest="sha256:" + uuid.uuid4().hex,
                          now=now, ttl=timedelta(hours=1))
        )  # fmt: skip
        origin = DecisionOrigin(
            operation_id=operation.operation_id, key="approve", principal=principal, origin_method="tools/call",
            origin_request_digest=operation.request_digest, about='deploy(service="api")',
        )  # fmt: skip
        return self.store.create_decision(
            new_form_decision(origin, message=MESSAGE, requested_schema=FORM_SCHEMA, now=now, ttl=ttl)
        )

    def seen(self, decision: Decision) -> tuple[DecisionStatus, int, list[AuditEntry]]:
        """What a visit could have changed: the decision's status and version, and its audit trail."""
        current = self.store.get_decision(decision.elicitation_id, Operator())
        return current.status, current.completion_version, self.store.audit_trail(decision.elicitation_id, Operator())


@pytest.fixture
def site(store_url: str) -> Iterator[Site]:
    """A server of one's own: sign-in, pages and inbox by `mount_web`, "decision waiting" to a Slack receiver with
    the signed link; no sweep, so that nothing but a visit could move a decision."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    store = open_store(store_url)
    with Receiver() as receiver:
        notifications = Notifications(
            [Webhook(receiver.url, events={NotificationEvent.DECISION_WAITING}, format="slack")],
            poll=timedelta(seconds=0.05),
            links=DecisionLinks(base, PAGE_KEY),
        )
        elicitation = Elicitation(
            store, request_state=RequestState(keys=[b"l" * 32]), public_base_url=base,
            timing=Timing(sweep_interval=None), notifications=notifications,
        )  # fmt: skip
        subscribed(store, notifications)
        auth = LocalAuthorizationServer(base, LocalUsers.from_text(USERS), store, signing_keys=[b"a" * 32])
        server = elicitation.server("link-test", **auth.mcp_server_kwargs(f"{base}/mcp"))
        mount_web(server, elicitation, WebPages(sign_in=auth, page_key=PAGE_KEY, title="Deploys"))
        try:
            with serving(server.streamable_http_app(), port):
                yield Site(base, store, receiver)
        finally:
            elicitation.close()


def subscribed(store: Store, notifications: Notifications) -> None:
    """The subscriptions the served app's deliverer records when it starts, recorded before anything is asked: a
    question asked before the store knows of them is announced to nobody (the store looks once a second)."""
    store.outbox_subscribe({target.subscription: frozenset(target.events) for target in notifications.targets})


@contextmanager
def browser() -> Iterator[httpx2.Client]:
    with httpx2.Client(timeout=30, follow_redirects=False) as client:
        yield client


def sign_in_through(browser: httpx2.Client, base: str, redirect: httpx2.Response, user: str) -> str:
    """Follow a redirect to the sign-in page and sign in there; where the sign-in leads back to."""
    assert redirect.status_code == 303, redirect.text
    form = browser.get(base + redirect.headers["location"])
    assert form.status_code == 200, form.text
    signed = browser.post(
        f"{base}/signin",
        data={"username": user, "password": PASSWORDS[user], "next": hidden(form.text, "next"),
              "csrf": hidden(form.text, "csrf")},
    )  # fmt: skip
    assert signed.status_code == 303, signed.text
    location: str = signed.headers["location"]
    return location


def path_of(link: str) -> str:
    parts = urlsplit(link)
    return f"{parts.path}?{parts.query}"


def test_the_link_alone_changes_nothing_and_leads_the_right_person_to_the_page_after_sign_in(site: Site) -> None:
    decision = site.ask("alice")
    link = link_for(site.receiver, decision)
    assert link.startswith(f"{site.base}/elicit/{decision.elicitation_id}?until=")
    before = site.seen(decision)
    with browser() as unfurler:  # a chat unfurler or a mail scanner: no session
        opened = unfurler.get(link)
        assert opened.status_code == 303
        assert opened.headers["location"] == "/signin?" + urlencode({"next": path_of(link)})
        assert MESSAGE not in opened.text
        assert unfurler.head(link).status_code == 303
    assert site.seen(decision) == before  # status, version and audit untouched
    with browser() as alice:
        back = sign_in_through(alice, site.base, alice.get(link), "alice")
        assert back == path_of(link)
        page = alice.get(site.base + back)
        assert page.status_code == 200, page.text
        assert MESSAGE in page.text and "deploy(service=&quot;api&quot;)" in page.text
        assert site.seen(decision) == before  # seeing the page answers nothing
        answered = alice.post(
            f"{site.base}/elicit/{decision.elicitation_id}/answer",
            data={"csrf": hidden(page.text, "csrf"), "action": "accept", f"{FIELD_PREFIX}approve": "true"},
        )
        assert answered.status_code == 200, answered.text
    current = site.store.get_decision(decision.elicitation_id, Operator())
    assert (current.status, current.content) == (DecisionStatus.ACCEPTED, {"approve": True})


def test_a_link_opened_by_another_account_is_refused_as_the_page_refuses_it(site: Site) -> None:
    decision = site.ask("alice")
    link = link_for(site.receiver, decision)
    with browser() as bob:
        back = sign_in_through(bob, site.base, bob.get(link), "bob")
        refused = bob.get(site.base + back)
    assert refused.status_code == 403 and "belongs to another account" in refused.text
    assert MESSAGE not in refused.text
    status, version, trail = site.seen(decision)
    assert (status, version) == (DecisionStatus.REQUESTED, decision.completion_version)
    assert trail[-1].reason == "opened by another user"


def test_a_tampered_link_is_refused_with_a_clear_page_and_changes_nothing(site: Site) -> None:
    decision = site.ask("alice")
    other = site.ask("alice")
    link = link_for(site.receiver, decision)
    query = {name: values[0] for name, values in parse_qs(urlsplit(link).query).items()}
    later = str(int(query["until"]) + 3600)
    tampered = [
        f"{site.base}/elicit/{other.elicitation_id}?{urlsplit(link).query}",  # another decision's id
        f"{site.base}/elicit/{decision.elicitation_id}?{urlencode({**query, 'until': later})}",  # a later deadline
        f"{site.base}/elicit/{decision.elicitation_id}?{urlencode({**query, 'sig': 'A' * 43})}",  # a made-up one
        f"{site.base}/elicit/{decision.elicitation_id}?{urlencode({'until': query['until']})}",  # half a link
    ]
    before = site.seen(decision), site.seen(other)
    with browser() as anyone:
        for url in tampered:
            refused = anyone.get(url)
            assert refused.status_code == 400, url
            assert "This link is not valid" in refused.text and "Nothing was changed" in refused.text
            assert 'href="/inbox"' in refused.text and MESSAGE not in refused.text
    with browser() as alice:
        sign_in_through(alice, site.base, alice.get(link), "alice")
        assert alice.get(tampered[0]).status_code == 400  # signed in or not
    assert (site.seen(decision), site.seen(other)) == before


def test_a_lapsed_link_says_so_changes_nothing_and_the_inbox_still_works(site: Site) -> None:
    decision = site.ask("alice", ttl=timedelta(seconds=1))
    link = link_for(site.receiver, decision)
    anyio.run(anyio.sleep, max(0.0, (decision.expires_at - datetime.now(UTC)).total_seconds()) + 0.1)
    before = site.seen(decision)
    assert before[0] is DecisionStatus.REQUESTED  # overdue, and nothing has expired it
    with browser() as alice:
        lapsed = alice.get(link)
        assert lapsed.status_code == 410, lapsed.text
        assert "This link has lapsed" in lapsed.text and "Nothing was changed" in lapsed.text
        assert decision.expires_at.strftime("%Y-%m-%d %H:%M UTC") in lapsed.text
        inbox = lapsed.text.split('href="', 1)[1].split('"', 1)[0]
        assert inbox == "/inbox"
        back = sign_in_through(alice, site.base, alice.get(site.base + inbox), "alice")
        assert back == "/inbox"
        assert alice.get(site.base + back).status_code == 200
        assert alice.get(link).status_code == 410  # signed in: still lapsed, still nothing changed
    assert site.seen(decision) == before


def test_the_reference_deployment_signs_links_with_its_auth_keys(store_url: str, tmp_path: Path) -> None:
    """`mcp-elicit serve --transport http`'s wiring: a Slack webhook from the environment, links signed with
    MCP_ELICIT_AUTH_KEYS, which the deployment's own pages accept after sign-in."""
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    with Receiver() as receiver:
        environ = {
            **shared_settings(None),
            "MCP_ELICIT_WEBHOOK_URL": receiver.url,
            "MCP_ELICIT_WEBHOOK_FORMAT": "slack",
            "MCP_ELICIT_WEBHOOK_EVENTS": "decision.waiting",
        }
        settings = http_settings(environ, public)
        assert settings.notifications is not None
        deployment = build_http_deployment(store=store_url, workspace=tmp_path / "workspace", settings=settings)
        try:
            subscribed(deployment.elicitation.store, settings.notifications)
            with serving(deployment.http_app("127.0.0.1"), port):
                site = Site(public, deployment.elicitation.store, receiver)
                decision = site.ask("alice")
                link = link_for(receiver, decision, seconds=60)
                with browser() as alice:
                    opened = alice.get(link)
                    assert opened.headers["location"] == "/signin?" + urlencode({"next": path_of(link)})
                    back = sign_in_through(alice, public, opened, "alice")  # the balancer's user, alice:wonderland
                    page = alice.get(public + back)
                assert page.status_code == 200 and MESSAGE in page.text
        finally:
            deployment.elicitation.close()


def test_pages_built_by_hand_check_links_signed_with_their_own_page_key(store_url: str) -> None:
    """`UrlPages` without `links=` checks links signed with its `page_key`; without an inbox beside it, a refusal
    sends the person back to the assistant."""
    with served_site(store_url, "http://127.0.0.1:9", free_port()) as site:  # the provider is never reached
        decision = ask(site, "alice", "set_api_key", tool="set_api_key")
        ours = DecisionLinks(site.base, b"p" * 32).link(decision.elicitation_id, decision.expires_at)
        forged = DecisionLinks(site.base, b"q" * 32).link(decision.elicitation_id, decision.expires_at)
        with browser() as anyone:
            assert anyone.get(ours).status_code == 303
            refused = anyone.get(forged)
        assert refused.status_code == 400 and "Open the decision from your assistant." in refused.text
        assert "inbox" not in refused.text
