"""`Flow`: what a tool body holds to run steps and ask questions, the same on every protocol era.

A tool body may run many times for one operation: every 2026-07-28 retry re-runs it, and so does a
legacy retry after a crash. `step` makes that cheap and safe: a step whose result is journaled is never
run again for the operation, its recorded result is returned instead. A step that crashed half-way,
before its result was recorded, may run again, so it gets a stable idempotency key to hand to the
external system it touches (the contract of Temporal activities and Stripe idempotency keys).

`ask` and `ask_url` find the operation's decision for their key: an answered one returns its answer at
once, an open one is asked (again) through the era adapter. `sample` and `roots` ask the client itself
(its model, its roots) and are journaled like steps under their key: once answered, never asked again.
`gather` asks several of these at once: in one round where the era has rounds, one after another where
it does not. The body never learns which era it ran on.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar, cast, get_type_hints, overload

import anyio.to_thread
from mcp_types import (
    CreateMessageRequest,
    CreateMessageRequestParams,
    CreateMessageResult,
    ListRootsRequest,
    ListRootsResult,
    ModelPreferences,
    Root,
    SamplingMessage,
    TextContent,
)
from pydantic import BaseModel, TypeAdapter

from mcp_elicit.model import (
    Decision,
    DecisionOrigin,
    DecisionStatus,
    JSONObject,
    JSONValue,
    Mode,
    Operation,
    Principal,
    ResumePolicy,
    check_decision_transition,
    new_form_decision,
    new_url_decision,
)
from mcp_elicit.model.decision import new_elicitation_id
from mcp_elicit.server.answers import (
    Accepted,
    Answer,
    Cancelled,
    Completed,
    Declined,
    Expired,
    Failed,
    UrlAnswer,
)
from mcp_elicit.server.eras import Need
from mcp_elicit.server.fallback import ANSWERS_ARGUMENT, Fallback
from mcp_elicit.server.forms import FormSpec, InvalidAnswer, form_spec
from mcp_elicit.server.writes import HeldWrites
from mcp_elicit.store import DecisionConflict, DecisionExpired, JournalEntry
from mcp_elicit.store.offload import AsyncStore

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)
R = TypeVar("R")
T1 = TypeVar("T1")
T2 = TypeVar("T2")
T3 = TypeVar("T3")
T4 = TypeVar("T4")
T5 = TypeVar("T5")

DEFAULT_FORM_TTL = timedelta(minutes=15)
DEFAULT_URL_TTL = timedelta(minutes=30)
MAX_UNUSABLE_ANSWERS = 3
"""How often one question is asked again because its recorded answer no longer fits the model."""
_KEY = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
RESERVED_JOURNAL_PREFIX = "mcp-elicit/"
"""Journal names under this prefix belong to the library (`sample` and `roots` answers), never to a step."""

ClientQuery = CreateMessageRequest | ListRootsRequest
"""A question to the client itself, not to the person: its model (sampling) or its roots."""
A = TypeVar("A", CreateMessageResult, ListRootsResult)


NEED_OF_MODE = {Mode.FORM: Need.FORM, Mode.URL: Need.URL}


@dataclass(frozen=True, slots=True)
class Unaskable:
    """One thing the body asked that this client cannot be asked; a decision's, with its form, if it is one."""

    key: str
    need: Need
    decision: Decision | None = None
    form: FormSpec[Any] | None = None


class CannotAsk(Exception):
    """The client cannot be asked these things and the entry's fallback decides what the caller sees."""

    def __init__(self, unaskable: Sequence[Unaskable], fallback: Fallback) -> None:
        self.unaskable = tuple(unaskable)
        self.fallback = fallback
        super().__init__("cannot ask " + ", ".join(f"{u.key} ({u.need})" for u in self.unaskable))

    @property
    def needs(self) -> frozenset[Need]:
        return frozenset(u.need for u in self.unaskable)

    @classmethod
    def merged(cls, errors: Sequence[CannotAsk]) -> CannotAsk:
        """One error naming everything several items of one `gather` could not ask."""
        return cls([u for error in errors for u in error.unaskable], errors[0].fallback)


class ClientRefused(Exception):
    """The client answered a sampling or roots request with an error, or not in time; nothing was recorded."""


class Waker(Protocol):
    """Ends a wait on a decision early when the store reports that it moved."""

    async def wait(self, elicitation_id: str, seconds: float) -> None: ...


class Asker(Protocol):
    """One per era: puts open decisions in front of the person, queries the client, records what came back."""

    def can(self, need: Need) -> bool: ...

    async def ask(self, flow: Flow, decision: Decision, form: FormSpec[Any] | None) -> Decision: ...

    async def query(self, flow: Flow, key: str, query: ClientQuery, answer: type[A]) -> A:
        """The client's answer to `query`; the flow journals it under `key` before the body sees it."""
        ...

    async def gather(self, items: Sequence[Awaitable[Any]]) -> list[Any]:
        """Await every item, asking what they ask in as few exchanges as the era allows."""
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


