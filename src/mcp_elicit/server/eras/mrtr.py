"""The 2026-07-28 adapter: ask by ending the round with `InputRequiredResult`, record on the retry.

Nothing is pinned in memory between rounds. The round's plaintext state names the operation, what the
round asked (each decision by its id, each question to the client itself by its method) and a
single-use nonce; any instance can serve the retry. Answers are applied only for what that round
asked (or, sent without any round's state, for a form question the request asks), and only when
valid: a missing, extra or invalid response leaves the decision open (or the query unanswered) and
asks again, it never completes anything. A URL decision whose flow is still running gets a bounded
server-side wait, then a state-only round so the client retries without a person.
`gather` lets every item ask before the round ends, so one round carries them all.

Rounds are stateless: the server cannot tell whether a round is still in front of a person or was lost
(the host restarted, its handler raised, the process died right after the round's commit). So a question
is put out again rather than left waiting. The round that asks it takes the question's claim for
`reask_after` (at most until the round's state lapses, or the decision's TTL); an overlapping call of the
same operation finds it taken and gets the still-waiting treatment (a bounded long poll, then state-only
rounds) until it is answered or the claim lapses. Then one such call (the claim's compare-and-set picks
it) puts the same decision, same id and key, in a round of its own, and holds the claim for the next
`reask_after`: at most one new round per `reask_after` per decision, however many calls wait. Every round
that put the decision out may answer it; the first answer recorded wins by compare-and-set and a later
one is audited as superseded. The price: a person slower than `reask_after`, or a lost round, may see the
question twice. The retry of the round itself may ask the question again, and its claim passes on.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
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

from mcp_elicit.approvals.gate import is_approval
from mcp_elicit.model import WAITING_META_KEY, Decision, DecisionStatus, Mode, OperationStatus, Principal
from mcp_elicit.server.eras import Call, Declared, Need, Target, progress_of
from mcp_elicit.server.eras.capabilities import missing_capability
from mcp_elicit.server.eras.mrtr_state import RoundState, refused
from mcp_elicit.server.execution import (
    A,
    AwaitingApprovers,
    CannotAsk,
    ClientQuery,
    Execution,
    Tell,
    answer_again,
    discard,
    question_claim,
)
from mcp_elicit.server.forms import FormSpec, InvalidAnswer
from mcp_elicit.server.signals import Suspended
from mcp_elicit.server.writes import HeldWrites, OperationEnded
from mcp_elicit.store import Consumption, OperationRecords, StoreError, StoreUnavailable
from mcp_elicit.store.aio import AsyncStore

log = logging.getLogger(__name__)

DEFAULT_LONG_POLL = timedelta(seconds=5)
DEFAULT_REASK_AFTER = timedelta(seconds=15)
"""How long a question stays with the round that last put it out before a waiting identical call asks again."""
CLOCK_SKEW = timedelta(seconds=60)
"""How long past a round's TTL its spent nonce stays in the ledger: another instance's clock checks that TTL."""
ROUND_LAPSE_MARGIN = timedelta(seconds=5)
"""How long past its state's TTL a round keeps its questions' claims, when `reask_after` is longer still."""


@dataclass(frozen=True, slots=True)
class Asking:
    """One input request of the round, and what the round state records for its key."""

    key: str
    request: InputRequest
    marker: str
    """The decision's elicitation id, or the method of a question to the client itself."""
    decision: Decision | None = None


def round_holder(nonce: str) -> str:
    return f"round:{nonce}"


@dataclass(frozen=True, slots=True)
class RoundSettings:
    long_poll: timedelta
    state_ttl: timedelta
    answers_without_state: bool
    clock: Callable[[], datetime]
    reask_after: timedelta = DEFAULT_REASK_AFTER


