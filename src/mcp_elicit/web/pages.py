"""The server's own decision pages: `/elicit/{id}`, the OAuth callback, the API-key form and the form page, and the
webhooks of external systems that complete URL decisions (`/elicit/hooks/{flow key}`).

A URL decision's page runs its external flow (third-party OAuth, API key, or an external completion: a
payment, a signature, whose page shows what is charged from the server's own records and sends the person
to the provider with a single-use reference; its webhooks end it, see `mcp_elicit.web.external`). A form
decision's page is the `Fallback.WEB` way to answer a question the MCP client cannot show: the form built
from the decision's requested schema (see `mcp_elicit.web.formpage`), with Submit, Decline and Cancel; a valid answer is
recorded as `accepted` with its content, an invalid one is shown back with its problems and recorded never.

A page opened from a notification's signed link (`mcp_elicit.server.notifications.links`) is checked for the
link first: one this server did not issue, or that was altered, gets a page saying so (400), and one past its
deadline a page saying it lapsed (410), both pointing to the inbox; neither reads or writes the store. A valid
link leads to the page as any other visit does: sign-in first, then the principal's check.

A decision that approvers answer (`Decision.approvers`) has the page of `mcp_elicit.web.approving` instead: its
requester is told whom it waits on, a person in none of its roles is refused, an approver votes; nobody cancels
it or continues it from here.

Guarantees: nothing happens before the browser user is signed in with the authorization server that issues
the MCP tokens and is the decision's principal; a different user gets a refusal page, the attempt is
audited, and the decision is untouched. The refusal names nobody but the person signed in, and offers to
sign out and sign in as another account (the sign-in's own POST, with a token bound to the session), which
leads back to the decision's page. Every state change is the store's compare-and-set, so duplicate,
replayed and reordered callbacks have one effect. The OAuth `state` is sealed (AES-GCM) and names the
decision, the principal and the PKCE verifier; it is accepted once, from that principal only. Credentials
go to the vault and nowhere else. Pages carry no JavaScript and every value is escaped.

Does not guarantee: that the third party is honest, or that a user who signs in as someone else on a
shared browser is not that someone else.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol
from urllib.parse import parse_qs, quote, urlsplit

import httpx2
from authlib.common.errors import AuthlibBaseError
from authlib.integrations.httpx_client import AsyncOAuth2Client
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from mcp_elicit.model import BrowserUser, Decision, DecisionStatus, Mode, Operator, redact_text
from mcp_elicit.model.form_schema import UnsupportedSchema, parse_form
from mcp_elicit.server.notifications.links import DecisionLinks, LinkCheck
from mcp_elicit.server.runtime import Elicitation
from mcp_elicit.store import (
    Consumption,
    DecisionConflict,
    DecisionExpired,
    NotFound,
    Store,
    StoreUnavailable,
    UnreadableRow,
)
from mcp_elicit.store.aio import AsyncStore
from mcp_elicit.web.approving import ApproverPages
from mcp_elicit.web.authserver import SignOutForm
from mcp_elicit.web.external import HOOKS_PATH, MAX_BODY, CheckoutRefused, CheckoutStillOpen, ExternalCompletions
from mcp_elicit.web.flows import ApiKeyEntry, Charge, ExternalCompletion, ExternalFlow, OAuthConnect
from mcp_elicit.web.formpage import FIELD_PREFIX, posted_values, read_answer, render, unknown_fields
from mcp_elicit.web.html import client_name, page, text
from mcp_elicit.web.roles import ApproverRoles
from mcp_elicit.web.vault import Vault

log = logging.getLogger(__name__)

Endpoint = Callable[[Request], Awaitable[Response]]

CALLBACK_PATH = "/elicit/callback"
STATE_TTL = 600
MAX_SAID = 300
"""At most this many characters of a provider's own words (an error, a login) reach a page or the audit."""
_PAGES_OPERATOR = Operator("url-pages")
_DECISION_PATH = re.compile(r"/elicit/([0-9A-Za-z-]{1,64})(?:/[a-z]+)?")


class SignIn(Protocol):
    def principal_of(self, request: Request) -> str | None: ...

    def sign_in_redirect(self, request: Request) -> Response: ...

    def display_name_of(self, principal: str) -> str | None: ...

    def switch_account_form(self, request: Request, back_to: str) -> SignOutForm | None:
        """The POST form that signs the browser's user out and has someone sign in again, then leads to `back_to`,
        a same-origin path; None when nobody is signed in. Its token keeps other sites from signing anyone out."""
        ...


@dataclass(frozen=True, slots=True)
class _OAuthState:
    elicitation_id: str
    principal_id: str
    verifier: str
    nonce: str
    expires: float


_PROCEED_ATTEMPTS = 3
"""Tries to start a URL flow while other writers move its decision (each lost race moves it one step on)."""


