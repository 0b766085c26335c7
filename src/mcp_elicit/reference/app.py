"""The reference server's tools: each computes what is at stake first, then asks only what a person must decide."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import anyio.to_thread
import httpx2
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field, create_model

from mcp_elicit.model import Decision, JSONValue
from mcp_elicit.reference.workspace import ENVIRONMENTS, FileChange, Invoice, Match, Offer, Workspace
from mcp_elicit.server import Accepted, Cancelled, Completed, Declined, Elicitation, Expired, Flow, TaskPolicy, Titled
from mcp_elicit.web import Vault
from mcp_elicit.web.flows import Charge

TOKEN_VAULT = "example-token"  # noqa: S105 (a vault entry name, not a secret)
API_KEY_VAULT = "example-api-key"
SERVER_NAME = "mcp-elicit-reference"
"""The name the reference server gives itself: in `initialize`, so in the client's terminal, and on its pages."""


class Approval(BaseModel):
    approve: bool = Field(title="Approve", description="Deploy to production now")
    note: str | None = Field(default=None, title="Note", description="Anything the on-call engineer should know")


class StagingOnly(BaseModel):
    deploy_staging: bool = Field(title="Deploy to staging only", description="Leave production as it is")


class DeleteConfirmation(BaseModel):
    delete: bool = Field(title="Delete these files", description="They cannot be recovered")


class Priority(BaseModel):
    priority: Annotated[
        Literal["low", "normal", "high"],
        Titled({"low": "Low: when someone has time", "normal": "Normal: this week", "high": "High: today"}),
    ] = Field(default="normal", title="Priority")


def build_reference_server(
    elicitation: Elicitation,
    workspace: Workspace,
    name: str = SERVER_NAME,
    *,
    vault: Vault | None = None,
    provider_api: str | None = None,
    server_kwargs: dict[str, Any] | None = None,
    payments: bool = False,
) -> MCPServer:
    """The scenario tools; with a vault (HTTP deployments), also URL-mode tools keeping credentials server-side;
    with `payments` (a payment flow under the key `pay_invoice`, charging `invoice_charge`), `pay_invoice`."""
    server = elicitation.server(
        name, instructions="Deploys, procurement, file clean-up and tickets, with consent.", **(server_kwargs or {})
    )
    if vault is not None:
        _url_tools(elicitation, vault, provider_api)
    if payments:
        _payment_tools(elicitation, workspace)

    @elicitation.tool(task=TaskPolicy.OPTIONAL)
    async def deploy(flow: Flow, service: str) -> str:
        """Deploy a service's pending release to staging and production; production needs approval.

        The approval may wait for the on-call lead for hours: a client that supports tasks gets a task.
        """
        plans = await flow.step("plan", _plans, workspace, service)
        production = plans["production"]
        if production.empty:
            applied = await flow.step("apply", _deploy, workspace, service, ["staging"])
            return f"Deployed {service} to staging ({applied} file changes); production is already up to date."
        scope = "\n".join(f"- {env}: {plans[env].describe()}" for env in ENVIRONMENTS)
        answer = await flow.ask(
            f"Deploy {service} to production? The change scope is:\n{scope}", Approval, key="approve_production"
        )
        match answer:
            case Accepted(data=approval) if approval.approve:
                applied = await flow.step("apply", _deploy, workspace, service, list(ENVIRONMENTS))
                note = f" Note: {approval.note}" if approval.note else ""
                return f"Deployed {service} to staging and production ({applied} file changes).{note}"
            case Accepted() | Declined():
                if plans["staging"].empty:
                    return f"Production deploy of {service} declined; staging is already up to date."
                staging = await flow.ask(
                    f"Production was declined. Deploy {service} to staging only? ({plans['staging'].describe()})",
                    StagingOnly,
                    key="staging_only",
                )
                if isinstance(staging, Accepted) and staging.data.deploy_staging:
                    applied = await flow.step("apply_staging", _deploy, workspace, service, ["staging"])
                    return f"Deployed {service} to staging only ({applied} file changes); production unchanged."
                return f"Nothing deployed for {service}."
            case Cancelled() | Expired():
                return f"Nothing changed: the production approval for {service} was {_closed(answer)}."

    @elicitation.tool()
    async def procure(flow: Flow, item: str, budget: float) -> str:
        """Find the offers for an item within budget, let the user choose one, and order it once."""
        offers = await flow.step("options", workspace.offers, item, budget, returns=list[Offer])
        if not offers:
            return f"No offer for {item!r} fits a budget of {budget:.2f}."
        answer = await flow.ask(
            f"{len(offers)} offer(s) for {item!r} fit your budget of {budget:.2f}. Which one should I order?",
            _offer_choice(offers),
            key="choose_offer",
        )
        if not isinstance(answer, Accepted):
            return f"No order placed ({_closed(answer)})."
        sku = answer.data.model_dump()["offer"]
        offer = next(o for o in offers if o.sku == sku)
        order = await flow.step("order", workspace.place_order, offer, flow.idempotency_key("order"))
        return f"Ordered {offer.name} from {offer.vendor} for {offer.price:.2f} (order {order[-8:]})."

    @elicitation.tool()
    async def delete_files(flow: Flow, pattern: str) -> str:
        """Delete workspace files matching a glob, after showing exactly which ones and confirming."""
        matches = await flow.step("match", workspace.match, pattern, returns=list[Match])
        if not matches:
            return f"No files match {pattern!r}."
        total = sum(m.size for m in matches)
        listing = "\n".join(f"- {m.path} ({_size(m.size)})" for m in matches)
        answer = await flow.ask(
            f"Delete these {len(matches)} file(s), {_size(total)} in all?\n{listing}",
            DeleteConfirmation,
            key="confirm_delete",
        )
        if isinstance(answer, Accepted) and answer.data.delete:
            deleted = await flow.step("delete", workspace.delete, matches)
            return f"Deleted {deleted} file(s) ({_size(total)})."
        return f"Nothing deleted ({_closed(answer) if not isinstance(answer, Accepted) else 'not confirmed'})."

    @elicitation.tool()
    async def create_ticket(flow: Flow, title: str, priority: Literal["low", "normal", "high"] | None = None) -> str:
        """Create a ticket; the priority is asked only when the call leaves it out."""
        if priority is None:
            answer = await flow.ask(f"Which priority for the ticket {title!r}?", Priority, key="priority")
            if not isinstance(answer, Accepted):
                return f"No ticket created ({_closed(answer)})."
            priority = answer.data.priority
        ticket = await flow.step("create", workspace.create_ticket, title, priority, flow.idempotency_key("create"))
        return f"Created ticket {ticket} ({priority}): {title}"

    return server


