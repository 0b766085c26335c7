"""Delivering the notification outbox to webhooks and mail: at least once, each event under one id, across restarts.

The store writes an outbox row per subscription in the transaction of the transition that causes it, so
no committed transition goes unannounced and no rolled-back one is announced. The served app's lifespan
runs one `Deliverer`: it claims due rows (one more attempt each, its next one put a lease ahead), sends
each (a POST to a webhook, in its format; a message through a mail target's SMTP server, in a worker
thread), and settles it: a 2xx answer, or a message the SMTP server took, delivers it; anything else
(another status, a redirect, a timeout, a refused connection, an SMTP error) schedules the next attempt
after the retry policy's backoff, or marks it dead, logged, once the policy gives up.

A decision whose approvers escalate has its `decision.escalated` row written when it is asked, due when it
escalates: no deliverer claims it before. Then the deliverer reads the decision once, and settles the row as
delivered without sending it when the decision no longer waits (answered, cancelled or expired meanwhile).

Guarantees: a delivery that a crash or a hang interrupts is claimed again once its lease passes, by any
instance, with the same `webhook-id` (a mail's `Message-ID`); on PostgreSQL instances claim with `FOR UPDATE
SKIP LOCKED`, so each attempt is made by one of them (SQLite serves one host, its write lock does the same).
The body holds ids, statuses, the method and target, times, what the call is about (the redacted summary the
pages show) and, for an event that asks someone to act, the signed link to the decision's page (when
`Notifications.links` is set); never the question's message or an answer.

Does not guarantee: exactly once (an attempt the receiver took whose answer was lost is made again), nor
order between events.

A webhook's path and query are often its secret (a token in the path, a signature in the query): the log
names a webhook by its subscription name (its origin and a digest by default, see `Webhook`) and never by its
URL. httpx2's client logs every request whole at INFO (`HTTP Request: POST <url>`): that line is not written
while a delivery is under way (a filter on the `httpx2` logger, scoped to the delivering task by a context
variable); every other use of httpx2 in the process logs as before.
"""

from __future__ import annotations

import json
import logging
import random
import smtplib
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta

import anyio
import httpx2

from mcp_elicit.model import WAITING_DECISION_STATUSES, Decision, JSONObject, Operator
from mcp_elicit.server.notifications import wording
from mcp_elicit.server.notifications.config import Notifications, Webhook
from mcp_elicit.server.notifications.mail import Mail, described
from mcp_elicit.server.notifications.signing import ID_HEADER, sign
from mcp_elicit.server.notifications.slack import slack_payload
from mcp_elicit.store import Clock, NotFound, StoreError, utc_now
from mcp_elicit.store.aio import AsyncStore
from mcp_elicit.store.protocol import Delivery, NotificationEvent

log = logging.getLogger(__name__)

JITTER = 0.2
PURGE_EVERY = timedelta(minutes=10)
_SUBSCRIBE_PAUSE = (1.0, 60.0)
_DELIVERER = Operator("notifications")


def payload(delivery: Delivery, *, link: str | None = None) -> bytes:
    """The JSON body of a delivery, Standard Webhooks' shape: `type`, `timestamp` (when it happened), `data`.

    `data.about` is what the call is about (when the decision has it); `data.approvers`, for a decision with
    approvers, the roles whose members may approve at the event's moment (an escalation's included) and how many
    must; `data.link` the decision page's signed link, given for an event that asks someone to act."""
    data: JSONObject = {
        "elicitation_id": delivery.elicitation_id,
        "operation_id": delivery.operation_id,
        "principal_id": delivery.principal_id,
        "status": delivery.status.value,
        "method": delivery.method,
        "target": delivery.target,
        "deadline": _iso(delivery.deadline),
    }
    if delivery.about:
        data["about"] = delivery.about
    if delivery.approvers is not None:
        data["approvers"] = {"roles": list(wording.roles(delivery)), "quorum": delivery.approvers.quorum}
    if delivery.event is NotificationEvent.TASK_INPUT_REQUIRED:
        data["task_id"] = delivery.operation_id
    if link is not None and wording.waiting(delivery):
        data["link"] = link
    body = {"type": delivery.event.value, "timestamp": _iso(delivery.occurred_at), "data": data}
    return json.dumps(body, separators=(",", ":")).encode()


def _kind(target: Webhook | Mail) -> str:
    return "mail" if isinstance(target, Mail) else "webhook"


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


_delivering: ContextVar[bool] = ContextVar("mcp_elicit_delivering", default=False)