class MrtrEra:
    """2026-07-28: a turn ends with `InputRequiredResult`; the retry names its round in `requestState`."""

    def __init__(self, call: Call, settings: RoundSettings) -> None:
        self._call = call
        self._settings = settings
        self._state: RoundState | None = None
        self._next = RoundState(operation_id="", nonce=secrets.token_urlsafe(18))
        self._spent = False
        self._settled_here: set[str] = set()
        """Decisions this call's own commits answered or noted as superseded: a run again must not note them."""

    async def resume(
        self, store: AsyncStore, principal: Principal, target: Target, writes: HeldWrites
    ) -> OperationRecords | None:
        """The operation a round's state names, if still open, with its decisions; the round's nonce is spent
        with the next commit. One that ended (completed by an overlapping call, or failed, or cancelled by an
        operator) ends this call too with `OperationEnded`, as it would have ended a call waiting on the live
        request: a completed one hands this call its result."""
        if self._call.request_state is None:
            return None
        state = self._state = RoundState.decode(self._call.request_state)
        ttl, clock = self._settings.state_ttl, self._settings.clock

        async def spend() -> None:
            """The round's nonce, spent in the transaction that records what the round brought: a replay fails it."""
            spent = await store.consume_token(state.ledger_id, expires_at=clock() + ttl + CLOCK_SKEW)
            if spent is Consumption.ALREADY_USED:
                log.warning("requestState round replayed for operation %s", state.operation_id)
                raise refused()

        try:
            records = await store.get_operation_records(state.operation_id, principal)
        except StoreUnavailable:
            raise  # temporary: the same round may be retried once the store is back
        except StoreError:
            raise refused() from None
        operation = records.operation
        if (operation.method, operation.target, operation.request_digest) != (
            target.method,
            target.name,
            target.request_digest,
        ):
            raise refused()
        late = self._superseded(records.decisions)
        # A late answer's note is kept, with the spend that stops a replay noting it again: the run's commit
        # may lose (an overlapping call completed the operation between these reads and that commit, and the
        # call ends with its result) and an answer is never dropped silently.
        if not self._spent:  # a run of this very call spent it already: running again is no replay
            writes.hold(spend, keep=bool(late), done=self._mark_spent)
        for decision in late:
            note = self._note_superseded(store, decision, principal)
            writes.hold(note, keep=True, done=partial(self._settled_here.add, decision.elicitation_id))
        if operation.status is OperationStatus.OPEN:
            return records
        if late or operation.status is OperationStatus.COMPLETED:
            await writes.commit()
        # The round's operation ended while its call waited: a completed one's result is this call's (an identical
        # call made afresh may not be handed it: a gated one is asked again), any other end is said as such.
        raise OperationEnded(operation)

    def _mark_spent(self) -> None:
        self._spent = True

    def _superseded(self, decisions: Sequence[Decision]) -> list[Decision]:
        """The decisions this round brings an answer for that someone else settled first (another round that
        put the same decision out, the web page, an operator): their answers are late and change nothing."""
        assert self._state is not None
        responses = self._call.input_responses or {}
        return [
            decision
            for decision in decisions
            if self._state.asked.get(decision.key) == decision.elicitation_id
            and isinstance(responses.get(decision.key), ElicitResult)
            and decision.status is not DecisionStatus.REQUESTED
            and decision.elicitation_id not in self._settled_here
        ]

    @staticmethod
    def _note_superseded(store: AsyncStore, decision: Decision, principal: Principal) -> Callable[[], Awaitable[None]]:
        reason = f"a later answer from another round was superseded: the decision was already {decision.status}"
        log.info("decision %s: %s", decision.elicitation_id, reason)
        return lambda: store.note(decision, actor=principal, reason=reason)

    def asker(self) -> MrtrAsker:
        settings, call = self._settings, self._call
        answering = round_holder(self._state.nonce) if self._state is not None else None
        return MrtrAsker(
            call.declared,
            call.input_responses,
            self._state.asked if self._state is not None else {},
            settings.long_poll,
            answers_without_state=settings.answers_without_state and call.request_state is None,
            holders=(round_holder(self._next.nonce), answering),
            answered=self._settled_here,
            tell=progress_of(call),
        )

    async def suspended(self, signal: Suspended, run: Execution) -> Any:
        if not isinstance(signal, Suspend):
            raise TypeError(f"{type(signal).__name__} is not a 2026-07-28 suspension")
        answering = round_holder(self._state.nonce) if self._state is not None else None
        holder = round_holder(self._next.nonce)
        held_for = min(self._settings.reask_after, self._settings.state_ttl + ROUND_LAPSE_MARGIN)
        reask_at = run.now() + held_for
        for asking in signal.asking:
            if asking.decision is not None:
                self._take(run, asking.decision, holder, answering, min(reask_at, asking.decision.expires_at))
        await run.commit()
        wire, _ = input_required(signal, run.operation.operation_id, nonce=self._next.nonce)
        return wire

    @staticmethod
    def _take(run: Execution, decision: Decision, holder: str, answering: str | None, lease_until: datetime) -> None:
        """The question's claim passes to the new round with the round's commit, or the commit fails."""
        run.take_at_commit(decision, holder=holder, succeeding=answering, lease_until=lease_until)

    def missing_capability(self, needs: frozenset[Need], *, tool: bool) -> Exception:
        return missing_capability(needs, "tool" if tool else "prompt")


