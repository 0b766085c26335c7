"""One call's run of a tool body: the plumbing `Flow` stands on, and what the era adapters receive.

A tool body may run many times for one operation: every 2026-07-28 retry re-runs it, and so does a
legacy retry after a crash, and so does every overlapping identical call, which attaches to the same
operation. What makes that safe lives here:

- a step whose result is journaled is never run again; steps run in one call at a time, the one holding
  the operation's run lease, while the others wait for their recorded results. The lease is taken with
  the commit before the call's first step runs and kept (renewed) until the call's turn ends: with the
  operation's end, with a 2026-07-28 round going out, or on any other end. It lapses `lease` after its
  holder's last renewal (a holder that died): only then may another call take it, and run the unjournaled
  step again with the same idempotency key. A step's result is durable with the call's next commit; a
  step may therefore run twice when its call dies (or is cancelled, or its store stays away) between its
  function and that commit, and only that way. The lease is given up while a person thinks. Every
  journal entry and the operation's end are fenced: written only while the lease is still the writer's
  (holder and attempt), so a lapsed holder's late result is never recorded;
- a question goes to the person through one call at a time, the one holding its claim; the others wait
  on the same decision and read the same answer;
- every record is written by compare-and-set through the call's held writes (see `writes`).

Nothing here knows a protocol era: the adapter in `eras/` puts questions to the person and decides
what a suspended turn looks like on the wire.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Protocol, TypeVar, cast

import anyio
import anyio.to_thread
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CreateMessageRequest, CreateMessageResult, ElicitResult, ListRootsRequest, ListRootsResult
from pydantic import TypeAdapter

from mcp_elicit.approvals.backends import ApprovalBackend, ApprovalRequest, Ruling, voter_of
from mcp_elicit.approvals.gate import APPROVAL_KEY, Approved, GatedTool, GrantOffer, Rejected, is_approval
from mcp_elicit.model import (
    NOTE_FIELD,
    REJECT_FIELD,
    Approver,
    ApproverRule,
    Decision,
    DecisionOrigin,
    DecisionStatus,
    Grant,
    GrantKind,
    JSONObject,
    JSONValue,
    Mode,
    Operation,
    Principal,
    ResumePolicy,
    Tally,
    UnencodableValue,
    Verdict,
    check_decision_transition,
    check_encodable,
    new_elicitation_id,
    new_form_decision,
    new_grant,
    new_url_decision,
)
from mcp_elicit.server.answers import (
    Accepted,
    Answer,
    Cancelled,
    Completed,
    Consented,
    Declined,
    Expired,
    Failed,
    RelayedUrlAnswer,
    UrlAnswer,
)
from mcp_elicit.server.eras.capabilities import Need
from mcp_elicit.server.fallback import ANSWERS_ARGUMENT, Fallback
from mcp_elicit.server.forms import FormSpec, InvalidAnswer, built_form
from mcp_elicit.server.leases import Kept, Leases
from mcp_elicit.server.signals import Signal, StaleSnapshot
from mcp_elicit.server.waiting import Backoff, Wakeups
from mcp_elicit.server.writes import HeldWrites
from mcp_elicit.store import (
    GRANT_JOURNAL,
    Claim,
    DecisionConflict,
    DecisionExpired,
    GrantEnded,
    JournalEntry,
    StoreError,
)
from mcp_elicit.store.aio import AsyncStore
from mcp_elicit.telemetry import calls as telemetry
from mcp_elicit.telemetry.instruments import Ending

log = logging.getLogger(__name__)

R = TypeVar("R")
S = TypeVar("S", bound=Signal)
DEFAULT_LEASE = timedelta(seconds=30)
DEFAULT_APPROVER_WAIT = timedelta(seconds=45)
"""How long a live call waits for approvers: under the 60 s many clients allow a request before giving up on it."""
MAX_UNUSABLE_ANSWERS = 3
"""How often one question is asked again because its recorded answer no longer fits the model."""
RESERVED_JOURNAL_PREFIX = "mcp-elicit/"
"""Journal names under this prefix belong to the library (`sample` and `roots` answers), never to a step."""

STARTED_PREFIX = f"{RESERVED_JOURNAL_PREFIX}started/"
"""The journal mark of a step that runs at most once, made durable before it starts."""


class OutcomeUnknown(ToolError):
    """A step that runs at most once was started by a run that ended before recording its result: it may have
    taken effect, so it is not run again. The operation fails with this error, and an identical call after that
    starts over (a gated call is asked again)."""

    def __init__(self, step: str, operation_id: str) -> None:
        self.step = step
        self.operation_id = operation_id
        super().__init__(
            f"{step} was started by an earlier attempt of operation {operation_id} that ended before its outcome "
            "was recorded: whether it took effect is unknown, so it is not run again; check before calling again"
        )


ClientQuery = CreateMessageRequest | ListRootsRequest
"""A question to the client itself, not to the person: its model (sampling) or its roots."""
A = TypeVar("A", CreateMessageResult, ListRootsResult)

NEED_OF_MODE = {Mode.FORM: Need.FORM, Mode.URL: Need.URL}


def answer_again(invalid: InvalidAnswer) -> str:
    """What the question says the second time, after an answer that did not fit its form."""
    return f"\n\n(The previous answer could not be used: {invalid} Please answer again.)"


def new_holder() -> str:
    return f"call:{uuid.uuid4().hex}"


RUN_LEASE = "run"
"""The claim of the operation that lets its holder run steps: one per operation, beside its questions' claims."""


def question_claim(key: str) -> str:
    return f"ask:{key}"


@dataclass(frozen=True, slots=True)
class Unaskable:
    """One thing the body asked that this client cannot be asked; a decision's, with its form, if it is one."""

    key: str
    need: Need
    decision: Decision | None = None
    form: FormSpec[Any] | None = None


