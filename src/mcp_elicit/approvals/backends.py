"""Approval backends: what decides a gated call's approval out of band, away from the requester and their client.

SEP-2848 (the draft "Asynchronous Approval for Tool Calls", text of 2026-06-08, not merged) keeps the approval
on the server: the client only ever holds a task id, and whatever decides (a person, a policy, another agent)
is the deployment's. Here every backend decides through the one path a gate's approvers already have: the
approval is a decision with an `ApproverRule`, and a backend that is not a person casts its verdict as a vote
of its own approver identity (`policy:NAME`, `agent:NAME`) in the rule's one role. So its verdict is recorded,
audited, bound to the call's argument digest and refused after the approval's TTL exactly as a person's vote on
the inbox page is, and a person holding that role may still vote too.

Three backends: `InboxApproval` (people vote on the decision's page, the inbox: nothing runs here), and
`PolicyApproval` and `AgentApproval`, whose `decide` runs on the server while the call waits on its approval
(a task's background run waits until the approval ends; a live call only as long as it waits). After the
approval carries, the server asks the backend again (`reevaluate`) just before the tool runs: an approval is
an input to a fresh decision, never a standing grant.

Does not guarantee that an agent is asked once: it is asked again by each run that waits on the approval while
it has not decided (a task taken over after its instance died, a live call made again).
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, Protocol, runtime_checkable

import anyio

from mcp_elicit.model import ApproverRule, JSONValue, Principal, Verdict
from mcp_elicit.printable import printable

__all__ = [
    "AgentApproval",
    "ApprovalBackend",
    "ApprovalRequest",
    "Cast",
    "InboxApproval",
    "PolicyApproval",
    "Ruling",
]

log = logging.getLogger(__name__)

_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,40}$")
DEFAULT_POLICY_EVERY: Final = timedelta(seconds=5)
MAX_RULING_NOTE: Final = 500


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """The call an approval is for, as a backend sees it: the draft's binding record, less nothing a backend needs.

    While the approval is decided (`decide`), `arguments` are the call's own (JSON) and `arguments_digest` is the
    call's request digest, which binds the approval to them (the store refuses a vote on other arguments'
    proposal to count for this call). At re-evaluation (`reevaluate`), they are the arguments the tool will run
    with: the call's own with the approvers' edits applied (`edited` names the arguments they changed), and the
    request digest of exactly those. A backend re-evaluates what runs, never only what was asked.
    """

    approval_id: str
    """The approval's decision (the draft's "approval request id")."""
    operation_id: str
    """The call's operation: the task id, when the call runs as a task."""
    tool: str
    arguments: Mapping[str, JSONValue]
    arguments_digest: str
    requester: Principal
    requested_at: datetime
    expires_at: datetime
    edited: frozenset[str] = frozenset()
    """At re-evaluation, the arguments approvers changed before approving (empty while the approval is decided)."""


@dataclass(frozen=True, slots=True)
class Ruling:
    """A backend's verdict, with a note the model reads beside the outcome (keep it free of secrets)."""

    verdict: Verdict
    note: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "verdict", Verdict(self.verdict))
        if self.note is not None:
            said = printable(" ".join(str(self.note).split()))[:MAX_RULING_NOTE]
            object.__setattr__(self, "note", said or None)


Cast = Callable[[Ruling], Awaitable[None]]
"""Records a backend's ruling as its vote on the approval; a late or refused vote is logged, never raised."""


@runtime_checkable
class ApprovalBackend(Protocol):
    """What decides a gate's approval. `rule` is recorded with the approval (who may vote on it); `decide` runs
    while a call waits on the approval and casts a ruling when it has one (it may also return without one, or be
    cancelled when the call stops waiting); `reevaluate` is asked once the approval carried, just before the tool
    runs, and the tool runs only if it says yes."""

    @property
    def rule(self) -> ApproverRule: ...

    async def decide(self, request: ApprovalRequest, cast: Cast) -> None: ...

    async def reevaluate(self, request: ApprovalRequest) -> bool: ...


@dataclass(frozen=True, slots=True)
class InboxApproval:
    """People decide: members of `rule`'s roles, on the approval's page or in the inbox (`Gate(approvers=rule)` is
    the same). Their votes are checked by the store as they are cast (eligible roles, never the requester, the
    quorum on one proposal), so re-evaluation has nothing left to ask."""

    approvers: ApproverRule

    def __post_init__(self) -> None:
        if not isinstance(self.approvers, ApproverRule):
            raise TypeError("InboxApproval(approvers=...) takes ApproverRule(roles=[...], quorum=..., ...)")

    @property
    def rule(self) -> ApproverRule:
        return self.approvers

    async def decide(self, request: ApprovalRequest, cast: Cast) -> None:
        return None

    async def reevaluate(self, request: ApprovalRequest) -> bool:
        return True


PolicyCheck = Callable[[ApprovalRequest], "Verdict | Ruling | None"]


