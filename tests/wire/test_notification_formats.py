"""The ready-made notification formats: Standard Webhooks JSON with the decision page's signed link, a Slack-style
incoming webhook's message, and e-mail through SMTP.

Real parts: an HTTP receiver on loopback that records each request whole, aiosmtpd as
the SMTP server on loopback (plain, STARTTLS and implicit TLS with the test's own CA, a login, refusals), and
the store on both engines, whose outbox the deliverer claims.
"""

from __future__ import annotations

import base64
import logging
import re
import socket
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx2
import pytest

from mcp_elicit.model import (
    Approver,
    ApproverRule,
    Decision,
    DecisionOrigin,
    DecisionStatus,
    Operator,
    Verdict,
    new_form_decision,
    new_operation,
)
from mcp_elicit.server import DecisionLinks, Mail, Notifications, Retry, Webhook
from mcp_elicit.server.notifications import Deliverer, LinkCheck, WebhookSecret, verify
from mcp_elicit.settings import SettingsError
from mcp_elicit.store import Store, open_store
from mcp_elicit.store.aio import AsyncStore
from mcp_elicit.store.protocol import TASK_JOURNAL, DeliveryState, NotificationEvent
from tests.helpers.balancer import make_tls
from tests.helpers.clock import FakeClock
from tests.helpers.http_harness import free_port
from tests.helpers.mailbox import HOST, mailbox
from tests.helpers.receiver import Receiver
from tests.helpers.records import ALICE, FORM_SCHEMA, Records

pytestmark = pytest.mark.engines("sqlite", "postgres")

SECRET = "whsec_" + base64.b64encode(bytes(range(1, 33))).decode()
PAGE_KEY = b"p" * 32
BASE = "https://elicit.example"
LINKS = DecisionLinks(BASE, PAGE_KEY)
WAITING, ENDED, TASK, ESCALATED = (
    NotificationEvent.DECISION_WAITING,
    NotificationEvent.DECISION_ENDED,
    NotificationEvent.TASK_INPUT_REQUIRED,
    NotificationEvent.DECISION_ESCALATED,
)
ESCALATES = timedelta(minutes=5)
ESCALATING = ApproverRule(("release-managers",), quorum=2, escalate_after=ESCALATES, escalate_to=("finance", "sre"))
CAROL = Approver("carol", frozenset({"release-managers"}))
CONTENT = (b"Deploy to production", b"fish", b"approve", b"requested_schema")
"""The question's message, an answer's values and field names: never in a notification."""
SENDER, TO = "elicit@example.com", ("alice@example.com", "ops@example.com")
SMTP_PASSWORD = "s3cret-smtp-password"


@contextmanager
def delivering(
    store_url: str, clock: FakeClock, *targets: Webhook | Mail, retry: Retry | None = None, timeout: float = 5
) -> Iterator[tuple[Store, Deliverer]]:
    store = open_store(store_url, clock=clock)
    settings = Notifications(list(targets), retry=retry or Retry(), timeout=timeout, links=LINKS)
    try:
        yield store, Deliverer(AsyncStore(store), settings, clock)
    finally:
        store.close()


async def deliver_all(deliverer: Deliverer) -> int:
    async with httpx2.AsyncClient() as http:
        return await deliverer.deliver_due(http)


def asked(
    store: Store,
    clock: FakeClock,
    *,
    tool: str = "deploy",
    about: str | None = None,
    approvers: ApproverRule | None = None,
) -> Decision:
    """A form decision of alice's, asked by `tool`, its call summarized as `about` (by default as the runtime does),
    decided by `approvers` when given."""
    operation = store.create_operation(
        new_operation(ALICE, method="tools/call", target=tool, request_digest="sha256:" + uuid.uuid4().hex,
                      now=clock(), ttl=timedelta(hours=1))
    )  # fmt: skip
    origin = DecisionOrigin(
        operation_id=operation.operation_id, key="approve", principal=ALICE, origin_method="tools/call",
        origin_request_digest=operation.request_digest, sensitive_fields=("note",),
        about=f'{tool}(service="api", api_key=[redacted])' if about is None else about, approvers=approvers,
    )  # fmt: skip
    return store.create_decision(
        new_form_decision(
            origin, message="Deploy to production?", requested_schema=FORM_SCHEMA, now=clock(),
            ttl=timedelta(minutes=10),
        )
    )  # fmt: skip