class _QuietDeliveries(logging.Filter):
    """Drops httpx2's records made while a delivery is under way: they carry the webhook's URL whole."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _delivering.get()


_QUIET = _QuietDeliveries()


class Deliverer:
    """Delivers one store's outbox to the configured webhooks and mail targets for as long as `run` runs."""

    def __init__(self, store: AsyncStore, notifications: Notifications, clock: Clock = utc_now) -> None:
        self._store = store
        self._clock = clock
        self._settings = notifications
        self._hooks: dict[str, Webhook | Mail] = {hook.subscription: hook for hook in notifications.targets}
        self._renames = {
            hook.former_name: hook.subscription
            for hook in notifications.targets
            if isinstance(hook, Webhook) and hook.former_name
        }
        self._formerly: dict[str, str] = {}
        """The former names the store held at `subscribe`, and the names that took their rows over."""
        self._purged: float | None = None
        logging.getLogger("httpx2").addFilter(_QUIET)

    async def run(self) -> None:
        """Subscribe (again until the store answers), then deliver what is due after every `poll`."""
        await self.subscribe()
        timeout = httpx2.Timeout(self._settings.timeout)
        async with httpx2.AsyncClient(timeout=timeout, follow_redirects=False) as http:
            while True:
                claimed = await self.deliver_due(http)
                await self._purge()
                if claimed < self._settings.batch:
                    await anyio.sleep(self._settings.poll.total_seconds())

    async def subscribe(self) -> None:
        """Record the webhooks' subscriptions in the store, trying again until it answers.

        A webhook named by default takes over what the store holds under its former name (see
        `Webhook.former_name`): its subscription and its deliveries, pending ones included."""
        pause, ceiling = _SUBSCRIBE_PAUSE
        subscriptions = {name: frozenset(hook.events) for name, hook in self._hooks.items()}
        while True:
            try:
                found = await self._store.outbox_subscribe(subscriptions, renamed=self._renames)
                self._formerly = {former: self._renames[former] for former in found}
                for name in sorted(self._formerly.values()):
                    log.info("webhook %s took over the subscription and deliveries of its former name", name)
                return
            except StoreError as error:
                log.warning("cannot record webhook subscriptions in %s (trying again): %s", self._display, error)
            await anyio.sleep(pause)
            pause = min(pause * 2, ceiling)

    @property
    def _display(self) -> str:
        return self._store.sync.display_url

    async def deliver_due(self, http: httpx2.AsyncClient) -> int:
        """Attempt every due delivery of a batch at once; how many were claimed.

        Rows still under a former name (written by a transition that began before `subscribe` renamed them) are
        claimed too, so that none is left behind."""
        names = [*self._hooks, *self._formerly]
        try:
            claimed = await self._store.outbox_claim(names, limit=self._settings.batch, lease=self._settings.lease)
        except StoreError as error:
            log.warning("cannot read the notification outbox of %s (trying again): %s", self._display, error)
            return 0
        async with anyio.create_task_group() as group:
            for delivery in claimed:
                group.start_soon(self._deliver, http, delivery)
        return len(claimed)

    def link(self, delivery: Delivery) -> str | None:
        """The decision page's signed link for `delivery`, lapsing at its deadline; None for an event that asks
        nobody to act, or without `Notifications.links`."""
        links = self._settings.links
        if links is None or not wording.waiting(delivery):
            return None
        return links.link(delivery.elicitation_id, delivery.deadline)

    async def _deliver(self, http: httpx2.AsyncClient, delivery: Delivery) -> None:
        name = self._formerly.get(delivery.subscription, delivery.subscription)
        hook = self._hooks[name]
        problem: str | None = None
        send = True
        if delivery.event is NotificationEvent.DECISION_ESCALATED:
            try:
                send = await self._still_waiting(delivery)  # if not, settled unsent: nobody is to act any more
            except StoreError as error:
                send, problem = False, f"cannot read its decision: {type(error).__name__}"
        if send:
            if isinstance(hook, Mail):
                problem = await self._mail(hook, delivery)
            else:
                problem = await self._post(http, hook, delivery)
        try:
            await self._settle(hook, delivery, problem)
        except StoreError as error:
            # The claim lapses after its lease and the delivery is made again: at least once holds.
            log.warning("cannot record delivery of %s to %s %s: %s", delivery.event_id, _kind(hook), name, error)

    async def _still_waiting(self, delivery: Delivery) -> bool:
        """Whether the decision an escalation is about still waits (one read): the escalation was written when the
        decision was asked, due only now, and a decision answered, cancelled or expired meanwhile asks nobody to
        act. A read that fails raises `StoreError`: the attempt fails and is made again, like a refused POST."""
        try:
            decision: Decision | None = await self._store.get_decision(delivery.elicitation_id, _DELIVERER)
        except NotFound:
            decision = None
        at = delivery.claimed_at or self._clock()
        if decision is not None and decision.status in WAITING_DECISION_STATUSES and at < decision.expires_at:
            return True
        log.debug(
            "%s settled without sending: its decision %s",
            delivery.event_id, "is gone" if decision is None else f"no longer waits ({decision.status.value})",
        )  # fmt: skip
        return False

    async def _post(self, http: httpx2.AsyncClient, hook: Webhook, delivery: Delivery) -> str | None:
        link = self.link(delivery)
        headers = {"content-type": "application/json"}
        if hook.format == "slack":
            body = slack_payload(delivery, link=link)
            headers[ID_HEADER] = delivery.event_id
        else:
            body = payload(delivery, link=link)
            assert hook.key is not None  # a standard webhook has its secret (Webhook refuses one without)
            headers.update(sign(hook.key, delivery.event_id, body))
        quiet = _delivering.set(True)
        try:
            # The whole attempt is bounded, not each read: a receiver that trickles its answer would otherwise
            # outlast the claim's lease, and another instance would deliver the event again meanwhile.
            with anyio.fail_after(self._settings.timeout):
                async with http.stream("POST", hook.url, content=body, headers=headers) as response:
                    return None if 200 <= response.status_code < 300 else f"HTTP {response.status_code}"
        except httpx2.HTTPError as error:
            return type(error).__name__
        except TimeoutError:
            return "timed out"
        finally:
            _delivering.reset(quiet)

    async def _mail(self, target: Mail, delivery: Delivery) -> str | None:
        try:
            message = target.message(delivery, self.link(delivery))
            # Abandoned, not awaited, when the attempt runs out of time. smtplib's timeout bounds each socket
            # operation, not the session: a server that trickles bytes keeps the abandoned thread (and may take
            # the message late, beside the retry: the same Message-ID says so) until it closes the connection.
            with anyio.fail_after(self._settings.timeout):
                refused = await anyio.to_thread.run_sync(
                    target.send, message, self._settings.timeout, abandon_on_cancel=True
                )
        except TimeoutError:
            return "timed out"
        except (smtplib.SMTPException, OSError, ValueError) as error:
            return described(error)
        if refused:
            # Sending again would repeat the message to those who have it; the rest is for the mail's admin.
            log.warning(
                "mail %s for %s went to %d of %d recipients: the server refused the others",
                target.subscription, delivery.event_id, len(target.to) - refused, len(target.to),
            )  # fmt: skip
        return None

    async def _settle(self, hook: Webhook | Mail, delivery: Delivery, failure: str | None) -> None:
        if failure is None:
            await self._store.outbox_delivered(delivery)
            return
        retry = self._settings.retry
        age = (delivery.claimed_at or delivery.occurred_at) - delivery.occurred_at
        if retry.gives_up(delivery.attempts, age):
            if await self._store.outbox_failed(delivery, retry_after=None, error=failure):
                log.error(
                    "gave up delivering %s to %s %s after %d attempts over %s: %s",
                    delivery.event_id, _kind(hook), hook.subscription, delivery.attempts, age, failure,
                )  # fmt: skip
            return
        pause = retry.pause(delivery.attempts) * random.uniform(1 - JITTER, 1 + JITTER)  # noqa: S311 (spreading)
        await self._store.outbox_failed(delivery, retry_after=pause, error=failure)
        log.warning(
            "delivering %s to %s %s failed (attempt %d: %s); next in %.0f s",
            delivery.event_id, _kind(hook), hook.subscription, delivery.attempts, failure, pause.total_seconds(),
        )  # fmt: skip

    async def _purge(self) -> None:
        tick = anyio.current_time()
        if self._purged is not None and tick - self._purged < PURGE_EVERY.total_seconds():
            return
        self._purged = tick
        now, settings = self._clock(), self._settings
        try:
            await self._store.outbox_purge(
                now - settings.keep,
                stale_before=now - settings.retry.max_age - settings.keep,
            )
        except StoreError as error:
            log.warning("cannot purge settled deliveries of %s: %s", self._display, error)
