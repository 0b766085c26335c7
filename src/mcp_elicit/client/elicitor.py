"""Putting one elicitation in front of the handler and mapping the reply onto the wire, on every era.

Both delivery paths end here: a 2025-era `elicitation/create` request (through the SDK's callback) and a
2026-07-28 input request (through the kit's own round loop). So the same rules hold everywhere:

- a mode the handler did not declare is refused with `-32602` and never shown (the 2025-11-25 rule; on
  2026-07-28 the call then fails with that error, since a server must not ask for it either);
- one question at a time: a person answers one dialog at a time, so parallel calls queue for the handler;
- form answers are checked before they are sent (`replies`); decline and cancel stay distinct;
- a URL is reviewed first (`url_review`); one that is not http(s) is never offered: the answer is `cancel`
  (nobody decided), a warning is logged and the flow shows as cancelled with the reason; a consented URL is
  opened by the opener only after consent, and a URL that cannot be opened is answered `cancel` too, since
  the person cannot act on it (the flow shows as failed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace

import anyio
from mcp_types import INVALID_PARAMS, ElicitRequestFormParams, ElicitRequestURLParams, ElicitResult, ErrorData

from mcp_elicit.client.calls import CallInFlight
from mcp_elicit.client.handler import (
    Accept,
    Asker,
    Cancel,
    Consent,
    Decline,
    ElicitationHandler,
    FormRequest,
    UrlRequest,
)
from mcp_elicit.client.opener import UrlOpener, open_with
from mcp_elicit.client.pending import FlowStatus, PendingFlow, PendingFlows
from mcp_elicit.client.replies import (
    MAX_INVALID_REPLIES,
    content_problems,
    form_result,
    schema_problem,
    url_result,
    with_defaults,
)
from mcp_elicit.client.url_review import review_url

log = logging.getLogger(__name__)


class Elicitor:
    def __init__(
        self,
        handler: ElicitationHandler,
        pending: PendingFlows,
        opener: UrlOpener,
        *,
        connection: object,
        asker: Callable[[CallInFlight | None], Asker],
        protocol_version: Callable[[], str | None],
        person_deciding: Callable[[], AbstractContextManager[None]],
    ) -> None:
        self.handler = handler
        self.pending = pending
        self._opener = opener
        self._connection = connection
        self._asker = asker
        self._protocol_version = protocol_version
        self._person_deciding = person_deciding
        self._one_at_a_time = anyio.Lock()

    @property
    def modes(self) -> frozenset[str]:
        return frozenset(self.handler.modes)

    async def answer(
        self,
        params: ElicitRequestFormParams | ElicitRequestURLParams,
        call: CallInFlight | None,
        input_key: str | None = None,
    ) -> ElicitResult | ErrorData:
        if isinstance(params, ElicitRequestURLParams):
            result, _ = await self.url(params, call, input_key)
            return result
        return await self.form(params, call)

    async def form(self, params: ElicitRequestFormParams, call: CallInFlight | None) -> ElicitResult | ErrorData:
        if "form" not in self.modes:
            return _undeclared("form")
        schema = params.requested_schema
        problem = schema_problem(schema)
        if problem is not None:
            log.warning("refused a form elicitation: %s", problem)
            return ErrorData(code=INVALID_PARAMS, message=problem)
        request = FormRequest(self._asker(call), params.message, schema)
        for _ in range(MAX_INVALID_REPLIES):
            async with self._one_at_a_time:
                with self._person_deciding():
                    reply = await self.handler.form(request)
            if not isinstance(reply, Accept):
                return form_result(reply)
            content = with_defaults(reply.content, schema)
            problems = content_problems(content, schema)
            if not problems:
                return form_result(reply, content)
            request = replace(request, problem="; ".join(problems))
        log.error(
            "the handler answered %r with invalid content %d times (%s); answering cancel, nothing invalid was sent",
            params.message,
            MAX_INVALID_REPLIES,
            request.problem,
        )
        return ElicitResult(action="cancel")

    async def url(
        self, params: ElicitRequestURLParams, call: CallInFlight | None, input_key: str | None = None
    ) -> tuple[ElicitResult | ErrorData, PendingFlow | None]:
        """The wire answer, and the flow now tracked for it (None when the mode was not declared)."""
        if "url" not in self.modes:
            return _undeclared("url"), None
        review = review_url(params.url)
        asker = self._asker(call)
        flow = self.pending.add(
            PendingFlow(
                id=params.elicitation_id or input_key or "url",
                server=asker.server_title or asker.server_name,
                message=params.message,
                url=params.url,
                review=review,
                status=FlowStatus.AWAITING_CONSENT,
                protocol_version=self._protocol_version(),
                tool=asker.tool or asker.prompt,
                elicitation_id=params.elicitation_id,
                input_key=input_key,
            ),
            self._connection,
        )
        if call is not None:
            call.flows.append(flow.id)
            owner = call
            self.pending.controls(flow.id, retry=owner.retry, stop=lambda: owner.stop(flow.id))
        if not review.may_open:
            log.warning("refused to offer a URL elicitation whose URL is not http(s); answered cancel")
            flow = self.pending.update(flow.id, FlowStatus.CANCELLED, "not an http(s) URL: never offered")
            return ElicitResult(action="cancel"), flow
        async with self._one_at_a_time:
            with self._person_deciding():
                reply = await self.handler.url(UrlRequest(asker, params.message, review, params.elicitation_id))
        match reply:
            case Consent():
                failure = await open_with(self._opener, params.url)
                if failure is not None:
                    return ElicitResult(action="cancel"), self.pending.update(flow.id, FlowStatus.FAILED, failure)
                return url_result(reply), self.pending.update(flow.id, FlowStatus.OPEN, "opened after consent")
            case Decline():
                return url_result(reply), self.pending.update(flow.id, FlowStatus.DECLINED, "the person declined")
            case Cancel():
                flow = self.pending.update(flow.id, FlowStatus.CANCELLED, "the person closed the dialog")
                return url_result(reply), flow
        raise TypeError(f"a URL handler must return Consent, Decline or Cancel, not {type(reply).__name__}")


def _undeclared(mode: str) -> ErrorData:
    log.warning("refused a %s elicitation: this client did not declare %s mode", mode, mode)
    return ErrorData(code=INVALID_PARAMS, message=f"this client did not declare {mode} elicitation")