def until_text(decision: Decision) -> str:
    return decision.expires_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def link_check(link: str, clock: FakeClock) -> tuple[str, LinkCheck]:
    """The decision id a link names, and what the pages make of it."""
    parts = urlsplit(link)
    assert f"{parts.scheme}://{parts.netloc}" == BASE
    found = re.fullmatch(r"/elicit/([0-9a-f-]{36})", parts.path)
    assert found, parts.path
    return found.group(1), LINKS.check(found.group(1), dict(parse_qsl(parts.query)), clock())


# -- Standard Webhooks JSON, with the signed link ------------------------------------------------------------


@pytest.mark.anyio
async def test_a_waiting_event_carries_the_signed_link_and_the_call_summary(store_url: str, clock: FakeClock) -> None:
    with (
        Receiver() as receiver,
        delivering(store_url, clock, Webhook(receiver.url, SECRET)) as (store, deliverer),
    ):
        await deliverer.subscribe()
        task = Records(store, clock).operation()
        store.journal_record(task.operation_id, TASK_JOURNAL, {"era": "2026-07-28"}, caller=ALICE)
        decision = Records(store, clock).form(task, sensitive=("note",))
        store.transition(decision, DecisionStatus.ACCEPTED, caller=ALICE, content={"approve": True, "note": "fish"})
        assert await deliver_all(deliverer) == 3
    events = receiver.by_event()
    assert set(events) == {"decision.waiting", "task.input_required", "decision.ended"}
    link = LINKS.link(decision.elicitation_id, decision.expires_at)
    for name, request in events.items():
        assert verify(WebhookSecret(SECRET), request.headers, request.body) == f"{name}:{decision.elicitation_id}"
        data = request.json["data"]
        assert data["about"] == decision.about == 'deploy(service="api", note="ünïcode ✓")'
        assert data.get("link") == (None if name == "decision.ended" else link)
        for content in CONTENT:
            assert content not in request.body
    assert link_check(link, clock) == (decision.elicitation_id, LinkCheck.VALID)


# -- Slack-style incoming webhooks -------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_slack_message_has_the_tool_the_summary_the_deadline_and_a_button(
    store_url: str, clock: FakeClock
) -> None:
    with (
        Receiver() as receiver,
        delivering(store_url, clock, Webhook(receiver.url, events={WAITING, ENDED}, format="slack")) as (
            store,
            deliverer,
        ),
    ):
        await deliverer.subscribe()
        decision = asked(store, clock)
        store.transition(decision, DecisionStatus.ACCEPTED, caller=ALICE, content={"approve": True, "note": "fish"})
        assert await deliver_all(deliverer) == 2
    events = receiver.by_event()
    link = LINKS.link(decision.elicitation_id, decision.expires_at)
    until, stamp = until_text(decision), int(decision.expires_at.timestamp())
    summary = '`deploy(service="api", api_key=[redacted])`'
    assert events["decision.waiting"].json == {
        "text": f"deploy is waiting for a decision (until {until}): <{link}|Open the decision>",
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": "*deploy is waiting for a decision*"}},
            {
                "type": "section",
                "fields": [
                    {"type": "mrkdwn", "text": "*Tool*\ndeploy"},
                    {"type": "mrkdwn", "text": f"*Call*\n{summary}"},
                    {"type": "mrkdwn", "text": f"*Until*\n<!date^{stamp}^{{date_short_pretty}} {{time}}|{until}>"},
                ],
            },
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": "Open the decision"},
                        "url": link,
                        "style": "primary",
                    }
                ],
            },
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": f"Decision `{decision.elicitation_id}` · decision.waiting"}],
            },
        ],
    }
    ended = events["decision.ended"].json
    assert ended["text"] == "The decision deploy waited for ended: accepted"
    assert [block["type"] for block in ended["blocks"]] == ["section", "section", "context"]  # no button
    assert ended["blocks"][1]["fields"][-1] == {"type": "mrkdwn", "text": "*Status*\naccepted"}
    for request in events.values():
        # Slack checks no signature: the event id stays (an intermediary deduplicates by it), nothing else is sent.
        assert request.headers["content-type"] == "application/json"
        assert request.headers["webhook-id"].endswith(decision.elicitation_id)
        assert "webhook-signature" not in request.headers and "webhook-timestamp" not in request.headers
        for content in CONTENT:
            assert content not in request.body
    assert link_check(link, clock) == (decision.elicitation_id, LinkCheck.VALID)


