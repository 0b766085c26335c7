"""What can go wrong with a store, each case its own type so callers never parse messages."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcp_elicit.model import Decision, Operation


class StoreError(Exception):
    """Base of every error the store raises on purpose."""


class StoreConfigError(StoreError):
    """The store URL cannot be used: unknown scheme, missing path, unsupported option."""


class StoreUnavailable(StoreError):
    """The store exists in principle but cannot be reached or opened right now."""


class StoreCorrupt(StoreError):
    """The store's file or tables are not what mcp-elicit wrote; nothing was changed."""


class SchemaTooNew(StoreError):
    """The database was migrated by a newer mcp-elicit; this code must not write to it."""

    def __init__(self, found: int, supported: int, where: str) -> None:
        self.found = found
        self.supported = supported
        super().__init__(
            f"{where} has schema version {found}, but this mcp-elicit supports up to version {supported}; "
            "upgrade mcp-elicit to use this store"
        )


class NotFound(StoreError):
    """No such record for this caller. Someone else's record is reported exactly like a missing one."""


class AlreadyExists(StoreError):
    """A record with this id is already stored."""


class TransitionConflict(StoreError):
    """The compare-and-set lost: the record is no longer in the state the caller saw."""

    def __init__(self, current: Decision | Operation, attempted: str) -> None:
        self.current = current
        self.attempted = attempted
        identity = getattr(current, "elicitation_id", None) or getattr(current, "operation_id", "")
        super().__init__(
            f"cannot move {identity} to {attempted}: it is now {current.status} "
            f"(version {getattr(current, 'completion_version', getattr(current, 'version', '?'))})"
        )


class DecisionExpired(StoreError):
    """The signal came after the TTL; the record is now expired and stays so."""

    def __init__(self, current: Decision | Operation, attempted: str) -> None:
        self.current = current
        self.attempted = attempted
        identity = getattr(current, "elicitation_id", None) or getattr(current, "operation_id", "")
        super().__init__(f"cannot move {identity} to {attempted}: it expired at {current.expires_at.isoformat()}")
