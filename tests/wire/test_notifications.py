"""Notifications: the outbox written with each transition, signed webhook deliveries, retries, crash safety.

A real HTTP receiver on loopback checks every signature by the Standard Webhooks formula itself, not with
the library's `verify`; the crash test SIGKILLs a real server process between a transition and its delivery.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_elicit.model import DecisionStatus, Operator
from mcp_elicit.reference.deployment import http_settings
from mcp_elicit.server import Elicitation, Notifications, RequestState, Retry, Webhook
from mcp_elicit.server.notifications import Deliverer, SignatureInvalid, WebhookSecret, sign, verify
from mcp_elicit.server.tasks import TaskSettings
from mcp_elicit.server.tasks.state import META_JOURNAL
from mcp_elicit.settings import SettingsError
from mcp_elicit.store import Store, open_store
from mcp_elicit.store.aio import AsyncStore
from mcp_elicit.store.protocol import TASK_JOURNAL, Delivery, DeliveryState, NotificationEvent
from tests.helpers.clock import FakeClock
from tests.helpers.http_harness import StaticTokenVerifier, auth_settings, free_port, serving, wait_for_port
from tests.helpers.person import Person, accept
from tests.helpers.records import ALICE, Records
from tests.helpers.results import text
from tests.helpers.server import Workspace, task_tools
from tests.helpers.tasks_http import answer, answer_task
from tests.helpers.tasks_http import until as task_until
from tests.helpers.tasks_wire import LEGACY, MODERN, Wire

# On both engines: the outbox claimed by several deliverers: row locks on PostgreSQL.
pytestmark = pytest.mark.engines("sqlite", "postgres")

REPO = Path(__file__).resolve().parents[2]
KEY = bytes(range(1, 33))
SECRET = "whsec_" + base64.b64encode(KEY).decode()
WAITING, ENDED, TASK = (
    NotificationEvent.DECISION_WAITING,
    NotificationEvent.DECISION_ENDED,
    NotificationEvent.TASK_INPUT_REQUIRED,
)
DATA_FIELDS = {"elicitation_id", "operation_id", "principal_id", "status", "method", "target", "deadline", "about"}


@dataclass(frozen=True)
class Received:
    event_id: str
    timestamp: int
    body: bytes
    signed: bool
    answered: int
    target: str = ""
    """The request line's target: a path, or the whole URL when the request came through as a proxy's."""
    authorization: str | None = None

    @property
    def event(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.body)
        return loaded


class Receiver:
    """A webhook endpoint (http.server in a thread) answering from a script of statuses, then 200."""

    def __init__(self, statuses: tuple[int, ...] = (), port: int | None = None) -> None:
        self.statuses = list(statuses)
        self.received: list[Received] = []
        self.lock = threading.Lock()
        """Held while the handler thread records a delivery, and while the test reads them."""
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                with receiver.lock:
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                    receiver.received.append(
                        Received(
                            self.headers["webhook-id"], int(self.headers["webhook-timestamp"]), body,
                            _signed(self.headers, body), status, self.path, self.headers["authorization"],
                        )
                    )  # fmt: skip
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", port or 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hooks/elicit"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def delivered(self) -> list[Received]:
        with self.lock:
            return [r for r in self.received if 200 <= r.answered < 300]


def _signed(headers: Any, body: bytes) -> bool:
    """The Standard Webhooks check, written out: HMAC-SHA256 of `id.timestamp.body`, base64, after `v1,`."""
    event_id, stamp = headers["webhook-id"], headers["webhook-timestamp"]
    mac = hmac.new(KEY, f"{event_id}.{stamp}.".encode() + body, hashlib.sha256).digest()
    expected = "v1," + base64.b64encode(mac).decode()
    fresh = abs(time.time() - int(stamp)) < 300
    return fresh and any(hmac.compare_digest(expected, s) for s in headers["webhook-signature"].split(" "))


def subscribed(store: Store, **hooks: frozenset[NotificationEvent]) -> None:
    store.outbox_subscribe(hooks)


def url_digest(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()[:12]


def rows(store: Store, **where: Any) -> list[tuple[str, str, str, str]]:
    return [(d.event_id, d.subscription, d.event.value, d.status.value) for d in store.outbox_deliveries(**where)]


# -- signatures and settings ---------------------------------------------------------------------


def test_signatures_verify_and_fail_closed() -> None:
    secret = WebhookSecret(SECRET)
    body = b'{"type":"decision.waiting"}'
    headers = sign(secret, "decision.waiting:abc", body)
    assert _signed(headers, body)
    assert verify(secret, headers, body) == "decision.waiting:abc"
    rotated = {**headers, "webhook-signature": "v1,AAAA " + headers["webhook-signature"]}
    assert verify(secret, rotated, body) == "decision.waiting:abc"
    with pytest.raises(SignatureInvalid, match="matches"):
        verify(secret, headers, body + b" ")
    with pytest.raises(SignatureInvalid, match="matches"):
        verify(WebhookSecret(b"x" * 32), headers, body)
    with pytest.raises(SignatureInvalid, match="matches"):
        verify(secret, {**headers, "webhook-id": "decision.ended:abc"}, body)
    with pytest.raises(SignatureInvalid, match="from now"):
        verify(secret, headers, body, now=time.time() + 301)
    with pytest.raises(SignatureInvalid, match="required"):
        verify(secret, {"webhook-id": "x", "webhook-timestamp": headers["webhook-timestamp"]}, body)
    with pytest.raises(SignatureInvalid, match="whole seconds"):
        verify(secret, {**headers, "webhook-timestamp": "12.5"}, body)
    with pytest.raises(SignatureInvalid, match="whole seconds"):
        verify(secret, {**headers, "webhook-timestamp": "\u0661" * 10}, body)  # Arabic-Indic digits
    assert "whsec" not in repr(Webhook("https://hooks.example/in", SECRET))
    assert Webhook("https://hooks.example/in", secret).key is secret, "a WebhookSecret is taken as it is"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: WebhookSecret(b"short"), "at least 24 bytes"),
        (lambda: WebhookSecret("plain-text-secret-of-enough-length"), "whsec_"),
        (lambda: WebhookSecret("whsec_not base64!"), "not base64"),
        (lambda: Webhook("ftp://hooks.example/in", SECRET), "http"),
        (lambda: Webhook("https://hooks.example/in", SECRET, frozenset()), "no event"),
        (lambda: Notifications([Webhook("https://a.example/x", SECRET)] * 2), "name="),
        (lambda: Retry(first=timedelta(0)), "positive"),
        (lambda: Retry(factor=0.5), "factor >= 1"),
        (lambda: Retry(attempts=0), "attempts >= 1"),
        (lambda: Notifications([], batch=0), "batch of at least 1"),
        (lambda: Notifications([], poll=timedelta(0)), "positive timeout and poll"),
    ],
)
def test_bad_notification_settings_are_refused(make: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_serve_reads_its_webhook_from_the_environment() -> None:
    environ = {
        "MCP_ELICIT_USERS": "alice:wonderland",
        "MCP_ELICIT_AUTH_KEYS": base64.urlsafe_b64encode(b"A" * 32).decode(),
        "MCP_ELICIT_STATE_KEYS": base64.urlsafe_b64encode(b"S" * 32).decode(),
        "MCP_ELICIT_VAULT_KEYS": "v1:" + base64.urlsafe_b64encode(b"V" * 32).decode(),
        "MCP_ELICIT_WEBHOOK_URL": "https://hooks.example/in?token=t",
        "MCP_ELICIT_WEBHOOK_SECRET": SECRET,
        "MCP_ELICIT_WEBHOOK_EVENTS": "decision.ended, task.input_required",
    }
    notifications = http_settings(environ, "https://elicit.example").notifications
    assert notifications is not None
    [hook] = notifications.targets
    assert isinstance(hook, Webhook)
    assert hook.events == {ENDED, TASK} and hook.name == f"https://hooks.example ({url_digest(hook.url)})"
    assert http_settings({**environ, "MCP_ELICIT_WEBHOOK_URL": ""}, "https://elicit.example").notifications is None
    with pytest.raises(SettingsError) as refused:
        http_settings(
            {**environ, "MCP_ELICIT_WEBHOOK_SECRET": "", "MCP_ELICIT_WEBHOOK_EVENTS": "decision.done"},
            "https://elicit.example",
        )
    assert [p.split()[0] for p in refused.value.problems] == ["MCP_ELICIT_WEBHOOK_SECRET"]
    with pytest.raises(SettingsError, match=r"unknown event decision\.done"):
        http_settings({**environ, "MCP_ELICIT_WEBHOOK_EVENTS": "decision.done"}, "https://elicit.example")


# -- the outbox, written with the transition ------------------------------------------------------


def test_each_transition_writes_its_events_in_its_transaction(store: Store, records: Records) -> None:
    subscribed(store, everything=frozenset(NotificationEvent), endings=frozenset({ENDED}))
    decision = records.form()
    assert rows(store) == [
        (f"decision.waiting:{decision.elicitation_id}", "everything", "decision.waiting", "requested")
    ]
    store.transition(decision, DecisionStatus.ACCEPTED, caller=ALICE, content={"approve": True, "note": "x"})
    ended = f"decision.ended:{decision.elicitation_id}"
    assert sorted(rows(store, elicitation_id=decision.elicitation_id)) == sorted(
        [
            (f"decision.waiting:{decision.elicitation_id}", "everything", "decision.waiting", "requested"),
            (ended, "everything", "decision.ended", "accepted"),
            (ended, "endings", "decision.ended", "accepted"),
        ]
    )
    [row] = [d for d in store.outbox_deliveries(elicitation_id=decision.elicitation_id) if d.subscription == "endings"]
    assert (row.method, row.target, row.deadline, row.state, row.attempts) == (
        "tools/call", "deploy", decision.expires_at, DeliveryState.PENDING, 0,
    )  # fmt: skip

    class Abandon(Exception):
        pass

    operation = records.operation()

    def rolled_back() -> None:
        records.form(operation, key="other")
        raise Abandon

    with pytest.raises(Abandon):
        store.atomically(rolled_back)
    assert store.outbox_deliveries(state=DeliveryState.PENDING, limit=100) == store.outbox_deliveries(limit=100)
    assert len(store.outbox_deliveries()) == 3


def test_without_subscriptions_nothing_is_written(store: Store, records: Records) -> None:
    decision = records.form()
    store.transition(decision, DecisionStatus.DECLINED, caller=ALICE)
    assert store.outbox_deliveries() == []
    subscribed(store, gone=frozenset({ENDED}))
    subscribed(store, gone=frozenset())
    store.transition(records.form(), DecisionStatus.CANCELLED, caller=Operator("ops"))
    assert store.outbox_deliveries() == []


def test_expiry_by_sweep_and_by_late_signal_ends_the_decision(store: Store, records: Records, clock: FakeClock) -> None:
    subscribed(store, endings=frozenset({ENDED}))
    swept = records.form(ttl=timedelta(minutes=1))
    late = records.url(ttl=timedelta(minutes=5))
    clock.advance(timedelta(minutes=2))
    assert store.sweep_expired().decisions == 1
    clock.advance(timedelta(minutes=5))
    with pytest.raises(Exception, match="expired"):
        store.transition(late, DecisionStatus.ACCEPTED_URL, caller=ALICE)
    assert sorted(rows(store)) == sorted(
        [
            (f"decision.ended:{swept.elicitation_id}", "endings", "decision.ended", "expired"),
            (f"decision.ended:{late.elicitation_id}", "endings", "decision.ended", "expired"),
        ]
    )


def test_a_question_of_a_task_says_the_task_needs_input(store: Store, records: Records) -> None:
    assert TASK_JOURNAL == META_JOURNAL  # the tasks' marker is the one the store looks for
    subscribed(store, tasks=frozenset({TASK}))
    task = records.operation()
    store.journal_record(task.operation_id, TASK_JOURNAL, {"era": "2026-07-28"}, caller=ALICE)
    asked = records.form(task)
    records.form()  # a plain call's question: no task event
    [delivery] = store.outbox_deliveries()
    assert (delivery.event_id, delivery.operation_id, delivery.status) == (
        f"task.input_required:{asked.elicitation_id}", task.operation_id, DecisionStatus.REQUESTED,
    )  # fmt: skip


def test_claims_are_exclusive_and_lapse(store: Store, records: Records, clock: FakeClock) -> None:
    subscribed(store, hook=frozenset({WAITING}))
    decision = records.form()
    [first] = store.outbox_claim(["hook"], limit=10, lease=timedelta(seconds=30))
    assert (first.attempts, first.claimed_at) == (1, clock())
    assert store.outbox_claim(["hook"], limit=10, lease=timedelta(seconds=30)) == []
    assert store.outbox_claim(["another"], limit=10, lease=timedelta(seconds=30)) == []
    clock.advance(timedelta(seconds=31))  # the deliverer died mid-attempt: its claim lapses
    [again] = store.outbox_claim(["hook"], limit=10, lease=timedelta(seconds=30))
    assert (again.event_id, again.attempts) == (first.event_id, 2)
    assert not store.outbox_failed(first, retry_after=timedelta(seconds=1), error="late")  # a stale attempt
    assert store.outbox_failed(again, retry_after=None, error="HTTP 410")
    [dead] = store.outbox_deliveries(elicitation_id=decision.elicitation_id)
    assert (dead.state, dead.last_error, dead.attempts) == (DeliveryState.DEAD, "HTTP 410", 2)
    assert not store.outbox_delivered(again)
    assert store.outbox_purge(clock()) == 0
    assert store.outbox_purge(clock() + timedelta(seconds=1)) == 1
    orphan = records.form()  # pending for a webhook nobody delivers to any more
    assert store.outbox_purge(clock() + timedelta(days=1), stale_before=clock()) == 0
    clock.advance(timedelta(seconds=1))
    assert store.outbox_purge(clock() + timedelta(days=1), stale_before=clock()) == 1
    assert store.outbox_deliveries(elicitation_id=orphan.elicitation_id) == []


def test_concurrent_deliverers_claim_each_delivery_once(store_url: str, clock: FakeClock) -> None:
    stores = [open_store(store_url, clock=clock) for _ in range(3)]
    try:
        subscribed(stores[0], hook=frozenset({WAITING}))
        made = Records(stores[0], clock)
        operation = made.operation()
        for index in range(40):
            made.form(operation, key=f"q{index}")

        def drain(store: Store) -> list[str]:
            taken: list[str] = []
            while batch := store.outbox_claim(["hook"], limit=3, lease=timedelta(minutes=5)):
                taken.extend(d.event_id for d in batch)
            return taken

        with ThreadPoolExecutor(3) as pool:
            claimed = [event for taken in pool.map(drain, stores) for event in taken]
        assert len(claimed) == 40 and len(set(claimed)) == 40
    finally:
        for store in stores:
            store.close()


# -- delivery --------------------------------------------------------------------------------


@contextmanager
def deliverer_for(
    store_url: str, clock: FakeClock, *hooks: Webhook, retry: Retry | None = None
) -> Iterator[tuple[Store, Deliverer]]:
    store = open_store(store_url, clock=clock)
    try:
        yield store, Deliverer(AsyncStore(store), Notifications(list(hooks), retry=retry or Retry(), timeout=5), clock)
    finally:
        store.close()


@pytest.mark.anyio
async def test_events_carry_ids_status_target_deadline_and_no_content(store_url: str, clock: FakeClock) -> None:
    with Receiver() as receiver, deliverer_for(store_url, clock, Webhook(receiver.url, SECRET)) as (store, deliverer):
        await deliverer.subscribe()
        made = Records(store, clock)
        decision = made.form(sensitive=("note",))
        store.transition(decision, DecisionStatus.ACCEPTED, caller=ALICE, content={"approve": True, "note": "fish"})
        async with httpx2.AsyncClient() as http:
            assert await deliverer.deliver_due(http) == 2
            assert await deliverer.deliver_due(http) == 0
        got = {r.event["type"]: r for r in receiver.received}
        assert set(got) == {"decision.waiting", "decision.ended"}
        for event_type, status in (("decision.waiting", "requested"), ("decision.ended", "accepted")):
            received = got[event_type]
            assert received.signed and received.event_id == f"{event_type}:{decision.elicitation_id}"
            data = received.event["data"]
            assert set(data) == DATA_FIELDS
            assert data == {
                "elicitation_id": decision.elicitation_id, "operation_id": decision.operation_id,
                "principal_id": "alice", "status": status, "method": "tools/call", "target": "deploy",
                "deadline": decision.expires_at.isoformat().replace("+00:00", "Z"), "about": decision.about,
            }  # fmt: skip
            assert "link" not in data  # no Notifications.links: no link
            for content in (b"Deploy to production", b"fish", b"approve", b"requested_schema"):
                assert content not in received.body
        assert {d.state for d in store.outbox_deliveries()} == {DeliveryState.DELIVERED}


@pytest.mark.anyio
async def test_a_failed_delivery_is_retried_with_backoff_under_the_same_id(store_url: str, clock: FakeClock) -> None:
    retry = Retry(first=timedelta(seconds=30))
    with (
        Receiver(statuses=(500, 503)) as receiver,
        deliverer_for(store_url, clock, Webhook(receiver.url, SECRET, {WAITING}), retry=retry) as (store, deliverer),
    ):
        await deliverer.subscribe()
        decision = Records(store, clock).form()
        async with httpx2.AsyncClient() as http:
            assert await deliverer.deliver_due(http) == 1
            [pending] = store.outbox_deliveries()
            assert (pending.state, pending.attempts, pending.last_error) == (DeliveryState.PENDING, 1, "HTTP 500")
            assert timedelta(seconds=24) <= pending.next_attempt_at - clock() <= timedelta(seconds=36)
            assert await deliverer.deliver_due(http) == 0  # not due before its backoff
            clock.advance(timedelta(seconds=37))
            assert await deliverer.deliver_due(http) == 1
            [pending] = store.outbox_deliveries()
            assert timedelta(seconds=48) <= pending.next_attempt_at - clock() <= timedelta(seconds=72)  # doubled
            clock.advance(timedelta(seconds=73))
            assert await deliverer.deliver_due(http) == 1
        assert [r.answered for r in receiver.received] == [500, 503, 200]
        assert {r.event_id for r in receiver.received} == {f"decision.waiting:{decision.elicitation_id}"}
        assert all(r.signed for r in receiver.received)
        [delivered] = store.outbox_deliveries()
        assert (delivered.state, delivered.attempts, delivered.last_error) == (DeliveryState.DELIVERED, 3, None)


@pytest.mark.anyio
async def test_delivery_gives_up_after_its_attempts_and_logs(
    store_url: str, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    retry = Retry(first=timedelta(seconds=1), attempts=2)
    refused = f"http://127.0.0.1:{free_port()}/nobody"
    with Receiver(statuses=(302,)) as receiver:
        hooks = (Webhook(receiver.url, SECRET, {ENDED}, name="redirects"), Webhook(refused, SECRET, {ENDED}))
        refused_name = hooks[1].subscription
        with deliverer_for(store_url, clock, *hooks, retry=retry) as (store, deliverer):
            await deliverer.subscribe()
            made = Records(store, clock)
            store.transition(made.form(), DecisionStatus.DECLINED, caller=ALICE)
            async with httpx2.AsyncClient() as http:
                assert await deliverer.deliver_due(http) == 2
                clock.advance(timedelta(seconds=2))
                with caplog.at_level(logging.ERROR, "mcp_elicit.server.notifications.delivery"):
                    assert await deliverer.deliver_due(http) == 2
                clock.advance(timedelta(hours=1))
                assert await deliverer.deliver_due(http) == 0
            states = {d.subscription: (d.state, d.attempts, d.last_error) for d in store.outbox_deliveries()}
    assert states == {
        "redirects": (DeliveryState.DELIVERED, 2, None),
        refused_name: (DeliveryState.DEAD, 2, "ConnectError"),
    }
    assert [r.answered for r in receiver.received] == [302, 200]
    [gave_up] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "gave up" in gave_up.getMessage() and "after 2 attempts" in gave_up.getMessage()


@pytest.mark.anyio
@pytest.mark.parametrize("era", [LEGACY, MODERN])
async def test_a_served_task_says_it_needs_input_and_its_question_ends(
    store_url: str, tmp_path: Path, era: str
) -> None:
    port = free_port()
    with Receiver() as receiver:
        fast = Notifications([Webhook(receiver.url, SECRET)], poll=timedelta(seconds=0.05))
        runtime = Elicitation(
            open_store(store_url), request_state=RequestState(keys=[b"t" * 32]), public_base_url=f"http://127.0.0.1:{port}",
            tasks=TaskSettings(poll_interval=timedelta(milliseconds=200)), notifications=fast,
        )  # fmt: skip
        server = runtime.server("tasks-http", token_verifier=StaticTokenVerifier(), auth=auth_settings(port))
        task_tools(runtime, Workspace(tmp_path / "workspace"))
        try:
            with serving(server.streamable_http_app(), port) as base:
                async with Wire(f"{base}/mcp", era, token="token-alice") as wire:
                    task_id = (await wire.call_as_task("deploy", {"service": "payments"}))["taskId"]
                    await task_until(wire, task_id, "input_required")
                    await until(lambda: len(receiver.delivered()) == 2)
                    await answer_task(wire, task_id, "approve", answer(approve=True))
                    await task_until(wire, task_id, "completed")
                    await until(lambda: len(receiver.delivered()) == 3)
        finally:
            runtime.close()
    events = {r.event["type"]: r.event["data"] for r in receiver.delivered()}
    assert set(events) == {"decision.waiting", "task.input_required", "decision.ended"}
    assert events["task.input_required"]["task_id"] == task_id == events["decision.ended"]["operation_id"]
    assert (events["decision.waiting"]["target"], events["decision.ended"]["status"]) == ("deploy", "accepted")
    assert all(r.signed for r in receiver.received)


# -- what a webhook's URL may hold stays out of the log and the store --------------------------------


@pytest.mark.anyio
async def test_a_webhooks_path_query_and_credentials_reach_neither_the_log_nor_the_store(
    store_url: str, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    retry = Retry(first=timedelta(seconds=1), attempts=2)
    hidden = ("tok-in-path", "tok-in-query", "tok-user", "tok-password")
    with Receiver(statuses=(500,)) as receiver:
        port = urlsplit(receiver.url).port
        answering = f"http://tok-user:tok-password@127.0.0.1:{port}/hooks/tok-in-path?sig=tok-in-query"
        nobody = f"http://127.0.0.1:{free_port()}/hooks/tok-in-path?sig=tok-in-query"
        hooks = (Webhook(answering, SECRET, {ENDED}), Webhook(nobody, SECRET, {ENDED}))
        with caplog.at_level(logging.DEBUG), deliverer_for(store_url, clock, *hooks, retry=retry) as (store, deliverer):
            await deliverer.subscribe()
            store.transition(Records(store, clock).form(), DecisionStatus.DECLINED, caller=ALICE)
            async with httpx2.AsyncClient() as connections:
                assert await deliverer.deliver_due(connections) == 2  # HTTP 500 and refused: two warnings
                clock.advance(timedelta(seconds=2))
                assert await deliverer.deliver_due(connections) == 2  # delivered, and given up: an error
            names = {d.subscription for d in store.outbox_deliveries()}
    target = "/hooks/tok-in-path?sig=tok-in-query"
    assert [(r.answered, r.target) for r in receiver.received] == [(500, target), (200, target)]
    assert receiver.received[-1].authorization == "Basic " + base64.b64encode(b"tok-user:tok-password").decode()
    assert (
        names
        == {hook.subscription for hook in hooks}
        == {
            f"http://127.0.0.1:{port} ({url_digest(answering)})",
            f"{hooks[1].origin} ({url_digest(nobody)})",
        }
    )
    logged = "\n".join(f"{record.name}: {record.getMessage()}" for record in caplog.records)
    assert logged.count("to webhook http://127.0.0.1:") == 3, logged  # the webhook is named, by its origin
    for secret in hidden:
        assert secret not in logged and not any(secret in name for name in names)
    assert "HTTP Request" not in logged  # httpx2's client line, which logs the URL whole


@pytest.mark.anyio
async def test_deliveries_go_through_the_proxy_the_environment_names(
    store_url: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The receiver stands in for a forward proxy: only through it can `hooks.invalid` be reached."""
    with Receiver() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url.removesuffix("/hooks/elicit"))
        hooks = (Webhook("http://hooks.invalid/in/tok", SECRET, {ENDED}), Webhook("http://direct.invalid/in", SECRET))
        monkeypatch.setenv("NO_PROXY", "direct.invalid")
        with deliverer_for(store_url, clock, *hooks) as (store, deliverer):
            await deliverer.subscribe()
            store.transition(Records(store, clock).form(), DecisionStatus.DECLINED, caller=ALICE)
            async with httpx2.AsyncClient() as connections:
                assert await deliverer.deliver_due(connections) == 3
            states = {(d.subscription, d.event, d.state, d.last_error) for d in store.outbox_deliveries()}
    assert [(r.target, r.signed) for r in proxy.received] == [("http://hooks.invalid/in/tok", True)]
    assert {(name, state, error) for name, _, state, error in states} == {
        (hooks[0].subscription, DeliveryState.DELIVERED, None),
        (hooks[1].subscription, DeliveryState.PENDING, "ConnectError"),  # not proxied: the name does not resolve
    }


