"""The 2025-06-18 / 2025-11-25 adapter: ask with `elicitation/create` on the live call.

The question rides the originating request's stream and the call waits for the answer, at most until
the decision's TTL. Whatever comes back is recorded by compare-and-set before the body goes on, so a
retry after a crash finds the answer instead of asking twice. URL mode exists only from 2025-11-25 and
only for clients that declared it; the decision id is the `elicitationId`. A URL decision whose resume
policy is not `auto` does not block: the call ends with `-32042` and the client retries once the flow
is done. Sampling and roots go out as `sampling/createMessage` and `roots/list` on the same call, only
to clients that declared them; `gather` asks its items one after another.

Overlapping calls of one operation share its questions: the call holding a question's claim carries
the `elicitation/create`, renewing the claim while the person thinks; the others wait on the same
decision and read its answer. If the carrying call ends first (cancelled, connection lost, process
gone), its claim is released or lapses and one waiting call asks again on its own request.

A client that vanished without a word (the host killed, its connection dropped) does not end the call:
the server keeps waiting for an answer that cannot come, and would hold the question. So the carrying
call pings its client every `reask_after`; once a ping gets no answer within `PING_TIMEOUT`, the call
lets go of the question's claim (the decision stays open) and the next identical call asks it. The call
itself keeps waiting on its dialog: a live client that answers requests one at a time cannot answer a
ping while its person thinks, and if that person answers first, the answer wins by compare-and-set. A
client that answers pings keeps the question however long the person takes.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from functools import partial
from typing import Any

import anyio
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    ElicitRequestURLParams,
    ElicitResult,
    EmptyResult,
    PingRequest,
    RequestId,
)
from pydantic import ValidationError

from mcp_elicit.model import Decision, DecisionStatus, Mode, Operator, Principal, ResumePolicy
from mcp_elicit.server.eras import Call, Declared, Need, Target, progress_of
from mcp_elicit.server.eras.capabilities import legacy_missing_capability
from mcp_elicit.server.execution import (
    A,
    ClientQuery,
    ClientRefused,
    Execution,
    Tell,
    answer_again,
    in_turn,
    question_claim,
)
from mcp_elicit.server.forms import FormSpec, InvalidAnswer
from mcp_elicit.server.signals import Suspended
from mcp_elicit.server.waiting import Backoff
from mcp_elicit.server.writes import HeldWrites
from mcp_elicit.store import NotFound, OperationRecords, StoreError
from mcp_elicit.store.aio import AsyncStore

log = logging.getLogger(__name__)

MAX_INVALID_ANSWERS = 3
QUERY_TIMEOUT = timedelta(minutes=5)
"""How long a sampling or roots request on the live call may take before the call gives up on it."""
PING_TIMEOUT = timedelta(seconds=5)
"""How long a client carrying a question may take to answer a ping before it counts as gone."""


class CompletionNotices:
    """Sends `notifications/elicitation/complete` to the client that was answered `-32042`, on its session.

    A non-blocking URL decision leaves no call waiting, so this watcher polls the store for the decisions it
    was told about and notifies each initiating session once its flow completes, whichever instance ran the
    callback. It is a courtesy: the notification may be lost (the session gone, the process restarted), and
    the client's manual retry then finds the completed decision all the same.
    """

    POLL_SECONDS = 0.5

    def __init__(self, store: AsyncStore) -> None:
        self._store = store
        self._watched: dict[str, ServerSession] = {}
        self._wake = anyio.Event()

    def watch(self, elicitation_id: str, session: ServerSession) -> None:
        self._watched[elicitation_id] = session
        self._wake.set()

    @property
    def watching(self) -> int:
        return len(self._watched)

    async def run(self) -> None:
        """Watch until cancelled; one task at a time (see `background.Shared`)."""
        while True:
            if not self._watched:
                await self._wake.wait()
                self._wake = anyio.Event()
            await anyio.sleep(self.POLL_SECONDS)
            await self._check()

    async def _check(self) -> None:
        for elicitation_id, session in list(self._watched.items()):
            try:
                decision = await self._store.get_decision(elicitation_id, _NOTICES)
            except NotFound:
                del self._watched[elicitation_id]
                continue
            except StoreError as error:
                log.warning("cannot check decision %s for its completion notice: %s", elicitation_id, error)
                continue
            if not decision.is_terminal:
                continue
            del self._watched[elicitation_id]
            if decision.status is DecisionStatus.EXTERNAL_COMPLETED:
                try:
                    await session.send_elicit_complete(elicitation_id)
                except Exception as error:  # the session may be gone; the client's retry still works
                    log.info("completion notice for %s not delivered: %s", elicitation_id, type(error).__name__)


_NOTICES = Operator("completion-notices")


class UrlRequired(Suspended):
    """The call ends with `-32042`: the client opens the URL and retries once the flow is done."""

    def __init__(self, decision: Decision) -> None:
        assert decision.url is not None
        self.elicitation_id = decision.elicitation_id
        url = ElicitRequestURLParams(message=decision.message, url=decision.url, elicitation_id=decision.elicitation_id)
        self.error = UrlElicitationRequiredError([url])
        super().__init__(str(self.error))


class LegacyEra:
    """2025-06-18 and 2025-11-25: questions ride the live call; nothing to resume but the operation."""

    def __init__(self, call: Call, notices: CompletionNotices, probe_every: timedelta) -> None:
        self._call = call
        self._notices = notices
        self._probe_every = probe_every

    async def resume(
        self, store: AsyncStore, principal: Principal, target: Target, writes: HeldWrites
    ) -> OperationRecords | None:
        return None

    def asker(self) -> LegacyAsker:
        request = self._call.request
        return LegacyAsker(
            request.session, request.request_id, self._call.declared, self._probe_every, tell=progress_of(self._call)
        )

    async def suspended(self, signal: Suspended, run: Execution) -> Any:
        await run.commit()
        if isinstance(signal, UrlRequired):
            self._notices.watch(signal.elicitation_id, self._call.request.session)
            raise signal.error
        raise TypeError(f"{type(signal).__name__} is not a legacy-era suspension")

    def missing_capability(self, needs: frozenset[Need], *, tool: bool) -> Exception:
        return legacy_missing_capability(needs, tool=tool)


class LegacyAsker:
    def __init__(
        self,
        session: ServerSession,
        request_id: RequestId | None,
        declared: Declared,
        probe_every: timedelta,
        query_timeout: timedelta = QUERY_TIMEOUT,
        *,
        tell: Tell | None = None,
    ) -> None:
        self._tell = tell
        self._session = session
        self._request_id = request_id
        self._declared = declared
        self._query_timeout = query_timeout
        self._probe_every = probe_every

    def can(self, need: Need) -> bool:
        if not self._session.can_send_request:
            return False
        return self._declared.allows(need)

    async def query(self, run: Execution, key: str, query: ClientQuery, answer: type[A]) -> A:
        """Send the request on the live call and wait for the client's answer, at most `query_timeout`."""
        what = "sampling" if query.method == "sampling/createMessage" else "roots"
        await run.commit()
        metadata = ServerMessageMetadata(related_request_id=self._request_id)
        with anyio.move_on_after(self._query_timeout.total_seconds()):
            try:
                return await self._session.send_request(query, answer, metadata=metadata)
            except MCPError as error:
                log.info("client refused %s request %s: %s", what, key, error.code)
                raise ClientRefused(f"The client refused the {what} request {key!r}: {error.message}") from None
            except ValidationError:
                log.info("client answered %s request %s with a malformed result", what, key)
                raise ClientRefused(f"The client's answer to the {what} request {key!r} was malformed") from None
        raise ClientRefused(f"The client did not answer the {what} request {key!r} in time")

    async def gather(self, run: Execution, items: Sequence[Awaitable[Any]]) -> list[Any]:
        return await in_turn(items)

    async def await_approvers(self, run: Execution, decision: Decision) -> Decision:
        """On the live call until `run.approver_wait`, with progress notifications saying who it waits on."""
        return await run.wait_for_approvers(decision, patience=run.approver_wait, tell=self._tell)

    async def ask(self, run: Execution, decision: Decision, form: FormSpec[Any] | None) -> Decision:
        if decision.mode is Mode.FORM and form is not None:
            return await self._carried(run, decision, partial(self._ask_form, run, form=form))
        return await self._ask_url(run, decision)

    async def _carried(
        self, run: Execution, decision: Decision, put: Callable[[Decision], Awaitable[Decision]]
    ) -> Decision:
        """Put the question to the person on this call if no other call carries it; else wait for its answer."""
        claim_name = question_claim(decision.key)
        backoff = Backoff()
        run.release_lease()  # with the question's commit: no call waits on the run lease while a person thinks
        while decision.status is DecisionStatus.REQUESTED:
            claim, decision = await run.claim_question(decision)
            if decision.status is not DecisionStatus.REQUESTED:
                break
            if claim.held_by(run.holder):
                async with run.carrying(claim_name):
                    decision = await self._while_client_lives(run, claim_name, put, decision)
                    # The answer is durable before the body acts on it; the claim goes with it, the lease comes back.
                    await run.commit_taking_lease_back()
                return decision
            log.debug("decision %s is out to the person on another call; waiting on it", decision.elicitation_id)
            until = min(claim.lease_until, decision.expires_at)
            await run.pause([decision.elicitation_id, run.operation.operation_id], until=until, backoff=backoff)
            decision = await run.refresh(decision)
        return decision

    async def _while_client_lives(
        self, run: Execution, claim_name: str, put: Callable[[Decision], Awaitable[Decision]], decision: Decision
    ) -> Decision:
        """`put(decision)`; if the client stops answering pings meanwhile, the question's claim is let go (see the
        module's docstring). The dialog is not withdrawn: a client that answers one request at a time cannot
        answer a ping while its person thinks, and that person's answer still counts if it comes first."""
        every, key = self._probe_every.total_seconds(), decision.elicitation_id
        metadata = ServerMessageMetadata(related_request_id=self._request_id)

        async def answers_pings() -> bool:
            with anyio.move_on_after(PING_TIMEOUT.total_seconds()):
                try:
                    await self._session.send_request(PingRequest(), EmptyResult, metadata=metadata)
                except MCPError as error:
                    return error.code not in (CONNECTION_CLOSED, REQUEST_TIMEOUT)  # any other error is an answer
                return True
            return False

        async def probe() -> None:
            while True:
                await anyio.sleep(every)
                if not await answers_pings():
                    log.info("decision %s: the client stopped answering pings; the question is free again", key)
                    await run.let_go(claim_name)
                    return

        failure: Exception | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(probe)
            try:
                decision = await put(decision)
            except Exception as error:  # raised after the group, unwrapped, so callers see the store's own error
                failure = error
            group.cancel_scope.cancel()
        if failure is not None:
            raise failure
        return decision

    async def _ask_form(self, run: Execution, decision: Decision, *, form: FormSpec[Any]) -> Decision:
        note = ""
        session, request_id = self._session, self._request_id
        for _ in range(MAX_INVALID_ANSWERS):
            schema: Any = decision.requested_schema
            result = await self._send(
                run,
                decision,
                partial(session.elicit_form, decision.message + note, schema, related_request_id=request_id),
            )
            if result is None or isinstance(result, MCPError):
                return await _not_accepted(run, decision, result)
            applied = await run.apply_answer(decision, form, result)
            if not isinstance(applied, InvalidAnswer):
                return applied
            note = answer_again(applied)
        return await run.record(
            decision, DecisionStatus.CANCELLED, reason=f"{MAX_INVALID_ANSWERS} answers in a row were invalid"
        )

    async def _ask_url(self, run: Execution, decision: Decision) -> Decision:
        assert decision.url is not None
        if decision.resume_policy is not ResumePolicy.AUTO:
            raise run.signal(UrlRequired(decision))
        session, request_id = self._session, self._request_id
        if decision.status is DecisionStatus.REQUESTED:
            decision = await self._carried(run, decision, partial(self._consent, run))
            if decision.is_terminal or not run.awaits_completion(decision):
                return decision
        deadline = None
        while not decision.is_terminal and decision.expires_at != deadline:  # the flow may extend its TTL
            deadline = decision.expires_at
            decision = await run.settle(decision, until=deadline)
            if not decision.is_terminal:
                decision = await run.refresh(decision)
        if decision.status is DecisionStatus.EXTERNAL_COMPLETED:
            await session.send_elicit_complete(decision.elicitation_id, related_request_id=request_id)
        return decision

    async def _consent(self, run: Execution, decision: Decision) -> Decision:
        assert decision.url is not None
        session, request_id = self._session, self._request_id
        result = await self._send(
            run,
            decision,
            partial(
                session.elicit_url,
                decision.message,
                decision.url,
                decision.elicitation_id,
                related_request_id=request_id,
            ),
        )
        if result is None or isinstance(result, MCPError) or result.action != "accept":
            return await _not_accepted(run, decision, result)
        return await run.record(decision, DecisionStatus.ACCEPTED_URL, reason="consented to open the URL")

    async def _send(self, run: Execution, decision: Decision, send: Any) -> ElicitResult | MCPError | None:
        """The client's answer, its error, or None when the TTL ran out first."""
        await run.commit()
        remaining = (decision.expires_at - run.now()).total_seconds()
        if remaining <= 0:
            return None
        with anyio.move_on_after(remaining):
            try:
                result: ElicitResult = await send()
            except MCPError as error:
                log.info("client refused elicitation %s: %s", decision.elicitation_id, error.code)
                return error
            return result
        return None


async def _not_accepted(run: Execution, decision: Decision, result: ElicitResult | MCPError | None) -> Decision:
    """The decision after anything but an acceptance: the TTL ran out, the client erred, declined or cancelled."""
    if result is None:
        return await run.refresh(decision)
    if isinstance(result, MCPError):
        return await run.record(decision, DecisionStatus.CANCELLED, reason=f"client error {result.code}")
    closing = DecisionStatus.DECLINED if result.action == "decline" else DecisionStatus.CANCELLED
    return await run.record(decision, closing, reason=f"client answered {result.action}")