class Suspend(Suspended):
    """Ends a 2026-07-28 round: these must be asked (or something is still waiting) before the body goes on."""

    def __init__(self, asking: Sequence[Asking] = (), waiting: bool = False, told: Sequence[str] = ()) -> None:
        super().__init__("input required" if asking else "still waiting")
        self.asking = list(asking)
        self.waiting = waiting
        self.told = tuple(told)
        """What the caller is told it still waits on (approvers), beside what the round asks."""

    @classmethod
    def merged(cls, suspends: Sequence[Suspend]) -> Suspend:
        return cls(
            [a for s in suspends for a in s.asking],
            waiting=any(s.waiting for s in suspends),
            told=[said for s in suspends for said in s.told],
        )


class MrtrAsker:
    def __init__(
        self,
        declared: Declared,
        responses: Mapping[str, Any] | None,
        asked: Mapping[str, str],
        long_poll: timedelta = DEFAULT_LONG_POLL,
        *,
        answers_without_state: bool = False,
        holders: tuple[str, str | None] = ("", None),
        answered: set[str] | None = None,
        tell: Tell | None = None,
    ) -> None:
        self._tell = tell
        self._declared = declared
        self._responses = dict(responses or {})
        self._asked = dict(asked)
        self._long_poll = long_poll
        self._answers_without_state = answers_without_state
        self._ours = {holder for holder in holders if holder}
        """The round this turn may hand out, and the round it answers: a question claimed by either is ours."""
        self._answered = answered if answered is not None else set()
        """Where the decisions this call's commits answer are noted, once they are durable."""

    def can(self, need: Need) -> bool:
        return self._declared.allows(need)

    async def ask(self, run: Execution, decision: Decision, form: FormSpec[Any] | None) -> Decision:
        note: str | None = None
        response, reason = self._response_for(decision)
        if response is not None:
            decision, note = await self._apply(run, decision, form, response, reason)
            if decision.is_terminal or (decision.mode is Mode.URL and not run.awaits_completion(decision)):
                return decision
        reask_at: datetime | None = None
        if decision.status is DecisionStatus.REQUESTED:
            elsewhere = await run.claim_of(question_claim(decision.key))
            if elsewhere is None or elsewhere.holder in self._ours or elsewhere.lease_until <= run.now():
                raise run.signal(Suspend([_elicitation(decision, note)]))
            reask_at = elsewhere.lease_until
            until = min(decision.expires_at, run.now() + self._long_poll, reask_at)
        else:
            until = min(decision.expires_at, run.now() + self._long_poll)
        decision = await run.settle(decision, until=until)
        if not decision.is_terminal and decision.is_overdue(run.now()):
            decision = await run.refresh(decision)
        if decision.is_terminal:
            return decision
        if decision.status is DecisionStatus.REQUESTED and reask_at is not None and reask_at <= run.now():
            # The round that put it out had `reask_after` to bring an answer: put it out again, in this round.
            # The claim's compare-and-set at the commit lets one waiting call do it; the others run again and wait.
            raise run.signal(Suspend([_elicitation(decision, note)]))
        raise run.signal(Suspend([], waiting=True))

    async def await_approvers(self, run: Execution, decision: Decision) -> Decision:
        """A bounded long poll, then a still-waiting round that says who the call waits on: the retry waits again.
        What the request brings for the decision's key is never read: only approvers answer it."""
        patience = min(self._long_poll, run.approver_wait)
        try:
            return await run.wait_for_approvers(decision, patience=patience, tell=self._tell)
        except AwaitingApprovers as waiting:
            run.absorb(waiting)
            raise run.signal(Suspend([], waiting=True, told=[waiting.waiting])) from None

    async def query(self, run: Execution, key: str, query: ClientQuery, answer: type[A]) -> A:
        """The response the round that asked `key` this very question got back, or a new round asking it."""
        if self._asked.get(key) == query.method:
            response = self._responses.get(key)
            if isinstance(response, answer):
                return response
        raise run.signal(Suspend([Asking(key, query, query.method)]))

    async def gather(self, run: Execution, items: Sequence[Awaitable[Any]]) -> list[Any]:
        """Let every item ask before the round ends; one round then carries all their input requests."""
        results: list[Any] = []
        suspended: list[Suspend] = []
        unaskable: list[CannotAsk] = []
        for index, item in enumerate(items):
            try:
                results.append(await item)
            except Suspend as suspend:
                run.absorb(suspend)
                suspended.append(suspend)
            except CannotAsk as cannot:
                run.absorb(cannot)
                unaskable.append(cannot)
            except BaseException:
                discard(items[index + 1 :])
                raise
        if unaskable:
            raise run.signal(CannotAsk.merged(unaskable))
        if suspended:
            raise run.signal(Suspend.merged(suspended))
        return results

    def _response_for(self, decision: Decision) -> tuple[ElicitResult | None, str]:
        """The response meant for this decision: the one its round asked for, or one sent without a round.

        A request without `requestState` may carry responses keyed like the questions, as a stateless
        server would read them. They count for a form question this request asks, once (the decision's
        compare-and-set), validated like any answer. The round's state adds no proof that a person saw
        the question (a client could always answer without asking anyone); it stops one round's answers
        from being applied twice, which the compare-and-set does here. A URL consent counts only from a
        round: it means someone was shown that URL; so does a call's approval, which must have been shown.
        """
        response = self._responses.get(decision.key)
        if not isinstance(response, ElicitResult):
            return None, ""
        if self._asked.get(decision.key) == decision.elicitation_id:
            return response, "answered"
        if self._answers_without_state and decision.mode is Mode.FORM and not is_approval(decision.key):
            return response, "answered with the request, without a round's state"
        return None, ""

    async def _apply(
        self, run: Execution, decision: Decision, form: FormSpec[Any] | None, response: ElicitResult, reason: str
    ) -> tuple[Decision, str | None]:
        applied = await run.apply_answer(decision, form, response, reason=reason)
        if isinstance(applied, InvalidAnswer):
            return decision, answer_again(applied)
        run.after_commit(partial(self._answered.add, decision.elicitation_id))
        return applied, None


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
    return Asking(decision.key, ElicitRequest(params=params), decision.elicitation_id, decision)


def input_required(suspend: Suspend, operation_id: str, *, nonce: str) -> tuple[InputRequiredResult, RoundState]:
    """The round's wire result and the plaintext state it carries (the SDK's boundary seals it)."""
    requests: InputRequests = {}
    asked: dict[str, str] = {}
    for asking in suspend.asking:
        if asking.key in requests:
            raise RuntimeError(f"input request key {asking.key!r} asked twice in one round")
        requests[asking.key] = asking.request
        asked[asking.key] = asking.marker
    state = RoundState(operation_id=operation_id, nonce=nonce, asked=asked)
    meta = {WAITING_META_KEY: " ".join(suspend.told)} if suspend.told else None
    return InputRequiredResult(input_requests=requests or None, request_state=state.encode(), _meta=meta), state
