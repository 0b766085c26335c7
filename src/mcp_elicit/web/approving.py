"""The decision page of a decision that approvers answer (`Decision.approvers`): who may see it, the vote they cast.

Such a decision is not its requester's to answer. At `/elicit/{id}` the requester is told whom it waits on and how
far the votes are (four-eyes: they never approve their own call); a signed-in person who holds none of the roles
that may vote now is refused, the roles needed named, the attempt audited, with the switch of account the pages
offer; an eligible approver sees the call (tool, summary, client, requester, deadline), the question, the votes so
far (per proposal, each change from the call as made spelled out with who made it), and the form prefilled with
the leading proposal, with Approve and Reject and, above them, exactly what Approve approves. The call's own
values are the defaults of the question's editable fields; a field without one (its value hidden from the
question) is shown as unknown, never as unchanged. A requester who presses Approve on their own call is refused
and the attempt audited. The grant choice is never offered to approvers, and nothing cancels from here: an
approver decision ends by its votes, an operator, or its TTL.

Guarantees: opening the page changes nothing (the refusal of a person not eligible is noted in the audit, as the
pages note strangers); the roles come from `ApproverRoles` (the configuration, the sign-in's claim) at every page
and every vote, never from the browser; a vote is a POST with the pages' CSRF token, its form checked again (a
field the page did not show refuses the post, an invalid value shows the page back), and then cast in one
transaction by the store, which checks four-eyes, eligibility, state, expiry and replay again and binds the
approval to the digest of what it approves. A refused vote records nothing and says why.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final, cast

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from mcp_elicit.model import BrowserUser, Decision, DecisionStatus, JSONObject, Operator
from mcp_elicit.model.approvers import (
    GRANT_FIELD,
    NOTE_FIELD,
    REJECT_FIELD,
    REMARKS,
    Approver,
    ApproverRule,
    Tally,
    Verdict,
    Vote,
)
from mcp_elicit.model.digest import canonical_json
from mcp_elicit.model.form_schema import Answer, Form, UnsupportedSchema, parse_form
from mcp_elicit.store import DecisionConflict, DecisionExpired, NotFound, VoteRefusal, VoteRefused
from mcp_elicit.store.aio import AsyncStore
from mcp_elicit.web.formpage import FIELD_PREFIX, posted_values, read_answer, render, unknown_fields
from mcp_elicit.web.html import page, text
from mcp_elicit.web.roles import ApproverRoles

if TYPE_CHECKING:
    from mcp_elicit.web.pages import UrlPages

__all__ = ["HIDDEN_FROM_APPROVERS", "ApproverPages", "approver_form"]

log = logging.getLogger(__name__)

HIDDEN_FROM_APPROVERS: Final = frozenset({GRANT_FIELD, REJECT_FIELD})
"""Fields of an approval's form an approver is never shown: a grant is the requester's own to give, and a
rejection is the Reject button."""
_READER: Final = Operator("approver-pages")


def approver_form(schema: object, proposal: Mapping[str, object] | None = None) -> Form:
    """The form an approver answers: the decision's own without `HIDDEN_FROM_APPROVERS`, its fields prefilled with
    `proposal`'s values where it has them. `UnsupportedSchema` when the page cannot show the question."""
    fields = []
    for found in parse_form(schema).fields:
        if found.name in HIDDEN_FROM_APPROVERS:
            continue
        if proposal is not None and found.name in proposal:
            found = dataclasses.replace(found, default=cast(Answer, proposal[found.name]))
        fields.append(found)
    return Form(tuple(fields))


