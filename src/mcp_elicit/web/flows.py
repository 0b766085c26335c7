"""The external steps behind URL decisions: a third-party OAuth connection, an API key typed into our page, or a
step another system completes (a payment, a signature) and reports by signed webhook.

OAuth and API keys end in the vault: the credential is stored server-side for the decision's principal and
never travels back through the MCP client, a tool result, a log line or an audit row. An external completion
stores nothing secret: the decision itself is the outcome (`external_completed` or `external_failed`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from mcp_elicit.model import Decision, JSONValue

CURRENCY_CODE = re.compile(r"[A-Z]{3}")
"""An ISO 4217 code as a charge and an event carry it: three upper-case letters."""


@dataclass(frozen=True, slots=True)
class OAuthConnect:
    """Authorization code with PKCE against a third-party provider; the token lands in the vault as `vault_name`."""

    vault_name: str
    provider_title: str
    authorize_url: str
    token_url: str
    client_id: str
    client_secret: str
    scope: str = ""
    profile_url: str = ""
    """The provider's user-info API (GET with the new token, JSON with `login` and `name`); the "Done" page says
    whom the account was connected as. Empty: the page says only that it was connected."""


@dataclass(frozen=True, slots=True)
class ApiKeyEntry:
    """A form on our own page that posts the key straight to this server; it lands in the vault as `vault_name`."""

    vault_name: str
    service_title: str
    max_length: int = 4096
    header: bool = False
    """The key is sent in an HTTP header: the page takes printable ASCII only (else any character but a control
    character), so that a key that cannot be sent is refused as it is typed, not by the HTTP client later."""

    def problem(self, key: str) -> str | None:
        """Why the page refuses `key` (never quoting it); None when it takes it."""
        if not key:
            return "The key is empty."
        if len(key) > self.max_length:
            return f"The key is longer than {self.max_length} characters."
        unfit = unfit_secret(key, header=self.header)
        return None if unfit is None else f"The key {unfit}: paste it again, on one line."


def unfit_secret(secret: str, *, header: bool) -> str | None:
    """What keeps `secret` from being sent as it is: in an HTTP header (`header`: printable ASCII only), or in an
    environment variable (any character but a control one: a line break, a tab, NUL). Said without quoting it, so the
    reason may go anywhere (a page, a log line, an error to a client); None when it fits."""
    if not secret:
        return "is empty"
    if secret != secret.strip():
        return "begins or ends with a space"
    if any(unicodedata.category(char) in ("Cc", "Zl", "Zp") for char in secret):
        return "holds a line break or another control character"
    if header and not all(" " <= char <= "~" for char in secret):
        return "holds a character outside printable ASCII, which an HTTP header cannot carry"
    return None


@dataclass(frozen=True, slots=True)
class Charge:
    """What the person is asked to pay (or sign): the server computes it from the decision's own records, so what
    the page shows, what the provider is asked for and what a webhook must report are one figure that no MCP
    client ever supplied."""

    amount: int
    """In the currency's minor unit (cents)."""
    currency: str
    """ISO 4217, upper case ("EUR")."""
    description: str

    def __post_init__(self) -> None:
        if isinstance(self.amount, bool) or not isinstance(self.amount, int) or self.amount <= 0:
            raise ValueError(f"a charge is a positive whole number of minor units, got {self.amount!r}")
        if not CURRENCY_CODE.fullmatch(self.currency):
            raise ValueError(f"a charge's currency is three upper-case letters (ISO 4217), got {self.currency!r}")
        if not self.description.strip():
            raise ValueError("a charge needs a description the person recognises")

    @property
    def shown(self) -> str:
        """The amount as a person reads it: "EUR 1,250.00"."""
        return f"{self.currency} {self.amount // 100:,}.{self.amount % 100:02d}"


@dataclass(frozen=True, slots=True)
class Checkout:
    """What the provider's page is opened for: our single-use reference, the charge, where to send the person back
    to, and until when the reference holds (the decision's deadline)."""

    reference: str
    charge: Charge
    return_url: str
    expires_at: datetime


class EventOutcome(StrEnum):
    """What a provider's event says of the attempt its reference names."""

    SUCCEEDED = "succeeded"
    """Paid (signed): final, the decision completes."""
    FAILED = "failed"
    """This attempt failed (a declined card): the person may try again, the decision stays open."""
    CANCELLED = "cancelled"
    """The person gave up at the provider: final, the decision fails."""
    EXPIRED = "expired"
    """The provider's own page lapsed: final, the decision fails."""


@dataclass(frozen=True, slots=True)
class ProviderEvent:
    """One webhook event as the flow needs it, whatever the provider's own format.

    Every field is checked (its type; the id's length and the currency's form too) before anything is written:
    an event a reader filled wrongly is refused with 400 and changes nothing, so that the provider's retry, once
    the reader is fixed, still applies.
    """

    event_id: str
    """The provider's id of the event, the same on every retry: events are applied once by it. 1 to 200
    printable characters."""
    reference: str
    order: int
    """The provider's own order of events (a sequence number, or the event time in any fixed unit): events are
    applied in it, not in the order they arrive."""
    outcome: EventOutcome
    amount: int | None = None
    """In the currency's minor unit, as `Charge.amount`; a success reporting another amount is refused."""
    currency: str | None = None
    """ISO 4217, upper case, as `Charge.currency` (a reader upper-cases a provider's "eur")."""
    said: str = ""
    """The provider's reason, in its words (a decline code): bounded and redacted before it reaches the audit."""


class WebhookVerifier(Protocol):
    """Checks that a webhook delivery comes from the provider (`mcp_elicit.web.webhooks` has two)."""

    def verify(self, headers: Mapping[str, str], body: bytes) -> None:
        """Return when the delivery's signature holds; raise `SignatureInvalid` (its reason, for the log) if not.
        `headers` are looked up by lower-case name."""
        ...


@dataclass(frozen=True, slots=True)
class ExternalCompletion:
    """A step another system completes: a payment, an e-signature, a ticket's approval.

    The decision's page shows `charge(decision, steps)` (computed from the decision and its operation's
    journaled steps, never from the client; if it raises or gives no `Charge`, Continue is refused before the
    decision moves), then creates a single-use reference bound to the decision and
    its principal, and sends the person to the page `start` opens for it at the provider. The provider's
    webhooks, posted to `/elicit/hooks/{flow key}` and checked by `verifier`, then complete or fail the
    decision: `read_event` reads a verified body into a `ProviderEvent` (None: an event of no concern here,
    acknowledged and ignored; `ValueError`: a body that cannot be read, refused).
    """

    provider_title: str
    charge: Callable[[Decision, Mapping[str, JSONValue]], Charge]
    start: Callable[[Checkout], Awaitable[str]]
    """Opens the provider's page for the checkout (an API call at a real provider) and returns its URL."""
    verifier: WebhookVerifier
    read_event: Callable[[bytes], ProviderEvent | None]
    doing: str = "pay"
    """What the person does there, as the page's heading says it ("pay", "sign")."""


ExternalFlow = OAuthConnect | ApiKeyEntry | ExternalCompletion