class UrlPages:
    """The routes that run URL decisions in a browser, for the flows registered by question key."""

    def __init__(
        self,
        *,
        elicitation: Elicitation,
        sign_in: SignIn,
        vault: Vault | None,
        flows: Mapping[str, ExternalFlow],
        page_key: bytes,
        server_title: str,
        public_base_url: str,
        clock: Callable[[], float] = time.time,
        links: DecisionLinks | None = None,
        inbox: str | None = None,
        approver_roles: ApproverRoles | None = None,
    ) -> None:
        """`links` checks the signed links notifications carry (by default, links signed with `page_key` itself);
        `inbox` is the path of the decision inbox served beside the pages, which their refusals point to;
        `approver_roles` says who holds the roles of decisions that approvers answer (`mcp_elicit.web.approving`)."""
        if len(page_key) != 32:
            raise ValueError("the page key must be 32 bytes (it seals OAuth state and signs forms)")
        self._elicitation = elicitation
        self._store = elicitation.store
        self._reach = AsyncStore(elicitation.store)
        self._sign_in = sign_in
        if vault is None and any(isinstance(flow, OAuthConnect | ApiKeyEntry) for flow in flows.values()):
            raise ValueError("OAuth and API-key flows keep what they obtain in the vault: pass vault=Vault(...)")
        self._vault = vault
        self._flows = dict(flows)
        self._aead = AESGCM(page_key)
        self._mac_key = hashlib.sha256(b"mcp-elicit csrf\x00" + page_key).digest()
        self._title = server_title
        self._base = public_base_url.rstrip("/")
        self._clock = clock
        self._links = links if links is not None else DecisionLinks(self._base, page_key)
        self._inbox = inbox
        self._approvers = ApproverPages(self, approver_roles, clock)
        completions = {key: flow for key, flow in self._flows.items() if isinstance(flow, ExternalCompletion)}
        self._external = ExternalCompletions(self._reach, completions, page_key, clock=clock)

    def _flow_vault(self) -> Vault:
        if self._vault is None:
            raise RuntimeError("a flow ran without a vault")  # refused in __init__
        return self._vault

    def routes(self) -> list[Route]:
        return [
            Route(CALLBACK_PATH, self.guarded(self.callback), methods=["GET"]),
            Route("/elicit/{elicitation_id}", self.guarded(self.show), methods=["GET"]),
            Route("/elicit/{elicitation_id}/continue", self.guarded(self.proceed), methods=["POST"]),
            Route("/elicit/{elicitation_id}/cancel", self.guarded(self.cancel), methods=["POST"]),
            Route("/elicit/{elicitation_id}/key", self.guarded(self.submit_key), methods=["POST"]),
            Route("/elicit/{elicitation_id}/answer", self.guarded(self.answer), methods=["POST"]),
            Route(HOOKS_PATH + "/{flow_key}", self.webhook, methods=["POST"]),
        ]

    def guarded(self, endpoint: Endpoint) -> Endpoint:
        """`endpoint`, with a store that cannot do its part answered by a page naming the condition (503) and a
        line in the log, not a traceback."""

        async def served(request: Request) -> Response:
            try:
                return await endpoint(request)
            except StoreUnavailable as down:
                log.warning("%s %s failed: %s", request.method, request.url.path, down.for_log())
                if down.remedy is None:
                    return self._message("Nothing was recorded", f"{down.plainly}. Try again in a moment.", 503)
                again = f"Trying again fails the same way until {down.remedy}."
                return self._message("Nothing was recorded", f"{down.plainly}. {again}", 503)

        return served

    # -- what other pages on the same sign-in share (the decision inbox) -----------------------------------

    @property
    def store(self) -> Store:
        return self._store

    @property
    def sign_in(self) -> SignIn:
        return self._sign_in

    @property
    def server_title(self) -> str:
        return self._title

    @property
    def approvers(self) -> ApproverPages:
        return self._approvers

    def now(self) -> datetime:
        """The pages' clock, which decides whether a decision they show is overdue."""
        return datetime.fromtimestamp(self._clock(), UTC)

    def form_token(self, elicitation_id: str, principal: str) -> str:
        """The CSRF token of a form about the decision, for the signed-in `principal`: the decision page's own."""
        return self._csrf(elicitation_id, principal)

    def doing(self, decision: Decision) -> str:
        """What the decision asks the person to do, as the page's heading says it ("answer a question")."""
        return self._doing(decision)

    def who(self, principal: str) -> str:
        return self._who(principal)

    def message(self, title: str, detail: str, status: int, *, ok: bool = False) -> Response:
        return self._message(title, detail, status, ok=ok)

    # -- the decision page -----------------------------------------------------------------------------

    async def show(self, request: Request) -> Response:
        refused = self._link_refused(request)
        if refused is not None:
            return refused
        principal = self._sign_in.principal_of(request)
        if principal is None:
            return self._sign_in.sign_in_redirect(request)
        approved = await self._approvers.decision(request.path_params["elicitation_id"])
        if approved is not None:
            return await self._approvers.show(request, principal, approved)
        decision = await self._own_decision(request, principal)
        if isinstance(decision, Response):
            return decision
        if decision.mode is Mode.FORM:
            if decision.is_terminal or self._overdue(decision):
                return self._form_outcome(decision)
            return await self._form_page(decision, principal)
        flow = self._flows.get(decision.key)
        if isinstance(flow, ExternalCompletion):
            return await self._external_page(flow, decision, principal)
        if decision.is_terminal:
            return self._outcome(decision)
        operation = await self._reach.get_operation(decision.operation_id, _PAGES_OPERATOR)
        token = self._csrf(decision.elicitation_id, principal)
        body = f"""
<h1>{text(self._title)} asks you to {text(self._doing(decision))}</h1>
<div class="message">{text(decision.message)}</div>
{await self._summary(decision, operation.target, principal)}
<p class="next">{self._leads_to(self._flows.get(decision.key))}</p>
<p class="muted">Your credentials stay with this server: they are never shown to the assistant or its app.</p>
<div class="actions">
<form method="post" action="/elicit/{text(decision.elicitation_id)}/continue">
<input type="hidden" name="csrf" value="{text(token)}"><button class="primary" type="submit">Continue</button></form>
<form method="post" action="/elicit/{text(decision.elicitation_id)}/cancel">
<input type="hidden" name="csrf" value="{text(token)}"><button type="submit">Cancel</button></form>
</div>"""
        return page(f"{self._title}: a step needs you", body, server=self._title)

    def _link_refused(self, request: Request) -> Response | None:
        """The page for a link this server did not issue, or that lapsed; None for a valid link, or none at all.

        Neither the store nor the sign-in is asked: the page says the same to whoever opens it (a scanner, the
        person, someone the link was forwarded to), and nothing changes."""
        now = self.now()
        opened = self._links.check(request.path_params["elicitation_id"], request.query_params, now)
        if opened is LinkCheck.INVALID:
            title, status = "This link is not valid", 400
            where = "your inbox, or from your assistant" if self._inbox is not None else "your assistant"
            detail = (
                f"It was not made by {self._title}, or it was changed on the way. Nothing was changed. "
                f"Open the decision from {where}."
            )
        elif opened is LinkCheck.LAPSED:
            title, status = "This link has lapsed", 410
            until = datetime.fromtimestamp(int(request.query_params["until"]), UTC)
            detail = f"It was valid until {_when(until)}, the decision's deadline. Nothing was changed."
            if self._inbox is not None:
                detail += " Your inbox lists what still waits for you."
        else:
            return None
        body = f'<h1>{text(title)}</h1><p class="muted">{text(detail)}</p>'
        if self._inbox is not None:
            body += f'\n<div class="actions"><a class="button" href="{text(self._inbox)}">Open your inbox</a></div>'
        return page(title, body, server=self._title, status=status)

    def _doing(self, decision: Decision) -> str:
        if decision.approvers is not None:
            return "approve a call"
        if decision.mode is Mode.FORM:
            return "answer a question"
        flow = self._flows.get(decision.key)
        if isinstance(flow, OAuthConnect):
            return f"connect your {flow.provider_title} account"
        if isinstance(flow, ApiKeyEntry):
            return f"enter your {flow.service_title} API key"
        if isinstance(flow, ExternalCompletion):
            return f"{flow.doing} with {flow.provider_title}"
        return "finish this step"

    def _leads_to(self, flow: ExternalFlow | None) -> str:
        """Where Continue takes the person, said before they press it: another site, or a form here."""
        if isinstance(flow, OAuthConnect):
            host = urlsplit(flow.authorize_url).netloc
            return (
                f"Continue takes you to <strong>{text(flow.provider_title)}</strong> at <strong>{text(host)}</strong>, "
                "where you sign in and allow access; then you come back here."
            )
        if isinstance(flow, ApiKeyEntry):
            return "Continue opens a form on this server, where you enter the key. It is sent nowhere else."
        return "Continue goes on with this step."

    def sign_in_reason(self, next_path: str) -> str | None:
        """Why a browser sent to sign in on its way to `next_path` is asked to: which tool waits, on what.

        The sign-in page shows it before anyone is known, so it names the tool and the kind of step only: the
        message and the person it was asked of are for the decision's principal, once signed in.
        """
        parts = urlsplit(next_path)
        if parts.path == CALLBACK_PATH:
            state = self._unseal(parse_qs(parts.query).get("state", [""])[0])
            elicitation_id = state.elicitation_id if state is not None else None
        else:
            found = _DECISION_PATH.fullmatch(parts.path)
            elicitation_id = found.group(1) if found is not None else None
        if elicitation_id is None:
            return None
        try:
            decision = self._store.get_decision(elicitation_id, _PAGES_OPERATOR)
        except NotFound:
            return None
        if decision.is_terminal or self._overdue(decision):
            return None
        operation = self._store.get_operation(decision.operation_id, _PAGES_OPERATOR)
        return f"The tool {operation.target} is waiting for you to {self._doing(decision)}."

    async def proceed(self, request: Request) -> Response:
        checked = await self._checked_post(request)
        if isinstance(checked, Response):
            return checked
        principal, decision, _ = checked
        flow = self._flows.get(decision.key)
        if flow is None or decision.mode is not Mode.URL:
            return self._message("This step cannot be done here", "The server has no page for it.", 404)
        user = BrowserUser(principal)
        if isinstance(flow, ExternalCompletion):
            try:  # before the decision moves: a step that cannot say what it charges stays answerable as it is
                charge = await self._external.charge(flow, decision)
            except CheckoutRefused as refused:
                return self._message("This step cannot go on now", refused.plainly, 502)
        # The client's own consent may move the decision to accepted_url at the same moment (2025-11-25): a
        # lost compare-and-set goes on from where the decision now stands, so the flow starts external_pending.
        for _ in range(_PROCEED_ATTEMPTS):
            try:
                if decision.status is DecisionStatus.REQUESTED:
                    decision = await self._reach.transition(
                        decision, DecisionStatus.ACCEPTED_URL, caller=user, reason="opened"
                    )
                if decision.status is DecisionStatus.ACCEPTED_URL:
                    decision = await self._reach.transition(
                        decision,
                        DecisionStatus.EXTERNAL_PENDING,
                        caller=user,
                        reason=f"started {type(flow).__name__}",
                    )
                break
            except DecisionExpired as expired:
                return self._outcome(expired.current)
            except DecisionConflict as moved:
                decision = moved.current
        if decision.is_terminal:
            return self._outcome(decision)
        if isinstance(flow, OAuthConnect):
            return await self._start_oauth(flow, decision, principal)
        if isinstance(flow, ExternalCompletion):
            try:
                url = await self._external.checkout(
                    flow, decision, charge, f"{self._base}/elicit/{decision.elicitation_id}"
                )
            except CheckoutStillOpen as still:
                return self._message("The checkout is still open", _not_reported(flow, still.reopens), 409)
            except CheckoutRefused as refused:
                return self._message("This step cannot go on now", refused.plainly, 502)
            return RedirectResponse(url, status_code=303)
        return self._key_form(flow, decision, principal)

    async def cancel(self, request: Request) -> Response:
        checked = await self._checked_post(request)
        if isinstance(checked, Response):
            return checked
        principal, decision, _ = checked
        try:
            decision = await self._reach.transition(
                decision,
                DecisionStatus.CANCELLED,
                caller=BrowserUser(principal),
                reason="cancelled on the page",
            )
        except (DecisionConflict, DecisionExpired) as lost:
            decision = lost.current
        return self._outcome(decision)

    # -- form decisions ------------------------------------------------------------------------------

    async def _form_page(
        self,
        decision: Decision,
        principal: str,
        *,
        values: Mapping[str, list[str]] | None = None,
        problems: Mapping[str, list[str]] | None = None,
    ) -> Response:
        try:
            form = parse_form(decision.requested_schema)
        except UnsupportedSchema as unsupported:
            log.warning("decision %s cannot be answered on the page: %s", decision.elicitation_id, unsupported)
            return self._message(
                "This question cannot be answered here", "Answer it in an app that can show the question.", 409
            )
        operation = await self._reach.get_operation(decision.operation_id, _PAGES_OPERATOR)
        token = self._csrf(decision.elicitation_id, principal)
        problems = problems or {}
        notice = ""
        if problems:
            general = "".join(f"<br>{text(p)}" for p in problems.get("", ()))
            notice = (
                f'<div class="error" role="alert">Some answers need another look; nothing was recorded.{general}</div>'
            )
        body = f"""
<h1>{text(self._title)} needs your answer</h1>
<div class="message">{text(decision.message)}</div>
{await self._summary(decision, operation.target, principal)}
{notice}
<form method="post" action="/elicit/{text(decision.elicitation_id)}/answer">
<input type="hidden" name="csrf" value="{text(token)}">
{render(form, values=values, errors=problems)}
<div class="actions">
<button class="primary" type="submit" name="action" value="accept">Submit</button>
<button type="submit" name="action" value="decline" formnovalidate>Decline</button>
<button type="submit" name="action" value="cancel" formnovalidate>Cancel</button>
</div>
</form>
<p class="muted">Decline answers no to this request; Cancel dismisses it without an answer. Either way,
{text(operation.target)} learns which you chose and nothing else.</p>"""
        return page(f"{self._title}: a question for you", body, server=self._title, status=400 if problems else 200)

    async def answer(self, request: Request) -> Response:
        principal = self._sign_in.principal_of(request)
        approved = None if principal is None else await self._approvers.decision(request.path_params["elicitation_id"])
        if principal is not None and approved is not None:
            form = await request.form()
            if not hmac.compare_digest(str(form.get("csrf", "")), self._csrf(approved.elicitation_id, principal)):
                return self._message("This form has expired", "Reload the page and try again. Nothing was recorded.",
                                     403)  # fmt: skip
            return await self._approvers.vote(request, principal, approved, form)
        checked = await self._checked_post(request)
        if isinstance(checked, Response):
            return checked
        principal, decision, form = checked
        if decision.mode is not Mode.FORM:
            return self._message("This step has no form", "Open the link from your assistant again.", 404)
        if decision.is_terminal or self._overdue(decision):
            return self._form_outcome(decision)
        action = form.get("action")
        user = BrowserUser(principal)
        try:
            if action == "decline":
                decision = await self._reach.transition(
                    decision,
                    DecisionStatus.DECLINED,
                    caller=user,
                    reason="declined on the page",
                )
            elif action == "cancel":
                decision = await self._reach.transition(
                    decision,
                    DecisionStatus.CANCELLED,
                    caller=user,
                    reason="cancelled on the page",
                )
            elif action == "accept":
                try:
                    asked = parse_form(decision.requested_schema)
                except UnsupportedSchema:
                    return await self._form_page(decision, principal)
                unknown = unknown_fields(asked, form.keys())
                if unknown:
                    log.warning("decision %s: a post carried fields the page has not: %s", decision.elicitation_id,
                                ", ".join(name.removeprefix(FIELD_PREFIX)[:40] for name in unknown[:5]))  # fmt: skip
                    return self._message(
                        "This form was not sent as the page showed it",
                        "It carries fields the question does not have. Nothing was recorded; reload the page.",
                        400,
                    )
                values = posted_values(asked, form.getlist)
                content, problems = read_answer(asked, values)
                if problems:
                    fitless = ", ".join(sorted(problems))
                    log.info("decision %s: an answer on the page did not fit (%s)", decision.elicitation_id, fitless)
                    return await self._form_page(decision, principal, values=values, problems=problems)
                decision = await self._reach.transition(
                    decision,
                    DecisionStatus.ACCEPTED,
                    caller=user,
                    content=content,
                    reason="answered on the page",
                )
            else:
                return self._message("This form was not sent whole", "Reload the page and try again.", 400)
        except DecisionExpired as expired:
            return self._outcome(expired.current)
        except DecisionConflict as moved:
            return self._form_outcome(moved.current)
        return self._form_outcome(decision, just_now=True)

    def _overdue(self, decision: Decision) -> bool:
        return decision.is_overdue(self.now())

    def _form_outcome(self, decision: Decision, *, just_now: bool = False) -> Response:
        status = decision.status
        if not decision.is_terminal and self._overdue(decision):
            status = DecisionStatus.EXPIRED
        if status is DecisionStatus.ACCEPTED and just_now:
            return self._message(
                "Done",
                "Your answer was recorded. Go back to your assistant and ask it to try again: "
                "it continues with your answer.",
                200,
                ok=True,
            )
        if status is DecisionStatus.DECLINED:
            return self._message(
                "Declined", "The tool learns that you said no. You can close this page.", 200 if just_now else 409
            )
        if status is DecisionStatus.CANCELLED:
            return self._message(
                "Cancelled", "The question was dismissed without an answer. You can close this page.",
                200 if just_now else 409,
            )  # fmt: skip
        if status is DecisionStatus.EXPIRED:
            return self._message(
                "This question has expired",
                "It was only open for a limited time. Nothing was recorded; ask your assistant again.",
                410,
            )
        return self._outcome(decision)

    # -- external completion (payments, signatures) ----------------------------------------------------

    async def _external_page(self, flow: ExternalCompletion, decision: Decision, principal: str) -> Response:
        """What is being paid (or signed), from the server's own records, and Continue to the provider's page; once
        started, what the provider has reported so far."""
        if decision.is_terminal:
            return self._external_outcome(flow, decision)
        try:
            charge = await self._external.charge(flow, decision)
        except CheckoutRefused as refused:
            return self._message("This step cannot be done here", refused.plainly, 409)
        operation = await self._reach.get_operation(decision.operation_id, _PAGES_OPERATOR)
        token = self._csrf(decision.elicitation_id, principal)
        notice, action = "", "Continue"
        if decision.status is DecisionStatus.EXTERNAL_PENDING:
            failed = await self._external.last_failure(decision)
            reopens = await self._external.reopens_at(decision)
            if reopens is not None:
                notice, action = f'<p class="muted">{text(_not_reported(flow, reopens))}</p>', ""
            elif failed is not None:
                notice, action = (
                    f'<div class="error" role="alert">The last attempt at {text(flow.provider_title)} failed: '
                    f"{text(failed)}. Nothing was charged; you can try again.</div>",
                    "Try again",
                )
            else:
                notice, action = (
                    f'<p class="muted">If you have finished at {text(flow.provider_title)}, it confirms it here in a '
                    "moment: reload this page.</p>",
                    "Open the checkout again",
                )
        go_on = (
            f'<form method="post" action="/elicit/{text(decision.elicitation_id)}/continue">\n<input type="hidden" '
            f'name="csrf" value="{text(token)}"><button class="primary" type="submit">{action}</button></form>\n'
            if action
            else ""
        )
        body = f"""
<h1>{text(self._title)} asks you to {text(self._doing(decision))}</h1>
<div class="message">{text(decision.message)}</div>
{_charged(charge)}
{await self._summary(decision, operation.target, principal)}
{notice}
<p class="next">Continue takes you to <strong>{text(flow.provider_title)}</strong> to {text(flow.doing)}
<strong>{text(charge.shown)}</strong>; then you come back here.</p>
<p class="muted">This amount is set by {text(self._title)}, not by your assistant, and it is the one
{text(flow.provider_title)} is asked for.</p>
<div class="actions">
{go_on}<form method="post" action="/elicit/{text(decision.elicitation_id)}/cancel">
<input type="hidden" name="csrf" value="{text(token)}"><button type="submit">Cancel</button></form>
</div>"""
        return page(f"{self._title}: a step needs you", body, server=self._title)

    def _external_outcome(self, flow: ExternalCompletion, decision: Decision) -> Response:
        if decision.status is DecisionStatus.EXTERNAL_COMPLETED:
            return self._message(
                "Done",
                f"{flow.provider_title} confirmed it. You can close this page and go back to your assistant.",
                200,
                ok=True,
            )
        if decision.status is DecisionStatus.EXTERNAL_FAILED:
            return self._message(
                "That did not work",
                f"{flow.provider_title} reports that it was abandoned or lapsed. Nothing was charged. Ask your "
                "assistant to try again: it will give you a new link.",
                200,
            )
        return self._outcome(decision)

    async def webhook(self, request: Request) -> Response:
        """A provider's webhook for the `ExternalCompletion` flow of the path's key (`mcp_elicit.web.external`)."""
        flow_key = request.path_params["flow_key"]
        length = request.headers.get("content-length", "")
        if length and (not length.isdigit() or int(length) > MAX_BODY):
            log.warning("webhook for %r refused: a body of %r bytes", flow_key[:64], length[:20])
            return JSONResponse({"error": "body_too_large"}, 413)
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY:
                log.warning("webhook for %r refused: a body over %d bytes", flow_key[:64], MAX_BODY)
                return JSONResponse({"error": "body_too_large"}, 413)
        try:
            received = await self._external.receive(flow_key, request.headers, body)
        except StoreUnavailable as down:
            log.warning("webhook for %r failed: %s", flow_key[:64], down.for_log())
            return JSONResponse({"error": "store_unavailable"}, 503)
        return JSONResponse(received.body, received.status)

    # -- API key -------------------------------------------------------------------------------------

    def _key_form(self, flow: ApiKeyEntry, decision: Decision, principal: str, problem: str = "") -> Response:
        token = self._csrf(decision.elicitation_id, principal)
        alert = f'<p class="error" role="alert">{text(problem)} Nothing was stored.</p>' if problem else ""
        body = f"""
<h1>Your {text(flow.service_title)} API key</h1>
<div class="message">{text(decision.message)}</div>
{alert}<form method="post" action="/elicit/{text(decision.elicitation_id)}/key">
<input type="hidden" name="csrf" value="{text(token)}">
<label for="key">API key</label>
<input id="key" name="api_key" type="password" autocomplete="off" required maxlength="{flow.max_length}">
<p class="muted">It goes straight to {text(self._title)} and is stored encrypted.</p>
<div class="actions"><button class="primary" type="submit">Save key</button></div>
</form>"""
        return page(f"{flow.service_title} API key", body, server=self._title)

    async def submit_key(self, request: Request) -> Response:
        checked = await self._checked_post(request)
        if isinstance(checked, Response):
            return checked
        principal, decision, form = checked
        flow = self._flows.get(decision.key)
        if not isinstance(flow, ApiKeyEntry) or decision.status is not DecisionStatus.EXTERNAL_PENDING:
            return (
                self._outcome(decision)
                if decision.is_terminal
                else self._message(
                    "Start from the beginning", "Open the link from your assistant again and press Continue.", 409
                )
            )
        key = str(form.get("api_key", "")).strip()
        problem = flow.problem(key)
        if problem is not None:
            return self._key_form(flow, decision, principal, problem)
        await self._reach.call_blocking(self._flow_vault().put, BrowserUser(principal).as_owner(), flow.vault_name, key)
        return await self._complete(
            decision, principal, "API key stored", done=f"Your {flow.service_title} API key is stored on {self._title}."
        )

    # -- OAuth -----------------------------------------------------------------------------------------

    async def _start_oauth(self, flow: OAuthConnect, decision: Decision, principal: str) -> Response:
        verifier = secrets.token_urlsafe(48)
        state = self._seal(
            _OAuthState(
                decision.elicitation_id, principal, verifier, secrets.token_urlsafe(16), self._clock() + STATE_TTL
            )
        )
        client = AsyncOAuth2Client(
            client_id=flow.client_id,
            scope=flow.scope or None,
            redirect_uri=self._base + CALLBACK_PATH,
            code_challenge_method="S256",
        )
        url, _ = client.create_authorization_url(flow.authorize_url, state=state, code_verifier=verifier)
        await client.aclose()
        return RedirectResponse(url, status_code=303)

    async def callback(self, request: Request) -> Response:
        principal = self._sign_in.principal_of(request)
        if principal is None:
            return self._sign_in.sign_in_redirect(request)
        state = self._unseal(request.query_params.get("state", ""))
        if state is None or state.expires < self._clock():
            return self._message("This sign-in link is not valid", "Start again from your assistant.", 400)
        if state.principal_id != principal:
            await self._audit_stranger(state.elicitation_id, principal, "callback presented by another user")
            return self._not_yours(request, principal, state.elicitation_id)
        try:
            decision = await self._reach.get_decision(state.elicitation_id, BrowserUser(principal))
        except NotFound:
            return self._message("This sign-in link is not valid", "Start again from your assistant.", 404)
        if self._overdue(decision):
            decision = await self._reach.expire_if_overdue(
                decision.elicitation_id,
                BrowserUser(principal),
                reason="callback after the TTL",
            )
            if decision.is_terminal:
                return self._outcome(decision)
        flow = self._flows.get(decision.key)
        first = await self._reach.consume_token(f"oauth-state:{state.nonce}", expires_at=decision.expires_at)
        if first is Consumption.ALREADY_USED or decision.is_terminal or not isinstance(flow, OAuthConnect):
            return (
                self._outcome(decision)
                if decision.is_terminal
                else self._message(
                    "This sign-in link was already used", "Open the link from your assistant again.", 409
                )
            )
        if decision.status is not DecisionStatus.EXTERNAL_PENDING:
            return self._message("Start from the beginning", "Open the link from your assistant again.", 409)
        error = request.query_params.get("error")
        if error:
            said = _said(error, request.query_params.get("error_description"))
            return await self._fail(
                decision,
                principal,
                f"{flow.provider_title} answered {said}",
                why=f"{flow.provider_title} did not allow the connection ({said}).",
            )
        code = request.query_params.get("code", "")
        client = AsyncOAuth2Client(
            client_id=flow.client_id,
            client_secret=flow.client_secret,
            redirect_uri=self._base + CALLBACK_PATH,
            code_challenge_method="S256",
        )
        try:
            try:
                token = await client.fetch_token(flow.token_url, code=code, code_verifier=state.verifier)
            except AuthlibBaseError as refused:
                # The provider answered with an OAuth error: a replayed or expired code, a PKCE mismatch.
                said = _said(refused.error, refused.description)
                log.warning(
                    "decision %s: %s refused the token exchange: %s", decision.elicitation_id, flow.provider_title, said
                )
                return await self._fail(
                    decision,
                    principal,
                    f"the token exchange failed at {flow.provider_title}: {said}",
                    why=f"{flow.provider_title} refused the connection: {said}.",
                )
            except (httpx2.HTTPError, ValueError) as failure:
                log.warning("token exchange for %s failed: %s", decision.elicitation_id, type(failure).__name__)
                return await self._fail(
                    decision,
                    principal,
                    f"the token exchange with {flow.provider_title} failed ({type(failure).__name__})",
                    why=f"{flow.provider_title} could not be reached or gave an answer that could not be read.",
                )
            access = token.get("access_token") if isinstance(token, dict) else None
            if not isinstance(access, str) or not access:
                return await self._fail(
                    decision,
                    principal,
                    f"{flow.provider_title} gave no access token",
                    why=f"{flow.provider_title} gave no access.",
                )
            account = await _account(client, flow)
        finally:
            await client.aclose()
        await self._reach.call_blocking(
            self._flow_vault().put, BrowserUser(principal).as_owner(), flow.vault_name, access
        )
        if account is None:
            return await self._complete(
                decision,
                principal,
                f"{flow.provider_title} connected",
                done=f"Your {flow.provider_title} account is connected.",
            )
        return await self._complete(
            decision,
            principal,
            f"{flow.provider_title} connected as {account}",
            done=f"Connected to {flow.provider_title} as {account}.",
        )

    # -- shared steps -----------------------------------------------------------------------------------

    async def _complete(self, decision: Decision, principal: str, reason: str, *, done: str) -> Response:
        """Complete the decision; the page says `done` (what was done) when this request is the one that did it."""
        try:
            completed = await self._reach.transition(
                decision,
                DecisionStatus.EXTERNAL_COMPLETED,
                caller=BrowserUser(principal),
                reason=reason,
            )
        except (DecisionConflict, DecisionExpired) as lost:
            return self._outcome(lost.current)
        return self._outcome(completed, detail=done)

    async def _fail(self, decision: Decision, principal: str, reason: str, *, why: str) -> Response:
        """Fail the decision, `reason` in the audit; the page says `why` when this request is the one that failed it."""
        try:
            failed = await self._reach.transition(
                decision,
                DecisionStatus.EXTERNAL_FAILED,
                caller=BrowserUser(principal),
                reason=reason,
            )
        except (DecisionConflict, DecisionExpired) as lost:
            return self._outcome(lost.current)
        return self._outcome(failed, detail=why)

    async def _own_decision(self, request: Request, principal: str) -> Decision | Response:
        elicitation_id = request.path_params["elicitation_id"]
        try:
            decision = await self._reach.get_decision(elicitation_id, BrowserUser(principal))
        except NotFound:
            pass
        else:
            if not self._overdue(decision):
                return decision
            return await self._reach.expire_if_overdue(
                elicitation_id, BrowserUser(principal), reason="opened after the TTL"
            )
        if await self._audit_stranger(elicitation_id, principal, "opened by another user"):
            return self._not_yours(request, principal, elicitation_id)
        return self._message("This link is not valid", "Ask your assistant to start again.", 404)

    async def _audit_stranger(self, elicitation_id: str, principal: str, reason: str) -> bool:
        try:
            decision = await self._reach.get_decision(elicitation_id, _PAGES_OPERATOR)
        except NotFound:
            return False
        await self._reach.note(decision, actor=BrowserUser(principal), reason=reason)
        log.warning("decision %s: %s", elicitation_id, reason)
        return True

    def _not_yours(self, request: Request, principal: str, elicitation_id: str) -> Response:
        """The refusal of a decision asked of someone else: it names the person signed in, never the one asked,
        and offers the switch of account that leads back to the decision's page (the callback's too: its flow
        starts again from there, for the right person)."""
        detail = f"You are signed in as {self._who(principal)}, not as the person it was asked of. Nothing was changed."
        return self.refusal(
            request,
            "This step belongs to another account",
            detail,
            elicitation_id,
            switch="If it was asked of you under another account, sign out and sign in as that one: "
            "you come back to this page.",
        )

    def refusal(
        self,
        request: Request,
        title: str,
        detail: str,
        elicitation_id: str,
        *,
        switch: str = "If you approve under another account, sign out and sign in as that one: "
        "you come back to this page.",
    ) -> Response:
        """A 403 page about the decision `elicitation_id` saying `detail`, with the switch of account that signs the
        browser's user out and leads back to the decision's page, `switch` saying why one would."""
        body = f'<h1>{text(title)}</h1>\n<p class="muted">{text(detail)}</p>'
        form = self._sign_in.switch_account_form(request, f"/elicit/{quote(elicitation_id, safe='')}")
        if form is not None:
            fields = "".join(
                f'<input type="hidden" name="{text(name)}" value="{text(value)}">'
                for name, value in form.fields.items()
            )
            body += (
                f"\n<p>{text(switch)}</p>\n"
                f'<div class="actions"><form method="post" action="{text(form.action)}">{fields}'
                '<button class="primary" type="submit">Sign out and switch account</button></form></div>'
            )
        return page(title, body, server=self._title, status=403)

    async def _checked_post(self, request: Request) -> tuple[str, Decision, FormData] | Response:
        principal = self._sign_in.principal_of(request)
        if principal is None:
            return self._sign_in.sign_in_redirect(request)
        decision = await self._own_decision(request, principal)
        if isinstance(decision, Response):
            return decision
        if decision.approvers is not None:
            return self._message(
                "Approvers decide this",
                "You asked for this call; another person must approve it. It ends by their votes, an operator, "
                "or its deadline. Nothing was changed.",
                403,
            )
        form = await request.form()
        if not hmac.compare_digest(str(form.get("csrf", "")), self._csrf(decision.elicitation_id, principal)):
            return self._message("This form has expired", "Reload the page and try again.", 403)
        return principal, decision, form

    def _outcome(self, decision: Decision, *, detail: str | None = None) -> Response:
        """The page for where the decision now is; `detail` says what this very request did, when it did."""
        status = decision.status
        if status is DecisionStatus.EXTERNAL_COMPLETED:
            close = "You can close this page and go back to your assistant."
            if detail is None:
                return self._message("Done", close, 200, ok=True)
            body = f'<h1>Done</h1><p class="ok">{text(detail)}</p><p class="muted">{text(close)}</p>'
            return page("Done", body, server=self._title)
        if status is DecisionStatus.EXTERNAL_FAILED:
            why = detail or "The connection was refused or failed."
            return self._message(
                "That did not work",
                f"{why} Nothing was stored. Ask your assistant to try again: it will give you a new link.",
                200,
            )
        if status is DecisionStatus.EXPIRED:
            return self._message(
                "This link has expired",
                "It was only valid for a limited time. Ask your assistant again: the next request starts a new step.",
                410,
            )
        if status in (DecisionStatus.CANCELLED, DecisionStatus.DECLINED):
            return self._message("Cancelled", "Nothing was stored. You can close this page.", 200)
        return self._message("Already answered", "This step is already done.", 409)

    def _message(self, title: str, detail: str, status: int, *, ok: bool = False) -> Response:
        body = f'<h1>{text(title)}</h1><p class="{"ok" if ok else "muted"}">{text(detail)}</p>'
        return page(title, body, server=self._title, status=status)

    def facts(self, decision: Decision, tool: str, client: str, *, for_whom: str | None, server: bool = True) -> str:
        """What every page about a decision says of it: the server and tool that ask, what the call is about, the
        client it came through (`client_label`, as HTML), for whom, and when it was asked and until when."""
        shown = [("Server", text(self._title))] if server else []
        shown.append(("Tool", text(tool)))
        if decision.about:
            shown.append(("Call", f"<code>{text(decision.about)}</code>"))
        shown.append(("Client", client))
        if for_whom is not None:
            shown.append(("For", text(for_whom)))
        shown += [("Asked", text(_when(decision.created_at))), ("Until", text(_when(decision.expires_at)))]
        return "<dl>\n" + "\n".join(f"<dt>{term}</dt><dd>{value}</dd>" for term, value in shown) + "\n</dl>"

    async def client_label(self, client_id: str) -> str:
        """The client as HTML: the name it registered with this server's authorization server, and its id, for the
        name is the client's own claim; the id alone for a client registered elsewhere."""
        try:
            metadata = await self._reach.oauth_client_get(client_id)
        except UnreadableRow as row:
            log.warning("the registration of client %s cannot be read: %s", client_id, row)
            metadata = None
        name = client_name((metadata or {}).get("client_name"))
        if name is None:
            return text(client_id)
        return f'{text(name)} <span class="muted">({text(client_id)})</span>'

    async def _summary(self, decision: Decision, tool: str, principal: str) -> str:
        client = await self.client_label(decision.client_id)
        return self.facts(decision, tool, client, for_whom=self._who(principal))

    def _who(self, principal: str) -> str:
        """The signed-in user as people know them: the display name, and the username it belongs to."""
        username = principal.rsplit("#", 1)[-1]
        name = self._sign_in.display_name_of(principal)
        return f"{name} ({username})" if name and name != username else username

    def _csrf(self, elicitation_id: str, principal: str) -> str:
        mac = hmac.new(self._mac_key, f"{elicitation_id}\x00{principal}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")

    def _seal(self, state: _OAuthState) -> str:
        nonce = secrets.token_bytes(12)
        plain = json.dumps(
            {
                "d": state.elicitation_id,
                "p": state.principal_id,
                "v": state.verifier,
                "n": state.nonce,
                "e": state.expires,
            }
        ).encode()
        return base64.urlsafe_b64encode(nonce + self._aead.encrypt(nonce, plain, b"oauth-state")).decode().rstrip("=")

    def _unseal(self, token: str) -> _OAuthState | None:
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            plain = json.loads(self._aead.decrypt(raw[:12], raw[12:], b"oauth-state"))
            return _OAuthState(str(plain["d"]), str(plain["p"]), str(plain["v"]), str(plain["n"]), float(plain["e"]))
        except (ValueError, InvalidTag, KeyError, TypeError):
            return None