@pytest.mark.anyio
async def test_a_webhook_takes_over_what_the_store_holds_under_its_former_name(
    store_url: str, clock: FakeClock
) -> None:
    """Until names left the URL's path out, a webhook was named by its URL without query: its subscription and
    deliveries move to the new name once, no event is delivered twice, and none is left behind."""
    with Receiver() as receiver:
        hook = Webhook(receiver.url + "?sig=q", SECRET, {WAITING, ENDED})
        assert hook.former_name == receiver.url
        assert Webhook(receiver.url, SECRET, name="named").former_name is None
        with deliverer_for(store_url, clock, hook) as (store, deliverer):
            made = Records(store, clock)
            store.outbox_subscribe({receiver.url: frozenset({WAITING, ENDED})})  # as an earlier version named it
            asked = [made.form() for _ in range(3)]
            store.outbox_subscribe({hook.subscription: frozenset({WAITING, ENDED})})  # an upgraded instance, meanwhile
            store.transition(asked[2], DecisionStatus.DECLINED, caller=ALICE)  # its end written under both names
            ended = f"decision.ended:{asked[2].elicitation_id}"
            for row in store.outbox_claim([receiver.url], limit=10, lease=timedelta(seconds=30)):
                if row.event_id in (ended, f"decision.waiting:{asked[0].elicitation_id}"):
                    assert store.outbox_delivered(row)
                else:
                    assert store.outbox_failed(row, retry_after=timedelta(0), error="HTTP 503")
            await deliverer.subscribe()
            assert {(d.event_id, d.subscription, d.state) for d in store.outbox_deliveries()} == {
                (f"decision.waiting:{asked[0].elicitation_id}", hook.subscription, DeliveryState.DELIVERED),
                (f"decision.waiting:{asked[1].elicitation_id}", hook.subscription, DeliveryState.PENDING),
                (f"decision.waiting:{asked[2].elicitation_id}", hook.subscription, DeliveryState.PENDING),
                (ended, hook.subscription, DeliveryState.DELIVERED),
            }
            # A transition that began before the rename writes under the former name once more.
            store.outbox_subscribe({receiver.url: frozenset({WAITING}), hook.subscription: frozenset()})
            straggler = made.form()
            store.outbox_subscribe({receiver.url: frozenset(), hook.subscription: frozenset({WAITING, ENDED})})
            async with httpx2.AsyncClient() as connections:
                while await deliverer.deliver_due(connections):
                    pass
            states = {d.state for d in store.outbox_deliveries()}
    assert sorted(r.event_id for r in receiver.received) == sorted(
        f"decision.waiting:{decision.elicitation_id}" for decision in (asked[1], asked[2], straggler)
    )
    assert states == {DeliveryState.DELIVERED}