@pytest.mark.anyio
async def test_what_a_tool_says_cannot_become_slack_markup(store_url: str, clock: FakeClock) -> None:
    """A tool's name and its call's summary are the tool's words: a mention, a link, an entity or a closing
    backtick in them shows as text."""
    tool = "<!channel> & <https://evil.example|reset>"
    about = 'reset(note="<@U123> `rm` &amp; <https://evil.example|here>")'
    with (
        Receiver() as receiver,
        delivering(store_url, clock, Webhook(receiver.url, events={WAITING}, format="slack")) as (store, deliverer),
    ):
        await deliverer.subscribe()
        decision = asked(store, clock, tool=tool, about=about)
        assert await deliver_all(deliverer) == 1
    message = receiver.by_event()["decision.waiting"].json
    texts = [message["text"]] + [
        part["text"]
        for block in message["blocks"]
        for part in [block.get("text"), *block.get("fields", []), *block.get("elements", [])]
        if isinstance(part, dict) and part.get("type") == "mrkdwn"
    ]
    link = LINKS.link(decision.elicitation_id, decision.expires_at)
    stamp = int(decision.expires_at.timestamp())
    ours = {f"<{link}|Open the decision>", f"<!date^{stamp}^{{date_short_pretty}} {{time}}|{until_text(decision)}>"}
    for text in texts:
        assert set(re.findall(r"<[^<>]*>", text)) <= ours, text
    escaped_tool = "&lt;!channel&gt; &amp; &lt;https://evil.example|reset&gt;"
    assert message["blocks"][1]["fields"][0]["text"] == f"*Tool*\n{escaped_tool}"
    assert message["blocks"][1]["fields"][1]["text"] == (
        "*Call*\n`reset(note=\"&lt;@U123&gt; 'rm' &amp;amp; &lt;https://evil.example|here&gt;\")`"
    )


# -- e-mail through SMTP ----------------------------------------------------------------------------------


def mail(port: int, **options: Any) -> Mail:
    return Mail(HOST, SENDER, TO, port=port, security=options.pop("security", "plain"), **options)


@pytest.mark.anyio
async def test_a_waiting_decision_is_mailed_with_its_link_and_nothing_of_the_question(
    store_url: str, clock: FakeClock
) -> None:
    with mailbox() as box, delivering(store_url, clock, mail(box.port)) as (store, deliverer):
        await deliverer.subscribe()
        decision = asked(store, clock)
        store.transition(decision, DecisionStatus.ACCEPTED, caller=ALICE, content={"approve": True, "note": "fish"})
        assert await deliver_all(deliverer) == 1  # decision.waiting only, by default
        assert await deliver_all(deliverer) == 0
        [row] = store.outbox_deliveries()
    assert (row.event, row.state) == (WAITING, DeliveryState.DELIVERED)
    [taken] = box.messages()
    assert (taken.sender, taken.recipients) == (SENDER, list(TO))
    message = taken.message
    until = until_text(decision)
    link = LINKS.link(decision.elicitation_id, decision.expires_at)
    assert message["Subject"] == f"deploy is waiting for a decision (until {until})"
    assert (message["From"], message["To"]) == (SENDER, ", ".join(TO))
    assert message["Message-ID"].strip() == f"<decision.waiting.{decision.elicitation_id}@example.com>"
    assert message["Auto-Submitted"] == "auto-generated"
    plain = message.get_body(("plain",))
    html = message.get_body(("html",))
    assert plain is not None and html is not None
    assert plain.get_content().splitlines() == [
        "deploy is waiting for a decision.",
        "",
        "Tool:   deploy",
        'Call:   deploy(service="api", api_key=[redacted])',
        f"Until:  {until}",
        f"Open:   {link}",
        "",
        "The link itself decides nothing: you sign in, and the page shows you the question.",
        f"Decision {decision.elicitation_id} of operation {decision.operation_id}.",
    ]
    markup = html.get_content()
    assert "<code>deploy(service=&quot;api&quot;, api_key=[redacted])</code>" in markup
    assert f'<a href="{link.replace("&", "&amp;")}">Open the decision</a>' in markup
    for content in CONTENT:
        assert content not in taken.data
    assert link_check(link, clock) == (decision.elicitation_id, LinkCheck.VALID)


