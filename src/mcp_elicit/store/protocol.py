"""The `Store` protocol: what every backend does, with the same behaviour.

Binding: every read or write made as a `Principal` matches the record's principal *and* client; a
mismatch is `NotFound`, indistinguishable from a missing record. An `Operator` sees every record.

Transitions are compare-and-set on the snapshot the caller holds, `(status, version)`: the first
writer wins; every other gets a `TransitionConflict` (`DecisionConflict`, `OperationConflict`) carrying
the record as it now is. A transition attempted at or after the record's `expires_at` moves the record
to `expired` instead, in the same transaction, and raises `RecordExpired` (`DecisionExpired`,
`OperationExpired`) whether or not a sweep has run; a move on a record that already expired raises it
too, so a late signal always reads as late. Each change and its audit row commit together.

The OAuth client rows hold the registrations of the local authorization server, metadata as given
(including a confidential client's secret, which the SDK's client authentication compares in clear).

The vault rows hold opaque sealed blobs under a key id: the store never sees a key or a plaintext, and
audits every vault write (subject kind `vault`, subject id `principal_id/name`) with the key id alone.
"""

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol, TypeVar, runtime_checkable

from mcp_elicit.model import (
    Actor,
    AuditEntry,
    Caller,
    Decision,
    DecisionStatus,
    JSONObject,
    JSONValue,
    Operation,
    OperationStatus,
    Principal,
)
from mcp_elicit.store.errors import UnreadableRow

Clock = Callable[[], datetime]

R = TypeVar("R")


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


class NotificationEvent(StrEnum):
    """What the notification outbox records, in the transaction of the transition that causes it."""

    DECISION_WAITING = "decision.waiting"
    """A decision was created: a person must answer (or the deadline passes)."""
    DECISION_ENDED = "decision.ended"
    """A decision reached a terminal status: answered, declined, cancelled, expired, or its URL flow ended."""
    TASK_INPUT_REQUIRED = "task.input_required"
    """A decision was created in an operation that runs as an MCP task: the task now waits for input."""


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
    """One event for one subscription, as the outbox holds it: ids, status, target, deadline; never content."""

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
    claimed_at: datetime | None = None
    """The store's time when `outbox_claim` took it; `None` in a listing."""


@runtime_checkable
class Interest(Protocol):
    """Whether anything waits for changes now, and a way to wait until something does."""

    def awaited(self) -> bool: ...

    async def until_awaited(self) -> None: ...