# -- a real server process, killed between a transition and its delivery ------------------------------


@contextmanager
def notify_server(port: int, store: str, hook: str) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.helpers.server",
            "serve",
            "--tools",
            "ship",
            "--webhook",
            "--port",
            str(port),
            "--store",
            store,
        ],
        cwd=REPO,
        env={**os.environ, "MCP_ELICIT_WEBHOOK_URL": hook, "MCP_ELICIT_WEBHOOK_SECRET": SECRET},
    )
    try:
        wait_for_port(port, process)
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


async def until(check: Callable[[], bool], seconds: float = 30) -> None:
    with anyio.fail_after(seconds):
        while not check():
            await anyio.sleep(0.05)


@pytest.mark.anyio
async def test_events_outlive_a_sigkill_and_arrive_once_after_restart(store_url: str) -> None:
    port, hook_port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    hook = f"http://127.0.0.1:{hook_port}/hooks/elicit"
    store = open_store(store_url)
    try:
        with notify_server(port, store_url, hook) as doomed:  # the receiver is down: every attempt is refused
            async with (
                httpx2.AsyncClient(timeout=60) as http,
                Client(
                    streamable_http_client(url, http_client=http), mode="legacy",
                    elicitation_callback=Person([accept(confirm=True)]),
                ) as client,
            ):  # fmt: skip
                assert text(await client.call_tool("ship", {"version": "1.2"})) == "shipped"
            [decision] = store.list_decisions(Operator("test"))

            def tried() -> list[Delivery]:
                return [d for d in store.outbox_deliveries(elicitation_id=decision.elicitation_id) if d.last_error]

            await until(lambda: len(tried()) == 2 and all(d.attempts >= 2 for d in tried()))
            doomed.kill()
        assert {d.state for d in store.outbox_deliveries()} == {DeliveryState.PENDING}
        with Receiver(port=hook_port) as receiver, notify_server(port, store_url, hook):
            await until(lambda: len(receiver.received) >= 2)
            await until(lambda: {d.state for d in store.outbox_deliveries()} == {DeliveryState.DELIVERED})
            await anyio.sleep(1)  # long enough for a repeat delivery to show (poll 0.1 s)
            received = list(receiver.received)
    finally:
        store.close()
    assert sorted(r.event_id for r in received) == [
        f"decision.ended:{decision.elicitation_id}",
        f"decision.waiting:{decision.elicitation_id}",
    ]
    assert all(r.signed and r.answered == 200 for r in received)
    assert {r.event["data"]["status"] for r in received} == {"requested", "accepted"}
    assert all(b"swordfish" not in r.body for r in received)
