"""Putting one elicitation in front of the handler and mapping the reply onto the wire, on every era.

Both delivery paths end here: a 2025-era `elicitation/create` request (through the SDK's callback) and a
2026-07-28 input request (through the kit's own round loop). So the same rules hold everywhere:

- a mode the handler did not declare is refused with `-32602` and never shown (the 2025-11-25 rule; on
  2026-07-28 the call then stops with `QuestionRefused`, since a server must not ask for it either), and so
  is a form whose `requestedSchema` is not the spec's restricted form schema (`form_schema.parse_form`, the
  project's one reader of it): answers to it could not be checked the way the person's form checks them;
- one question at a time per client: a person answers one dialog at a time, so parallel calls queue for
  the handler (a handler shared by several clients serialises its own dialogs, as `TerminalHandler` does);
- form answers are checked before they are sent (`replies`, with the form's own judge) and sent as given,
  with nothing added; decline and cancel stay distinct;
- a URL is reviewed first (`url_review`); one the review refuses is never offered: the answer is `cancel`
  (nobody decided), a warning is logged and the flow shows as cancelled with the reason. A consented URL
  is opened only after consent, and what is opened is the reviewed URL the person was shown, never the
  server's text. A URL that cannot be opened is answered `cancel` too, since the person cannot act on it
  (the flow shows as failed);
- the consent dialog runs in a cancel scope of its flow: when the host cancels the flow, or its call ends,
  the dialog closes, and whatever the handler answers after that, nothing is opened and the answer is
  `cancel`. A dialog cancelled from outside (the SDK interrupts the handler when the server withdraws its
  2025-era request with `notifications/cancelled`) leaves the flow `cancelled`, not awaiting consent.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from functools import partial
from typing import TypeVar

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
    Mode,
    UrlReply,
    UrlRequest,
)
from mcp_elicit.client.opener import UrlOpener, open_with
from mcp_elicit.client.pending import FlowStatus, PendingFlow, PendingFlows
from mcp_elicit.client.replies import MAX_INVALID_REPLIES, answer_problems, form_result, url_result
from mcp_elicit.client.url_review import review_url
from mcp_elicit.model.form_schema import UnsupportedSchema, parse_form

log = logging.getLogger(__name__)

T = TypeVar("T")


class Elicitor:
    """The single path from a server's question to the handler and back, shared by both delivery paths.

    One object per client, so the rules above cannot drift apart between eras, and so that the questions
    of one connection queue for the person one at a time. It knows the call a question belongs to when
    the client can tell (`call`), to name it to the person and to tie URL flows to the call the host's
    controls then steer.
    """

    def __init__(
        self,
        handler: ElicitationHandler,
        pending: PendingFlows,
        opener: UrlOpener,
        *,
        connection: object,
        modes: Callable[[], frozenset[Mode]],
        asker: Callable[[CallInFlight | None], Asker],
        protocol_version: Callable[[], str | None],
        person_deciding: Callable[[], AbstractContextManager[None]],
        clock: Callable[[], float],
    ) -> None:
        self.handler = handler
        self.pending = pending
        self._opener = opener
        self._connection = connection
        self._modes = modes
        self._asker = asker
        self._protocol_version = protocol_version
        self._person_deciding = person_deciding
        self._clock = clock
        self._one_at_a_time = anyio.Lock()
        self.unattributed: list[str] = []
        """Flows asked while the client could not tell for which call (several 2025-era calls in flight)."""

    async def answer(
        self, params: ElicitRequestFormParams | ElicitRequestURLParams, call: CallInFlight | None
    ) -> ElicitResult | ErrorData:
        """A 2025-era `elicitation/create`, answered on the wire; `call` is a guess (the one call in flight)."""
        if isinstance(params, ElicitRequestURLParams):
            result, _ = await self.url(params, call, guessed=True)
            return result
        return await self.form(params, call)

    async def form(self, params: ElicitRequestFormParams, call: CallInFlight | None) -> ElicitResult | ErrorData:
        if "form" not in self._modes():
            return _undeclared("form")
        schema = params.requested_schema
        try:
            form = parse_form(schema)
        except UnsupportedSchema as why:
            log.warning("refused a form elicitation: %r", str(why))
            return ErrorData(code=INVALID_PARAMS, message=f"requestedSchema is not a restricted form schema: {why}")
        request = FormRequest(self._asker(call), params.message, schema)
        for _ in range(MAX_INVALID_REPLIES):
            reply = await self._ask(partial(self.handler.form, request))
            if not isinstance(reply, Accept):
                return form_result(reply)
            problems = answer_problems(form, reply.content)
            if not problems:
                return form_result(reply)
            request = replace(request, problem="; ".join(problems))
        log.error(
            "the handler answered %r with invalid content %d times (%s); answering cancel, nothing invalid was sent",
            params.message,
            MAX_INVALID_REPLIES,
            request.problem,
        )
        return ElicitResult(action="cancel")

    async def url(
        self,
        params: ElicitRequestURLParams,
        call: CallInFlight | None,
        input_key: str | None = None,
        *,
        guessed: bool = False,
    ) -> tuple[ElicitResult | ErrorData, PendingFlow | None]:
        """The wire answer, and the flow now tracked for it (None when the mode was not declared).

        `guessed`: `call` is only the one call that was in flight, not known to be the question's.
        """
        if "url" not in self._modes():
            return _undeclared("url"), None
        review = review_url(params.url)
        asker = self._asker(call)
        flow = self.pending.add(
            PendingFlow(
                id="",
                server=asker.server_title or asker.server_name,
                message=params.message,
                url=review.url,
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
            if guessed:
                call.guessed.add(flow.id)
            owner, flow_id = call, flow.id
            self.pending.hold(flow_id, owner, retry=owner.retry, stop=lambda reason: owner.stop(flow_id, reason))
        else:
            self.unattributed.append(flow.id)
        if not review.may_open:
            refused = ", ".join(warning.value for warning in review.warnings if warning.refuses)
            log.warning("refused to offer a URL elicitation (%s); answered cancel", refused)
            return ElicitResult(action="cancel"), self.pending.update(
                flow.id, FlowStatus.CANCELLED, f"{refused}: never offered"
            )
        reply = await self._consent(flow.id, UrlRequest(asker, params.message, review, params.elicitation_id))
        flow = self.pending.get(flow.id)
        if reply is None or flow.status is not FlowStatus.AWAITING_CONSENT:
            log.info("the URL flow %s ended while the person was asked (%s); answered cancel", flow.id, flow.status)
            return ElicitResult(action="cancel"), flow
        match reply:
            case Consent():
                failure = await open_with(self._opener, review.url)
                if failure is not None:
                    return ElicitResult(action="cancel"), self.pending.update(flow.id, FlowStatus.FAILED, failure)
                flow = self.pending.update(flow.id, FlowStatus.OPEN, "opened after consent", opened_at=self._clock())
                if flow.status is not FlowStatus.OPEN:
                    return ElicitResult(action="cancel"), flow
                return url_result(reply), flow
            case Decline():
                return url_result(reply), self.pending.update(flow.id, FlowStatus.DECLINED, "the person declined")
            case Cancel():
                flow = self.pending.update(flow.id, FlowStatus.CANCELLED, "the person closed the dialog")
                return url_result(reply), flow
        raise TypeError(f"a URL handler must return Consent, Decline or Cancel, not {type(reply).__name__}")

    async def _consent(self, flow_id: str, request: UrlRequest) -> UrlReply | None:
        """The person's answer, or None when the flow ended (host cancel, call over) before they gave one.

        Cancelled from outside (on 2025-era connections, the SDK interrupts the handler after the server's
        `notifications/cancelled`), the flow is marked cancelled before the cancellation goes on, so the host
        never sees it awaiting a consent nobody can give any more.
        """
        dialog = anyio.CancelScope()
        self.pending.consent_dialog(flow_id, dialog)
        reply: UrlReply | None = None
        try:
            with dialog:
                reply = await self._ask(partial(self.handler.url, request))
        except anyio.get_cancelled_exc_class():
            self.pending.update(flow_id, FlowStatus.CANCELLED, "withdrawn by the server")
            raise
        finally:
            self.pending.consent_dialog(flow_id, None)
        return reply

    async def _ask(self, ask: Callable[[], Awaitable[T]]) -> T:
        async with self._one_at_a_time:
            with self._person_deciding():
                return await ask()


def _undeclared(mode: str) -> ErrorData:
    log.warning("refused a %s elicitation: this client did not declare %s mode", mode, mode)
    return ErrorData(code=INVALID_PARAMS, message=f"this client did not declare {mode} elicitation")
