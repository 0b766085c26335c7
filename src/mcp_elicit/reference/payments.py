"""A stand-in payment provider, for tests and the demo: hosted checkout pages and signed webhooks.

A URL decision that asks a person to pay (`ExternalCompletion`) needs a provider real enough to catch our
mistakes: one that is told the amount by the server, never by the browser; whose checkout the person may
pay, fail (a declined card, after which they may try again) or abandon; and whose webhooks, like every real
provider's, come signed, at least once, retried until answered 2xx, and not necessarily in order. This is
it, served by the stand-in OAuth provider's process (`python -m mcp_elicit.reference.provider
--webhook-url ...`), its client id and secret doubling as the API key:

- ``POST /api/checkouts`` (HTTP Basic, the client's id and secret), JSON ``{reference, amount, currency,
  description, return_url, expires_at}`` → ``201 {id, url}``: a checkout open until ``expires_at``.
- ``GET /checkout/{id}`` shows the amount and description with Pay, Fail and Abandon; ``POST`` them.
  Pay and Abandon end the checkout and send the browser to ``return_url``; Fail shows the page again.
- Every outcome is an event ``{id, type, sequence, created, data: {checkout, reference, amount, currency,
  reason}}`` (types ``payment.succeeded``, ``payment.failed``, ``checkout.cancelled``,
  ``checkout.expired``), signed ``Example-Signature: t=…,v1=…`` and posted to the webhook URL
  ``duplicates`` times, each copy after a random delay of up to ``jitter`` seconds (so later events may
  overtake earlier ones), every failed post retried with backoff.

What it deliberately is not: a payment system. Nothing is charged, all state is in memory, cards are
buttons, and it refuses to listen anywhere but loopback (the OAuth provider's own rule).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import logging
import random
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from html import escape
from typing import Final
from urllib.parse import urlsplit

import httpx2
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from mcp_elicit.model import Decision, JSONValue
from mcp_elicit.reference.provider import page_response
from mcp_elicit.web.flows import Charge, Checkout, EventOutcome, ExternalCompletion, ProviderEvent
from mcp_elicit.web.webhooks import TimestampedHmac, sign_timestamped

__all__ = [
    "SIGNATURE_HEADER",
    "CheckoutPage",
    "PaymentsConfig",
    "example_payments",
    "payments_routes",
    "read_example_event",
    "signed_event",
]

SIGNATURE_HEADER: Final = "Example-Signature"
PROVIDER_TITLE: Final = "Example Pay"
_TYPES: Final = {
    "payment.succeeded": EventOutcome.SUCCEEDED,
    "payment.failed": EventOutcome.FAILED,
    "checkout.cancelled": EventOutcome.CANCELLED,
    "checkout.expired": EventOutcome.EXPIRED,
}
_RETRIES: Final = 6
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PaymentsConfig:
    """Where the webhooks go and how they are signed and delivered."""

    webhook_url: str
    webhook_secret: str = field(repr=False)
    duplicates: int = 1
    """Copies of every event posted (a real provider sends one, and sometimes more)."""
    jitter: float = 0.0
    """The most seconds each copy waits before its first post: above zero, events arrive out of order."""

    def __post_init__(self) -> None:
        parts = urlsplit(self.webhook_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"the webhook URL must be an absolute http(s) URL, got {self.webhook_url!r}")
        if len(self.webhook_secret) < 16:
            raise ValueError("the webhook secret has at least 16 characters")
        if self.duplicates < 1 or self.jitter < 0:
            raise ValueError("duplicates is at least 1 and jitter at least 0")


@dataclass
class CheckoutPage:
    """One checkout: what it charges, for which reference, and whether it is still open."""

    checkout_id: str
    client_id: str
    reference: str
    amount: int
    currency: str
    description: str
    return_url: str
    expires_at: float
    csrf: str
    status: str = "open"
    attempts: int = 0


def signed_event(secret: str, event: Mapping[str, JSONValue], *, timestamp: int | None = None) -> tuple[bytes, str]:
    """An event's body and its `Example-Signature` header value, as the stand-in sends them."""
    body = json.dumps(event, separators=(",", ":")).encode()
    return body, sign_timestamped(secret, body, timestamp=timestamp)