class CannotAsk(Signal):
    """The client cannot be asked these things and the entry's fallback decides what the caller sees."""

    def __init__(self, unaskable: Sequence[Unaskable], fallback: Fallback) -> None:
        self.unaskable = tuple(unaskable)
        self.fallback = fallback
        super().__init__("cannot ask " + ", ".join(f"{u.key} ({u.need})" for u in self.unaskable))

    @property
    def needs(self) -> frozenset[Need]:
        return frozenset(u.need for u in self.unaskable)

    @property
    def ends_as(self) -> Ending:
        return Ending("cannot_ask", ",".join(sorted(self.needs)))

    @classmethod
    def merged(cls, errors: Sequence[CannotAsk]) -> CannotAsk:
        """One signal naming everything several items of one `gather` could not ask."""
        return cls([u for error in errors for u in error.unaskable], errors[0].fallback)


class AwaitingApprovers(Signal):
    """The call stops waiting while its question is with approvers: the caller is told who it waits on, and that
    the identical call made later attaches to it. The decision stays open and keeps its votes."""

    def __init__(self, decision: Decision, waiting: str) -> None:
        self.decision = decision
        self.waiting = waiting
        super().__init__(waiting)

    @property
    def ends_as(self) -> Ending:
        return Ending("awaiting_approvers")

    def said(self, kind: str) -> str:
        until = self.decision.expires_at.strftime("%Y-%m-%d %H:%M UTC")
        return (
            f"Not run yet. {self.waiting}: approval request {self.decision.elicitation_id}, open until {until}. "
            f"The requester cannot approve it. Call this {kind} again with the same arguments (and the same "
            "idempotency key, if this call had one) later: the call attaches to the same request and gets its "
            "result once the approvers decided."
        )


Tell = Callable[[str], Awaitable[None]]
"""Tells the caller, while its call waits, what it waits on (a progress notification, say)."""


class UnusableAnswer(Exception):
    """An asker closed a question whose answer does not fit its form (recorded as cancelled, the content not
    kept): `ask_form` asks again under the question's next key."""

    def __init__(self, invalid: InvalidAnswer) -> None:
        self.invalid = invalid
        super().__init__(str(invalid))


class ClientRefused(Exception):
    """The client answered a sampling or roots request with an error, or not in time; nothing was recorded."""


class Asker(Protocol):
    """One per era: puts open decisions in front of the person, queries the client, records what came back."""

    def can(self, need: Need) -> bool: ...

    async def ask(self, run: Execution, decision: Decision, form: FormSpec[Any] | None) -> Decision: ...

    async def query(self, run: Execution, key: str, query: ClientQuery, answer: type[A]) -> A:
        """The client's answer to `query`; the run journals it under `key` before the body sees it."""
        ...

    async def gather(self, run: Execution, items: Sequence[Awaitable[Any]]) -> list[Any]:
        """Await every item, asking what they ask in as few exchanges as the era allows."""
        ...

    async def await_approvers(self, run: Execution, decision: Decision) -> Decision:
        """Wait for the approvers of `decision` as long as the era lets a call wait (`run.wait_for_approvers`), then
        end the turn the era's way; the decision once decided."""
        ...


async def in_turn(items: Sequence[Awaitable[Any]]) -> list[Any]:
    """`gather` for eras that ask on the live call: each item in order, nothing batched."""
    results: list[Any] = []
    for index, item in enumerate(items):
        try:
            results.append(await item)
        except BaseException:
            discard(items[index + 1 :])
            raise
    return results


def discard(items: Sequence[Awaitable[Any]]) -> None:
    """Close the coroutines a failed `gather` will never await, so none is left half-born."""
    for item in items:
        if inspect.iscoroutine(item):
            cast(Coroutine[Any, Any, Any], item).close()


BeginTask = Callable[[], Awaitable[None]]
Backing = tuple[ApprovalBackend, str, dict[str, JSONValue]]
"""The backend deciding a call's approval out of band, with the tool and the call's arguments (JSON)."""


@dataclass(frozen=True, slots=True)
class CallSettings:
    """What the server decided for every call: who may be asked how, and how claims behave."""

    clock: Callable[[], datetime]
    decision_url: Callable[[str], str] | None
    fallback: Fallback
    wakeups: Wakeups
    lease: timedelta = DEFAULT_LEASE
    approver_wait: timedelta = DEFAULT_APPROVER_WAIT
    begin_task: BeginTask | None = None
    """What `flow.begin_task()` does: make this call a task (on a call that asked for one), else nothing."""