@dataclass(frozen=True, slots=True)
class PolicyApproval:
    """A policy function decides, and may take its time: `check(request)` is asked every `every` while the call
    waits, and says `Verdict.APPROVE`, `Verdict.REJECT` (or a `Ruling` with a note), or None for "not yet" (a
    risk signal still elevated, a grant not provisioned yet). Once the approval carried, `check` is asked again
    before the tool runs and must approve again: a policy that changed its mind meanwhile denies the call.

    `check` is a plain function that answers at once (it runs on the event loop); one that raises counts as "not
    yet" while waiting and as a denial at re-evaluation (fails closed). Its votes are cast as `policy:NAME`.
    """

    check: PolicyCheck
    name: str = "policy"
    every: timedelta = DEFAULT_POLICY_EVERY

    def __post_init__(self) -> None:
        if not callable(self.check) or inspect.iscoroutinefunction(self.check):
            raise TypeError("PolicyApproval(check=...) is a plain function of the ApprovalRequest; for an async "
                            "decider, use AgentApproval")  # fmt: skip
        _check_name("PolicyApproval", self.name)
        if not isinstance(self.every, timedelta) or self.every <= timedelta(0):
            raise ValueError(f"PolicyApproval(every=...) is a positive timedelta, got {self.every!r}")

    @property
    def rule(self) -> ApproverRule:
        return ApproverRule([f"policy:{self.name}"])

    @property
    def voter(self) -> str:
        return f"policy:{self.name}"

    async def decide(self, request: ApprovalRequest, cast: Cast) -> None:
        while True:
            ruling = self._ruled(request, "while the call waits")
            if ruling is not None:
                await cast(ruling)
                return
            await anyio.sleep(self.every.total_seconds())

    async def reevaluate(self, request: ApprovalRequest) -> bool:
        ruling = self._ruled(request, "at re-evaluation")
        return ruling is not None and ruling.verdict is Verdict.APPROVE

    def _ruled(self, request: ApprovalRequest, when: str) -> Ruling | None:
        try:
            return _ruling(self.check(request))
        except Exception as error:  # fails closed: not yet while waiting, a denial at re-evaluation
            log.warning("approval %s: the policy %s raised %s %s", request.approval_id, self.name,
                        type(error).__name__, when)  # fmt: skip
            return None


AgentDecide = Callable[[ApprovalRequest], Awaitable["Verdict | Ruling | None"]]


@dataclass(frozen=True, slots=True)
class AgentApproval:
    """Another agent decides (a supervisor holding the budget, an orchestrator, a model behind an API):
    `decide(request)` is awaited in the background while the call waits, and its ruling is cast as `agent:NAME`.
    None, or an error, casts nothing: the approval waits for its TTL (or a person holding the role).

    Its ruling is the decision, so re-evaluation checks only what the server checks for every approval (the same
    call, the approval unexpired). `timeout` bounds one ask; None lets it run as long as the call waits.
    """

    agent: AgentDecide
    name: str = "agent"
    timeout: timedelta | None = None

    def __post_init__(self) -> None:
        if not callable(self.agent):
            raise TypeError("AgentApproval(agent=...) is an async function of the ApprovalRequest")
        _check_name("AgentApproval", self.name)
        if self.timeout is not None and (not isinstance(self.timeout, timedelta) or self.timeout <= timedelta(0)):
            raise ValueError(f"AgentApproval(timeout=...) is a positive timedelta or None, got {self.timeout!r}")

    @property
    def rule(self) -> ApproverRule:
        return ApproverRule([f"agent:{self.name}"])

    @property
    def voter(self) -> str:
        return f"agent:{self.name}"

    async def decide(self, request: ApprovalRequest, cast: Cast) -> None:
        limit = None if self.timeout is None else self.timeout.total_seconds()
        try:
            with anyio.fail_after(limit):
                ruling = _ruling(await self.agent(request))
        except TimeoutError:
            log.warning("approval %s: the agent %s did not decide within %s", request.approval_id, self.name,
                        self.timeout)  # fmt: skip
            return
        except Exception as error:
            log.warning("approval %s: the agent %s raised %s; nothing was cast", request.approval_id, self.name,
                        type(error).__name__)  # fmt: skip
            return
        if ruling is not None:
            await cast(ruling)

    async def reevaluate(self, request: ApprovalRequest) -> bool:
        return True


def voter_of(backend: ApprovalBackend) -> str | None:
    """The approver identity a backend's own votes are cast under (None: people vote, not the backend)."""
    voter = getattr(backend, "voter", None)
    return voter if isinstance(voter, str) else None


def _ruling(value: object) -> Ruling | None:
    if value is None:
        return None
    if isinstance(value, Ruling):
        return value
    if isinstance(value, Verdict | str):
        return Ruling(Verdict(value))
    raise TypeError(f"a backend rules with Verdict.APPROVE, Verdict.REJECT, a Ruling or None, not {value!r}")


def _check_name(kind: str, name: object) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"{kind}(name=...) is 1-41 letters, digits and _.- starting with a letter or digit, "
                         f"got {name!r}")  # fmt: skip