def read_example_event(body: bytes) -> ProviderEvent | None:
    """The stand-in's event format, read; None for a type of no concern to a payment step."""
    event = json.loads(body)
    if not isinstance(event, dict) or not isinstance(data := event.get("data"), dict):
        raise ValueError("an event is an object with an object `data`")
    outcome = _TYPES.get(str(event.get("type")))
    if outcome is None:
        return None
    order, amount = event.get("sequence"), data.get("amount")
    if isinstance(order, bool) or not isinstance(order, int):
        raise ValueError("an event's sequence is a whole number")
    if amount is not None and (isinstance(amount, bool) or not isinstance(amount, int)):
        raise ValueError("an event's amount is a whole number of minor units")
    currency = data.get("currency")
    return ProviderEvent(
        event_id=str(event["id"]),
        reference=str(data["reference"]),
        order=order,
        outcome=outcome,
        amount=amount,
        currency=currency if isinstance(currency, str) else None,
        said=str(data.get("reason") or ""),
    )


def example_payments(
    api_url: str,
    client_id: str,
    client_secret: str,
    webhook_secret: str,
    charge: Callable[[Decision, Mapping[str, JSONValue]], Charge],
    *,
    tolerance: int = 300,
) -> ExternalCompletion:
    """The `ExternalCompletion` of the stand-in provider at `api_url`, charging what `charge` computes."""
    api = api_url.rstrip("/")

    async def start(checkout: Checkout) -> str:
        async with httpx2.AsyncClient(timeout=10, auth=(client_id, client_secret)) as http:
            response = await http.post(
                f"{api}/api/checkouts",
                json={
                    "reference": checkout.reference,
                    "amount": checkout.charge.amount,
                    "currency": checkout.charge.currency,
                    "description": checkout.charge.description,
                    "return_url": checkout.return_url,
                    "expires_at": int(checkout.expires_at.timestamp()),
                },
            )
        response.raise_for_status()
        url: str = response.json()["url"]
        return url

    return ExternalCompletion(
        provider_title=PROVIDER_TITLE,
        charge=charge,
        start=start,
        verifier=TimestampedHmac(webhook_secret, header=SIGNATURE_HEADER, tolerance=tolerance),
        read_event=read_example_event,
    )


