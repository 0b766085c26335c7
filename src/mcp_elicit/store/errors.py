"""What can go wrong with a store, each case its own type so callers never parse messages."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datetime import datetime

    from mcp_elicit.model import Decision, Grant, Operation


class StoreError(Exception):
    """Base of every error the store raises on purpose."""


class StoreConfigError(StoreError):
    """The store URL cannot be used: unknown scheme, missing path, unsupported option."""


class StoreDriverMissing(StoreConfigError):
    """The URL is right, but its engine's driver is not installed: the message names the extra that brings it."""


class StoreUnavailable(StoreError):
    """The store cannot do this now, and nothing of what failed was stored.

    This class itself is a temporary outage (a database down or restarting, a file locked past the busy
    timeout, a full disk): the same request made again succeeds once it ends. Its subclasses are the cases
    where waiting alone does not end it and an operator must act; `remedy` names what they must do.
    """

    plainly = (
        "The decision store is unavailable right now (a temporary failure: it may be restarting, busy or out of space)"
    )
    """The condition in words for whoever made the request: no path, host or driver message."""
    remedy: str | None = None
    """What must happen before the same request can succeed; None when it will once the outage ends."""

    def for_log(self) -> str:
        """The condition and its cause, for a line in the log per request it failed."""
        return f"{self.plainly}: {self}"


class StoreReadOnly(StoreUnavailable):
    """The store can be read but refuses writes: a read-only SQLite file, directory or file system, a PostgreSQL
    database in read-only transaction mode or a hot standby.

    A `StoreUnavailable`, since it is one where it matters: the refused write left the records as they were,
    so whatever waits out an outage (a task left to be taken up again, a round that may be sent again) is
    right here too. Only the remedy differs.
    """

    plainly = "The decision store is read-only (its file, directory or database refuses writes)"
    remedy = "an operator makes it writable"


class StoreCorrupt(StoreError):
    """The store's file or tables are not what mcp-elicit wrote; nothing was changed."""


class UnreadableRow(StoreCorrupt):
    """One stored row holds a value mcp-elicit never writes there (invalid JSON, text where a time belongs...).

    `row_id` is the row's id as stored (`None` when the id itself is unreadable), `column` the first column
    found unreadable. `why` describes the value by its kind (an unknown status or mode is quoted), never by
    text it holds, which may be an answer.
    """

    def __init__(self, record: str, row_id: object, column: str, why: str) -> None:
        self.record = record
        self.row_id = row_id
        self.column = column
        self.why = why
        named = f"{record} {row_id}" if row_id is not None else f"a {record} with an unreadable id"
        super().__init__(f"{named}: column {column} holds {why}; the row was left as it is")


class SchemaTooNew(StoreError):
    """The database was migrated by a newer mcp-elicit; this code must not write to it."""

    def __init__(self, found: int, supported: int, where: str) -> None:
        self.found = found
        self.supported = supported
        super().__init__(
            f"{where} has schema version {found}, but this mcp-elicit supports up to version {supported}; "
            "upgrade mcp-elicit to use this store"
        )


class MigrationPending(StoreError):
    """The database is at an older schema version (0: none yet) than this code's; it was opened without migrating.

    Opening a store migrates it; a check that must change nothing (`open_store(url, migrate=False)`) says this
    instead, and so does a running store whose database was set back (a restored backup) under it.
    """

    def __init__(self, found: int, supported: int, where: str) -> None:
        self.found = found
        self.supported = supported
        held = f"schema version {found}" if found else "no mcp-elicit schema yet"
        super().__init__(f"{where} has {held}, and this mcp-elicit needs version {supported}")


class StoreFileReplaced(StoreUnavailable):
    """The SQLite file a running store opened was deleted, or another file took its path.

    A write would go on to the file the store opened, which no later start reads: every call would report
    success and the records be gone after a restart (and a retry then act again). So every write is refused.
    The latest commits of the file opened are in the `-wal` file beside the path, which SQLite leaves there.
    A `StoreUnavailable` for the reason `StoreReadOnly` is: the refused write changed nothing.
    """

    plainly = "The decision store's file was deleted or replaced while the server ran"
    remedy = "an operator restarts the server"

    def __init__(self, path: str, *, deleted: bool) -> None:
        self.path = path
        self.deleted = deleted
        what = "was deleted" if deleted else "was replaced by another file"
        super().__init__(
            f"the database file {path} {what} while this store had it open; refusing to write to the file it "
            "opened, which no later start would read. Nothing of this write was stored. Stop the server, then "
            f"put back the file it opened ({path}-wal beside it holds its latest commits), or remove {path}-wal "
            f"and {path}-shm before starting on {'a new store' if deleted else 'the new file'}"
        )

    def for_log(self) -> str:
        return f"{self.plainly} ({self.path})"  # what to do is long: the store logs it once, when it finds this


