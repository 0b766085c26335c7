"""The demo's five scenarios: which tool is called with what, what to watch for, and what became durable.

Each one shows a different reason a tool must stop and ask, in the order a newcomer meets them: an
approval whose scope is computed first, a choice among options narrowed first, a confirmation of exactly
what will be destroyed, a credential that must never pass through the client (URL mode), and a payment
that another system completes (URL mode, ended by the payment provider's signed webhooks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Scenario:
    title: str
    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)
    before: str = ""
    """What happens and what to look at; `{placeholders}` name the demo's credentials."""
    after: str = ""
    """What the call made durable, beyond the decisions listed from the store."""
    browser: str = ""
    """What the person does in the browser, for a URL-mode scenario (`{placeholders}` as in `before`)."""


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        title="Deploy approval",
        tool="deploy",
        arguments={"service": "payments"},
        before=(
            "deploy computes the change scope first, in a journaled step, and asks only because production "
            "changes. The question shows the exact scope, per environment."
        ),
        after=(
            "The plan and the apply steps are journaled in the operation: a retry of this call replays them, "
            "so nothing is deployed twice."
        ),
    ),
    Scenario(
        title="Procurement choice",
        tool="procure",
        arguments={"item": "laptop", "budget": 1500},
        before=(
            "procure narrows the catalog to the offers within budget before asking, then offers them as a "
            "titled choice: you see names and prices, the server receives the SKU."
        ),
        after=(
            "The offers are journaled, and an order carries an idempotency key from the operation: a retry of "
            "this call never orders twice."
        ),
    ),
    Scenario(
        title="Delete confirmation",
        tool="delete_files",
        arguments={"pattern": "logs/*.log"},
        before=(
            "delete_files lists the exact files and their sizes before asking: you confirm what will be "
            "deleted, not a pattern."
        ),
        after="The match list is journaled: a retry acts on the same files, never on a new match.",
    ),
    Scenario(
        title="Connect an account in the browser (URL mode)",
        tool="connect_account",
        before=(
            "A credential never passes through this client. You consent to open the server's own page; there "
            "you sign in as {user} (password {password}), press Continue, sign in at the Example provider as "
            "{provider_user} (password {provider_password}) and press Allow. The provider's token goes to the "
            "server's encrypted vault; this client only hears the outcome."
        ),
        after=(
            "Consent (accepted_url) and completion (external_completed) are separate states. A completed "
            "flow's token is sealed in the server's vault, bound to your principal; it never reaches this client."
        ),
        browser=(
            "sign in as {user} (password {password}), press Continue, sign in at Example as {provider_user} "
            "(password {provider_password}), press Allow"
        ),
    ),
    Scenario(
        title="Pay an invoice (URL mode, completed by the provider)",
        tool="pay_invoice",
        arguments={"number": "INV-1042"},
        before=(
            "pay_invoice looks the invoice up first: the amount comes from the server, never from this client. "
            "You consent to open the server's page; there you sign in as {user} (password {password}), see the "
            "amount, press Continue and, at the stand-in Example Pay checkout, Pay (or Fail, then Pay). Example "
            "Pay tells the server by signed webhooks, sent twice each and out of order; the server applies "
            "each event once, in the provider's order."
        ),
        after=(
            "The reference the checkout carried and every provider event are journaled in the operation: a "
            "duplicate or replayed webhook changes nothing, and a late one is refused and audited."
        ),
        browser=(
            "sign in as {user} (password {password}), press Continue, then Pay at the Example Pay checkout; "
            "the page says Done once the provider's webhook has arrived"
        ),
    ),
)