class ApproverPages:
    """The approver's side of `UrlPages`: its show and answer for decisions with approvers."""

    def __init__(self, pages: UrlPages, roles: ApproverRoles | None, clock: Callable[[], float]) -> None:
        self._pages = pages
        self._roles = roles or ApproverRoles()
        self._reach = AsyncStore(pages.store)
        self._clock = clock

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    async def decision(self, elicitation_id: str) -> Decision | None:
        """The decision `elicitation_id` when approvers answer it, read whoever asks (nothing is shown before the
        checks of `show` and `vote`); None for any other, or none."""
        try:
            decision = await self._reach.get_decision(elicitation_id, _READER)
        except NotFound:
            return None
        return decision if decision.approvers is not None else None

    def roles_of(self, principal: str, request: Request) -> frozenset[str]:
        return self._roles.roles_of(principal, self._pages.sign_in, request)

    def eligible(self, decision: Decision, roles: frozenset[str]) -> frozenset[str]:
        """The roles of `roles` that may vote on `decision` now (escalation included)."""
        rule = _rule(decision)
        return roles & frozenset(rule.eligible_roles(decision.created_at, self._now()))

    async def tally(self, decision: Decision) -> tuple[list[Vote], Tally]:
        votes = await self._reach.votes(decision.elicitation_id)
        return votes, Tally.of(_rule(decision), votes)

    def waiting(self, decision: Decision, tally: Tally) -> str:
        """Whom it waits on and how far, as the requester's call says it (`Tally.waiting`)."""
        return tally.waiting(_rule(decision), decision.created_at, self._now())

    # -- GET ---------------------------------------------------------------------------------------------------

    async def show(self, request: Request, principal: str, decision: Decision) -> Response:
        votes, tally = await self.tally(decision)
        ended = decision.is_terminal or decision.is_overdue(self._now())
        if decision.principal_id == principal:
            return self._ended(decision, tally) if ended else self._own_call(decision, tally)
        if not self.eligible(decision, self.roles_of(principal, request)):
            return await self._not_eligible(request, principal, decision, "opened by someone not among its approvers")
        if ended:
            return self._ended(decision, tally)
        return await self._page(decision, principal, votes, tally)

    async def _page(
        self,
        decision: Decision,
        principal: str,
        votes: Sequence[Vote],
        tally: Tally,
        *,
        values: Mapping[str, list[str]] | None = None,
        problems: Mapping[str, list[str]] | None = None,
    ) -> Response:
        pages = self._pages
        leading = _leading(votes, tally)
        try:
            form = approver_form(decision.requested_schema, leading)
        except UnsupportedSchema as unsupported:
            log.warning("decision %s cannot be answered on the page: %s", decision.elicitation_id, unsupported)
            return pages.message("This question cannot be shown here", "Nothing was recorded.", 409)
        tool = await self.tool(decision)
        client = await pages.client_label(decision.client_id)
        facts = pages.facts(decision, tool, client, for_whom=pages.who(decision.principal_id))
        mine = [vote for vote in votes if vote.approver_id == principal]
        approved_leading = any(
            vote.verdict is Verdict.APPROVE and vote.proposal == _leading_proposal(tally) for vote in mine
        )
        notice = ""
        if problems:
            general = "".join(f"<br>{text(p)}" for p in problems.get("", ()))
            notice = (
                f'<div class="error" role="alert">Some values need another look; nothing was recorded.{general}</div>'
            )
        body = [
            f"<h1>{text(pages.server_title)} asks for your approval</h1>",
            f'<div class="message">{text(decision.message)}</div>',
            facts,
            self._votes_section(decision, votes, tally, principal),
            notice,
        ]
        if approved_leading:
            body.append(
                '<p class="ok">You approved these values. Your vote counts once; the call waits for the others.</p>'
            )
        else:
            token = pages.form_token(decision.elicitation_id, principal)
            needed = f"{tally.quorum} approval{'s' if tally.quorum > 1 else ''}"
            if _is_gate(decision):
                changed = _approves(decision, leading or {})
                approves = f"Approve approves: {changed or 'the call as made'}."
            else:
                approves = "Approve answers with the values in the form."
            body.append(f"""<form method="post" action="/elicit/{text(decision.elicitation_id)}/answer">
<input type="hidden" name="csrf" value="{text(token)}">
{render(form, values=values, errors=problems)}
<p class="approves" id="approves"><strong>{text(approves)}</strong></p>
<div class="actions">
<button class="primary" type="submit" name="action" value="approve">Approve</button>
<button type="submit" name="action" value="reject" formnovalidate>Reject</button>
</div>
</form>
<p class="muted">If you change a value, Approve approves your values instead: a new proposal, and the approvals
count again from it. Reject ends it: nothing runs. It needs {needed} of the same values.</p>""")
        title = f"{pages.server_title}: an approval for you"
        return page(title, "\n".join(part for part in body if part), server=pages.server_title,
                    status=400 if problems else 200)  # fmt: skip

    def _votes_section(self, decision: Decision, votes: Sequence[Vote], tally: Tally, principal: str) -> str:
        """The votes so far: approvals of each proposal and by whom, and the signed-in approver's own vote."""
        who = self._pages.who
        parts = ['<h2 id="votes">Votes</h2>']
        if not tally.approvals:
            parts.append(f'<p class="muted">No approvals yet; {tally.quorum} needed.</p>')
        contents = {vote.proposal: vote.content for vote in votes}
        for proposal, approvers in tally.approvals.items():
            names = ", ".join(who(approver) for approver in approvers)
            shown = f"Approved {len(approvers)} of {tally.quorum}: {names}"
            content = contents.get(proposal, {})
            if not _is_gate(decision):
                values = _values(content)
                shown += f", answering {values}." if values else "."
            elif changes := _changes(decision, content):
                shown += f". {who(approvers[0])} changed {'; '.join(changes)}."
            else:
                shown += ", the call as made."
            parts.append(f'<p class="tally">{text(shown)}</p>')
        if tally.rejected_by is not None:
            parts.append(f'<p class="tally">Rejected by {text(who(tally.rejected_by))}</p>')
        for vote in votes:
            if vote.approver_id == principal:
                said = "approved" if vote.verdict is Verdict.APPROVE else "rejected"
                values = _values(vote.content)
                note = f" with the note {vote.note!r}" if vote.note else ""
                parts.append(f'<p class="mine">You {said}{text(" " + values if values else "")}{text(note)}.</p>')
        return "\n".join(parts)

    def _own_call(self, decision: Decision, tally: Tally) -> Response:
        title = "Another person must approve this"
        detail = (
            f"You asked for this call; another person must approve it. {self.waiting(decision, tally)}. "
            "Nothing was changed."
        )
        return self._pages.message(title, detail, 403)

    async def _not_eligible(self, request: Request, principal: str, decision: Decision, reason: str) -> Response:
        await self._reach.note(decision, actor=BrowserUser(principal), reason=reason)
        log.warning("decision %s: %s", decision.elicitation_id, reason)
        roles = _rule(decision).waiting_on(decision.created_at, self._now())
        title = "You are not among the approvers of this call"
        detail = (
            f"You are signed in as {self._pages.who(principal)}. It needs an approver in {roles}. Nothing was changed."
        )
        return self._pages.refusal(request, title, detail, decision.elicitation_id)

    def _ended(self, decision: Decision, tally: Tally, *, just_now: bool = False) -> Response:
        """Where a decided (or lapsed) decision stands; `just_now` when this very vote decided it."""
        message = self._pages.message
        if decision.status is DecisionStatus.EXPIRED or (not decision.is_terminal and decision.is_overdue(self._now())):
            return message("This approval has expired", "Nobody decided in time. Nothing was recorded.", 410)
        rejected = decision.status is DecisionStatus.DECLINED or (
            decision.status is DecisionStatus.ACCEPTED and (decision.content or {}).get(REJECT_FIELD) is True
        )
        status = 200 if just_now else 409
        vote = "" if just_now else " Your vote was not recorded."
        if rejected:
            by = f" by {self._pages.who(tally.rejected_by)}" if tally.rejected_by else ""
            return message("Rejected", f"It was rejected{by}: nothing runs.{vote}", status, ok=just_now)
        if decision.status is DecisionStatus.ACCEPTED:
            if _is_gate(decision):
                changed = _approves(decision, decision.content or {})
                runs = "the call runs " + (f"with {changed}," if changed else "as made")
                runs += " when the requester's call picks it up (at once if it is still waiting)"
            else:
                runs = "the answer goes to the tool that asked"
            return message("Approved", f"Approved: {runs}.{vote}", status, ok=just_now)
        if decision.status is DecisionStatus.CANCELLED:
            return message("Cancelled", f"It was cancelled without a decision.{vote}", 409)
        return message("This approval is no longer waiting", f"It moved on meanwhile.{vote}", 409)

    # -- POST --------------------------------------------------------------------------------------------------

    async def vote(self, request: Request, principal: str, decision: Decision, posted: FormData) -> Response:
        """Cast the signed-in approver's vote from the page's post (its CSRF token already checked)."""
        votes, tally = await self.tally(decision)
        if decision.principal_id == principal:
            reason = "a vote by its requester on their own call (four-eyes)"
            await self._reach.note(decision, actor=BrowserUser(principal), reason=reason)
            log.warning("decision %s: %s", decision.elicitation_id, reason)
            return self._own_call(decision, tally)
        roles = self.roles_of(principal, request)
        if not self.eligible(decision, roles):
            return await self._not_eligible(request, principal, decision, "a vote by someone not among its approvers")
        if decision.is_terminal or decision.is_overdue(self._now()):
            return self._ended(decision, tally)
        try:
            form = approver_form(decision.requested_schema)
        except UnsupportedSchema:
            return self._pages.message("This question cannot be shown here", "Nothing was recorded.", 409)
        unknown = unknown_fields(form, posted.keys())
        if unknown:
            log.warning("decision %s: a vote carried fields the page has not: %s", decision.elicitation_id,
                        ", ".join(name.removeprefix(FIELD_PREFIX)[:40] for name in unknown[:5]))  # fmt: skip
            return self._pages.message(
                "This form was not sent as the page showed it",
                "It carries fields the question does not have. Nothing was recorded; reload the page.",
                400,
            )
        action = posted.get("action")
        values = posted_values(form, posted.getlist)
        content, problems = read_answer(form, values)
        if action == "reject":
            problems = {name: found for name, found in problems.items() if name == NOTE_FIELD}
            content = {name: value for name, value in content.items() if name == NOTE_FIELD}
            if _is_gate(decision):
                content[REJECT_FIELD] = True
            verdict = Verdict.REJECT
        elif action == "approve":
            verdict = Verdict.APPROVE
        else:
            return self._pages.message("This form was not sent whole", "Reload the page and try again.", 400)
        if problems:
            log.info("decision %s: a vote did not fit (%s)", decision.elicitation_id, ", ".join(sorted(problems)))
            return await self._page(decision, principal, votes, tally, values=values, problems=problems)
        approver = Approver(principal, roles)
        try:
            cast_vote = await self._reach.cast_vote(decision.elicitation_id, approver, verdict, content)
        except VoteRefused as refused:
            return self._refused(request, principal, decision, tally, refused)
        except DecisionExpired as expired:
            return self._ended(expired.current, tally)
        except DecisionConflict as moved:
            return self._ended(moved.current, (await self.tally(moved.current))[1])
        if cast_vote.decision.is_terminal:
            return self._ended(cast_vote.decision, cast_vote.tally, just_now=True)
        count, quorum = len(cast_vote.tally.approvals.get(cast_vote.vote.proposal, ())), cast_vote.tally.quorum
        needed = _rule(decision).waiting_on(decision.created_at, self._now())
        left = quorum - count
        more = (
            f"{left} more approver in {needed} approves" if left == 1 else f"{left} more approvers in {needed} approve"
        )
        return self._pages.message(
            "Your approval was recorded",
            f"Your approval was recorded: {count} of {quorum}. It goes on once {more} the same values.",
            200,
            ok=True,
        )

    def _refused(
        self, request: Request, principal: str, decision: Decision, tally: Tally, refused: VoteRefused
    ) -> Response:
        reason = refused.reason
        if reason is VoteRefusal.OWN_CALL:
            return self._own_call(decision, tally)
        if reason is VoteRefusal.ALREADY_VOTED:
            return self._pages.message(
                "You already voted",
                "Your vote on these values was recorded before and counts once. Nothing changed.",
                409,
            )
        if reason is VoteRefusal.NOT_ELIGIBLE:
            roles = _rule(decision).waiting_on(decision.created_at, self._now())
            who = self._pages.who(principal)
            detail = f"You are signed in as {who}. It needs an approver in {roles}. Nothing was recorded."
            title = "You are not among the approvers of this call"
            return self._pages.refusal(request, title, detail, decision.elicitation_id)
        return self._pages.message(
            "Nobody votes on this", "It is answered by the person who asked. Nothing changed.", 409
        )

    async def tool(self, decision: Decision) -> str:
        try:
            operation = await self._reach.get_operation(decision.operation_id, _READER)
        except NotFound:
            return "a tool"
        return operation.target