def _charged(charge: Charge) -> str:
    return (
        f"<dl>\n<dt>Amount</dt><dd><strong>{text(charge.shown)}</strong></dd>\n"
        f"<dt>Description</dt><dd>{text(charge.description)}</dd>\n</dl>"
    )


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _shown(words: str) -> str:
    """A third party's words as they may reach a page or the audit: printable, bounded, URLs redacted."""
    return redact_text("".join(c if c.isprintable() else " " for c in words)[:MAX_SAID])


def _said(error: object, description: object) -> str:
    """A provider's reason for refusing: its error code, then its description."""
    return _shown(": ".join(str(word) for word in (error, description) if word)) or "no reason given"


async def _account(client: AsyncOAuth2Client, flow: OAuthConnect) -> str | None:
    """Who the new token speaks for, as the provider's user-info API says ("ada (Ada Lovelace)"), if it says."""
    if not flow.profile_url:
        return None
    try:
        response = await client.get(flow.profile_url)
        profile = response.json() if response.status_code == 200 else None
    except (AuthlibBaseError, httpx2.HTTPError, ValueError) as failure:  # Authlib's OAuth client runs on httpx2
        log.info("the %s profile could not be read: %s", flow.provider_title, type(failure).__name__)
        return None
    if not isinstance(profile, dict):
        return None
    login, name = _field(profile, "login", "username", "preferred_username"), _field(profile, "name")
    if login and name and name != login:
        return f"{login} ({name})"
    return login or name or None


def _field(profile: dict[str, object], *names: str) -> str:
    """The first of `names` that `profile` gives as text, as it may be shown; "" when it gives none."""
    return next((_shown(value) for name in names if isinstance(value := profile.get(name), str)), "")


def _not_reported(flow: ExternalCompletion, reopens: datetime) -> str:
    """Why the checkout is not offered again yet: a second one, opened while the first one's report is on its way,
    could take a second payment."""
    return (
        f"You opened the checkout at {flow.provider_title} a moment ago and it has not reported yet. If you paid, it "
        f"confirms it here shortly: reload this page. So that nothing is paid twice, it can be opened again from "
        f"{reopens.astimezone(UTC):%H:%M:%S} UTC."
    )