class NotFound(StoreError):
    """No such record for this caller. Someone else's record is reported exactly like a missing one."""


class AlreadyExists(StoreError):
    """A record with this id is already stored."""


class IdempotencyKeyConflict(StoreError):
    """A caller's idempotency key came back with another request than the one it was first used for.

    A key is its caller's own (principal and client): the same key from another caller is another key.
    It stays bound to the method, target and arguments digest it first named: reusing it for something
    else must fail loudly (the rule payment APIs follow), since attaching would let an answer given for one
    request act on another. `reason` says what differs.
    """

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        super().__init__(f"idempotency key {key!r} was first used for {reason}; use a new key for this request")


class LeaseLost(StoreError):
    """A fenced write (a step's result, an operation's end) came from a call that no longer holds the
    operation's run lease: the lease lapsed and another call took the operation over, or the call let go.

    What the call computed under the lease it lost must not be recorded, since the new holder may run the
    same steps; the call runs again on what is recorded instead.
    """

    def __init__(self, operation_id: str, holder: str, attempt: int) -> None:
        self.operation_id = operation_id
        super().__init__(f"operation {operation_id}: {holder} no longer holds its run lease (attempt {attempt})")


class TransitionConflict(StoreError):
    """The compare-and-set lost: the record is no longer in the state the caller saw."""

    def __init__(self, identity: str, status: str, version: int, attempted: str) -> None:
        self.attempted = attempted
        super().__init__(f"cannot move {identity} to {attempted}: it is now {status} (version {version})")


class DecisionConflict(TransitionConflict):
    def __init__(self, current: Decision, attempted: str) -> None:
        self.current = current
        super().__init__(current.elicitation_id, current.status, current.completion_version, attempted)


class OperationConflict(TransitionConflict):
    def __init__(self, current: Operation, attempted: str) -> None:
        self.current = current
        super().__init__(current.operation_id, current.status, current.version, attempted)


class RecordExpired(StoreError):
    """The signal came after the TTL; the record is expired and stays so."""

    def __init__(self, identity: str, expires_at: datetime, attempted: str) -> None:
        self.attempted = attempted
        super().__init__(f"cannot move {identity} to {attempted}: it expired at {expires_at.isoformat()}")


class DecisionExpired(RecordExpired):
    def __init__(self, current: Decision, attempted: str) -> None:
        self.current = current
        super().__init__(current.elicitation_id, current.expires_at, attempted)


class OperationExpired(RecordExpired):
    def __init__(self, current: Operation, attempted: str) -> None:
        self.current = current
        super().__init__(current.operation_id, current.expires_at, attempted)


class GrantEnded(StoreError):
    """The grant was revoked or has expired: it covers no call, and revoking it again changes nothing.

    `current` is the grant as stored; `how` says when it ended, and by whom for a revocation.
    """

    def __init__(self, current: Grant) -> None:
        self.current = current
        if current.revoked_at is not None:
            self.how = f"was revoked at {current.revoked_at.isoformat(timespec='seconds')} by {current.revoked_by}"
        else:
            self.how = f"expired at {current.expires_at.isoformat(timespec='seconds')}"
        super().__init__(f"grant {current.grant_id} {self.how}")


class VoteRefusal(StrEnum):
    """Why a vote was refused (`VoteRefused.reason`)."""

    NOT_APPROVERS = "not_approvers"
    """The decision names no approvers: its requester answers it, nobody votes on it."""
    OWN_CALL = "own_call"
    """Four-eyes: the approver is the principal the decision was asked for."""
    NOT_ELIGIBLE = "not_eligible"
    """None of the approver's roles may vote on the decision now."""
    ALREADY_VOTED = "already_voted"
    """The approver cast this very vote (verdict and proposal) before: it counts once."""


class VoteRefused(StoreError):
    """A vote the store did not record, and why (`reason`); the decision and its votes are as they were."""

    def __init__(self, elicitation_id: str, reason: VoteRefusal, message: str) -> None:
        self.elicitation_id = elicitation_id
        self.reason = reason
        super().__init__(message)