class Flow:
    """The handle a tool or prompt body receives: `step`, `ask`, `ask_url`, `sample`, `roots`, `gather`."""

    def __init__(
        self,
        *,
        store: AsyncStore,
        operation: Operation,
        principal: Principal,
        asker: Asker,
        decisions: dict[str, Decision],
        clock: Callable[[], datetime],
        decision_url: Callable[[str], str] | None,
        fallback: Fallback,
        argument_answers: dict[str, Any] | None,
        wakeups: Waker | None = None,
        writes: HeldWrites | None = None,
        fresh: bool = False,
    ) -> None:
        self.operation = operation
        self.wakeups = wakeups
        self.principal = principal
        self._store = store
        self._writes = writes or HeldWrites(store)
        self._fresh = fresh
        self._asker = asker
        self._decisions = decisions
        self._clock = clock
        self._decision_url = decision_url
        self._fallback = fallback
        self._argument_answers = argument_answers or {}
        self._keys_used: dict[str, int] = {}

    @property
    def saw_expiry(self) -> bool:
        """Whether a question of this operation expired: its result is then not replayed, the next call starts anew."""
        return any(decision.status is DecisionStatus.EXPIRED for decision in self._decisions.values())

    # -- steps --------------------------------------------------------------------------------

    def idempotency_key(self, name: str) -> str:
        """Stable across every re-execution of this operation's step `name`; opaque to the outside."""
        digest = hashlib.sha256(f"{self.operation.operation_id}\x00{name}".encode()).hexdigest()
        return f"mcp-elicit-{digest[:40]}"

    async def step(
        self,
        name: str,
        function: Callable[..., Awaitable[R]] | Callable[..., R],
        *args: Any,
        returns: type[R] | None = None,
        **kwargs: Any,
    ) -> R:
        """Run `function` once for this operation and journal its result; later runs get the journal."""
        if name.startswith(RESERVED_JOURNAL_PREFIX):
            raise ValueError(f"step names starting with {RESERVED_JOURNAL_PREFIX!r} are reserved: got {name!r}")
        adapter: TypeAdapter[Any] = TypeAdapter(returns if returns is not None else _return_type(function))
        recorded = await self._journaled(name)
        if recorded is not None:
            return cast(R, adapter.validate_python(recorded.value))
        await self.commit()
        if inspect.iscoroutinefunction(function):
            result = await function(*args, **kwargs)
        else:
            result = await anyio.to_thread.run_sync(lambda: function(*args, **kwargs))
        value = cast(JSONValue, adapter.dump_python(result, mode="json"))
        entry = await self._journal(name, value)
        return cast(R, adapter.validate_python(entry.value))

    # -- questions ------------------------------------------------------------------------------

    async def ask(
        self,
        message: str,
        model: type[M],
        *,
        key: str | None = None,
        ttl: timedelta = DEFAULT_FORM_TTL,
    ) -> Answer[M]:
        """Ask the person for a form answer shaped by `model` (non-sensitive data only).

        An answer recorded out of band (the decision's web page checks the requested schema, not the
        model's own validators) or under an older version of the model may not fit `model` any more: the
        question is then asked again, under the key `{key}#2` and then `{key}#3`, with a note saying why.
        A third unusable answer ends the question as `Cancelled()`.
        """
        form = form_spec(model)
        name = self._claim_key(key, _snake(model.__name__))
        note = ""
        for attempt in range(1, MAX_UNUSABLE_ANSWERS + 1):
            question = name if attempt == 1 else f"{name}#{attempt}"
            decision = self._decisions.get(question)
            if decision is None:
                decision = await self._create(
                    new_form_decision(
                        self._origin(question, form.sensitive_fields, ResumePolicy.AUTO),
                        message=message + note,
                        requested_schema=form.schema,
                        now=self._clock(),
                        ttl=ttl,
                    )
                )
            if decision.status is DecisionStatus.REQUESTED:
                decision = await self._put_to_person(decision, form)
            if decision.status is not DecisionStatus.ACCEPTED:
                return _closed_answer(decision)
            try:
                return Accepted(form.validate(decision.content))
            except InvalidAnswer as unusable:
                log.warning(
                    "decision %s: the recorded answer does not fit %s; asking again",
                    decision.elicitation_id,
                    model.__name__,
                )
                note = f"\n\n(The previous answer could not be used: {unusable} Please answer again.)"
        return Cancelled()

    async def ask_url(
        self,
        message: str,
        *,
        key: str = "connect",
        ttl: timedelta = DEFAULT_URL_TTL,
        resume: ResumePolicy = ResumePolicy.AUTO,
    ) -> UrlAnswer:
        """Send the person to this server's own page for the decision (credentials, OAuth, payments)."""
        if self._decision_url is None:
            raise RuntimeError("ask_url needs the server's public base URL: Elicitation(public_base_url=...)")
        name = self._claim_key(key, "connect")
        decision = self._decisions.get(name)
        if decision is None:
            elicitation_id = new_elicitation_id()
            decision = await self._create(
                new_url_decision(
                    self._origin(name, (), resume),
                    message=message,
                    url=self._decision_url(elicitation_id),
                    now=self._clock(),
                    ttl=ttl,
                    elicitation_id=elicitation_id,
                )
            )
        if not decision.is_terminal:
            decision = await self._put_to_person(decision, None)
        return _url_answer(decision)

    # -- the client itself: its model, its roots ------------------------------------------------

    async def sample(
        self,
        messages: str | Sequence[SamplingMessage],
        *,
        max_tokens: int,
        key: str | None = None,
        system_prompt: str | None = None,
        temperature: float | None = None,
        stop_sequences: Sequence[str] | None = None,
        model_preferences: ModelPreferences | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> CreateMessageResult:
        """Ask the client's model (`sampling/createMessage`); a string is one user message.

        Journaled under `key` (default `sample`, then `sample_2`, ...): once the client answered, a re-run
        of the body gets the recorded answer and the model is not asked again. Needs the client's
        `sampling` capability; without it the entry's fallback answers (-32021 naming `sampling`). A client
        that answers with an error, or not at all, raises `ClientRefused`: nothing is journaled, and the
        body may catch it to go on without the model (uncaught, the call fails and a retry asks again).
        """
        name = self._claim_key(key, "sample")
        if isinstance(messages, str):
            messages = [SamplingMessage(role="user", content=TextContent(type="text", text=messages))]
        query = CreateMessageRequest(
            params=CreateMessageRequestParams(
                messages=list(messages),
                max_tokens=max_tokens,
                system_prompt=system_prompt,
                temperature=temperature,
                stop_sequences=list(stop_sequences) if stop_sequences is not None else None,
                model_preferences=model_preferences,
                metadata=metadata,
            )
        )
        return await self._query(name, Need.SAMPLING, query, CreateMessageResult)

    async def roots(self, *, key: str | None = None) -> list[Root]:
        """The client's roots (`roots/list`), journaled under `key` (default `roots`) like `sample`."""
        name = self._claim_key(key, "roots")
        return (await self._query(name, Need.ROOTS, ListRootsRequest(), ListRootsResult)).roots

    # -- several at once ------------------------------------------------------------------------

    @overload
    async def gather(self, a: Awaitable[T1], /) -> tuple[T1]: ...
    @overload
    async def gather(self, a: Awaitable[T1], b: Awaitable[T2], /) -> tuple[T1, T2]: ...
    @overload
    async def gather(self, a: Awaitable[T1], b: Awaitable[T2], c: Awaitable[T3], /) -> tuple[T1, T2, T3]: ...
    @overload
    async def gather(
        self, a: Awaitable[T1], b: Awaitable[T2], c: Awaitable[T3], d: Awaitable[T4], /
    ) -> tuple[T1, T2, T3, T4]: ...
    @overload
    async def gather(
        self, a: Awaitable[T1], b: Awaitable[T2], c: Awaitable[T3], d: Awaitable[T4], e: Awaitable[T5], /
    ) -> tuple[T1, T2, T3, T4, T5]: ...
    @overload
    async def gather(self, *items: Awaitable[R]) -> tuple[R, ...]: ...

    async def gather(self, *items: Awaitable[Any]) -> tuple[Any, ...]:
        """Ask independent things together: `await flow.gather(flow.ask(...), flow.sample(...), flow.roots())`.

        Returns their answers in order. Where the era has rounds, every unanswered item goes into the same
        round and the body goes on once all are answered; otherwise they are asked one after another. The
        items must not depend on each other's answers: ask those in sequence instead.
        """
        return tuple(await self._asker.gather(items))

    # -- used by the era adapters ---------------------------------------------------------------

    async def record(
        self, decision: Decision, to: DecisionStatus, *, content: JSONObject | None = None, reason: str = ""
    ) -> Decision:
        """Record an outcome by compare-and-set, held until the call's next commit (see `writes`).

        An overdue decision is settled at once instead: the store's late-signal rule expires it, and the
        body must see that now. A held outcome that loses its compare-and-set at the commit makes the runtime
        run the body again, so whoever recorded first wins and every run ends up reading that.
        """
        now = self._clock()
        if decision.is_overdue(now):
            await self.commit()
            try:
                recorded = await self._store(
                    self._store.sync.transition, decision, to, caller=self.principal, content=content, reason=reason
                )
            except (DecisionConflict, DecisionExpired) as lost:
                recorded = lost.current
        else:
            check_decision_transition(decision.mode, decision.status, to)
            sync, principal = self._store.sync, self.principal
            self._writes.hold(lambda: sync.transition(decision, to, caller=principal, content=content, reason=reason))
            recorded = replace(
                decision,
                status=to,
                completion_version=decision.completion_version + 1,
                content=decision.content if content is None else content,
                updated_at=now,
            )
        self._decisions[decision.key] = recorded
        return recorded

    async def commit(self) -> None:
        """Make what this call holds durable now: before anything leaves the process or waits on others."""
        await self._writes.commit()

    async def refresh(self, decision: Decision) -> Decision:
        """The decision as stored now; an overdue one is expired on the spot (the store's late-signal rule)."""
        await self.commit()
        current = await self._store(self._store.sync.get_decision, decision.elicitation_id, self.principal)
        if current.is_overdue(self._clock()):
            current = await self._store(
                self._store.sync.expire_if_overdue,
                decision.elicitation_id,
                self.principal,
                reason="no answer before the TTL",
            )
        self._decisions[decision.key] = current
        return current

    def now(self) -> datetime:
        return self._clock()

    # -- internals ------------------------------------------------------------------------------

    def _claim_key(self, key: str | None, default: str) -> str:
        base = key or default
        if not _KEY.match(base):
            raise ValueError(f"a question key is 1-64 letters, digits, '_', '.', '-': got {base!r}")
        count = self._keys_used.get(base, 0) + 1
        self._keys_used[base] = count
        if count == 1:
            return base
        if key is not None:
            raise ValueError(f"question key {key!r} is used twice in one tool body; keys name questions")
        return f"{base}_{count}"

    def _origin(self, key: str, sensitive: tuple[str, ...], resume: ResumePolicy) -> DecisionOrigin:
        return DecisionOrigin(
            operation_id=self.operation.operation_id,
            key=key,
            principal=self.principal,
            origin_method=self.operation.method,
            origin_request_digest=self.operation.request_digest,
            resume_policy=resume,
            sensitive_fields=sensitive,
        )

    async def _create(self, decision: Decision) -> Decision:
        sync = self._store.sync
        self._writes.hold(lambda: sync.create_decision(decision))
        self._decisions[decision.key] = decision
        return decision

    async def _journaled(self, name: str) -> JournalEntry | None:
        if self._fresh:
            return None
        await self.commit()
        sync, operation_id, principal = self._store.sync, self.operation.operation_id, self.principal
        return await self._store(sync.journal_get, operation_id, name, caller=principal)

    async def _journal(self, name: str, value: JSONValue) -> JournalEntry:
        sync, operation_id, principal = self._store.sync, self.operation.operation_id, self.principal
        return await self._writes.commit_with(lambda: sync.journal_record(operation_id, name, value, caller=principal))

    async def _query(self, name: str, need: Need, query: ClientQuery, answer: type[A]) -> A:
        journal = f"{RESERVED_JOURNAL_PREFIX}input/{name}"
        recorded = await self._journaled(journal)
        if recorded is not None:
            return answer.model_validate(recorded.value)
        if not self._asker.can(need):
            raise CannotAsk([Unaskable(name, need)], self._fallback)
        result = await self._asker.query(self, name, query, answer)
        value = cast(JSONValue, result.model_dump(mode="json", by_alias=True, exclude_none=True))
        entry = await self._journal(journal, value)
        return answer.model_validate(entry.value)

    async def _put_to_person(self, decision: Decision, form: FormSpec[Any] | None) -> Decision:
        need = NEED_OF_MODE[decision.mode]
        if self._asker.can(need):
            return await self._asker.ask(self, decision, form)
        if self._fallback is Fallback.ARGUMENTS and decision.mode is Mode.FORM and form is not None:
            supplied = self._argument_answers.get(decision.key)
            if supplied is not None:
                try:
                    answer = form.validate(supplied)
                except InvalidAnswer:
                    raise CannotAsk([Unaskable(decision.key, need, decision, form)], self._fallback) from None
                content = form.content(answer)
                return await self.record(
                    decision, DecisionStatus.ACCEPTED, content=content, reason=f"answered through {ANSWERS_ARGUMENT}"
                )
        if self._fallback is Fallback.WEB and decision.is_overdue(self._clock()):
            decision = await self.refresh(decision)
            if decision.is_terminal:
                return decision
        raise CannotAsk([Unaskable(decision.key, need, decision, form)], self._fallback)


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


def _return_type(function: Callable[..., Any]) -> Any:
    try:
        hints = get_type_hints(function)
    except (NameError, TypeError):
        return Any
    returned = hints.get("return", Any)
    origin = getattr(returned, "__origin__", None)
    if origin is not None and getattr(origin, "__name__", "") in ("Awaitable", "Coroutine"):
        return returned.__args__[-1]
    return returned


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
