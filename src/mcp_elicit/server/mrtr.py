"""The 2026-07-28 adapter: ask by ending the round with `InputRequiredResult`, record on the retry.

Nothing is pinned in memory between rounds. The round's plaintext state names the operation, the
decisions asked and a single-use nonce; any instance can serve the retry. Answers are applied only for
the decisions that round asked, and only when valid: a missing, extra or invalid response leaves the
decision open and asks again, it never completes anything. A URL decision whose flow is still running
gets a bounded server-side wait, then a state-only round so the client retries without a person.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from mcp_types import (
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestURLParams,
    ElicitResult,
    InputRequests,
    InputRequiredResult,
)

from mcp_elicit.model import Decision, DecisionStatus, Mode
from mcp_elicit.server.eras import Modes
from mcp_elicit.server.flow import Flow, Suspend
from mcp_elicit.server.forms import FormSpec, InvalidAnswer
from mcp_elicit.server.state import RoundState
from mcp_elicit.server.waiting import settle

DEFAULT_LONG_POLL = timedelta(seconds=5)


class MrtrAsker:
    def __init__(
        self,
        modes: Modes,
        responses: Mapping[str, Any] | None,
        asked: Mapping[str, str],
        long_poll: timedelta = DEFAULT_LONG_POLL,
    ) -> None:
        self._modes = modes
        self._responses = dict(responses or {})
        self._asked = dict(asked)
        self._long_poll = long_poll

    def can_ask(self, mode: Mode) -> bool:
        return self._modes.form if mode is Mode.FORM else self._modes.url

    async def ask(self, flow: Flow, decision: Decision, form: FormSpec[Any] | None) -> Decision:
        note: str | None = None
        response = self._response_for(decision)
        if response is not None:
            decision, note = await self._apply(flow, decision, form, response)
            if decision.is_terminal:
                return decision
        if decision.status is DecisionStatus.REQUESTED:
            raise Suspend([(decision, note)])
        decision = await settle(flow, decision, until=min(decision.expires_at, flow.now() + self._long_poll))
        if not decision.is_terminal and decision.is_overdue(flow.now()):
            decision = await flow.refresh(decision)
        if decision.is_terminal:
            return decision
        raise Suspend([], waiting=True)

    def _response_for(self, decision: Decision) -> ElicitResult | None:
        if self._asked.get(decision.key) != decision.elicitation_id:
            return None
        response = self._responses.get(decision.key)
        return response if isinstance(response, ElicitResult) else None

    async def _apply(
        self, flow: Flow, decision: Decision, form: FormSpec[Any] | None, response: ElicitResult
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
        return await flow.record(decision, DecisionStatus.ACCEPTED, content=content, reason="answered"), None


def input_required(suspend: Suspend, operation_id: str) -> tuple[InputRequiredResult, RoundState]:
    """The round's wire result and the plaintext state it carries (the SDK's boundary seals it)."""
    requests: InputRequests = {}
    asked: dict[str, str] = {}
    for decision, note in suspend.asking:
        message = decision.message + (note or "")
        if decision.mode is Mode.FORM:
            params: ElicitRequestFormParams | ElicitRequestURLParams = ElicitRequestFormParams(
                message=message,
                requested_schema=decision.requested_schema,  # type: ignore[arg-type]
            )
        else:
            assert decision.url is not None
            params = ElicitRequestURLParams(message=message, url=decision.url)
        requests[decision.key] = ElicitRequest(params=params)
        asked[decision.key] = decision.elicitation_id
    state = RoundState(operation_id=operation_id, asked=asked)
    return InputRequiredResult(input_requests=requests or None, request_state=state.encode()), state