class Execution:
    """One call's run of a body over one operation; adapters and `Flow` share it, the body never sees it."""

    def __init__(
        self,
        *,
        store: AsyncStore,
        operation: Operation,
        principal: Principal,
        decisions: dict[str, Decision],
        settings: CallSettings,
        writes: HeldWrites,
        leases: Leases,
        argument_answers: dict[str, Any] | None = None,
        about: Callable[[], str] | None = None,
        fresh: bool = False,
        holder: str | None = None,
    ) -> None:
        self.operation = operation
        self.principal = principal
        self._claims: dict[str, Claim] | None = {} if fresh else None
        self._released: set[str] = set()
        self._creating: set[str] = set()
        """Decisions this call holds the creation of: none is durable, so none can have moved."""
        self.holder = holder or new_holder()
        """Who holds this call's claims: the same for every run of one call, so a run after a stale commit
        takes up the claims the run before it held, instead of waiting for them to lapse."""
        self.asker: Asker
        self._store = store
        self._settings = settings
        self._writes = writes
        self._fresh = fresh
        self._decisions = decisions
        self._argument_answers = argument_answers or {}
        self._describe = about
        self._about: str | None = None
        self.arguments: dict[str, Any] = {}
        """What the body runs with: the call's arguments, or as the person approved them (`Flow.arguments`)."""
        self._pending: Signal | None = None
        self._leases = leases
        self._kept: list[Kept] = []
        self._journal: dict[str, JournalEntry] | None = {} if fresh else None
        """The operation's journal as this run knows it: read once, added to by its own steps."""
        self._lease: Kept | None = None
        self._fence: Claim | None = None
        """The run lease this run took, which its journal entries and the operation's end are fenced on."""
        self._unjournaled: set[str] = set()
        self._ended = False
        self._set_aside = False
        self._taking = anyio.Lock()
        self._backing: Backing | None = None
        """The backend deciding this call's approval out of band, the tool and the call's arguments (JSON)."""
        self._relayed: set[str] = set()
        """URL decisions of another server's questions (`relay_url`): consent answers them."""

    def _ids(self) -> tuple[AsyncStore, str, Principal, str]:
        """What a write made on this call's behalf names: the store, the operation, the caller, this call."""
        return self._store, self.operation.operation_id, self.principal, self.holder

    # -- signals ------------------------------------------------------------------------------------

    def signal(self, signal: S) -> S:
        """`raise run.signal(...)` ends the turn, and the run remembers the signal in case the body swallows it."""
        self._pending = signal
        return signal

    @property
    def pending(self) -> Signal | None:
        return self._pending

    def check(self) -> None:
        """Every flow call starts here: a body that swallowed a signal meets it again."""
        if self._pending is not None:
            raise self._pending

    def absorb(self, signal: Signal) -> None:
        """An adapter collected `signal` itself (one round for a whole `gather`)."""
        if self._pending is signal:
            self._pending = None

    # -- facts --------------------------------------------------------------------------------------

    def now(self) -> datetime:
        return self._settings.clock()

    @property
    def fallback(self) -> Fallback:
        return self._settings.fallback

    @property
    def saw_expiry(self) -> bool:
        """Whether a question of this operation expired: its result is then not replayed, the next call starts anew."""
        return any(decision.status is DecisionStatus.EXPIRED for decision in self._decisions.values())

    # -- writes -------------------------------------------------------------------------------------

    def hold(self, write: Callable[[], Awaitable[Any]]) -> None:
        self._writes.hold(write)

    def hold_journal(self, name: str, value: JSONValue) -> None:
        """Record `name` in the operation's journal with this call's next commit: a note of the library's own."""
        store, operation_id, principal, _ = self._ids()
        self._writes.hold(lambda: store.journal_record(operation_id, name, value, caller=principal))

    def after_commit(self, done: Callable[[], None]) -> None:
        """Call `done` once what this call holds now is durable; if that commit fails, never."""
        self._writes.after_commit(done)

    async def commit(self) -> None:
        """Make what this call holds durable now: before anything leaves the process or waits on others."""
        if self._writes.pending:
            await self._commit_with(_nothing)

    async def _commit_with(self, last: Callable[[], Awaitable[R]]) -> R:
        """Commit what is held and `last` in one transaction; a lost commit ends the turn like any signal."""
        try:
            result = await self._writes.commit_with(last)
        except Signal as lost:
            raise self.signal(lost) from lost.__cause__
        self._creating.clear()
        return result

    @property
    def _unseen(self) -> bool:
        """Nothing of this call's new operation is durable yet, so no other call can have added to it."""
        return self._fresh and not self._writes.committed

    async def apply_answer(
        self, decision: Decision, form: FormSpec[Any] | None, response: ElicitResult, *, reason: str = "answered"
    ) -> Decision | InvalidAnswer:
        """Record what the client answered, the same way on every era: a decline or a cancel closes the
        decision, consent moves a URL decision on, and a form answer is recorded only once it fits its form.

        An answer that does not fit is returned and nothing is recorded: the era decides how to ask again.
        """
        if response.action == "decline":
            return await self.record(decision, DecisionStatus.DECLINED, reason="client answered decline")
        if response.action == "cancel":
            return await self.record(decision, DecisionStatus.CANCELLED, reason="client answered cancel")
        if decision.mode is Mode.URL:
            return await self.record(decision, DecisionStatus.ACCEPTED_URL, reason="consented to open the URL")
        if form is None:
            raise AssertionError("a form decision is asked with its form")
        try:
            content = form.content(form.validate(response.content))
            check_encodable(content)
        except InvalidAnswer as invalid:
            return invalid
        except UnencodableValue as unencodable:  # a lone surrogate: no UTF-8 form, so no store can keep it
            return InvalidAnswer(form.model, [f"the answer's {unencodable}"])
        return await self.record(decision, DecisionStatus.ACCEPTED, content=content, reason=reason)

    async def record(
        self, decision: Decision, to: DecisionStatus, *, content: JSONObject | None = None, reason: str = ""
    ) -> Decision:
        """Record an outcome by compare-and-set, held until the call's next commit (see `writes`).

        An overdue decision is settled at once instead: the store's late-signal rule expires it, and the
        body must see that now. A decision that leaves `requested` frees its question claim with it.
        """
        store, principal, operation_id = self._store, self.principal, self.operation.operation_id
        frees_claim = decision.status is DecisionStatus.REQUESTED
        now = self.now()
        if decision.is_overdue(now):
            await self.commit()
            try:
                recorded = await self._store.transition(decision, to, caller=principal, content=content, reason=reason)
            except (DecisionConflict, DecisionExpired) as lost:
                recorded = lost.current
        else:
            check_decision_transition(decision.mode, decision.status, to)
            self._writes.hold(lambda: store.transition(decision, to, caller=principal, content=content, reason=reason))
            recorded = replace(
                decision,
                status=to,
                completion_version=decision.completion_version + 1,
                content=decision.content if content is None else content,
                updated_at=now,
            )
        if frees_claim:
            claim = question_claim(decision.key)
            self._released.add(claim)
            self._writes.hold(lambda: store.release_claim(operation_id, claim, caller=principal))
        self._decisions[decision.key] = recorded
        return recorded

    async def refresh(self, decision: Decision) -> Decision:
        """The decision as stored now; an overdue one is expired on the spot (the store's late-signal rule)."""
        await self.commit()
        current = await self._store.get_decision(decision.elicitation_id, self.principal)
        if current.is_overdue(self.now()):
            current = await self._store.expire_if_overdue(
                decision.elicitation_id, self.principal, reason="no answer before the TTL"
            )
        self._decisions[decision.key] = current
        return current

    # -- waiting ------------------------------------------------------------------------------------

    async def pause(self, subjects: Sequence[str], *, until: datetime, backoff: Backoff) -> None:
        """Wait until one of `subjects` moves, the next poll is due, or `until`; whichever comes first."""
        remaining = (until - self.now()).total_seconds()
        seconds = backoff.next(remaining)
        if seconds <= 0:
            return
        await self._settings.wakeups.wait(subjects, seconds)

    async def settle(self, decision: Decision, *, until: datetime) -> Decision:
        """Look again until the decision is terminal or `until` passes: on a wake-up, or after a growing pause."""
        if not decision.is_terminal and self.now() < until:
            self.release_lease()
        await self.commit()
        backoff = Backoff()
        while not decision.is_terminal and self.now() < until:
            await self.pause([decision.elicitation_id], until=until, backoff=backoff)
            decision = await self.refresh(decision)
        return decision

    async def wait_for_approvers(
        self, decision: Decision, *, patience: timedelta | None, tell: Tell | None = None
    ) -> Decision:
        """Wait while the approvers decide, at most `patience` (None: until the decision's TTL), telling the caller
        who it waits on whenever that changes (a vote, an escalation); the decision once decided, else
        `AwaitingApprovers` ends the turn. Nothing is put to the requester's client and nothing it sends is read:
        only approvers answer such a decision, and the decision stays open when this call stops waiting."""
        backing = self._backing if is_approval(decision.key) else None
        if backing is None or voter_of(backing[0]) is None:
            return await self._wait_for_approvers(decision, patience, tell)
        await self.commit()  # the backend votes on the decision: it must exist before it may be asked
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._backend_decides, backing, decision)
                decided = await self._wait_for_approvers(decision, patience, tell)
                group.cancel_scope.cancel()
        except BaseExceptionGroup as failed:
            if len(failed.exceptions) == 1:
                raise failed.exceptions[0] from None
            raise
        return decided

    def approval_request(
        self, decision: Decision, running: tuple[dict[str, JSONValue], str, frozenset[str]] | None = None
    ) -> ApprovalRequest | None:
        """The approval `decision` as its backend sees it; None when no backend decides it (see `approve`).

        While it is decided, the call as made; at re-evaluation, `running`: the arguments the tool will run with
        (approvers' edits applied), their request digest, and the names the approvers changed."""
        if self._backing is None:
            return None
        _, tool, arguments = self._backing
        digest, edited = decision.origin_request_digest, frozenset[str]()
        if running is not None:
            arguments, digest, edited = running
        return ApprovalRequest(
            approval_id=decision.elicitation_id,
            operation_id=self.operation.operation_id,
            tool=tool,
            arguments=arguments,
            arguments_digest=digest,
            requester=self.principal,
            requested_at=decision.created_at,
            expires_at=decision.expires_at,
            edited=edited,
        )

    async def _backend_decides(self, backing: Backing, decision: Decision) -> None:
        """Run the backend's `decide` beside the wait; its ruling is its vote, cast as any approver's is."""
        backend = backing[0]
        voter = voter_of(backend)
        request = self.approval_request(decision)
        assert voter is not None
        assert request is not None
        assert decision.approvers is not None
        approver = Approver(voter, frozenset(decision.approvers.roles))
        store = self._store

        async def cast(ruling: Ruling) -> None:
            content: JSONObject = {REJECT_FIELD: True} if ruling.verdict is Verdict.REJECT else {}
            if ruling.note:
                content[NOTE_FIELD] = ruling.note
            try:
                await store.cast_vote(decision.elicitation_id, approver, ruling.verdict, content)
            except StoreError as refused:
                log.info("approval %s: %s's vote was not recorded: %s", decision.elicitation_id, voter, refused)

        try:
            await backend.decide(request, cast)
        except Exception as error:  # a backend's failure decides nothing: the approval waits for its TTL
            log.warning("approval %s: its backend %s failed: %s", decision.elicitation_id, voter, type(error).__name__)

    async def _wait_for_approvers(self, decision: Decision, patience: timedelta | None, tell: Tell | None) -> Decision:
        rule = decision.approvers
        assert rule is not None
        until = decision.expires_at if patience is None else min(decision.expires_at, self.now() + patience)
        self.release_lease()  # nobody waits on the run lease while approvers think
        await self.commit()
        told: str | None = None
        backoff = Backoff()
        while True:
            now = self.now()  # one reading per look: the decision's expiry and this call's patience are told apart
            if not decision.is_terminal and decision.is_overdue(now):
                decision = await self.refresh(decision)
            if decision.is_terminal:
                return decision
            tally = Tally.of(rule, await self._store.votes(decision.elicitation_id))
            waiting = tally.waiting(rule, decision.created_at, now)
            if waiting != told and tell is not None:
                await tell(waiting)
            told = waiting
            if now >= until and until < decision.expires_at:  # patience ran out first; at the TTL, the decision expires
                raise self.signal(AwaitingApprovers(decision, waiting))
            await self.pause([decision.elicitation_id], until=until, backoff=backoff)
            decision = await self.refresh(decision)

    @property
    def approver_wait(self) -> timedelta:
        """How long a call waits for approvers on its live request before it ends naming the pending decision."""
        return self._settings.approver_wait

    # -- claims -------------------------------------------------------------------------------------

    async def claim_of(self, name: str) -> Claim | None:
        """The claim `name` as this call last saw it; the operation's claims are read once, when first needed."""
        if self._claims is None:
            store, operation_id, principal, _ = self._ids()
            listed = await store.claims(operation_id, caller=principal)
            self._claims = {claim.name: claim for claim in listed}
        return self._claims.get(name)

    def lease_end(self) -> datetime:
        return self.now() + self._settings.lease

    async def claim_question(self, decision: Decision) -> tuple[Claim, Decision]:
        """Commit what is held and take the question's claim for this call if it is free, in one transaction.

        The decision is read again after the claim: a call that gets the claim the moment its previous
        holder let go must see the answer that holder recorded in the same transaction, not ask again.
        """
        store, operation_id, principal, holder = self._ids()
        name, lease_until = question_claim(decision.key), self.lease_end()

        async def claim_and_read() -> tuple[Claim, Decision]:
            claim = await store.claim(operation_id, name, holder=holder, lease_until=lease_until, caller=principal)
            current = await self._stored(decision)
            if claim.held_by(holder) and current.status is not DecisionStatus.REQUESTED:
                await store.release_claim(operation_id, name, caller=principal, holder=holder)
            return claim, current

        claim, current = await self._commit_with(claim_and_read)
        self._decisions[current.key] = current
        return claim, current

    def take_at_commit(
        self, decision: Decision, *, holder: str, lease_until: datetime, succeeding: str | None = None
    ) -> None:
        """Take the question's claim for `holder` with the next commit; the commit fails if another holder
        has it or the decision moved since this call read it."""
        store, operation_id, principal, _ = self._ids()
        name = question_claim(decision.key)

        async def take() -> None:
            claim = await store.claim(
                operation_id, name, holder=holder, lease_until=lease_until, caller=principal, succeeding=succeeding
            )
            if not claim.held_by(holder):
                raise StaleSnapshot(f"{name} was claimed by another call meanwhile")
            current = await self._stored(decision)
            if (current.status, current.completion_version) != (decision.status, decision.completion_version):
                raise StaleSnapshot(f"decision {decision.elicitation_id} moved meanwhile")

        self._writes.hold(take)

    async def _stored(self, decision: Decision) -> Decision:
        """The decision as stored, read inside a commit; one this very commit creates cannot have moved."""
        if decision.elicitation_id in self._creating:
            return decision
        return await self._store.get_decision(decision.elicitation_id, self.principal)

    @asynccontextmanager
    async def carrying(self, name: str) -> AsyncIterator[None]:
        """Hold the claim `name` (taken already) while the block runs and until the call's next commit: renewed
        all along, then given up with that commit, so waiters wake when what the block did is durable."""
        store, operation_id, principal, holder = self._ids()
        kept = self._leases.keep(operation_id, name, holder, principal)
        self._kept.append(kept)
        try:
            yield
        except Signal:
            # The turn ends without committing what it holds: let go now, or waiters sit out the lease.
            kept.drop()
            with anyio.CancelScope(shield=True):
                await self._release_now(name)
            raise
        finally:
            # Success, an error or a cancellation: the runtime commits what the call holds on every such
            # end (a result, a failed operation), and the claim goes with it, so no waiter starts the work
            # again before it can see how it ended. (An answer recorded in the block let go of it already.)
            if not kept.dropped:
                if name not in self._released:
                    self._writes.hold(lambda: store.release_claim(operation_id, name, caller=principal, holder=holder))
                if self._writes.pending:
                    self._writes.after_commit(kept.drop)
                else:
                    kept.drop()

    async def let_go(self, name: str) -> None:
        """Stop renewing the claim `name` this call carries, and the run lease, and release them now, while the
        call goes on: another call may take them up. Whatever this call records later is still checked: by
        compare-and-set, and a step it runs next takes the lease again first."""
        for kept in self._kept:
            if kept.name == name and not kept.dropped:
                kept.drop()
                await self._release_now(name)
        if self._lease is not None:
            with anyio.CancelScope(shield=True):
                await self._release_now(RUN_LEASE)
            self._forget_lease()

    async def end(self) -> None:
        """The run is over: stop renewing what it keeps; a run lease its last commit did not end or give up is
        released now, so the next call need not wait for it to lapse."""
        for kept in self._kept:
            kept.drop()
        self._kept.clear()
        if self._lease is not None and not self._ended:
            self._forget_lease()
            if self._unjournaled:
                return  # a step's result is not recorded: the lease lapses, and keeps it the holder's until then
            with anyio.CancelScope(shield=True):
                await self._release_now(RUN_LEASE)

    async def _release_now(self, name: str) -> None:
        store, operation_id, principal, holder = self._ids()
        try:
            await store.release_claim(operation_id, name, caller=principal, holder=holder)
        except StoreError as error:
            log.warning(
                "operation %s: cannot release the claim on %s (it lapses on its own): %s", operation_id, name, error
            )

    # -- steps ------------------------------------------------------------------------------------

    def idempotency_key(self, name: str) -> str:
        digest = hashlib.sha256(f"{self.operation.operation_id}\x00{name}".encode()).hexdigest()
        return f"mcp-elicit-{digest[:40]}"

    @property
    def unjournaled(self) -> str | None:
        """A step whose function ran in this run and whose result is not durable yet: running the call again
        would run it again."""
        return next(iter(self._unjournaled), None)

    @telemetry.traced_step
    async def step(
        self,
        name: str,
        function: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        adapter: TypeAdapter[Any],
        *,
        at_most_once: bool = False,
        holding: AbstractAsyncContextManager[object] | None = None,
    ) -> Any:
        entry = await self._recorded(name)
        if entry is not None:
            return adapter.validate_python(entry.value)
        async with holding if holding is not None else nullcontext():
            entry = await self._take_turn(name, at_most_once=at_most_once)
            if entry is not None:
                return adapter.validate_python(entry.value)
            fence = self._fence
            self._unjournaled.add(name)
            if inspect.iscoroutinefunction(function):
                result = await function(*args, **kwargs)
            else:
                result = await anyio.to_thread.run_sync(lambda: function(*args, **kwargs))
                if inspect.isawaitable(result):
                    # A plain callable that hands back the work to await (a wrapper typed `-> Awaitable[X]`, a
                    # lambda calling an async function, an object with an async `__call__`): its result is what
                    # the awaitable gives, not the awaitable itself, which cannot be journaled.
                    result = await result
        value = cast(JSONValue, adapter.dump_python(result, mode="json"))
        check_encodable(value)
        # The result is durable with the call's next commit: before anything leaves the process or the next
        # step runs. A commit that loses on something else records it on its own (`keep`).
        store, operation_id, principal, _ = self._ids()
        self._writes.hold(
            lambda: store.journal_record(operation_id, name, value, caller=principal, fence=fence), keep=True
        )
        self._writes.after_commit(partial(self._unjournaled.discard, name))
        assert self._journal is not None
        self._journal[name] = JournalEntry(name, value, self.now())
        return adapter.validate_python(value)

    async def _recorded(self, name: str) -> JournalEntry | None:
        """The journal entry `name`, from the operation's journal as read once (nothing, for a new operation)."""
        if self._journal is None:
            store, operation_id, principal, _ = self._ids()
            self._journal = {e.name: e for e in await store.journal(operation_id, caller=principal)}
        return self._journal.get(name)

    async def _take_turn(self, name: str, *, at_most_once: bool = False) -> JournalEntry | None:
        """Commit what is held, taking the run lease with it unless this run holds it; then the step's result if
        the lease's previous holder recorded it meanwhile, else nothing: the step is this run's to run.

        `at_most_once`: the same commit makes it durable that the step starts (`STARTED_PREFIX`), fenced on the
        lease, so that a run after this one died knows it may have taken effect; `OutcomeUnknown` if a run before
        this one left that mark and no result. Once the lease is this run's, its journal is the operation's."""
        async with self._taking:  # a task's `gather` runs its steps side by side: one of them takes the lease
            if self._holds_lease:
                if at_most_once:
                    await self._hold_mark(name)
                await self.commit()
                return None
            return await self._take_lease(name, mark=at_most_once)

    async def _hold_mark(self, name: str) -> None:
        """The mark that step `name` starts, with the next commit (this run holds the lease)."""
        mark = f"{STARTED_PREFIX}{name}"
        store, operation_id, principal, _ = self._ids()
        if await self._recorded(mark) is not None:
            raise OutcomeUnknown(name, operation_id)
        fence = self._fence
        self._writes.hold(lambda: store.journal_record(operation_id, mark, True, caller=principal, fence=fence))
        assert self._journal is not None
        self._journal[mark] = JournalEntry(mark, True, self.now())

    async def _take_lease(self, name: str | None, *, wait: bool = True, mark: bool = False) -> JournalEntry | None:
        store, operation_id, principal, holder = self._ids()
        backoff = Backoff()
        started = f"{STARTED_PREFIX}{name}"
        unknown = False

        async def take() -> Claim:
            nonlocal unknown
            claim = await store.claim(
                operation_id, RUN_LEASE, holder=holder, lease_until=self.lease_end(), caller=principal
            )
            if claim.held_by(holder) and not self._unseen:
                # The journal as the lease's previous holders left it: this commit's snapshot is after theirs.
                self._journal = {e.name: e for e in await store.journal(operation_id, caller=principal)}
            if mark and name is not None and claim.held_by(holder):
                assert self._journal is not None
                if name in self._journal:
                    return claim
                if started in self._journal:
                    unknown = True
                else:
                    entry = await store.journal_record(operation_id, started, True, caller=principal, fence=claim)
                    self._journal[started] = entry
            return claim

        while True:
            with anyio.CancelScope(shield=True):  # a lease taken is a lease kept, so that its release is not lost
                claim = await self._commit_with(take)
                if claim.held_by(holder):
                    self._fence = claim
                    self._lease = self._leases.keep(operation_id, RUN_LEASE, holder, principal)
            if claim.held_by(holder):
                assert self._journal is not None
                if unknown and name is not None:
                    raise OutcomeUnknown(name, operation_id)
                return None if name is None else self._journal.get(name)
            if not wait:
                return None
            log.debug("operation %s: another call runs its steps; waiting to run %s", operation_id, name)
            await self.pause([operation_id], until=claim.lease_until, backoff=backoff)

    @property
    def _holds_lease(self) -> bool:
        return self._lease is not None and not self._lease.dropped

    @property
    def fence(self) -> Claim | None:
        """The run lease the operation's end is fenced on, if this run took it."""
        return self._fence

    def release_lease(self) -> None:
        """Give up the run lease with the call's next commit: the turn ends without ending the operation, or
        the call waits on a person or a flow. An identical call, or this call's retry, then takes it without
        waiting for it to lapse; the lease is never held while someone thinks."""
        if self._lease is None:
            return
        self._set_aside = True
        store, operation_id, principal, holder = self._ids()
        self._writes.hold(lambda: store.release_claim(operation_id, RUN_LEASE, caller=principal, holder=holder))
        self._writes.after_commit(self._forget_lease)

    async def commit_taking_lease_back(self) -> None:
        """Commit what is held (a person's answer), taking back with it the run lease this run gave up while the
        person thought, if no other call took it meanwhile: the next step then needs no commit of its own."""
        if not self._set_aside or self._holds_lease:
            await self.commit()
            return
        async with self._taking:
            await self._take_lease(None, wait=False)

    def ended(self) -> None:
        """The operation's end is durable: its run lease no longer matters to anyone."""
        self._ended = True
        self._forget_lease()

    def _forget_lease(self) -> None:
        if self._lease is not None:
            self._lease.drop()
        self._lease = self._fence = None

    async def _journal_now(self, name: str, value: JSONValue) -> JournalEntry:
        """Record an answer of the client's own (sampling, roots) at once: the body acts on it next."""
        store, operation_id, principal, _ = self._ids()
        entry = await self._commit_with(lambda: store.journal_record(operation_id, name, value, caller=principal))
        if self._journal is not None:
            self._journal[name] = entry
        return entry

    # -- questions ----------------------------------------------------------------------------------

    async def ask_form(
        self, message: str, form: FormSpec[Any], name: str, ttl: timedelta, approvers: ApproverRule | None = None
    ) -> Answer[Any]:
        note = ""
        for attempt in range(1, MAX_UNUSABLE_ANSWERS + 1):
            question = name if attempt == 1 else f"{name}#{attempt}"
            decision = self._decisions.get(question)
            if decision is None:
                decision = self._create(
                    new_form_decision(
                        self._origin(question, form.sensitive_fields, ResumePolicy.AUTO, approvers),
                        message=message + note,
                        requested_schema=form.schema,
                        now=self.now(),
                        ttl=self._within_operation(ttl),
                    )
                )
            if decision.status is DecisionStatus.REQUESTED:
                try:
                    decision = await self._put_to_person(decision, form)
                except UnusableAnswer as unusable:
                    note = f"\n\n(The previous answer could not be used: {unusable} Please answer again.)"
                    continue
            if decision.status is not DecisionStatus.ACCEPTED:
                if f"{name}#{attempt + 1}" in self._decisions:
                    continue  # an earlier run closed this one as unusable and asked again
                return _closed_answer(decision)
            try:
                return Accepted(form.validate(decision.content))
            except InvalidAnswer as unusable:
                log.warning(
                    "decision %s: the recorded answer does not fit %s; asking again",
                    decision.elicitation_id,
                    form.name,
                )
                note = f"\n\n(The previous answer could not be used: {unusable} Please answer again.)"
        return Cancelled()

    async def approve(
        self, gated: GatedTool, arguments: dict[str, JSONValue], offer: GrantOffer | None = None
    ) -> Approved | Rejected | Declined | Cancelled | Expired:
        """Put the call to the person for approval, as the gate shows it (with `offer`, the standing grants they may
        give besides); what they decided, or how it closed."""
        form = built_form(
            f"the approval of {gated.tool}",
            APPROVAL_KEY,
            gated.schema(arguments, offer),
            lambda content: gated.read(content, arguments),
            gated.content,
        )
        gate = gated.gate
        if gate.backend is not None:
            self._backing = (gate.backend, gated.tool, arguments)
        answer = await self.ask_form(gated.message(arguments), form, APPROVAL_KEY, gate.ttl, gate.approvers)
        return answer.data if isinstance(answer, Accepted) else answer

    @property
    def approval(self) -> Decision | None:
        """The call's approval as this run knows it: the question last asked (an answer that did not fit asks again
        under the next key), or None when the operation was never asked for one."""
        asked = [
            (1 if key == APPROVAL_KEY else int(key.rpartition("#")[2]), decision)
            for key, decision in self._decisions.items()
            if key == APPROVAL_KEY or (key.startswith(f"{APPROVAL_KEY}#") and key.rpartition("#")[2].isdigit())
        ]
        return max(asked, key=lambda found: found[0])[1] if asked else None

    async def let_through(self, tool: str, offer: GrantOffer) -> Grant | None:
        """The standing grant that lets the call run without asking, if any: the one that let this operation through
        on an earlier run (its journal says so), or one that covers the call now (one read), whose use is recorded
        with the call's next commit. That commit fails if the grant was revoked or expired meanwhile, and the run
        again finds none: the call is asked, and nothing of it ran with a step or was recorded under the grant."""
        used = await self._recorded(GRANT_JOURNAL)
        if used is not None:
            return await self._store.get_grant(str(used.value), self.principal)
        grant = await self._store.covering_grant(self.principal, tool, offer.scope)
        if grant is None or not offer.grants.allows(grant, self.now()):
            return None
        store, operation_id, principal, _ = self._ids()

        async def use() -> None:
            try:
                await store.grant_used(grant, operation_id, caller=principal)
            except GrantEnded as ended:
                raise StaleSnapshot(f"{ended} while a call it let through began") from None

        self._writes.hold(use)
        return grant

    def keep_grant(self, tool: str, kind: GrantKind, ttl: timedelta, scope: str | None) -> Grant:
        """The standing grant the person gave with the approval this run read, created with the call's next commit;
        once, however often the call runs (a grant is created once per approving decision). It runs `ttl` from
        when they approved."""
        decision = self.approval
        if decision is None or decision.status is not DecisionStatus.ACCEPTED:
            raise RuntimeError("a grant is kept only beside the accepted approval it comes from")
        grant = new_grant(
            self.principal, tool=tool, scope=scope, kind=kind, decision_id=decision.elicitation_id,
            approved_at=decision.updated_at, ttl=ttl,
        )  # fmt: skip
        store = self._store
        self._writes.hold(lambda: store.create_grant(grant))
        return grant

    async def ask_url(self, message: str, name: str, ttl: timedelta, resume: ResumePolicy) -> UrlAnswer:
        if self._settings.decision_url is None:
            raise RuntimeError("ask_url needs the server's public base URL: Elicitation(public_base_url=...)")
        decision = self._decisions.get(name)
        if decision is None:
            elicitation_id = new_elicitation_id()
            decision = self._create(
                new_url_decision(
                    self._origin(name, (), resume),
                    message=message,
                    url=self._settings.decision_url(elicitation_id),
                    now=self.now(),
                    ttl=self._within_operation(ttl),
                    elicitation_id=elicitation_id,
                )
            )
        if not decision.is_terminal:
            decision = await self._put_to_person(decision, None)
        return _url_answer(decision)

    async def relay_url(self, message: str, name: str, ttl: timedelta, url: str) -> RelayedUrlAnswer:
        """Put another server's URL question to the person; their consent is the answer (that server runs the flow
        and learns how it ends). The decision moves to `external_pending` with the consent: completion is recorded
        only if that server says so (`complete_relayed`), else the decision expires at its TTL."""
        decision = self._decisions.get(name)
        if decision is None:
            decision = self._create(
                new_url_decision(
                    self._origin(name, (), ResumePolicy.AUTO),
                    message=message,
                    url=url,
                    now=self.now(),
                    ttl=self._within_operation(ttl),
                )
            )
        self._relayed.add(decision.elicitation_id)
        if decision.status is DecisionStatus.REQUESTED:
            decision = await self._put_to_person(decision, None)
        if decision.status is DecisionStatus.ACCEPTED_URL:
            decision = await self.record(
                decision, DecisionStatus.EXTERNAL_PENDING, reason="the relayed server runs the flow"
            )
        await self.commit()  # durable before the relayed server acts on it (and says the flow is complete)
        if decision.status in (
            DecisionStatus.EXTERNAL_PENDING,
            DecisionStatus.EXTERNAL_COMPLETED,
            DecisionStatus.EXTERNAL_FAILED,
        ):
            return Consented(decision.elicitation_id)
        return _closed_answer(decision)

    def awaits_completion(self, decision: Decision) -> bool:
        """Whether the person's consent to this URL decision is not yet its answer: true but for a relayed one."""
        return decision.elicitation_id not in self._relayed

    async def query(self, name: str, need: Need, query: ClientQuery, answer: type[A]) -> A:
        journal = f"{RESERVED_JOURNAL_PREFIX}input/{name}"
        recorded = await self._recorded(journal)
        if recorded is not None:
            return answer.model_validate(recorded.value)
        if not self.asker.can(need):
            raise self.signal(CannotAsk([Unaskable(name, need)], self.fallback))
        result = await self.asker.query(self, name, query, answer)
        value = cast(JSONValue, result.model_dump(mode="json", by_alias=True, exclude_none=True))
        try:
            check_encodable(value)
        except UnencodableValue as unencodable:
            raise ClientRefused(f"The client's answer to the request {name!r} cannot be kept: {unencodable}") from None
        entry = await self._journal_now(journal, value)
        return answer.model_validate(entry.value)

    async def gather(self, items: Sequence[Awaitable[Any]]) -> list[Any]:
        return await self.asker.gather(self, items)

    async def begin_task(self) -> None:
        """From here the call runs as a task, if it is to be one: what is held is durable first."""
        if self._settings.begin_task is not None:
            await self.commit()
            await self._settings.begin_task()

    def _within_operation(self, ttl: timedelta) -> timedelta:
        """No question outlives its operation (a task's TTL, say): at the latest it expires with it."""
        return max(min(ttl, self.operation.expires_at - self.now()), timedelta(milliseconds=1))

    def _origin(
        self, key: str, sensitive: tuple[str, ...], resume: ResumePolicy, approvers: ApproverRule | None = None
    ) -> DecisionOrigin:
        return DecisionOrigin(
            operation_id=self.operation.operation_id,
            key=key,
            principal=self.principal,
            origin_method=self.operation.method,
            origin_request_digest=self.operation.request_digest,
            resume_policy=resume,
            sensitive_fields=sensitive,
            about=self._what_about(),
            approvers=approvers,
        )

    def _what_about(self) -> str:
        """What the call is about, rendered once and only when a question is asked: most calls ask nothing."""
        if self._about is None:
            self._about = "" if self._describe is None else self._describe()
        return self._about

    def _create(self, decision: Decision) -> Decision:
        store = self._store
        self._creating.add(decision.elicitation_id)
        self._writes.hold(lambda: store.create_decision(decision))
        self._decisions[decision.key] = decision
        return decision

    @telemetry.traced_ask
    async def _put_to_person(self, decision: Decision, form: FormSpec[Any] | None) -> Decision:
        if decision.approvers is not None:  # never put to the requester's client, whatever it can show
            return await self.asker.await_approvers(self, decision)
        need = NEED_OF_MODE[decision.mode]
        if self.asker.can(need):
            return await self.asker.ask(self, decision, form)
        if (
            self.fallback is Fallback.ARGUMENTS
            and decision.mode is Mode.FORM
            and form is not None
            and not is_approval(decision.key)  # the model may not approve its own call
        ):
            supplied = self._argument_answers.get(decision.key)
            if supplied is not None:
                try:
                    answer = form.validate(supplied)
                except InvalidAnswer:
                    raise self.signal(
                        CannotAsk([Unaskable(decision.key, need, decision, form)], self.fallback)
                    ) from None
                content = form.content(answer)
                return await self.record(
                    decision, DecisionStatus.ACCEPTED, content=content, reason=f"answered through {ANSWERS_ARGUMENT}"
                )
        if self.fallback is Fallback.WEB and decision.is_overdue(self.now()):
            decision = await self.refresh(decision)
            if decision.is_terminal:
                return decision
        raise self.signal(CannotAsk([Unaskable(decision.key, need, decision, form)], self.fallback))


async def _nothing() -> None:
    return None


def _url_answer(decision: Decision) -> UrlAnswer:
    if decision.status is DecisionStatus.EXTERNAL_COMPLETED:
        return Completed()
    if decision.status is DecisionStatus.EXTERNAL_FAILED:
        return Failed()
    return _closed_answer(decision)


def _closed_answer(decision: Decision) -> Declined | Cancelled | Expired:
    if decision.status is DecisionStatus.DECLINED:
        return Declined()
    if decision.status is DecisionStatus.EXPIRED:
        return Expired()
    if decision.status is DecisionStatus.CANCELLED:
        return Cancelled()
    raise RuntimeError(f"decision {decision.elicitation_id} is still {decision.status}; the era adapter returned early")
