"""The decision inbox at `/inbox`: a signed-in person's pending decisions, across tools, clients and sessions.

Each entry says which tool asks and what its call is about (the summary stored with the decision when it was
asked), through which client (by the name it registered here, and its id), for whom, when it was asked and until
when. A form decision is answered on its own page (the `Fallback.WEB` form of `mcp_elicit.web.pages`, linked from
the entry), a URL decision is continued on its URL page; either is declined (while nothing has started) or
cancelled from the inbox itself. People named in `InboxSettings.operators` see everyone's pending decisions and
may cancel another person's, giving a reason. Every move is the store's compare-and-set transition, so the
calling client's retry or the call waiting on the decision picks it up as from any other path, and the audit
names who did it and why.

Guarantees: it runs on the URL pages' sign-in, page shell and CSRF tokens (`UrlPages`), so it needs the same
signed-in principal and carries the same headers and no JavaScript. A person lists and moves only their own
decisions (the store binds the read to the principal); another person's decision is refused exactly like a
missing one and nothing changes (a post without a token of the person's own for that id writes nothing; one
with a valid token for another's decision is noted in its audit). An operator's cancellation is
audited as `operator:<principal>` with the reason given. Listings are keyset pages of a bounded size. A
stored row that cannot be read hides nothing else: an unreadable decision is left out, an unreadable
operation shows its decisions as asked by "a tool", the page says so and the log names the rows.

A person who holds approver roles (`ApproverRoles`, resolved at every page) sees first the calls waiting for their
approval: each with its tool, call summary, requester, votes so far and deadline, linked to its decision page,
where they vote (`mcp_elicit.web.approving`); the inbox shows the queue's first page, `/inbox/approvals` pages
the rest. A requester's own call that approvers decide is listed as waiting for them, with no answer of their
own: it ends by its votes, an operator's cancellation, or its TTL.

The inbox also lists the person's standing grants that still let calls through (an operator's: everyone's), each
with a Revoke button: a POST with the pages' CSRF token for that grant, audited as `browser:<principal>` (their
own) or `operator:<principal>` (another person's), effective for the next call the grant would have covered. A
revocation posted without the person's token for that grant, or for a grant they may not revoke, changes nothing.

Does not guarantee: that an operator is who the configuration says (operators are principals of the same
sign-in), nor that a decision shown is still waiting when the person acts: a move that lost the race says
where the decision went instead.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final, Literal
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from mcp_elicit.model import BrowserUser, Decision, DecisionStatus, Grant, GrantKind, Mode, Operator
from mcp_elicit.model.form_schema import UnsupportedSchema, parse_form
from mcp_elicit.store import (
    DecisionConflict,
    DecisionExpired,
    DecisionFilter,
    DecisionPage,
    GrantEnded,
    GrantFilter,
    GrantPage,
    NotFound,
    UnreadableRow,
)
from mcp_elicit.store.aio import AsyncStore
from mcp_elicit.web.html import page, text
from mcp_elicit.web.pages import UrlPages

__all__ = ["APPROVALS_PATH", "GRANTS_PATH", "INBOX_PATH", "MAX_REASON", "DecisionInbox", "InboxSettings"]

log = logging.getLogger(__name__)

INBOX_PATH: Final = "/inbox"
GRANTS_PATH: Final = f"{INBOX_PATH}/grants"
APPROVALS_PATH: Final = f"{INBOX_PATH}/approvals"
MAX_REASON: Final = 300
"""At most this many characters of an operator's reason for cancelling reach the audit."""
MAX_PAGE_SIZE: Final = 100
_MAX_ID = 64
_EVERY_DEADLINE: Final = datetime(9999, 1, 1, tzinfo=UTC)
"""Later than any decision's TTL: as `expiring_before`, it keeps every waiting decision and only those."""
_DONE: Final = {
    "declined": "Declined. The tool learns that you said no.",
    "cancelled": "Cancelled. The tool learns that the question was dismissed without an answer.",
    "cancelled-for": "Cancelled. The tool learns it was dismissed; your reason is in the audit.",
    "revoked": "Revoked. The calls it let through are asked again from now on.",
}
_KIND: Final = {GrantKind.SESSION: "For a session", GrantKind.ALWAYS: "Always"}

Action = Literal["decline", "cancel"]


