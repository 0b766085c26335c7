"""What every store does, with the same behaviour, and the records its calls take and give.

Binding: every read or write made as a `Principal` matches the record's principal *and* client; a
mismatch is `NotFound`, indistinguishable from a missing record. An `Operator` sees every record.

Transitions are compare-and-set on the snapshot the caller holds, `(status, version)`: the first
writer wins; every other gets a `TransitionConflict` (`DecisionConflict`, `OperationConflict`) carrying
the record as it now is. A transition attempted at or after the record's `expires_at` moves the record
to `expired` instead, in the same transaction, and raises `RecordExpired` (`DecisionExpired`,
`OperationExpired`) whether or not a sweep has run; a move on a record that already expired raises it
too, so a late signal always reads as late. Each change and its audit row commit together.

A decision that names approvers (`Decision.approvers`) is answered by their votes (`cast_vote`), not by a
transition of its requester's: each vote is checked, recorded and counted in one transaction that locks the
decision first, so concurrent votes queue and the one that carries the decision moves it exactly once.

The OAuth client rows hold the registrations of the local authorization server, metadata as given
(including a confidential client's secret, which the SDK's client authentication compares in clear).

The vault rows hold opaque sealed blobs under a key id: the store never sees a key or a plaintext, and
audits every vault write (subject kind `vault`, subject id `principal_id/name`) with the key id alone.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Protocol, runtime_checkable

from mcp_elicit.model import ApproverRule, Decision, DecisionStatus, Grant, JSONValue, Operation, Tally, Vote
from mcp_elicit.store.errors import UnreadableRow

Clock = Callable[[], datetime]


class Consumption(StrEnum):
    FIRST = "first"
    ALREADY_USED = "already_used"


@dataclass(frozen=True, slots=True)
class SweepResult:
    decisions: int
    operations: int
    tokens: int
    keys: int = 0
    """Idempotency keys whose binding lapsed: free for any request again."""


@dataclass(frozen=True, slots=True)
class JournalEntry:
    name: str
    value: JSONValue
    recorded_at: datetime


@dataclass(frozen=True, slots=True)
class OperationStart:
    """What `begin_operation` found or made: the call's one open operation, or a completed one to replay."""

    operation: Operation
    created: bool
    """True when this call's candidate became the open operation: nothing of it is stored but itself."""


@dataclass(frozen=True, slots=True)
class OperationRecords:
    """An operation with its decisions as one read saw them: what a call resuming it starts from."""

    operation: Operation
    decisions: list[Decision]
    """Newest first, at most `OPERATION_DECISIONS_READ`."""


OPERATION_DECISIONS_READ = 1000
"""How many of an operation's decisions a resuming call reads: far more than one body asks."""


@dataclass(frozen=True, slots=True)
class Claim:
    """Who may run a step or put a question to the person for an operation now, and until when.

    A claim lapses at `lease_until` unless its holder renews it; only then may someone else take it, and
    `attempt` counts how often that happened.
    """

    operation_id: str
    name: str
    holder: str
    attempt: int
    lease_until: datetime

    def held_by(self, holder: str) -> bool:
        return self.holder == holder


@dataclass(frozen=True, slots=True)
class VaultRecord:
    """One vault entry as stored: a blob sealed by a caller under `key_id`, opaque to the store."""

    principal_id: str
    name: str
    key_id: str
    sealed: bytes = field(repr=False)
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class DecisionFilter:
    """Which decisions a listing or a count covers; a field left `None` does not narrow it.

    `expiring_before` keeps only waiting decisions whose TTL ends before then; `id_prefix` only the ids that
    start with it (a text that cannot start an id matches none).
    """

    status: DecisionStatus | None = None
    principal_id: str | None = None
    operation_id: str | None = None
    expiring_before: datetime | None = None
    id_prefix: str | None = None


