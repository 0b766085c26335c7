"""`Flow`: what a tool body holds to run steps and ask questions, the same on every protocol era.

A tool body may run many times for one operation: every 2026-07-28 retry re-runs it, a legacy retry
after a crash re-runs it, and an identical call made while the first still runs attaches to the same
operation and runs it too. `step` makes that cheap and safe: a step whose result is journaled is never
run again for the operation, its recorded result is returned instead, and while one call runs a step
the others wait for its result. A step that crashed half-way, before its result was recorded, may run
again once its claim lapses, so it gets a stable idempotency key to hand to the external system it
touches (the contract of Temporal activities and Stripe idempotency keys).

`ask` and `ask_url` find the operation's decision for their key: an answered one returns its answer at
once, an open one is put to the person (by one call at a time) through the era adapter. `sample` and
`roots` ask the client itself (its model, its roots) and are journaled like steps under their key.
`gather` asks several of these at once: in one round where the era has rounds, one after another where
it does not. The body never learns which era it ran on, and the runtime's control-flow signals
(`BaseException` subclasses, see `signals`) pass through its `except Exception` blocks.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from typing import Any, TypeVar, cast, get_type_hints, overload

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
from pydantic import TypeAdapter
from typing_extensions import TypeForm

from mcp_elicit.model import GRANT_FIELD, NOTE_FIELD, REJECT_FIELD, ApproverRule, JSONValue, Principal, ResumePolicy
from mcp_elicit.server.answers import Answer, RelayedUrlAnswer, UrlAnswer
from mcp_elicit.server.eras.capabilities import Need
from mcp_elicit.server.execution import RESERVED_JOURNAL_PREFIX, Execution
from mcp_elicit.server.forms import form_spec, schema_form

T = TypeVar("T")
K = TypeVar("K", bound=str | enum.Enum)
R = TypeVar("R")
T1 = TypeVar("T1")
T2 = TypeVar("T2")
T3 = TypeVar("T3")
T4 = TypeVar("T4")
T5 = TypeVar("T5")

DEFAULT_FORM_TTL = timedelta(minutes=15)
DEFAULT_URL_TTL = timedelta(minutes=30)
URL_KEY = "connect"
SAMPLE_KEY = "sample"
ROOTS_KEY = "roots"
"""The default keys of `ask_url`, `sample` and `roots`, which a form question's default key never takes."""
_KEY = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class Flow:
    """The handle a tool or prompt body receives: `step`, `ask`, `ask_url`, `sample`, `roots`, `gather`."""

    __slots__ = ("_defaulted", "_keys_used", "_run")

    def __init__(self, run: Execution) -> None:
        self._run = run
        self._keys_used: dict[str, int] = {}
        self._defaulted: set[str] = set()

    @property
    def operation_id(self) -> str:
        """The durable operation this call belongs to (shared by its retries and overlapping twins)."""
        return self._run.operation.operation_id

    @property
    def principal(self) -> Principal:
        """Who the call runs for: the authenticated subject and the OAuth client."""
        return self._run.principal

    @property
    def arguments(self) -> dict[str, Any]:
        """The arguments this call runs with: the call's own, or as the person approved them when a gate asked
        (an edit changes them). A body registered with `Elicitation.tool` receives them as its parameters too."""
        return dict(self._run.arguments)

    # -- steps --------------------------------------------------------------------------------

    def idempotency_key(self, name: str) -> str:
        """Stable across every re-execution of this operation's step `name`; opaque to the outside."""
        return self._run.idempotency_key(name)

    async def step(
        self,
        name: str,
        function: Callable[..., Awaitable[R]] | Callable[..., R],
        *args: Any,
        returns: type[R] | None = None,
        at_most_once: bool = False,
        holding: AbstractAsyncContextManager[object] | None = None,
        **kwargs: Any,
    ) -> R:
        """Run `function` once for this operation and journal its result; later runs get the journal.

        A coroutine function is awaited; any other callable runs in a worker thread, and an awaitable it
        returns (a wrapper typed `-> Awaitable[X]`, a lambda calling an async function) is awaited in turn.

        A step runs again when its call died between running it and recording its result (see `Execution`);
        `at_most_once=True` makes it durable that the step starts before it does (with the commit that takes the
        run lease for it, no commit of its own), and a run that finds a step started and unrecorded raises
        `OutcomeUnknown` instead of running it again: for an effect that must not happen twice and that no
        idempotency key protects (the gateway forwarding an approved call).

        `holding` is what the step must wait for before its effect can happen (the gateway's session with its
        upstream): entered before the step's turn is taken and its start marked, left once the function returned,
        never entered when the result is journaled already. So a call cancelled while it waits has not started
        the step, and the mark of an `at_most_once` step means that its effect may have happened.
        """
        self._run.check()
        if name.startswith(RESERVED_JOURNAL_PREFIX):
            raise ValueError(f"step names starting with {RESERVED_JOURNAL_PREFIX!r} are reserved: got {name!r}")
        adapter: TypeAdapter[Any] = TypeAdapter(returns if returns is not None else _return_type(function))
        return cast(
            R, await self._run.step(name, function, args, kwargs, adapter, at_most_once=at_most_once, holding=holding)
        )

    # -- questions ------------------------------------------------------------------------------

    @overload
    async def ask(
        self,
        message: str,
        model: Mapping[K, str],
        *,
        key: str | None = None,
        ttl: timedelta = DEFAULT_FORM_TTL,
        approvers: ApproverRule | None = None,
    ) -> Answer[K]: ...
    @overload
    async def ask(
        self,
        message: str,
        model: type[T],
        *,
        key: str | None = None,
        ttl: timedelta = DEFAULT_FORM_TTL,
        approvers: ApproverRule | None = None,
    ) -> Answer[T]: ...
    @overload
    async def ask(
        self,
        message: str,
        model: TypeForm[T],
        *,
        key: str | None = None,
        ttl: timedelta = DEFAULT_FORM_TTL,
        approvers: ApproverRule | None = None,
    ) -> Answer[T]: ...

    async def ask(
        self,
        message: str,
        model: Any,
        *,
        key: str | None = None,
        ttl: timedelta = DEFAULT_FORM_TTL,
        approvers: ApproverRule | None = None,
    ) -> Answer[Any]:
        """Ask the person for a form answer (non-sensitive data only) of the type `model`; `Accepted.data` is one.

        `model` is a pydantic model, a dataclass or a `TypedDict` (a form of their fields), one value (`bool`,
        `str`, `int`, `float`, a `Literal` or `Enum` of strings, a list of them for a multi-select, ...), asked
        as a one-field form titled by `message`, or a mapping of choices to titles, answered by the chosen key:
        `await flow.ask("Region?", {"eu": "Europe", "us": "United States"})`. A type that cannot be asked as a
        flat form raises `UnsupportedField` or `SecretField` here, before anything is stored or shown
        (declare it in `Elicitation.tool(asks=...)` to have it checked when the tool is registered).

        The key names the question in listings, the audit trail, logs and telemetry, and finds its answer on
        every run of the body. It defaults to what is asked, never to the message (which may carry names,
        addresses or arguments): the snake-case name of the model, dataclass, `TypedDict` or `Enum` (a list or
        mapping of an Enum's members too), else the kind of value: `yes_no` (bool), `text`, `email`, `date`,
        `date_time`, `url` (a text of that format), `number` (int, float), `choice` (a `Literal` or a mapping
        of strings), `choices` (a multi-select). A default key already taken in this body gets `_2`, then
        `_3` (`text`, `text_2`); one that is the default of `ask_url`, `sample` or `roots` (a model named
        `Sample`) gets `_form` (`sample_form`). An explicit `key=` names one question: equal to a key an
        earlier question of the body took, by default or not, it raises `ValueError`.

        An answer recorded out of band (the decision's web page checks the requested schema, not the
        type's own validators) or under an older version of the type may not fit it any more: the
        question is then asked again, under the key `{key}#2` and then `{key}#3`, with a note saying why.
        A third unusable answer ends the question as `Cancelled()`.

        `approvers` has others decide instead of the person calling: signed-in members of its roles answer on the
        decision's page or in the inbox, `quorum` of them with the same answer (any rejection is `Declined()`),
        never the caller themself; the call waits for them (see `Gate(approvers=...)`).
        """
        self._run.check()
        if approvers is not None and not isinstance(approvers, ApproverRule):
            raise TypeError("approvers= takes ApproverRule(roles=[...], quorum=..., ...)")
        form = form_spec(model).asking(message)
        fields = form.schema.get("properties")
        reserved = sorted(set(fields if isinstance(fields, dict) else ()) & {NOTE_FIELD, REJECT_FIELD, GRANT_FIELD})
        if approvers is not None and reserved:
            raise ValueError(
                f"a question approvers answer cannot have a field named {', '.join(reserved)}: the approvals' own "
                "fields have those names (their notes, a rejection); rename it"
            )
        default = f"{form.key}_form" if form.key in (URL_KEY, SAMPLE_KEY, ROOTS_KEY) else form.key
        name = self._claim_key(key, default)
        return await self._run.ask_form(message, form, name, ttl, approvers)

    async def ask_schema(
        self,
        message: str,
        requested_schema: Mapping[str, Any],
        *,
        key: str,
        ttl: timedelta = DEFAULT_FORM_TTL,
    ) -> Answer[dict[str, JSONValue]]:
        """Ask a form whose `requestedSchema` came from elsewhere (a question another server asks, relayed as it
        came); `Accepted.data` is the answer's content, checked against every rule of that schema.

        For relays, not for tools: a tool asks with a type (`ask`), whose schema the library renders and whose
        answer it reads back into that type. The schema must be the spec's restricted form schema
        (`UnsupportedSchema` names what is not, before anything is stored); the key is required, since only the
        relay knows what makes two of its questions the same one. The answer is durable when this returns, since
        the server that asked acts on it next.
        """
        self._run.check()
        form = schema_form(requested_schema, key)
        name = self._claim_key(key, key)
        answer = await self._run.ask_form(message, form, name, ttl)
        await self._run.commit()  # durable before the server that asked acts on it
        return answer

    async def relay_url(
        self, message: str, url: str, *, key: str, ttl: timedelta = DEFAULT_URL_TTL
    ) -> RelayedUrlAnswer:
        """Put another server's URL question (its own page, its own flow) to the person, for relays: `Consented`
        once they agree to open `url`, which is the answer that server waits for; it alone learns whether the flow
        completed. The answer is durable when this returns. Not for tools: a tool's URL question goes to this
        server's own page (`ask_url`)."""
        self._run.check()
        name = self._claim_key(key, key)
        return await self._run.relay_url(message, name, ttl, url)

    async def ask_url(
        self,
        message: str,
        *,
        key: str = URL_KEY,
        ttl: timedelta = DEFAULT_URL_TTL,
        resume: ResumePolicy = ResumePolicy.AUTO,
    ) -> UrlAnswer:
        """Send the person to this server's own page for the decision (credentials, OAuth, payments)."""
        self._run.check()
        name = self._claim_key(key, URL_KEY)
        return await self._run.ask_url(message, name, ttl, resume)

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
        self._run.check()
        name = self._claim_key(key, SAMPLE_KEY)
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
        return await self._run.query(name, Need.SAMPLING, query, CreateMessageResult)

    async def begin_task(self) -> None:
        """From here on the call may run as an MCP task (a tool registered with `task_start=TaskStart.FLOW`).

        On a call that asked for a task, what the body asked so far was asked on the call itself, and the
        client now gets the task: the body goes on in the background, asking through the task. On any
        other call, and in the task itself, this does nothing.
        """
        self._run.check()
        await self._run.begin_task()

    async def roots(self, *, key: str | None = None) -> list[Root]:
        """The client's roots (`roots/list`), journaled under `key` (default `roots`) like `sample`."""
        self._run.check()
        name = self._claim_key(key, ROOTS_KEY)
        return (await self._run.query(name, Need.ROOTS, ListRootsRequest(), ListRootsResult)).roots

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
        self._run.check()
        return tuple(await self._run.gather(items))

    # -- internals ------------------------------------------------------------------------------

    def _claim_key(self, key: str | None, default: str) -> str:
        base = key or default
        if not _KEY.match(base):
            raise ValueError(f"a question key is 1-64 letters, digits, '_', '.', '-': got {base!r}")
        count = self._keys_used.get(base, 0) + 1
        self._keys_used[base] = count
        if count == 1:
            if key is None:
                self._defaulted.add(base)
            return base
        if key is not None:
            earlier = " (an earlier question took it by default: give that one a key= too)" * (key in self._defaulted)
            raise ValueError(f"question key {key!r} is used twice in one tool body; keys name questions{earlier}")
        numbered = f"{base}_{count}"
        while numbered in self._keys_used:  # an explicit key took it
            count += 1
            numbered = f"{base}_{count}"
        self._keys_used[base] = count
        self._keys_used[numbered] = 1
        self._defaulted.add(numbered)
        return numbered


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