class Store(Protocol):
    @property
    def display_url(self) -> str:
        """The store's URL with any password masked: safe for logs and error messages."""
        ...

    def schema_version(self) -> int: ...

    def verify_schema(self) -> None:
        """Reach the database afresh and check that it still holds this code's schema, for readiness checks.

        `schema_version` is what opening found; another instance may have migrated the database since.
        Raises `StoreUnavailable` when it cannot be reached, `SchemaTooNew` or `MigrationPending` when its
        version is no longer this code's, `StoreCorrupt` when its schema table is not what mcp-elicit wrote.
        """
        ...

    @property
    def runs_inline(self) -> bool:
        """Whether a call takes microseconds on local files, so async code may make it on the event loop."""
        ...

    @property
    def asynchronous(self) -> Any:
        """The same store's calls as coroutines of the same names, on a driver that waits on the event loop,
        while `serving` holds it open on the running loop; `None` where there is no such driver (SQLite, whose
        calls run inline, or outside `serving`). `AsyncStore` picks what to use."""
        ...

    def serving(self) -> AbstractAsyncContextManager[None]:
        """Hold the async driver open on this event loop for as long as the block runs (a server's lifespan)."""
        ...

    async def listen(self, on_change: Callable[[str], None], interest: Interest | None = None) -> None:
        """Call `on_change(subject)` for each change other instances announce, until cancelled.

        With `interest`, only while something in this process waits (and a little after): a process nobody
        waits in neither receives notices nor has the database signal it. Returns at once on an engine
        without a channel between processes: waiters then rely on polling.
        """
        ...

    def atomically(self, work: Callable[[], R]) -> R:
        """Run `work`'s calls to this store (on this thread) in one transaction: all commit, or none do."""
        ...

    def create_operation(self, operation: Operation) -> Operation: ...

    def get_operation(self, operation_id: str, caller: Caller) -> Operation: ...

    def get_operation_records(self, operation_id: str, caller: Caller) -> OperationRecords:
        """The operation and its decisions in one read (`NotFound` as `get_operation`): a resuming call's start."""
        ...

    def begin_operation(self, candidate: Operation, *, replay_since: datetime | None = None) -> OperationStart:
        """The open operation of `candidate`'s call, or `candidate` stored as that operation.

        The call is the candidate's principal, client, method, target and request digest, or its principal,
        client and idempotency key (a key is its caller's own). At most one open operation exists per call
        (a unique index, so a racing creator attaches). An overdue open one is expired on the way. A
        completed one updated at or after `replay_since` is returned instead of starting anew. A key the
        caller bound to another request raises `IdempotencyKeyConflict`; a fresh key is bound to this
        request until its operation ends.
        """
        ...

    def find_operations(
        self,
        caller: Principal,
        *,
        method: str,
        target: str,
        request_digest: str | None = None,
        idempotency_key: str | None = None,
    ) -> list[Operation]:
        """The caller's operations for this call, newest first (by digest, or by idempotency key)."""
        ...

    def finish_operation(
        self,
        snapshot: Operation,
        to: OperationStatus,
        *,
        caller: Caller,
        result: JSONValue = None,
        reason: str = "",
        fence: Claim | None = None,
    ) -> Operation:
        """End an open operation by compare-and-set. With `fence` (the run lease the caller took), only while
        that lease is still the caller's, same holder and attempt: else `LeaseLost`."""
        ...

    def create_decision(self, decision: Decision) -> Decision: ...

    def get_decision(self, elicitation_id: str, caller: Caller) -> Decision: ...

    def list_decisions(
        self,
        caller: Caller,
        *,
        status: DecisionStatus | None = None,
        principal_id: str | None = None,
        operation_id: str | None = None,
        expiring_before: datetime | None = None,
        id_prefix: str | None = None,
        limit: int = 100,
        on_unreadable: Callable[[UnreadableRow], None] | None = None,
    ) -> list[Decision]:
        """Decisions visible to the caller, newest first; `expiring_before` keeps only waiting ones.

        A row that cannot be decoded raises `UnreadableRow`; with `on_unreadable`, it is handed there instead
        and left out, so that one corrupt row does not hide the others (it still counts towards `limit`).
        """
        ...

    def decision_page(
        self, caller: Caller, where: DecisionFilter | None = None, *, after: str | None = None, limit: int = 100
    ) -> DecisionPage:
        """Up to `limit` decisions visible to the caller, newest first (ties by id), past the cursor `after`.

        Keyset paging: a cursor is the last row's place in that order, not a row count, so the pages of one
        listing never repeat a row nor skip one that exists throughout, whatever is written meanwhile; each
        page is one short read. A cursor is opaque and holds no filter: give the same `where` with it.
        A text that is not a cursor raises `ValueError`.
        """
        ...

    def count_decisions(self, caller: Caller, where: DecisionFilter | None = None, *, after: str | None = None) -> int:
        """How many decisions a `decision_page` listing with these arguments holds in all pages together."""
        ...

    def transition(
        self,
        snapshot: Decision,
        to: DecisionStatus,
        *,
        caller: Caller,
        reason: str = "",
        content: JSONObject | None = None,
        expires_at: datetime | None = None,
    ) -> Decision: ...

    def expire_if_overdue(self, elicitation_id: str, caller: Caller, *, reason: str) -> Decision:
        """The decision as it stands, expired on the spot (by the store's clock) when its TTL has passed."""
        ...

    def note(self, decision: Decision, *, actor: Actor, reason: str) -> None:
        """Record an event about a decision that changes nothing (a wrong user at its page, say)."""
        ...

    def add_change_listener(self, listener: Callable[[str], None]) -> None:
        """Call `listener(elicitation_id)`, from the committing thread, after each URL decision move made here."""
        ...

    def sweep_expired(self) -> SweepResult:
        """Expire every overdue waiting decision and open operation, and purge spent token entries."""
        ...

    def audit_trail(
        self, subject_id: str, caller: Caller, *, on_unreadable: Callable[[UnreadableRow], None] | None = None
    ) -> list[AuditEntry]:
        """Every audit row of a decision or an operation the caller may see, oldest first.

        An unreadable row raises `UnreadableRow`, or with `on_unreadable` is handed there and left out, as
        in `list_decisions`.
        """
        ...

    def journal_record(
        self, operation_id: str, name: str, value: JSONValue, *, caller: Principal, fence: Claim | None = None
    ) -> JournalEntry:
        """Record a step's result unless one is recorded already; either way return the recorded one.

        With `fence` (the run lease the step ran under) the result is recorded only if none is recorded yet
        (else `AlreadyExists`) and while that lease is still the caller's, same holder and attempt (else
        `LeaseLost`): another holder took the operation over, and its record, not this one, counts.
        """
        ...

    def journal(self, operation_id: str, *, caller: Principal) -> list[JournalEntry]:
        """Every entry of the operation's journal, in one read: what a run replays instead of running again."""
        ...

    def journal_get(self, operation_id: str, name: str, *, caller: Principal) -> JournalEntry | None: ...

    def claim(
        self,
        operation_id: str,
        name: str,
        *,
        holder: str,
        lease_until: datetime,
        caller: Principal,
        succeeding: str | None = None,
    ) -> Claim:
        """Take the claim `name` of the operation if it is free, lapsed, or held by `holder` or `succeeding`.

        Returns the claim as it then stands: held by `holder`, or by someone else whose lease still runs.
        Taking over a lapsed claim of another holder is audited on the operation.
        """
        ...

    def claims(self, operation_id: str, *, caller: Principal) -> list[Claim]:
        """The operation's claims as they stand, lapsed ones included (their `lease_until` says so)."""
        ...

    def renew_claim(
        self, operation_id: str, name: str, *, holder: str, lease_until: datetime, caller: Principal
    ) -> bool:
        """Extend `holder`'s lease; False if the claim is no longer its own."""
        ...

    def release_claim(self, operation_id: str, name: str, *, caller: Principal, holder: str | None = None) -> None:
        """Drop the claim (only `holder`'s, when given) and tell waiters on the operation."""
        ...

    def consume_token(self, token_id: str, *, expires_at: datetime) -> Consumption:
        """Mark a single-use token spent. The entry must outlive the token, so pass the token's expiry."""
        ...

    def token_consumed(self, token_id: str) -> bool:
        """Whether the ledger holds an entry for `token_id` (spent, or revoked), until a sweep purges it."""
        ...

    def oauth_client_put(self, client_id: str, metadata: JSONObject) -> None:
        """Record an OAuth client registration; a registration is never overwritten (`AlreadyExists`)."""
        ...

    def oauth_client_get(self, client_id: str) -> JSONObject | None: ...

    def vault_put(self, principal_id: str, name: str, key_id: str, sealed: bytes, *, actor: str | None = None) -> None:
        """Store or replace the entry, audited as `stored` in the same transaction (`actor` names who)."""
        ...

    def vault_get(self, principal_id: str, name: str) -> VaultRecord | None: ...

    def vault_delete(self, principal_id: str, name: str, *, actor: str | None = None) -> bool:
        """Remove the entry, audited as `deleted`; False if there was none (and nothing is audited)."""
        ...

    def vault_reseal(self, snapshot: VaultRecord, key_id: str, sealed: bytes, *, actor: str | None = None) -> bool:
        """Replace the blob only if the entry still holds `snapshot`'s key id and blob (compare-and-set).

        False if it changed or vanished meanwhile: a concurrent `vault_put` always wins over a re-seal.
        """
        ...

    def vault_entries(
        self, key_id_not: str | None = None, limit: int = 1000, *, after: tuple[str, str] | None = None
    ) -> list[VaultRecord]:
        """Entries ordered by (principal_id, name), those past `after` only; `key_id_not` skips one key's."""
        ...

    def outbox_subscribe(
        self, subscriptions: Mapping[str, frozenset[NotificationEvent]], *, renamed: Mapping[str, str] | None = None
    ) -> frozenset[str]:
        """Record which events each named subscription takes from now on (its earlier set replaced), so that
        every process's transitions, the CLI's included, write outbox rows for it.

        `renamed` maps names subscriptions may have had until now to their names in `subscriptions`; of those
        the store holds, it returns the former ones and, in the same transaction, unsubscribes them and gives
        their outbox rows the new name (a row whose event the new name already holds is dropped, so nothing
        is delivered twice)."""
        ...

    def outbox_claim(self, subscriptions: Sequence[str], *, limit: int, lease: timedelta) -> list[Delivery]:
        """Take up to `limit` due pending deliveries of these subscriptions, oldest first, as one more attempt
        each: its next attempt is put `lease` ahead, so no one else takes it meanwhile, nor after a crash
        before `lease` has passed (on PostgreSQL rows another instance is claiming are skipped)."""
        ...

    def outbox_delivered(self, delivery: Delivery) -> bool:
        """Settle a claimed delivery as delivered; False if it was settled already."""
        ...

    def outbox_failed(self, delivery: Delivery, *, retry_after: timedelta | None, error: str) -> bool:
        """Record a failed attempt: tried again `retry_after` from now, or dead with `None`. False when the
        delivery is no longer at this attempt (claimed again after its lease lapsed, or settled)."""
        ...

    def outbox_deliveries(
        self, *, elicitation_id: str | None = None, state: DeliveryState | None = None, limit: int = 100
    ) -> list[Delivery]:
        """Outbox rows, oldest first, for operators and tests."""
        ...

    def outbox_purge(self, settled_before: datetime, *, stale_before: datetime | None = None) -> int:
        """Delete the deliveries settled (delivered or dead) before `settled_before`, and any that happened before
        `stale_before` (a webhook no instance delivers to any more leaves its rows pending); how many."""
        ...

    def close(self) -> None: ...
