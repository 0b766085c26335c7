"""A served site whose URL decisions are paid at the stand-in payment provider, for the payment tests.

The site is the pages' wiring in small (local sign-in, decision pages, the `pay_invoice` flow of
`mcp_elicit.reference.payments`) on loopback; the provider (OAuth and payments, `provider_app`) is served on its
own port and posts its signed webhooks to the site. Events can also be posted by the test itself, signed as the
provider signs them (`deliver`), in any order and as often as it likes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx2
from starlette.applications import Starlette

from mcp_elicit.model import Decision, DecisionOrigin, JSONValue, Principal, new_operation, new_url_decision
from mcp_elicit.model.decision import new_elicitation_id
from mcp_elicit.reference.app import PAY_INVOICE, invoice_charge
from mcp_elicit.reference.payments import (
    SIGNATURE_HEADER,
    PaymentsConfig,
    example_payments,
    payments_routes,
    signed_event,
)
from mcp_elicit.reference.provider import ProviderClient, ProviderConfig, ProviderUser, provider_app
from mcp_elicit.reference.workspace import INVOICES
from mcp_elicit.server import Elicitation, RequestState
from mcp_elicit.store import Store, open_store
from mcp_elicit.web import LocalAuthorizationServer, LocalUsers
from mcp_elicit.web.external import reference_entry
from mcp_elicit.web.flows import ExternalCompletion
from mcp_elicit.web.pages import UrlPages
from tests.helpers.http_harness import free_port, serving

CLIENT_ID = "elicit-pay"
CLIENT_SECRET = "pay-client-secret"
WEBHOOK_SECRET = "whsec-test-0123456789abcdef"
INVOICE = INVOICES[0]


@dataclass
class PaySite:
    base: str
    provider: str
    store: Store
    skew: list[float] = field(default_factory=lambda: [0.0])
    """Seconds added to the pages' clock: a test moves it past a decision's deadline."""
    pages: UrlPages | None = None

    def form_token(self, decision: Decision) -> str:
        """The CSRF token the decision's page would carry for its requester (for a page that shows no form)."""
        assert self.pages is not None
        return self.pages.form_token(decision.elicitation_id, decision.principal_id)

    def principal(self, user: str) -> Principal:
        return Principal(f"{self.base}#{user}", "client-x")


@contextmanager
def payments_site(
    store_url: str,
    *,
    duplicates: int = 1,
    jitter: float = 0.0,
    tweak: Callable[[ExternalCompletion], ExternalCompletion] = lambda flow: flow,
) -> Iterator[PaySite]:
    """The site and the provider, both served; the provider sends each event `duplicates` times, `jitter` apart.
    `tweak` changes the site's flow (a reader, a charge or a start of a test's own, with `dataclasses.replace`)."""
    port, provider_port = free_port(), free_port()
    base, provider = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{provider_port}"
    store = open_store(store_url)
    site = PaySite(base, provider, store)
    elicitation = Elicitation(store, request_state=RequestState(keys=[b"s" * 32]), public_base_url=base)
    auth = LocalAuthorizationServer(
        base, LocalUsers.from_text("alice:alice-pw:Alice,bob:bob-pw:Bob"), store, signing_keys=[b"a" * 32]
    )
    pages = UrlPages(
        elicitation=elicitation,
        sign_in=auth,
        vault=None,
        flows={
            PAY_INVOICE: tweak(example_payments(provider, CLIENT_ID, CLIENT_SECRET, WEBHOOK_SECRET, invoice_charge))
        },
        page_key=b"p" * 32,
        server_title="Invoices",
        public_base_url=base,
        clock=lambda: time.time() + site.skew[0],
    )
    site.pages = pages
    config = ProviderConfig(
        issuer=provider,
        clients={CLIENT_ID: ProviderClient(CLIENT_SECRET, (f"{base}/elicit/callback",))},
        users={"alice": ProviderUser("wonderland", "Alice Liddell")},
    )
    hooks = PaymentsConfig(f"{base}/elicit/hooks/{PAY_INVOICE}", WEBHOOK_SECRET, duplicates=duplicates, jitter=jitter)
    try:
        with ExitStack() as served:
            served.enter_context(serving(Starlette(routes=[*auth.routes(), *pages.routes()]), port))
            served.enter_context(
                serving(provider_app(config, more=payments_routes(provider, {CLIENT_ID: CLIENT_SECRET}, hooks)),
                        provider_port)
            )  # fmt: skip
            yield site
    finally:
        store.close()


def ask_payment(
    site: PaySite, user: str, *, ttl: timedelta = timedelta(minutes=10), journaled: bool = True
) -> Decision:
    """`pay_invoice`'s URL decision for `user`, as the runtime records it: the invoice step journaled first (unless
    not `journaled`: then nothing says what it charges)."""
    principal = site.principal(user)
    now = datetime.now(UTC)
    operation = site.store.create_operation(
        new_operation(principal, method="tools/call", target="pay_invoice", request_digest="sha256:" +
                      new_elicitation_id(), now=now, ttl=timedelta(hours=1))
    )  # fmt: skip
    if journaled:
        site.store.journal_record(operation.operation_id, "invoice", INVOICE.model_dump(), caller=principal)
    elicitation_id = new_elicitation_id()
    return site.store.create_decision(
        new_url_decision(
            DecisionOrigin(operation_id=operation.operation_id, key=PAY_INVOICE, principal=principal,
                           origin_method="tools/call", origin_request_digest=operation.request_digest),
            message=f"Pay invoice {INVOICE.number} from {INVOICE.vendor}: {INVOICE.shown}.",
            url=f"{site.base}/elicit/{elicitation_id}", now=now, ttl=ttl, elicitation_id=elicitation_id,
        )
    )  # fmt: skip


def reference_of(site: PaySite, decision: Decision) -> str | None:
    """The reference the site made for the decision (None before Continue was pressed)."""
    entry = site.store.journal_get(
        decision.operation_id, reference_entry(decision.elicitation_id), caller=decision.principal
    )
    if entry is None:
        return None
    assert isinstance(entry.value, dict)
    reference = entry.value["reference"]
    assert isinstance(reference, str)
    return reference


def event(
    reference: str,
    kind: str,
    sequence: int,
    *,
    event_id: str | None = None,
    amount: int = INVOICE.amount,
    reason: str = "",
) -> dict[str, JSONValue]:
    """An event in the stand-in provider's format."""
    return {
        "id": event_id or f"evt_{kind}_{sequence}",
        "type": kind,
        "sequence": sequence,
        "created": int(time.time()),
        "data": {"checkout": "cs_test", "reference": reference, "amount": amount, "currency": INVOICE.currency,
                 "reason": reason},
    }  # fmt: skip


def deliver(
    http: httpx2.Client,
    site: PaySite,
    body_of: dict[str, JSONValue],
    *,
    secret: str = WEBHOOK_SECRET,
    timestamp: int | None = None,
) -> httpx2.Response:
    """Post the event to the site's webhook, signed as the provider signs it (with `secret`, at `timestamp`)."""
    body, signature = signed_event(secret, body_of, timestamp=timestamp)
    return post(http, site, body, signature)


def post(http: httpx2.Client, site: PaySite, body: bytes, signature: str | None) -> httpx2.Response:
    headers = {"content-type": "application/json"}
    if signature is not None:
        headers[SIGNATURE_HEADER] = signature
    return http.post(f"{site.base}/elicit/hooks/{PAY_INVOICE}", content=body, headers=headers)
