"""The scripted person and the stand-in browser that the harness puts behind the client kit.

`ScriptedPerson` is an ordinary `ElicitationHandler`, so every question reaches it through the kit's one
path, on every era, with the kit's checks (declared modes, schema, URL review). The wire does not carry a
question's key on the 2025 eras, but the test runs the server in process and reads its store: the question
on screen is the open decision with that message (or that id, for a URL), and its key picks the reply.

`BrowserStandIn` is the kit's URL opener. After a consent it does what the decision's page records when the
person finishes the external step there: the decision moves to `external_pending`, then to
`external_completed` or `external_failed`, by compare-and-set, as the decision's own principal signed in
(`BrowserUser`). It serves and fetches no page: a test of the pages themselves drives them over HTTP, as
the web layer's tests do.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal
from urllib.parse import urlsplit

import anyio
import anyio.lowlevel
import anyio.to_thread
from anyio.abc import TaskGroup

from mcp_elicit.client import (
    Cancel,
    Consent,
    Decline,
    FormReply,
    FormRequest,
    Mode,
    PendingFlows,
    ScriptedHandler,
    UrlReply,
    UrlRequest,
)
from mcp_elicit.model import BrowserUser, Decision, DecisionStatus, Operator, ResumePolicy
from mcp_elicit.model import Mode as DecisionMode
from mcp_elicit.store import DecisionConflict, DecisionExpired, NotFound, StoreError
from mcp_elicit.store.aio import AsyncStore
from mcp_elicit.testing.clock import ControlledClock
from mcp_elicit.testing.script import Reply, Script, ScriptFailure, UnscriptedQuestion, UrlOutcome

TESTING = Operator("mcp-elicit-testing")
"""Who the harness reads the store as: it looks across principals, as an operator does, and changes nothing."""
ANSWER_NOTE = "\n\n("
"""How the server appends why it asks again (an answer its validators refused) to a question's message."""
CONSENT_POLL = 0.01
"""Seconds between two looks at a URL decision while waiting for the server to record the consent."""
_DECISION_PATH = re.compile(r"/elicit/([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$")


@dataclass(frozen=True, slots=True)
class Question:
    """A question put to the scripted person and answered from the script (an unscripted one fails the call)."""

    key: str
    mode: Literal["form", "url"]
    message: str
    era: str
    tool: str
    elicitation_id: str
    operation_id: str
    reply: Reply
    url: str | None = None
    """The page a URL question sends the person to, as the kit showed it."""
    schema: Mapping[str, Any] | None = None
    """The form's requested schema as the person's client received it (None for a URL question): what a
    test checks to see which fields, choices and titles the person was offered, beyond the message."""


@dataclass
class Encounters:
    """What one call put to the scripted person, and where the script did not fit (the first failure wins)."""

    era: str
    tool: str
    asked: list[Question] = field(default_factory=list)
    failures: list[ScriptFailure] = field(default_factory=list)