def _rule(decision: Decision) -> ApproverRule:
    if decision.approvers is None:
        raise ValueError(f"decision {decision.elicitation_id} names no approvers")
    return decision.approvers


def _is_gate(decision: Decision) -> bool:
    properties = (decision.requested_schema or {}).get("properties")
    return isinstance(properties, dict) and REJECT_FIELD in properties


def _leading_proposal(tally: Tally) -> str | None:
    """The proposal with the most approvals; of two with as many, the one approved last."""
    best = None
    for proposal, approvers in tally.approvals.items():
        if best is None or len(approvers) >= len(tally.approvals[best]):
            best = proposal
    return best


def _leading(votes: Sequence[Vote], tally: Tally) -> JSONObject | None:
    """The values of the leading proposal, to prefill the form with; None before any approval."""
    leading = _leading_proposal(tally)
    for vote in votes:
        if vote.proposal == leading and vote.verdict is Verdict.APPROVE:
            return {name: value for name, value in vote.content.items() if name not in REMARKS}
    return None


def _differences(decision: Decision, content: Mapping[str, object]) -> list[tuple[str, str | None, str]]:
    """Where a gate's proposal differs from the call as made: (field, the call's value, the proposal's), values as
    JSON. The call's own values are the defaults its question was asked with; a field without one had its value
    hidden (a secret-looking argument is not prefilled), so a value given for it differs from an unknown one
    (None). A field the proposal leaves out is as called."""
    differences: list[tuple[str, str | None, str]] = []
    for found in approver_form(decision.requested_schema).fields:
        if found.name in REMARKS or found.name not in content:
            continue
        given = canonical_json(content[found.name])
        if found.default is None:
            differences.append((found.name, None, given))
        elif content[found.name] != found.default:
            differences.append((found.name, canonical_json(found.default), given))
    return differences


def _changes(decision: Decision, content: Mapping[str, object]) -> list[str]:
    """A proposal's changes as its votes say them: "amount: 400 → 250", "pin: (not shown) → 1234"."""
    return [f"{name}: {called or '(not shown)'} → {given}" for name, called, given in _differences(decision, content)]


def _approves(decision: Decision, content: Mapping[str, object]) -> str | None:
    """What a gate's approval of `content` changes in the call, as the approver must read it before pressing
    Approve: "amount 250 (changed from 400), the rest as called"; None when it runs the call as made."""
    try:
        differences = _differences(decision, content)
    except UnsupportedSchema:
        return "the values recorded"
    changed = [
        f"{name} {given} "
        + (f"(changed from {called})" if called is not None else "(its value in the call is not shown)")
        for name, called, given in differences
    ]
    return f"{', '.join(changed)}, the rest as called" if changed else None


def _values(content: Mapping[str, object]) -> str:
    """A proposal's values as the page shows them (`amount: 250`); "" for an answer without values."""
    kept = {name: value for name, value in content.items() if name not in REMARKS and name != REJECT_FIELD}
    if not kept:
        return ""
    return ", ".join(f"{name}: {canonical_json(value)}" for name, value in kept.items())