@dataclass(frozen=True, slots=True)
class DecisionPage:
    """One page of a listing, newest first: the rows read, decoded or not, and where the next page starts."""

    decisions: list[Decision]
    unreadable: list[UnreadableRow]
    """Rows of this page that could not be decoded, left out of `decisions`; they count towards the limit."""
    after: str | None
    """The cursor past this page's last row while more rows follow (give it as `after`); `None` on the last page."""

    @property
    def rows(self) -> int:
        return len(self.decisions) + len(self.unreadable)


@dataclass(frozen=True, slots=True)
class GrantFilter:
    """Which grants a listing covers; a field left `None` (or `False`) does not narrow it.

    `active` keeps only the grants that cover calls now, by the store's clock (neither revoked nor expired);
    `id_prefix` only the ids that start with it (a text that cannot start an id matches none).
    """

    principal_id: str | None = None
    active: bool = False
    id_prefix: str | None = None


@dataclass(frozen=True, slots=True)
class GrantPage:
    """One page of a grant listing, newest first, as `DecisionPage` is of decisions."""

    grants: list[Grant]
    unreadable: list[UnreadableRow]
    after: str | None

    @property
    def rows(self) -> int:
        return len(self.grants) + len(self.unreadable)


@dataclass(frozen=True, slots=True)
class VoteCast:
    """What a vote did: the decision as the vote left it (accepted or declined when it carried the decision,
    still requested otherwise), the vote as stored, and where the decision's votes stand now."""

    decision: Decision
    vote: Vote
    tally: Tally


GRANT_JOURNAL = "mcp-elicit/grant"
"""The journal entry of an operation a standing grant let through (its value, the grant's id): written with the
audit row of that use, once per operation, so a run of the same operation after it needs neither."""


class NotificationEvent(StrEnum):
    """What the notification outbox records, in the transaction of the transition that causes it."""

    DECISION_WAITING = "decision.waiting"
    """A decision was created: a person must answer (or the deadline passes)."""
    DECISION_ENDED = "decision.ended"
    """A decision reached a terminal status: answered, declined, cancelled, expired, or its URL flow ended."""
    TASK_INPUT_REQUIRED = "task.input_required"
    """A decision was created in an operation that runs as an MCP task: the task now waits for input."""
    DECISION_ESCALATED = "decision.escalated"
    """A decision whose approvers escalate (`ApproverRule.escalate_after`) reached that moment still waiting: the
    roles of `escalate_to` may now vote too. Written when the decision is created, due at that moment; a deliverer
    sends it only if the decision still waits then."""


TASK_JOURNAL = "mcp-elicit/task"
"""The journal entry that makes an operation a task (written with it): the store emits `TASK_INPUT_REQUIRED` for
a decision created in an operation holding it."""


class DeliveryState(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    DEAD = "dead"
    """Given up on: too many attempts, or too old."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """One event for one subscription, as the outbox holds it: ids, status, target, deadline and what the call is
    about; never the question's message or an answer."""

    event_id: str
    """The same on every attempt and for every subscription: what a receiver deduplicates by."""
    subscription: str
    event: NotificationEvent
    elicitation_id: str
    operation_id: str
    principal_id: str
    status: DecisionStatus
    method: str
    target: str
    deadline: datetime
    occurred_at: datetime
    state: DeliveryState
    attempts: int
    """Attempts made, this one included once it is claimed."""
    next_attempt_at: datetime
    last_error: str | None
    about: str = ""
    """What the decision's call is about (`Decision.about`): the tool and its arguments' redacted one-line summary,
    the only call content a notification carries; "" for a question asked before calls had one."""
    approvers: ApproverRule | None = None
    """Who decides the decision (`Decision.approvers`), read with the row like `about`; None for one its requester
    answers (or one no longer stored)."""
    asked_at: datetime | None = None
    """When the decision was asked (`Decision.created_at`), which its approvers' escalation counts from; None for
    one no longer stored."""
    claimed_at: datetime | None = None
    """The store's time when `outbox_claim` took it; `None` in a listing."""


@runtime_checkable
class Interest(Protocol):
    """Whether anything waits for changes now, and a way to wait until something does."""

    def awaited(self) -> bool: ...

    async def until_awaited(self) -> None: ...