def _url_tools(elicitation: Elicitation, vault: Vault, provider_api: str | None) -> None:
    if provider_api is not None:

        @elicitation.tool()
        async def connect_account(flow: Flow) -> str:
            """Connect the user's Example account in the browser; the token stays on this server."""
            outcome = await flow.ask_url(
                "Connect your Example account so that I can read your profile.", key="connect_account"
            )
            if not isinstance(outcome, Completed):
                return f"Not connected ({type(outcome).__name__.lower()})."
            token = await anyio.to_thread.run_sync(vault.get, flow.principal, TOKEN_VAULT)
            if token is None:
                raise ToolError("The Example account is connected but its token is missing; connect it again.")
            async with httpx2.AsyncClient(timeout=10) as http:
                response = await http.get(f"{provider_api}/api/me", headers={"Authorization": f"Bearer {token}"})
            if response.status_code != 200:
                raise ToolError(f"Example refused the stored token ({response.status_code}); connect it again.")
            profile = response.json()
            return f"Connected as {profile.get('login')} ({profile.get('name')})."

    @elicitation.tool()
    async def set_api_key(flow: Flow) -> str:
        """Let the user type their Example API key on this server's own page, never in the chat."""
        outcome = await flow.ask_url("Enter your Example API key on the secure page.", key="set_api_key")
        if not isinstance(outcome, Completed):
            return f"No API key stored ({type(outcome).__name__.lower()})."
        stored = await anyio.to_thread.run_sync(vault.get, flow.principal, API_KEY_VAULT)
        return "Your Example API key is stored on the server." if stored else "No API key was stored."


def _payment_tools(elicitation: Elicitation, workspace: Workspace) -> None:
    @elicitation.tool()
    async def pay_invoice(flow: Flow, number: str) -> str:
        """Pay a supplier's invoice by card at the payment provider; the amount comes from the invoice, not the call."""
        invoice = await flow.step("invoice", _invoice, workspace, number)
        outcome = await flow.ask_url(
            f"Pay invoice {invoice.number} from {invoice.vendor}: {invoice.shown}.", key=PAY_INVOICE
        )
        if not isinstance(outcome, Completed):
            return f"Invoice {invoice.number} is not paid ({type(outcome).__name__.lower()})."
        return f"Paid invoice {invoice.number} from {invoice.vendor}: {invoice.shown}."


PAY_INVOICE = "pay_invoice"
"""The question key of `pay_invoice`'s payment: its `ExternalCompletion` is registered under it."""


def invoice_charge(decision: Decision, steps: Mapping[str, JSONValue]) -> Charge:
    """What `pay_invoice` charges: the invoice its journaled step found, never an amount from the call."""
    invoice = Invoice.model_validate(steps["invoice"])
    return Charge(invoice.amount, invoice.currency, f"Invoice {invoice.number} from {invoice.vendor}")


def _invoice(workspace: Workspace, number: str) -> Invoice:
    try:
        return workspace.invoice(number)
    except LookupError as missing:
        raise ToolError(str(missing)) from None


def _plans(workspace: Workspace, service: str) -> dict[str, FileChange]:
    try:
        return {environment: workspace.plan(service, environment) for environment in ENVIRONMENTS}
    except LookupError as missing:
        raise ToolError(str(missing)) from None


def _deploy(workspace: Workspace, service: str, environments: list[str]) -> int:
    return sum(workspace.deploy(service, environment) for environment in environments)


def _offer_choice(offers: list[Offer]) -> type[BaseModel]:
    skus = tuple(offer.sku for offer in offers)
    titles = {o.sku: f"{o.name} from {o.vendor}, {o.price:.2f}" for o in offers}
    choice: Any = Annotated[Literal[skus], Titled(titles)]
    return create_model("OfferChoice", offer=(choice, Field(title="Offer")))


def _closed(answer: object) -> str:
    return {Declined: "declined", Cancelled: "cancelled", Expired: "expired"}.get(type(answer), "not answered")


def _size(size: int) -> str:
    return f"{size} B" if size < 1024 else f"{size / 1024:.1f} kB"