@dataclass(frozen=True, slots=True)
class InboxSettings:
    """Who operates the inbox, and how long its pages are."""

    operators: frozenset[str] = field(default_factory=frozenset)
    """Principal ids (as the sign-in gives them, `issuer#username`) who see and may cancel everyone's decisions."""
    page_size: int = 20

    def __post_init__(self) -> None:
        if not 1 <= self.page_size <= MAX_PAGE_SIZE:
            raise ValueError(f"the inbox page size must be from 1 to {MAX_PAGE_SIZE}, got {self.page_size}")
        if isinstance(self.operators, str):
            raise TypeError("the inbox operators are a set of principal ids, not one string")
        if any(not isinstance(name, str) or not name for name in self.operators):
            raise ValueError("an inbox operator is a non-empty principal id")


@dataclass(frozen=True, slots=True)
class _Entry:
    decision: Decision
    tool: str
    client: str
    """The client as `UrlPages.client_label` shows it (HTML)."""
    own: bool


class DecisionInbox:
    """`GET /inbox`, `POST /inbox/{id}/decline` and `POST /inbox/{id}/cancel`, beside the `UrlPages` routes."""

    def __init__(self, pages: UrlPages, settings: InboxSettings | None = None) -> None:
        self._pages = pages
        self._settings = settings or InboxSettings()
        self._store = AsyncStore(pages.store)
        self._sign_in = pages.sign_in
        self._title = pages.server_title

    def routes(self) -> list[Route]:
        guard, item = self._pages.guarded, f"{INBOX_PATH}/{{elicitation_id}}"
        return [
            Route(INBOX_PATH, guard(self.show), methods=["GET"], name="elicit-inbox"),
            Route(f"{item}/decline", guard(self.decline), methods=["POST"], name="elicit-decline"),
            Route(f"{item}/cancel", guard(self.cancel), methods=["POST"], name="elicit-cancel"),
            Route(GRANTS_PATH, guard(self.show_grants), methods=["GET"], name="elicit-grants"),
            Route(APPROVALS_PATH, guard(self.show_approvals), methods=["GET"], name="elicit-approvals"),
            Route(f"{GRANTS_PATH}/{{grant_id}}/revoke", guard(self.revoke), methods=["POST"], name="elicit-revoke"),
        ]

    def is_operator(self, principal: str) -> bool:
        return principal in self._settings.operators

    # -- the listing ---------------------------------------------------------------------------------------

    async def show(self, request: Request) -> Response:
        principal = self._sign_in.principal_of(request)
        if principal is None:
            return self._sign_in.sign_in_redirect(request)
        after = request.query_params.get("after") or None
        operator = self.is_operator(principal)
        caller = Operator(principal) if operator else BrowserUser(principal)
        try:
            listed: DecisionPage = await self._store.decision_page(
                caller,
                DecisionFilter(expiring_before=_EVERY_DEADLINE),
                after=after,
                limit=self._settings.page_size,
            )
        except ValueError:
            return self._pages.message("This inbox link is not valid", "Open your inbox from its first page.", 400)
        unreadable = list(listed.unreadable)
        now = self._pages.now()
        tools: dict[str, str] = {}
        clients: dict[str, str] = {}
        entries = []
        for decision in listed.decisions:
            if decision.is_overdue(now):
                continue
            if decision.operation_id not in tools:
                tools[decision.operation_id] = await self._tool_of(decision, caller, unreadable.append)
            if decision.client_id not in clients:
                clients[decision.client_id] = await self._pages.client_label(decision.client_id)
            own = decision.principal_id == principal
            entries.append(_Entry(decision, tools[decision.operation_id], clients[decision.client_id], own))
        for row in unreadable:
            log.warning("the inbox left out a row it cannot read: %s", row)
        waiting = {}
        for entry in entries:
            if entry.own and entry.decision.approvers is not None:
                _, tally = await self._pages.approvers.tally(entry.decision)
                waiting[entry.decision.elicitation_id] = self._pages.approvers.waiting(entry.decision, tally)
        queue = await self._approvals_section(request, principal, more=True) if after is None else ""
        body = self._listing(
            principal, entries, listed, unreadable, first=after is None, done=request.query_params.get("done"),
            waiting=waiting, queue=queue,
        )  # fmt: skip
        if after is None:
            granted = await self._store.grant_page(caller, GrantFilter(active=True), limit=self._settings.page_size)
            for row in granted.unreadable:
                log.warning("the inbox left out a grant it cannot read: %s", row)
            body += "\n" + await self._grants_section(granted, principal, more=True)
        return page(f"{self._title}: {self._heading(principal).lower()}", body, server=self._title)

    async def show_grants(self, request: Request) -> Response:
        """`GET /inbox/grants`: every page of the person's standing grants (an operator's: everyone's)."""
        principal = self._sign_in.principal_of(request)
        if principal is None:
            return self._sign_in.sign_in_redirect(request)
        caller = Operator(principal) if self.is_operator(principal) else BrowserUser(principal)
        after = request.query_params.get("after") or None
        try:
            granted = await self._store.grant_page(
                caller, GrantFilter(active=True), after=after, limit=self._settings.page_size
            )
        except ValueError:
            return self._pages.message("This inbox link is not valid", "Open your inbox from its first page.", 400)
        for row in granted.unreadable:
            log.warning("the inbox left out a grant it cannot read: %s", row)
        back = f'<p><a href="{INBOX_PATH}">Back to the inbox</a></p>'
        section = await self._grants_section(granted, principal, more=False, first=after is None)
        return page(f"{self._title}: standing approvals", back + section, server=self._title)

    async def show_approvals(self, request: Request) -> Response:
        """`GET /inbox/approvals`: every page of the calls waiting for the signed-in approver's approval."""
        principal = self._sign_in.principal_of(request)
        if principal is None:
            return self._sign_in.sign_in_redirect(request)
        after = request.query_params.get("after") or None
        try:
            section = await self._approvals_section(request, principal, more=False, after=after)
        except ValueError:
            return self._pages.message("This inbox link is not valid", "Open your inbox from its first page.", 400)
        back = f'<p><a href="{INBOX_PATH}">Back to the inbox</a></p>'
        if not section:
            section = '<p class="muted">You hold no approver role: nothing waits for your approval.</p>'
        return page(f"{self._title}: waiting for your approval", back + section, server=self._title)

    async def _tool_of(
        self, decision: Decision, caller: BrowserUser | Operator, on_unreadable: Callable[[UnreadableRow], None]
    ) -> str:
        """The tool that asks; "a tool" when its operation is gone, or cannot be read (handed to `on_unreadable`)."""
        try:
            operation = await self._store.get_operation(decision.operation_id, caller)
        except NotFound:
            return "a tool"
        except UnreadableRow as row:
            on_unreadable(row)
            return "a tool"
        return operation.target

    def _listing(
        self,
        principal: str,
        entries: list[_Entry],
        listed: DecisionPage,
        unreadable: list[UnreadableRow],
        *,
        first: bool,
        done: str | None,
        waiting: Mapping[str, str],
        queue: str = "",
    ) -> str:
        operator = self.is_operator(principal)
        heading = self._heading(principal)
        role = " You are an operator: you see everyone's and may cancel them." if operator else ""
        parts = [
            f"<h1>{text(heading)}</h1>",
            f'<p class="muted">Signed in as {text(self._pages.who(principal))}.{text(role)} Newest first.</p>',
        ]
        if done in _DONE:
            parts.append(f'<p class="ok" role="status">{text(_DONE[done])}</p>')
        if queue:
            parts += [queue, f"<h2>{text(self._own_heading(principal))}</h2>"]
        if unreadable:
            parts.append(f'<p class="error">{text(_unreadable_note(unreadable))}</p>')
        if entries:
            parts.extend(
                self._entry(entry, principal, waiting=waiting.get(entry.decision.elicitation_id)) for entry in entries
            )
        else:
            parts.append(f'<p class="muted">{"Nothing more is waiting." if not first else "Nothing is waiting."}</p>')
        pager = []
        if not first:
            pager.append(f'<a href="{INBOX_PATH}">First page</a>')
        if listed.after is not None:
            more = urlencode({"after": listed.after})
            pager.append(f'<a href="{INBOX_PATH}?{text(more)}" rel="next">More</a>')
        if pager:
            parts.append(f'<nav class="pager" aria-label="Pages">{"".join(pager)}</nav>')
        return "\n".join(parts)

    def _own_heading(self, principal: str) -> str:
        return "Waiting for anyone" if self.is_operator(principal) else "Waiting for your answer"

    def _heading(self, principal: str) -> str:
        return "Decisions waiting for anyone" if self.is_operator(principal) else "Decisions waiting for you"

    async def _grants_section(self, granted: GrantPage, principal: str, *, more: bool, first: bool = True) -> str:
        """The standing grants of one page: what each lets through, from which app, until when, and a Revoke button.
        `more`: the inbox's own short list, which links to the grants' pages when more follow."""
        operator = self.is_operator(principal)
        heading = "Everyone's standing approvals" if operator else "Your standing approvals"
        parts = [
            f'<h2 id="grants">{text(heading)}</h2>',
            '<p class="muted">Calls these let through run without asking you. Revoke one to be asked again.</p>',
        ]
        if granted.unreadable:
            count = len(granted.unreadable)
            parts.append(f'<p class="error">{count} could not be read and {"is" if count == 1 else "are"} left out. '
                         "The server's log says which.</p>")  # fmt: skip
        clients: dict[str, str] = {}
        for grant in granted.grants:
            if grant.client_id not in clients:
                clients[grant.client_id] = await self._pages.client_label(grant.client_id)
            parts.append(self._grant_entry(grant, principal, clients[grant.client_id]))
        if not granted.grants and not granted.unreadable:
            parts.append(f'<p class="muted">{"None." if first else "No more."}</p>')
        pager = []
        if not more and not first:
            pager.append(f'<a href="{GRANTS_PATH}">First page</a>')
        if granted.after is not None:
            link = f"{GRANTS_PATH}?{urlencode({'after': granted.after})}"
            pager.append(f'<a href="{text(link)}" rel="next">{"All standing approvals" if more else "More"}</a>')
        if pager:
            parts.append(f'<nav class="pager" aria-label="Pages of standing approvals">{"".join(pager)}</nav>')
        return "\n".join(parts)

    def _grant_entry(self, grant: Grant, principal: str, client: str) -> str:
        ident = text(grant.grant_id)
        token = text(self._pages.form_token(_grant_subject(grant.grant_id), principal))
        scope = f" with {grant.scope}" if grant.scope is not None else ""
        shown = [("Tool", text(grant.tool)), ("Kind", text(_KIND[grant.kind])), ("Client", client)]
        if grant.principal_id != principal:
            shown.append(("For", text(self._pages.who(grant.principal_id))))
        shown += [("Approved", text(_when(grant.created_at))), ("Until", text(_when(grant.expires_at)))]
        facts = "<dl>\n" + "\n".join(f"<dt>{term}</dt><dd>{value}</dd>" for term, value in shown) + "\n</dl>"
        return f"""<section class="entry grant" aria-labelledby="grant-{ident}">
<h3 id="grant-{ident}">{text(grant.tool)} calls{text(scope)} run without asking</h3>
{facts}
<form class="actions" method="post" action="{GRANTS_PATH}/{ident}/revoke">
<input type="hidden" name="csrf" value="{token}"><button type="submit">Revoke</button></form>
</section>"""

    async def _approvals_section(
        self, request: Request, principal: str, *, more: bool, after: str | None = None
    ) -> str:
        """One page of the queue of the approver's roles: the calls waiting for their approval, each linked to its
        page; "" for a person who holds no approver role. `more`: the inbox's own first page, which links to the
        queue's pages when more follow. `ValueError` for a cursor no page gave."""
        approvers = self._pages.approvers
        roles = approvers.roles_of(principal, request)
        if not roles:
            return ""
        listed = await self._store.approval_page(
            roles, principal_id=principal, after=after, limit=self._settings.page_size
        )
        first = after is None
        now = self._pages.now()
        parts = [
            '<h2 id="approvals">Waiting for your approval</h2>',
            f'<p class="muted">Calls that need an approver in {text(", ".join(sorted(roles)))}. Newest first.</p>',
        ]
        shown = 0
        for decision in listed.decisions:
            if decision.is_overdue(now):
                continue
            _, tally = await approvers.tally(decision)
            state = "You voted. " if tally.voted(principal) else ""
            tool = await approvers.tool(decision)
            client = await self._pages.client_label(decision.client_id)
            facts = self._pages.facts(decision, tool, client, for_whom=self._pages.who(decision.principal_id),
                                      server=False)  # fmt: skip
            ident = text(decision.elicitation_id)
            parts.append(f"""<section class="entry approval" aria-labelledby="approval-{ident}">
<h3 id="approval-{ident}">{text(tool)} waits for your approval</h3>
<div class="message">{text(decision.message)}</div>
{facts}
<p class="tally">{text(state)}{text(approvers.waiting(decision, tally))}.</p>
<div class="actions"><a class="button" href="/elicit/{ident}">Open to approve</a></div>
</section>""")
            shown += 1
        if not shown:
            parts.append(f'<p class="muted">{"Nothing waits for your approval." if first else "Nothing more."}</p>')
        pager = []
        if not more and not first:
            pager.append(f'<a href="{APPROVALS_PATH}">First page</a>')
        if listed.after is not None:
            link = f"{APPROVALS_PATH}?{urlencode({'after': listed.after})}"
            label = "More waiting for your approval" if more else "More"
            pager.append(f'<a href="{text(link)}" rel="next">{label}</a>')
        if pager:
            parts.append(f'<nav class="pager" aria-label="Pages of the approvals queue">{"".join(pager)}</nav>')
        return "\n".join(parts)

    def _entry(
        self,
        entry: _Entry,
        principal: str,
        *,
        reason: str = "",
        problem: str | None = None,
        waiting: str | None = None,
    ) -> str:
        decision = entry.decision
        ident = text(decision.elicitation_id)
        token = text(self._pages.form_token(decision.elicitation_id, principal))
        csrf = f'<input type="hidden" name="csrf" value="{token}">'
        for_whom = None if entry.own else self._pages.who(decision.principal_id)
        facts = self._pages.facts(decision, entry.tool, entry.client, for_whom=for_whom, server=False)
        asks = f"{entry.tool} asks {'you' if entry.own else 'them'} to {self._pages.doing(decision)}"
        if entry.own and waiting is not None:
            asks = f"{entry.tool} waits for approval by others"
            actions = (
                f'<p class="tally">{text(waiting)}.</p>\n<p class="muted">Another person must approve '
                "your call; you cannot answer it. It ends by their votes, or is cancelled only by an operator or "
                "when it lapses.</p>"
            )
        elif entry.own:
            actions = self._own_actions(decision, csrf)
        else:
            shown = f' value="{text(reason)}"' if reason else ""
            error = f'<p class="error" role="alert">{text(problem)}</p>' if problem else ""
            actions = f"""{error}<form class="actions" method="post" action="{INBOX_PATH}/{ident}/cancel">
{csrf}<label for="reason-{ident}">Reason</label>
<input id="reason-{ident}" name="reason" type="text" required maxlength="{MAX_REASON}"{shown}
 placeholder="Why it is cancelled (goes to the audit)">
<button type="submit">Cancel for them</button></form>"""
        return f"""<section class="entry" aria-labelledby="entry-{ident}">
<h2 id="entry-{ident}">{text(asks)}</h2>
<div class="message">{text(decision.message)}</div>
{facts}
{actions}
</section>"""

    def _own_actions(self, decision: Decision, csrf: str) -> str:
        ident = text(decision.elicitation_id)
        buttons = []
        if decision.mode is Mode.URL:
            buttons.append(f'<a class="button" href="/elicit/{ident}">Continue</a>')
        elif _answerable_here(decision):
            buttons.append(f'<a class="button" href="/elicit/{ident}">Answer</a>')
        else:
            buttons.append('<span class="muted">Answer it in an app that can show the question.</span>')
        if decision.status is DecisionStatus.REQUESTED:
            buttons.append(
                f'<form method="post" action="{INBOX_PATH}/{ident}/decline">{csrf}'
                '<button type="submit">Decline</button></form>'
            )
        buttons.append(
            f'<form method="post" action="{INBOX_PATH}/{ident}/cancel">{csrf}'
            '<button type="submit">Cancel</button></form>'
        )
        return '<div class="actions">' + "\n".join(buttons) + "</div>"

    # -- moves ---------------------------------------------------------------------------------------------

    async def decline(self, request: Request) -> Response:
        return await self._move(request, "decline")

    async def cancel(self, request: Request) -> Response:
        return await self._move(request, "cancel")

    async def _move(self, request: Request, action: Action) -> Response:
        principal = self._sign_in.principal_of(request)
        if principal is None:
            return self._sign_in.sign_in_redirect(request)
        elicitation_id = str(request.path_params["elicitation_id"])
        form = await request.form()
        # The token first: a forged form writes nothing (not even an audit note or an expiry).
        expected = self._pages.form_token(elicitation_id, principal)
        if not hmac.compare_digest(str(form.get("csrf", "")), expected):
            return self._pages.message("This form has expired", "Reload your inbox and try again.", 403)
        try:
            return await self._make_move(elicitation_id, principal, action, str(form.get("reason", "")))
        except UnreadableRow as row:
            log.error("an inbox %s of decision %s stopped at a row it cannot read: %s", action, elicitation_id, row)
            damaged = "Its stored record is damaged; the server's log says how. Nothing changed."
            return self._pages.message("This decision could not be read", damaged, 500)

    async def _make_move(self, elicitation_id: str, principal: str, action: Action, reason: str) -> Response:
        """The move a person's valid form asks for, as far as the decision and their role allow."""
        found = await self._find(elicitation_id, principal)
        if found is None:
            return self._pages.message("Not in your inbox", "No decision of yours has this id. Nothing changed.", 404)
        decision, own = found
        if decision.is_terminal:
            return self._ended(decision)
        if own and decision.approvers is not None:
            return self._pages.message(
                "Approvers decide this",
                "You asked for this call; another person must approve it. It is cancelled only by an operator or "
                "when it lapses. Nothing changed.",
                403,
            )
        if not own:
            if action != "cancel":
                return self._pages.message("Not in your inbox", "No decision of yours has this id.", 404)
            return await self._cancel_for(decision, principal, reason)
        if action == "decline" and decision.status is not DecisionStatus.REQUESTED:
            return self._pages.message(
                "This can no longer be declined", "Its step has started; cancel it instead. Nothing changed.", 409
            )
        to, reason = (
            (DecisionStatus.DECLINED, "declined in the inbox")
            if action == "decline"
            else (DecisionStatus.CANCELLED, "cancelled in the inbox")
        )
        moved = await self._transition(decision, to, BrowserUser(principal), reason)
        if isinstance(moved, Response):
            return moved
        return RedirectResponse(f"{INBOX_PATH}?done={'declined' if action == 'decline' else 'cancelled'}", 303)

    async def _cancel_for(self, decision: Decision, principal: str, given: str) -> Response:
        """An operator cancels another person's decision; the reason they give goes to the audit, as said."""
        reason = " ".join("".join(c if c.isprintable() else " " for c in given).split())
        problem = None
        if not reason:
            problem = "Say why you cancel it: the reason goes to the audit. Nothing changed."
        elif len(reason) > MAX_REASON:
            problem = f"The reason may be at most {MAX_REASON} characters; it has {len(reason)}. Nothing changed."
        if problem is not None:
            tool = await self._tool_of(decision, Operator(principal), _logged)
            client = await self._pages.client_label(decision.client_id)
            body = "<h1>Cancel this decision</h1>\n" + self._entry(
                _Entry(decision, tool, client, own=False), principal, reason=given, problem=problem
            )
            return page(f"{self._title}: cancel a decision", body, server=self._title, status=400)
        moved = await self._transition(
            decision, DecisionStatus.CANCELLED, Operator(principal), f"cancelled by an operator in the inbox: {reason}"
        )
        if isinstance(moved, Response):
            return moved
        return RedirectResponse(f"{INBOX_PATH}?done=cancelled-for", 303)

    async def _transition(
        self, decision: Decision, to: DecisionStatus, caller: BrowserUser | Operator, reason: str
    ) -> Decision | Response:
        try:
            return await self._store.transition(decision, to, caller=caller, reason=reason)
        except (DecisionConflict, DecisionExpired) as lost:
            return self._ended(lost.current)

    async def _find(self, elicitation_id: str, principal: str) -> tuple[Decision, bool] | None:
        """The decision as the signed-in person may act on it, and whether it is their own; None when they may not."""
        if not 0 < len(elicitation_id) <= _MAX_ID:
            return None
        try:
            decision = await self._store.get_decision(elicitation_id, BrowserUser(principal))
        except NotFound:
            pass
        else:
            return await self._current(decision, BrowserUser(principal)), True
        try:
            decision = await self._store.get_decision(elicitation_id, Operator(principal))
        except NotFound:
            return None
        if self.is_operator(principal):
            return await self._current(decision, Operator(principal)), False
        await self._store.note(decision, actor=BrowserUser(principal), reason="inbox action by another user")
        log.warning("decision %s: an inbox action by another user was refused", elicitation_id)
        return None

    async def _current(self, decision: Decision, caller: BrowserUser | Operator) -> Decision:
        if not decision.is_overdue(self._pages.now()):
            return decision
        return await self._store.expire_if_overdue(decision.elicitation_id, caller, reason="acted on after the TTL")

    async def revoke(self, request: Request) -> Response:
        """`POST /inbox/grants/{id}/revoke`: the person revokes their grant, or an operator another person's."""
        principal = self._sign_in.principal_of(request)
        if principal is None:
            return self._sign_in.sign_in_redirect(request)
        grant_id = str(request.path_params["grant_id"])
        form = await request.form()
        # The token first: a forged or replayed-elsewhere form writes nothing.
        expected = self._pages.form_token(_grant_subject(grant_id), principal)
        if not hmac.compare_digest(str(form.get("csrf", "")), expected):
            return self._pages.message("This form has expired", "Reload your inbox and try again.", 403)
        gone = self._pages.message(
            "Not in your inbox", "No standing approval of yours has this id. Nothing changed.", 404
        )
        if not 0 < len(grant_id) <= _MAX_ID:
            return gone
        caller: BrowserUser | Operator = BrowserUser(principal)
        try:
            await self._store.get_grant(grant_id, caller)
        except NotFound:
            if not self.is_operator(principal):
                log.warning("grant %s: an inbox revocation by someone it is not theirs to revoke was refused", grant_id)
                return gone
            caller = Operator(principal)
        reason = "revoked in the inbox" if isinstance(caller, BrowserUser) else "revoked by an operator in the inbox"
        try:
            await self._store.revoke_grant(grant_id, caller=caller, reason=reason)
        except NotFound:
            return gone
        except GrantEnded as ended:
            return self._pages.message("This standing approval already ended", f"It {ended.how}. Nothing changed.", 409)
        except UnreadableRow as row:
            log.error("an inbox revocation of grant %s stopped at a row it cannot read: %s", grant_id, row)
            damaged = "Its stored record is damaged; the server's log says how. Nothing changed."
            return self._pages.message("This standing approval could not be read", damaged, 500)
        return RedirectResponse(f"{INBOX_PATH}?done=revoked", 303)

    def _ended(self, decision: Decision) -> Response:
        if decision.status is DecisionStatus.EXPIRED:
            return self._pages.message(
                "This decision has expired", "It was only open for a limited time. Nothing was recorded.", 410
            )
        said = {
            DecisionStatus.DECLINED: "It was declined.",
            DecisionStatus.CANCELLED: "It was cancelled.",
            DecisionStatus.ACCEPTED: "It was answered.",
            DecisionStatus.EXTERNAL_COMPLETED: "Its step was completed.",
            DecisionStatus.EXTERNAL_FAILED: "Its step failed.",
        }.get(decision.status, "It moved on meanwhile.")
        return self._pages.message("This decision is no longer waiting", f"{said} Nothing changed.", 409)


def _grant_subject(grant_id: str) -> str:
    """What a grant's CSRF token is bound to: never a decision's id, so no decision form's token revokes a grant."""
    return f"grant:{grant_id}"


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _logged(row: UnreadableRow) -> None:
    log.warning("the inbox cannot read a row: %s", row)


def _unreadable_note(rows: list[UnreadableRow]) -> str:
    """What the listing says of the rows it could not read: what each kind leaves out (the log names them)."""
    decisions = sum(row.record == "decision" for row in rows)
    said = []
    if decisions:
        said.append(f"{decisions} of these could not be read and {'is' if decisions == 1 else 'are'} left out.")
    if len(rows) > decisions:
        said.append('For some of these, the tool that asks could not be read: it is shown as "a tool".')
    return " ".join([*said, "The server's log says which."])


def _answerable_here(decision: Decision) -> bool:
    """Whether the decision page can show the question: the restricted-schema reader the form page uses says so."""
    try:
        parse_form(decision.requested_schema)
    except UnsupportedSchema:
        return False
    return True