class ScriptedPerson:
    """Answers each question by its key from the script; never guesses, and records every question it saw."""

    def __init__(
        self,
        store: AsyncStore,
        script: Script,
        encounters: Encounters,
        browser: BrowserStandIn,
        *,
        modes: Sequence[Mode],
        clock: ControlledClock | None,
    ) -> None:
        self._store = store
        self._script = script
        self._encounters = encounters
        self._browser = browser
        self._modes = frozenset(modes)
        self._clock = clock

    @property
    def modes(self) -> frozenset[Mode]:
        return self._modes

    async def form(self, request: FormRequest) -> FormReply:
        decision = await self._open_form(request.message)
        if decision is None:
            return Cancel()
        if request.problem is not None:
            return self._failed(f"the client kit refused the scripted answer to {decision.key!r}: {request.problem}")
        reply = self._reply(decision, "form", schema=request.requested_schema)
        if reply is None or not await self._wait(reply):
            return Cancel()
        return await ScriptedHandler([reply.entry], modes=("form",)).form(request)

    async def url(self, request: UrlRequest) -> UrlReply:
        decision = await self._url_decision(request)
        if decision is None:
            return Cancel()
        reply = self._reply(decision, "url", url=request.review.url)
        if reply is None or not await self._wait(reply):
            return Cancel()
        if reply.action == "decline":
            return Decline()
        if reply.action == "cancel":
            return Cancel()
        assert reply.outcome is not None
        if reply.outcome == "abandoned" and self._clock is None:
            return self._failed("consent('abandoned') needs the app on a ControlledClock: the TTL must run out")
        self._browser.expect(decision.elicitation_id, reply.outcome)
        return Consent()

    # -- which question this is --------------------------------------------------------------------

    async def _open_form(self, message: str) -> Decision | None:
        """The open form decision on screen: its message, maybe with the server's note on a refused answer."""
        store = self._store
        waiting = await store.list_decisions(TESTING, status=DecisionStatus.REQUESTED, limit=1000)
        found = [
            decision
            for decision in waiting
            if decision.mode is DecisionMode.FORM
            and (message == decision.message or message.startswith(decision.message + ANSWER_NOTE))
        ]
        keys = sorted({decision.key for decision in found})
        if not keys:
            self._failed(
                f"the tool {self._encounters.tool!r} asked {message!r}, and no open question of the server's store "
                "has that message: is the app's store the one the harness reads (Elicitation.store)?",
                unscripted=True,
            )
            return None
        if len(keys) > 1:
            self._failed(
                f"{message!r} is the message of several open questions ({', '.join(keys)}): give them distinct "
                "messages, so that a person (and the script) can tell them apart"
            )
            return None
        return found[0]

    async def _url_decision(self, request: UrlRequest) -> Decision | None:
        """The decision behind a URL question: the `elicitationId` (2025-11-25), else the page's path."""
        elicitation_id = request.elicitation_id
        if elicitation_id is None:
            found = _DECISION_PATH.search(urlsplit(request.review.url).path)
            elicitation_id = found.group(1) if found is not None else None
        store = self._store
        try:
            if elicitation_id is not None:
                return await store.get_decision(elicitation_id, TESTING)
        except NotFound:
            pass
        self._failed(
            f"the tool {self._encounters.tool!r} asked to open {request.review.url!r}, which is no decision page "
            "of the server's store",
            unscripted=True,
        )
        return None

    # -- the reply -----------------------------------------------------------------------------------

    def _reply(
        self,
        decision: Decision,
        mode: Literal["form", "url"],
        *,
        url: str | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Reply | None:
        encounters = self._encounters
        kind = "a form question" if mode == "form" else "a URL question"
        if self._script.covers(decision.key) is None:
            scripted = ", ".join(map(repr, self._script.keys)) or "nothing"
            self._failed(
                f"the tool {encounters.tool!r} asked {decision.message!r} (key {decision.key!r}, {kind}, on "
                f"{encounters.era}), which the script does not cover; it scripts {scripted}",
                unscripted=True,
            )
            return None
        try:
            reply = self._script.take(decision.key)
        except ScriptFailure as failure:
            self._encounters.failures.append(failure)
            return None
        if reply.mode not in (mode, "any"):
            fits = "consent() answers URL questions" if mode == "form" else "accept(...) answers form questions"
            self._failed(f"the script answers {decision.key!r}, {kind}, with {reply}: {fits}")
            return None
        encounters.asked.append(
            Question(
                key=decision.key,
                mode=mode,
                message=decision.message,
                era=encounters.era,
                tool=encounters.tool,
                elicitation_id=decision.elicitation_id,
                operation_id=decision.operation_id,
                reply=reply,
                url=url,
                schema=schema,
            )
        )
        return reply

    async def _wait(self, reply: Reply) -> bool:
        """Take the reply's time: the clock moves on at once, nobody sleeps."""
        if not reply.delay:
            return True
        if self._clock is None:
            self._failed(f"{reply} needs the app on a ControlledClock: Elicitation(..., clock=elicit_clock)")
            return False
        self._clock.advance(reply.delay)
        await anyio.lowlevel.checkpoint()
        return True

    def _failed(self, message: str, *, unscripted: bool = False) -> Cancel:
        """Nobody decided: the call goes on with a cancel, and the harness raises the failure when it ends."""
        failure = UnscriptedQuestion(message) if unscripted else ScriptFailure(message)
        self._encounters.failures.append(failure)
        return Cancel()


class BrowserStandIn:
    """The kit's URL opener: finishes the consented flows as the decision's page would, in the background."""

    def __init__(
        self,
        store: AsyncStore,
        group: TaskGroup,
        encounters: Encounters,
        pending: PendingFlows,
        *,
        clock: ControlledClock | None,
        timeout: float,
    ) -> None:
        self._store = store
        self._group = group
        self._encounters = encounters
        self._pending = pending
        self._clock = clock
        self._timeout = timeout
        self._expected: dict[str, UrlOutcome] = {}

    def expect(self, elicitation_id: str, outcome: UrlOutcome) -> None:
        """The person consented to this decision's URL; the kit opens it next, and then the flow goes so."""
        self._expected[elicitation_id] = outcome

    async def __call__(self, url: str) -> bool:
        found = _DECISION_PATH.search(urlsplit(url).path)
        outcome = self._expected.pop(found.group(1), None) if found is not None else None
        if found is None or outcome is None:
            self._encounters.failures.append(ScriptFailure(f"the client kit opened {url!r} without a scripted consent"))
            return False
        self._group.start_soon(self._finish, found.group(1), outcome)
        return True

    async def _finish(self, elicitation_id: str, outcome: UrlOutcome) -> None:
        try:
            decision = await self._opened(elicitation_id)
            if decision is None:
                return
            await self._walk(decision, outcome)
        except (DecisionConflict, DecisionExpired):
            return  # the decision moved meanwhile (cancelled, expired): the page would say so, and do nothing
        except StoreError as error:
            self._encounters.failures.append(ScriptFailure(f"the stand-in browser could not reach the store: {error}"))
            return
        if outcome != "completed" and self._not_blocking(decision):
            await self._back_at_the_host(elicitation_id)

    def _not_blocking(self, decision: Decision) -> bool:
        """Whether the decision went out with `-32042` (2025 eras, resume policy not `auto`): no call waits on it."""
        return self._encounters.era != "2026-07-28" and decision.resume_policy is not ResumePolicy.AUTO

    async def _opened(self, elicitation_id: str) -> Decision | None:
        """The decision once its page is open: consented, or None if it went any other way meanwhile.

        A 2025-era call that asked with `elicitation/create` records the consent itself, and so does a
        2026-07-28 round: the browser waits for that, as the person's browser opens the page only once the
        client said yes. The consent to a `-32042` never reaches the server: the page records it on opening,
        as `proceed` does.
        """
        store = self._store
        decision = await store.get_decision(elicitation_id, TESTING)
        if self._not_blocking(decision) and decision.status is DecisionStatus.REQUESTED:
            person = BrowserUser(decision.principal_id)
            return await store.transition(decision, DecisionStatus.ACCEPTED_URL, caller=person, reason="opened")
        with anyio.move_on_after(self._timeout):
            while True:
                decision = await store.get_decision(elicitation_id, TESTING)
                if decision.status is not DecisionStatus.REQUESTED:
                    return decision if decision.status is DecisionStatus.ACCEPTED_URL else None
                await anyio.sleep(CONSENT_POLL)
        self._encounters.failures.append(
            ScriptFailure(f"the server never recorded the consent to {elicitation_id} within {self._timeout:g} s")
        )
        return None

    async def _walk(self, decision: Decision, outcome: UrlOutcome) -> None:
        store, person = self._store, BrowserUser(decision.principal_id)
        pending = await store.transition(
            decision,
            DecisionStatus.EXTERNAL_PENDING,
            caller=person,
            reason="started the external flow (stand-in browser)",
        )
        if outcome == "abandoned":
            assert self._clock is not None
            self._clock.advance_to(pending.expires_at + timedelta(seconds=1))
            await store.sweep_expired()
            return
        to = DecisionStatus.EXTERNAL_COMPLETED if outcome == "completed" else DecisionStatus.EXTERNAL_FAILED
        await store.transition(pending, to, caller=person, reason=f"external flow {outcome} (stand-in browser)")

    async def _back_at_the_host(self, elicitation_id: str) -> None:
        """The person tells the host they are done ("retry now"), as at the kit's pending-flow prompt.

        A server sends the `-32042` completion notice only for a completed flow: after a failed or an
        abandoned one nothing would wake the call but the person, and the kit then retries the call.
        """
        with anyio.move_on_after(self._timeout):
            while True:
                flows = [flow for flow in self._pending.list(active=True) if flow.elicitation_id == elicitation_id]
                if not flows or any(self._pending.retry_now(flow.id) for flow in flows):
                    return
                await anyio.sleep(CONSENT_POLL)