@pytest.mark.anyio
async def test_mail_is_tried_again_while_the_server_refuses_then_delivered_once(
    store_url: str, clock: FakeClock
) -> None:
    retry = Retry(first=timedelta(seconds=30))
    with mailbox(refuse=2) as box, delivering(store_url, clock, mail(box.port), retry=retry) as (store, deliverer):
        await deliverer.subscribe()
        decision = asked(store, clock)
        assert await deliver_all(deliverer) == 1
        [pending] = store.outbox_deliveries()
        assert (pending.state, pending.attempts, pending.last_error) == (DeliveryState.PENDING, 1, "SMTPDataError 451")
        assert await deliver_all(deliverer) == 0  # not due before its backoff
        clock.advance(timedelta(seconds=37))
        assert await deliver_all(deliverer) == 1
        clock.advance(timedelta(seconds=73))
        assert await deliver_all(deliverer) == 1
        [delivered] = store.outbox_deliveries()
    assert (delivered.state, delivered.attempts, delivered.last_error) == (DeliveryState.DELIVERED, 3, None)
    assert box.refused == [SENDER, SENDER]
    [taken] = box.messages()
    assert taken.message["Message-ID"].strip() == f"<decision.waiting.{decision.elicitation_id}@example.com>"


@pytest.mark.anyio
async def test_mail_gives_up_after_its_attempts_and_logs_no_secret(
    store_url: str, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    nobody = free_port()
    target = mail(nobody, username="elicit", password=SMTP_PASSWORD)
    retry = Retry(first=timedelta(seconds=1), attempts=2)
    with caplog.at_level(logging.DEBUG), delivering(store_url, clock, target, retry=retry) as (store, deliverer):
        await deliverer.subscribe()
        asked(store, clock)
        assert await deliver_all(deliverer) == 1
        clock.advance(timedelta(seconds=2))
        assert await deliver_all(deliverer) == 1
        [dead] = store.outbox_deliveries()
    assert (dead.state, dead.attempts, dead.last_error) == (DeliveryState.DEAD, 2, "ConnectionRefusedError")
    assert target.subscription.startswith(f"smtp://127.0.0.1:{nobody} (")
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert f"gave up delivering decision.waiting:{dead.elicitation_id} to mail {target.subscription}" in logged
    assert SMTP_PASSWORD not in logged and SMTP_PASSWORD not in repr(target)
    assert not any(address in logged for address in TO)  # the log names the target, not whom it mails


@pytest.mark.anyio
async def test_mail_taken_for_some_recipients_is_delivered_and_for_none_is_tried_again(
    store_url: str, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Sending again a message the server took for some would repeat it to them; the log says how many were
    refused, never whom."""
    with (
        mailbox(refuse_recipients=frozenset({"ops@example.com"})) as some,
        mailbox(refuse_recipients=frozenset(TO)) as none,
    ):
        targets = (mail(some.port), mail(none.port, name="refuses all"))
        with caplog.at_level(logging.INFO), delivering(store_url, clock, *targets) as (store, deliverer):
            await deliverer.subscribe()
            asked(store, clock)
            assert await deliver_all(deliverer) == 2
            outcomes = {d.subscription: (d.state, d.last_error) for d in store.outbox_deliveries()}
    assert outcomes == {
        targets[0].subscription: (DeliveryState.DELIVERED, None),
        "refuses all": (DeliveryState.PENDING, "SMTPRecipientsRefused 550"),
    }
    [taken] = some.messages()
    assert taken.recipients == ["alice@example.com"] and none.messages() == []
    logged = "\n".join(record.getMessage() for record in caplog.records if record.name.startswith("mcp_elicit"))
    assert f"mail {targets[0].subscription} for decision.waiting:" in logged
    assert "went to 1 of 2 recipients: the server refused the others" in logged
    assert not any(address in logged for address in TO)


@pytest.mark.anyio
async def test_a_mail_server_that_never_answers_costs_one_timeout(store_url: str, clock: FakeClock) -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # takes the connection, never greets
        target = mail(silent.getsockname()[1])
        with delivering(store_url, clock, target, timeout=0.5) as (store, deliverer):
            await deliverer.subscribe()
            asked(store, clock)
            assert await deliver_all(deliverer) == 1
            [pending] = store.outbox_deliveries()
    assert (pending.state, pending.attempts, pending.last_error) == (DeliveryState.PENDING, 1, "timed out")


@pytest.mark.anyio
async def test_mail_goes_over_starttls_or_tls_with_a_login_and_never_falls_back_to_plain(
    store_url: str, clock: FakeClock, tmp_path: Path
) -> None:
    tls = make_tls(tmp_path / "tls")
    login = {"username": "elicit", "password": SMTP_PASSWORD}
    with (
        mailbox(starttls=tls, login=("elicit", SMTP_PASSWORD)) as starttls,
        mailbox(implicit_tls=tls) as implicit,
        mailbox() as cleartext,
    ):
        targets = {
            "starttls": mail(starttls.port, security="starttls", tls=tls.context(), **login),
            "tls": mail(implicit.port, security="tls", tls=tls.context(), name="implicit"),
            "no STARTTLS offered": mail(cleartext.port, security="starttls", tls=tls.context(), name="cleartext"),
            "untrusted": mail(starttls.port, security="starttls", name="untrusted", **login),
        }
        with delivering(store_url, clock, *targets.values()) as (store, deliverer):
            await deliverer.subscribe()
            asked(store, clock)
            assert await deliver_all(deliverer) == 4
            outcomes = {d.subscription: (d.state, d.last_error) for d in store.outbox_deliveries()}
        assert {name: outcomes[target.subscription] for name, target in targets.items()} == {
            "starttls": (DeliveryState.DELIVERED, None),
            "tls": (DeliveryState.DELIVERED, None),
            "no STARTTLS offered": (DeliveryState.PENDING, "SMTPNotSupportedError"),
            "untrusted": (DeliveryState.PENDING, "SSLCertVerificationError"),
        }
        assert [taken.login for taken in starttls.messages()] == ["elicit"]
        assert starttls.logins == ["elicit"]  # the untrusted server never saw the login
        assert len(implicit.messages()) == 1 and cleartext.messages() == []


@pytest.mark.anyio
async def test_a_tool_name_or_summary_cannot_inject_a_mail_header(store_url: str, clock: FakeClock) -> None:
    tool = "deploy\r\nBcc: evil@example.net"
    about = 'deploy(note="x\r\nBcc: evil@example.net\u2028To: evil@example.net")'
    with mailbox() as box, delivering(store_url, clock, mail(box.port)) as (store, deliverer):
        await deliverer.subscribe()
        decision = asked(store, clock, tool=tool, about=about)
        assert await deliver_all(deliverer) == 1
    [taken] = box.messages()
    assert taken.recipients == list(TO)
    message = taken.message
    assert message.get_all("Bcc") is None and message.get_all("To") == [", ".join(TO)]
    until = until_text(decision)
    assert message["Subject"] == f"deploy Bcc: evil@example.net is waiting for a decision (until {until})"
    assert [name for name, value in message.items() if "evil" in value] == ["Subject"]
    assert not re.search(rb"^(Bcc|To): .*evil", taken.data, flags=re.MULTILINE)


# -- approvers and escalation ------------------------------------------------------------------------------


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


async def until_escalated(deliverer: Deliverer, clock: FakeClock) -> int:
    """Nothing is due a second before the escalation; what was due at its moment."""
    clock.advance(ESCALATES - timedelta(seconds=1))
    assert await deliver_all(deliverer) == 0
    clock.advance(timedelta(seconds=1))
    return await deliver_all(deliverer)


@pytest.mark.anyio
async def test_a_decision_with_approvers_says_whose_approval_it_waits_for_and_escalates_when_due(
    store_url: str, clock: FakeClock
) -> None:
    with (
        Receiver() as receiver,
        delivering(store_url, clock, Webhook(receiver.url, SECRET)) as (store, deliverer),
    ):
        await deliverer.subscribe()
        decision = asked(store, clock, approvers=ESCALATING)
        plain = asked(store, clock)
        assert await deliver_all(deliverer) == 2
        assert await until_escalated(deliverer, clock) == 1
        states = {(d.event_id, d.state) for d in store.outbox_deliveries()}
    posted = {request.headers["webhook-id"]: request for request in receiver.posted()}
    assert set(posted) == {
        f"decision.waiting:{decision.elicitation_id}",
        f"decision.waiting:{plain.elicitation_id}",
        f"decision.escalated:{decision.elicitation_id}",
    }
    assert {state for _, state in states} == {DeliveryState.DELIVERED}
    link = LINKS.link(decision.elicitation_id, decision.expires_at)
    waiting = posted[f"decision.waiting:{decision.elicitation_id}"].json
    assert waiting["data"]["approvers"] == {"roles": ["release-managers"], "quorum": 2}
    assert waiting["data"]["link"] == link
    assert "approvers" not in posted[f"decision.waiting:{plain.elicitation_id}"].json["data"]
    escalated = posted[f"decision.escalated:{decision.elicitation_id}"]
    assert verify(WebhookSecret(SECRET), escalated.headers, escalated.body) == escalated.headers["webhook-id"]
    assert (escalated.json["type"], escalated.json["timestamp"]) == (
        "decision.escalated", iso(decision.created_at + ESCALATES),
    )  # fmt: skip
    data = escalated.json["data"]
    assert data["approvers"] == {"roles": ["release-managers", "finance", "sre"], "quorum": 2}
    assert (data["status"], data["link"], data["about"]) == ("requested", link, decision.about)
    for content in CONTENT:
        assert content not in escalated.body.replace(b'"approvers":', b"")  # the key, not the form's field


@pytest.mark.anyio
async def test_an_escalation_of_a_decision_no_longer_waiting_is_settled_without_being_sent(
    store_url: str, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Written when the decision was asked: by its moment the decision may have been approved or cancelled."""
    with (
        Receiver() as receiver,
        delivering(store_url, clock, Webhook(receiver.url, SECRET, {ESCALATED})) as (store, deliverer),
    ):
        await deliverer.subscribe()
        rule = ApproverRule(("release-managers",), escalate_after=ESCALATES, escalate_to=("finance",))
        approved, cancelled, waiting = (asked(store, clock, approvers=rule) for _ in range(3))
        assert store.cast_vote(approved.elicitation_id, CAROL, Verdict.APPROVE, {"approve": True}).decision.status is (
            DecisionStatus.ACCEPTED
        )
        store.transition(cancelled, DecisionStatus.CANCELLED, caller=Operator("ops"))
        with caplog.at_level(logging.DEBUG, "mcp_elicit.server.notifications.delivery"):
            assert await until_escalated(deliverer, clock) == 3
        settled = {d.elicitation_id: (d.state, d.attempts, d.last_error) for d in store.outbox_deliveries()}
    assert [request.headers["webhook-id"] for request in receiver.posted()] == [
        f"decision.escalated:{waiting.elicitation_id}"
    ]
    assert settled == {
        decision.elicitation_id: (DeliveryState.DELIVERED, 1, None) for decision in (approved, cancelled, waiting)
    }
    logged = "\n".join(record.getMessage() for record in caplog.records)
    for decision, status in ((approved, "accepted"), (cancelled, "cancelled")):
        said = f"decision.escalated:{decision.elicitation_id} settled without sending: its decision no longer waits"
        assert f"{said} ({status})" in logged
    assert f"decision.escalated:{waiting.elicitation_id} settled" not in logged


@pytest.mark.anyio
async def test_a_slack_message_names_the_approvers_and_the_roles_an_escalation_adds(
    store_url: str, clock: FakeClock
) -> None:
    with (
        Receiver() as receiver,
        delivering(store_url, clock, Webhook(receiver.url, events={WAITING, ESCALATED}, format="slack")) as (
            store,
            deliverer,
        ),
    ):
        await deliverer.subscribe()
        decision = asked(store, clock, approvers=ESCALATING)
        assert await deliver_all(deliverer) == 1
        assert await until_escalated(deliverer, clock) == 1
    events = receiver.by_event()
    link = LINKS.link(decision.elicitation_id, decision.expires_at)
    until = until_text(decision)
    for event, headline in (
        ("decision.waiting", "deploy is waiting for approval by release-managers"),
        ("decision.escalated", "deploy is still waiting for approval: it now also goes to finance and sre"),
    ):
        message = events[event].json
        assert message["text"] == f"{headline} (until {until}): <{link}|Open the decision>"
        assert [block["type"] for block in message["blocks"]] == ["section", "section", "actions", "context"]
        assert message["blocks"][0]["text"] == {"type": "mrkdwn", "text": f"*{headline}*"}
        assert [field["text"].split("\n")[0] for field in message["blocks"][1]["fields"]] == [
            "*Tool*", "*Call*", "*Until*",
        ]  # fmt: skip
        assert message["blocks"][2]["elements"][0]["url"] == link
        assert message["blocks"][3]["elements"][0]["text"] == f"Decision `{decision.elicitation_id}` · {event}"


@pytest.mark.anyio
async def test_mail_names_the_approvers_and_is_sent_again_when_the_decision_escalates(
    store_url: str, clock: FakeClock
) -> None:
    with mailbox() as box, delivering(store_url, clock, mail(box.port)) as (store, deliverer):
        assert mail(box.port).events == {WAITING, ESCALATED}  # by default, the events that ask someone to act
        await deliverer.subscribe()
        decision = asked(store, clock, approvers=ESCALATING)
        assert await deliver_all(deliverer) == 1
        assert await until_escalated(deliverer, clock) == 1
    first, second = (taken.message for taken in box.messages())
    until = until_text(decision)
    link = LINKS.link(decision.elicitation_id, decision.expires_at)
    for message, event, headline in (
        (first, "decision.waiting", "deploy is waiting for approval by release-managers"),
        (second, "decision.escalated", "deploy is still waiting for approval: it now also goes to finance and sre"),
    ):
        assert message["Subject"] == f"{headline} (until {until})"
        assert message["Message-ID"].strip() == f"<{event}.{decision.elicitation_id}@example.com>"
        plain = message.get_body(("plain",))
        assert plain is not None
        lines = plain.get_content().splitlines()
        assert lines[:3] == [f"{headline}.", "", "Tool:   deploy"]
        assert f"Open:   {link}" in lines


# -- what is refused, before anything is sent ------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Mail("smtp.example.com", SENDER, TO, security="plain"), "loopback only"),
        (lambda: Mail("smtp.example.com", "elicit@example.com\r\nBcc: x@example.net", TO), "one address"),
        (lambda: Mail("smtp.example.com", SENDER, ["ops@example.com\nBcc: x@example.net"]), "one address"),
        (lambda: Mail("smtp.example.com", SENDER, "ops@example.com"), "not one string"),
        (lambda: Mail("smtp.example.com", SENDER, []), "at least one recipient"),
        (lambda: Mail("smtp.example.com", "elicit", TO), "one address"),
        (lambda: Mail("smtp.example.com", SENDER, TO, username="elicit"), "both username= and password="),
        (lambda: Mail("smtp.example.com", SENDER, TO, port=0), "port is from 1 to 65535"),
        (lambda: Mail("smtp.example.com", SENDER, TO, security="ssl"), "starttls, tls or plain"),  # type: ignore[arg-type]
        (lambda: Mail("smtp example.com", SENDER, TO), "host name or an address"),
        (lambda: Mail("smtp.example.com", SENDER, TO, events=frozenset()), "no event"),
        (lambda: Webhook("https://hooks.slack.example/services/x", SECRET, format="slack"), "give it no secret"),
        (lambda: Webhook("https://hooks.example/in"), "needs a secret"),
        (lambda: Webhook("https://hooks.example/in", SECRET, format="teams"), "standard or slack"),  # type: ignore[arg-type]
        (lambda: DecisionLinks(BASE, b"short"), "at least 32 bytes"),
        (lambda: DecisionLinks(BASE, []), "need a key"),
        (lambda: DecisionLinks("http://elicit.example", PAGE_KEY), "HTTPS outside loopback"),
        (lambda: DecisionLinks("https://elicit.example/?x=1", PAGE_KEY), "no query"),
        (lambda: Notifications([Mail("smtp.example.com", SENDER, TO)] * 2), "share the name"),
    ],
)
def test_bad_targets_and_links_are_refused(make: Callable[[], object], message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        make()


def test_a_link_tells_ours_from_an_altered_a_lapsed_and_a_rotated_one() -> None:
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    decision_id = str(uuid.uuid4())
    link = LINKS.link(decision_id, now + timedelta(minutes=10))
    query = dict(parse_qsl(urlsplit(link).query))
    assert set(query) == {"until", "sig"}
    assert LINKS.check(decision_id, query, now) is LinkCheck.VALID
    assert LINKS.check(decision_id, {}, now) is LinkCheck.ABSENT
    assert LINKS.check(decision_id, query, now + timedelta(minutes=10)) is LinkCheck.LAPSED
    altered = [
        {**query, "until": str(int(query["until"]) + 3600)},
        {**query, "sig": query["sig"][:-1] + ("A" if query["sig"][-1] != "A" else "B")},
        {"until": query["until"]},
        {"sig": query["sig"]},
        {**query, "until": "١٢٣"},
        {**query, "sig": "é" * 43},
    ]
    for forged in altered:
        assert LINKS.check(decision_id, forged, now) is LinkCheck.INVALID, forged
    assert LINKS.check(str(uuid.uuid4()), query, now) is LinkCheck.INVALID
    assert DecisionLinks(BASE, b"q" * 32).check(decision_id, query, now) is LinkCheck.INVALID
    rotated = DecisionLinks(BASE, [b"n" * 32, PAGE_KEY])
    assert rotated.check(decision_id, query, now) is LinkCheck.VALID  # an older key still checks
    assert LINKS.check(decision_id, dict(parse_qsl(urlsplit(rotated.link(decision_id, now)).query)), now) is (
        LinkCheck.INVALID  # the new key signs, and the old ring does not know it
    )
    assert "p" * 32 not in repr(LINKS)


# -- from the environment ----------------------------------------------------------------------------------


def test_the_environment_configures_a_slack_webhook_and_a_mail_target(tmp_path: Path) -> None:
    password = tmp_path / "smtp-password"
    password.write_text(SMTP_PASSWORD + "\n")
    password.chmod(0o600)
    environ = {
        "MCP_ELICIT_WEBHOOK_URL": "https://hooks.slack.example/services/T0/B0/tok",
        "MCP_ELICIT_WEBHOOK_FORMAT": "slack",
        "MCP_ELICIT_WEBHOOK_EVENTS": "decision.waiting",
        "MCP_ELICIT_SMTP_HOST": "smtp.example.com",
        "MCP_ELICIT_SMTP_USERNAME": "elicit",
        "MCP_ELICIT_SMTP_PASSWORD_FILE": str(password),
        "MCP_ELICIT_MAIL_FROM": SENDER,
        "MCP_ELICIT_MAIL_TO": " alice@example.com, ops@example.com ",
    }
    notifications = Notifications.from_env(environ)
    assert notifications is not None
    hook, target = notifications.targets
    assert isinstance(hook, Webhook) and isinstance(target, Mail)
    assert (hook.format, hook.key, hook.events) == ("slack", None, {WAITING})
    assert (target.host, target.port, target.security) == ("smtp.example.com", 587, "starttls")
    assert (target.username, target.password) == ("elicit", SMTP_PASSWORD)
    assert (target.sender, target.to, target.events) == (SENDER, TO, {WAITING, ESCALATED})
    mail_only = {k: v for k, v in environ.items() if not k.startswith("MCP_ELICIT_WEBHOOK")}
    [only] = Notifications.from_env({**mail_only, "MCP_ELICIT_SMTP_SECURITY": "tls"}).targets  # type: ignore[union-attr]
    assert isinstance(only, Mail) and (only.security, only.port) == ("tls", 465)
    assert Notifications.from_env({}) is None


@pytest.mark.parametrize(
    ("changes", "problems"),
    [
        (
            {"MCP_ELICIT_WEBHOOK_SECRET": SECRET},
            ["MCP_ELICIT_WEBHOOK_SECRET is set, and MCP_ELICIT_WEBHOOK_FORMAT=slack is not signed"],
        ),
        (
            {"MCP_ELICIT_MAIL_FROM": "", "MCP_ELICIT_MAIL_TO": ""},
            ["MCP_ELICIT_MAIL_FROM and MCP_ELICIT_MAIL_TO are not set, and MCP_ELICIT_SMTP_HOST needs it"],
        ),
        (
            {"MCP_ELICIT_SMTP_USERNAME": "elicit"},
            ["MCP_ELICIT_SMTP_USERNAME is set, and needs MCP_ELICIT_SMTP_PASSWORD: set both, or neither"],
        ),
        (
            {"MCP_ELICIT_SMTP_SECURITY": "plain", "MCP_ELICIT_WEBHOOK_FORMAT": "standard"},
            [
                "MCP_ELICIT_WEBHOOK_SECRET is not set, and MCP_ELICIT_WEBHOOK_URL needs it",
                "MCP_ELICIT_SMTP_HOST/MCP_ELICIT_MAIL_FROM/MCP_ELICIT_MAIL_TO: plain SMTP to smtp.example.com",
            ],
        ),
        ({"MCP_ELICIT_SMTP_PORT": "70000"}, ["MCP_ELICIT_SMTP_PORT: "]),
        ({"MCP_ELICIT_SMTP_SECURITY": "ssl"}, ["MCP_ELICIT_SMTP_SECURITY: "]),
        ({"MCP_ELICIT_WEBHOOK_FORMAT": "teams"}, ["MCP_ELICIT_WEBHOOK_FORMAT: "]),
    ],
)
def test_bad_notification_settings_name_their_variables(changes: dict[str, str], problems: list[str]) -> None:
    environ = {
        "MCP_ELICIT_WEBHOOK_URL": "https://hooks.slack.example/services/T0/B0/tok",
        "MCP_ELICIT_WEBHOOK_FORMAT": "slack",
        "MCP_ELICIT_SMTP_HOST": "smtp.example.com",
        "MCP_ELICIT_MAIL_FROM": SENDER,
        "MCP_ELICIT_MAIL_TO": "ops@example.com",
        **changes,
    }
    with pytest.raises(SettingsError) as refused:
        Notifications.from_env(environ)
    assert len(refused.value.problems) == len(problems)
    for said, expected in zip(refused.value.problems, problems, strict=True):
        assert said.startswith(expected), said
        assert SECRET not in said and "tok" not in said
