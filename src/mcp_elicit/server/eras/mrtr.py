"""The 2026-07-28 adapter: ask by ending the round with `InputRequiredResult`, record on the retry.

Nothing is pinned in memory between rounds. The round's plaintext state names the operation, what the
round asked (each decision by its id, each question to the client itself by its method) and a
single-use nonce; any instance can serve the retry. Answers are applied only for what that round
asked (or, sent without any round's state, for a form question the request asks), and only when
valid: a missing, extra or invalid response leaves the decision open (or the query unanswered) and
asks again, it never completes anything. A URL decision whose flow is still running gets a bounded
server-side wait, then a state-only round so the client retries without a person.
`gather` lets every item ask before the round ends, so one round carries them all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from mcp_types import (
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestURLParams,
    ElicitResult,
    InputRequest,
    InputRequests,
    InputRequiredResult,
)

from mcp_elicit.model import Decision, DecisionStatus, Mode
from mcp_elicit.server.eras import Declared, Need
from mcp_elicit.server.flow import A, CannotAsk, ClientQuery, Flow, discard
from mcp_elicit.server.forms import FormSpec, InvalidAnswer
from mcp_elicit.server.state import RoundState
from mcp_elicit.server.waiting import settle

DEFAULT_LONG_POLL = timedelta(seconds=5)


@dataclass(frozen=True, slots=True)
class Asking:
    """One input request of the round, and what the round state records for its key."""

    key: str
    request: InputRequest
    marker: str
    """The decision's elicitation id, or the method of a question to the client itself."""


class Suspend(Exception):
    """Ends a 2026-07-28 round: these must be asked (or something is still waiting) before the body goes on."""

    def __init__(self, asking: Sequence[Asking] = (), waiting: bool = False) -> None:
        super().__init__("input required")
        self.asking = list(asking)
        self.waiting = waiting

    @classmethod
    def merged(cls, suspends: Sequence[Suspend]) -> Suspend:
        return cls([a for s in suspends for a in s.asking], waiting=any(s.waiting for s in suspends))


class MrtrAsker:
    def __init__(
        self,
        declared: Declared,
        responses: Mapping[str, Any] | None,
        asked: Mapping[str, str],
        long_poll: timedelta = DEFAULT_LONG_POLL,
        *,
        answers_without_state: bool = False,
    ) -> None:
        self._declared = declared
        self._responses = dict(responses or {})
        self._asked = dict(asked)
        self._long_poll = long_poll
        self._answers_without_state = answers_without_state

    def can(self, need: Need) -> bool:
        return self._declared.allows(need)

    async def ask(self, flow: Flow, decision: Decision, form: FormSpec[Any] | None) -> Decision:
        note: str | None = None
        response, reason = self._response_for(decision)
        if response is not None:
            decision, note = await self._apply(flow, decision, form, response, reason)
            if decision.is_terminal:
                return decision
        if decision.status is DecisionStatus.REQUESTED:
            raise Suspend([_elicitation(decision, note)])
        decision = await settle(flow, decision, until=min(decision.expires_at, flow.now() + self._long_poll))
        if not decision.is_terminal and decision.is_overdue(flow.now()):
            decision = await flow.refresh(decision)
        if decision.is_terminal:
            return decision
        raise Suspend([], waiting=True)

    async def query(self, flow: Flow, key: str, query: ClientQuery, answer: type[A]) -> A:
        """The response the round that asked `key` this very question got back, or a new round asking it."""
        if self._asked.get(key) == query.method:
            response = self._responses.get(key)
            if isinstance(response, answer):
                return response
        raise Suspend([Asking(key, query, query.method)])

    async def gather(self, items: Sequence[Awaitable[Any]]) -> list[Any]:
        """Let every item ask before the round ends; one round then carries all their input requests."""
        results: list[Any] = []
        suspended: list[Suspend] = []
        unaskable: list[CannotAsk] = []
        for index, item in enumerate(items):
            try:
                results.append(await item)
            except Suspend as suspend:
                suspended.append(suspend)
            except CannotAsk as cannot:
                unaskable.append(cannot)
            except BaseException:
                discard(items[index + 1 :])
                raise
        if unaskable:
            raise CannotAsk.merged(unaskable)
        if suspended:
            raise Suspend.merged(suspended)
        return results

    def _response_for(self, decision: Decision) -> tuple[ElicitResult | None, str]:
        """The response meant for this decision: the one its round asked for, or one sent without a round.

        A request without `requestState` may carry responses keyed like the questions, as a stateless
        server would read them. They count for a form question this request asks, once (the decision's
        compare-and-set), validated like any answer. The round's state adds no proof that a person saw
        the question (a client could always answer without asking anyone); it stops one round's answers
        from being applied twice, which the compare-and-set does here. A URL consent counts only from a
        round: it means someone was shown that URL.
        """
        response = self._responses.get(decision.key)
        if not isinstance(response, ElicitResult):
            return None, ""
        if self._asked.get(decision.key) == decision.elicitation_id:
            return response, "answered"
        if self._answers_without_state and decision.mode is Mode.FORM:
            return response, "answered with the request, without a round's state"
        return None, ""

    async def _apply(
        self, flow: Flow, decision: Decision, form: FormSpec[Any] | None, response: ElicitResult, reason: str
    ) -> tuple[Decision, str | None]:
        if response.action == "decline":
            return await flow.record(decision, DecisionStatus.DECLINED, reason="client answered decline"), None
        if response.action == "cancel":
            return await flow.record(decision, DecisionStatus.CANCELLED, reason="client answered cancel"), None
        if decision.mode is Mode.URL:
            return await flow.record(decision, DecisionStatus.ACCEPTED_URL, reason="consented to open the URL"), None
        assert form is not None
        try:
            answer = form.validate(response.content)
        except InvalidAnswer as invalid:
            return decision, f"\n\n(The previous answer could not be used: {invalid} Please answer again.)"
        content = form.content(answer)
        return await flow.record(decision, DecisionStatus.ACCEPTED, content=content, reason=reason), None


def _elicitation(decision: Decision, note: str | None) -> Asking:
    message = decision.message + (note or "")
    if decision.mode is Mode.FORM:
        params: ElicitRequestFormParams | ElicitRequestURLParams = ElicitRequestFormParams(
            message=message,
            requested_schema=decision.requested_schema,  # type: ignore[arg-type]
        )
    else:
        assert decision.url is not None
        params = ElicitRequestURLParams(message=message, url=decision.url)
    return Asking(decision.key, ElicitRequest(params=params), decision.elicitation_id)


def input_required(suspend: Suspend, operation_id: str) -> tuple[InputRequiredResult, RoundState]:
    """The round's wire result and the plaintext state it carries (the SDK's boundary seals it)."""
    requests: InputRequests = {}
    asked: dict[str, str] = {}
    for asking in suspend.asking:
        if asking.key in requests:
            raise RuntimeError(f"input request key {asking.key!r} asked twice in one round")
        requests[asking.key] = asking.request
        asked[asking.key] = asking.marker
    state = RoundState(operation_id=operation_id, asked=asked)
    return InputRequiredResult(input_requests=requests or None, request_state=state.encode()), state