class _Payments:
    def __init__(self, issuer: str, clients: Mapping[str, str], config: PaymentsConfig) -> None:
        self._issuer = issuer.rstrip("/")
        self._clients = dict(clients)
        self._config = config
        self._lock = threading.Lock()
        self._checkouts: dict[str, CheckoutPage] = {}
        self._sequence = 0

    def _client(self, request: Request) -> str | None:
        scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            client_id, _, secret = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        known = self._clients.get(client_id)
        if known is None or not hmac.compare_digest(known.encode(), secret.encode()):
            return None
        return client_id

    async def create(self, request: Request) -> Response:
        client_id = self._client(request)
        if client_id is None:
            return JSONResponse({"error": "invalid_client"}, 401, headers={"WWW-Authenticate": "Basic"})
        try:
            asked = json.loads(await request.body())
            amount, currency = asked["amount"], asked["currency"]
            if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
                raise ValueError("amount")
            page = CheckoutPage(
                checkout_id="cs_" + secrets.token_urlsafe(12),
                client_id=client_id,
                reference=str(asked["reference"]),
                amount=amount,
                currency=str(currency),
                description=str(asked["description"])[:300],
                return_url=str(asked["return_url"]),
                expires_at=float(asked["expires_at"]),
                csrf=secrets.token_urlsafe(16),
            )
        except (ValueError, KeyError, TypeError):
            return JSONResponse({"error": "invalid_request"}, 400)
        if urlsplit(page.return_url).scheme not in ("http", "https"):
            return JSONResponse({"error": "invalid_request", "error_description": "return_url"}, 400)
        with self._lock:
            self._checkouts[page.checkout_id] = page
        return JSONResponse({"id": page.checkout_id, "url": f"{self._issuer}/checkout/{page.checkout_id}"}, 201)

    def _open(self, checkout_id: str) -> CheckoutPage | None:
        with self._lock:
            page = self._checkouts.get(checkout_id)
            if page is not None and page.status == "open" and time.time() >= page.expires_at:
                page.status = "expired"
                self._emit(page, "checkout.expired", "the checkout lapsed")
        return page

    async def show(self, request: Request) -> Response:
        page = self._open(request.path_params["checkout_id"])
        if page is None:
            return _message("No such checkout", "This checkout does not exist.", 404)
        return self._page(page)

    def _page(self, page: CheckoutPage, *, error: str = "") -> Response:
        shown = f"{page.currency} {page.amount // 100:,}.{page.amount % 100:02d}"
        if page.status != "open":
            return _message("This checkout is closed", f"It was {page.status}. Nothing more can be paid here.", 409)
        notice = f'<p class="error" role="alert">{escape(error)}</p>' if error else ""
        buttons = "".join(
            f'<button type="submit" name="action" value="{value}"{" class=primary" if value == "pay" else ""}>'
            f"{label}</button>"
            for value, label in (("pay", f"Pay {shown}"), ("fail", "Fail (card declined)"), ("abandon", "Abandon"))
        )
        body = f"""<h1>Pay {escape(shown)}</h1>
<dl><dt>For</dt><dd>{escape(page.description)}</dd><dt>Amount</dt><dd>{escape(shown)}</dd></dl>
{notice}
<form method="post" action="/checkout/{escape(page.checkout_id)}">
<input type="hidden" name="csrf" value="{escape(page.csrf)}">
<div class="actions">{buttons}</div>
</form>
<p class="muted">A stand-in checkout: nothing is charged.</p>"""
        return page_response(f"Pay {shown}", body, 200)

    async def act(self, request: Request) -> Response:
        page = self._open(request.path_params["checkout_id"])
        if page is None:
            return _message("No such checkout", "This checkout does not exist.", 404)
        form = await request.form()
        if not hmac.compare_digest(str(form.get("csrf", "")), page.csrf):
            return _message("This form has expired", "Reload the checkout and try again.", 403)
        action = form.get("action")
        with self._lock:
            if page.status != "open":
                return self._page(page)
            if action == "pay":
                page.status = "paid"
                self._emit(page, "payment.succeeded", "")
            elif action == "abandon":
                page.status = "cancelled"
                self._emit(page, "checkout.cancelled", "abandoned at the checkout")
            elif action == "fail":
                page.attempts += 1
                self._emit(page, "payment.failed", "card_declined")
            else:
                return _message("Unknown action", "Reload the checkout and try again.", 400)
        if action == "fail":
            return self._page(page, error="Your card was declined. Nothing was charged; try again.")
        return RedirectResponse(page.return_url, status_code=303)

    def _emit(self, page: CheckoutPage, kind: str, reason: str) -> None:
        """Send the event (the caller holds the lock, so sequences follow the checkouts' own order)."""
        self._sequence += 1
        event: dict[str, JSONValue] = {
            "id": "evt_" + secrets.token_urlsafe(12),
            "type": kind,
            "sequence": self._sequence,
            "created": int(time.time()),
            "data": {
                "checkout": page.checkout_id,
                "reference": page.reference,
                "amount": page.amount,
                "currency": page.currency,
                "reason": reason,
            },
        }
        for _ in range(self._config.duplicates):
            threading.Thread(target=self._deliver, args=(event,), daemon=True).start()

    def _deliver(self, event: dict[str, JSONValue]) -> None:
        time.sleep(random.uniform(0, self._config.jitter))  # noqa: S311 (delivery jitter, not a secret)
        for attempt in range(_RETRIES):
            body, signature = signed_event(self._config.webhook_secret, event)
            try:
                answer = httpx2.post(
                    self._config.webhook_url,
                    content=body,
                    headers={"content-type": "application/json", SIGNATURE_HEADER: signature},
                    timeout=10,
                )
                if answer.is_success:
                    return
                said = f"HTTP {answer.status_code}"
            except httpx2.HTTPError as failure:
                said = type(failure).__name__
            log.info("webhook %s attempt %d: %s", event["id"], attempt + 1, said)
            time.sleep(0.2 * 2**attempt)


def payments_routes(issuer: str, clients: Mapping[str, str], config: PaymentsConfig) -> list[Route]:
    """The checkout API and pages of a provider at `issuer` whose `clients` (id → secret) may open checkouts."""
    payments = _Payments(issuer, clients, config)
    return [
        Route("/api/checkouts", payments.create, methods=["POST"]),
        Route("/checkout/{checkout_id}", payments.show, methods=["GET"]),
        Route("/checkout/{checkout_id}", payments.act, methods=["POST"]),
    ]


def _message(title: str, detail: str, status: int) -> Response:
    return page_response(title, f"<h1>{escape(title)}</h1><p>{escape(detail)}</p>", status)
