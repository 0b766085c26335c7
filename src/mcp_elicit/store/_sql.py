"""The store's logic, written once over a minimal SQL interface that each engine adapts.

Every write runs in one transaction through `_write()`: the change and its audit row commit together
or not at all. Compare-and-set is a conditional UPDATE on `(status, version)` plus the binding; when it
matches no row, a second read in the same transaction says why (missing, someone else's, lost race,
overdue), and an overdue record is expired right there so a late signal can never wake it.

`SQLCore` composes one class per aggregate, each in its own module so that one can be read alone:
`_operations`, `_decisions`, `_votes` (approvers' votes on decisions), `_journal` (and claims), `_grants`,
`_tokens` (and OAuth clients), `_vault`, `_outbox`, `_sweep` and `_audit_chain` (the audit's sealer), over the
pieces they share in `_core` and the engine interface in `_engine`.
"""

from __future__ import annotations

from mcp_elicit.store._audit_chain import AuditChainCore
from mcp_elicit.store._decisions import DecisionsCore
from mcp_elicit.store._grants import GrantsCore
from mcp_elicit.store._journal import JournalCore
from mcp_elicit.store._operations import OperationsCore
from mcp_elicit.store._outbox import OutboxCore
from mcp_elicit.store._sweep import SweepCore
from mcp_elicit.store._tokens import TokensCore
from mcp_elicit.store._vault import VaultCore
from mcp_elicit.store._votes import VotesCore


class SQLCore(
    OperationsCore,
    VotesCore,
    DecisionsCore,
    JournalCore,
    GrantsCore,
    TokensCore,
    VaultCore,
    OutboxCore,
    SweepCore,
    AuditChainCore,
):
    """The store's logic, once, as coroutines; an engine supplies transactions and value codecs.

    The `Store` a caller holds runs these on an engine that never waits; an engine with an async driver
    (PostgreSQL's) runs the very same coroutines on the event loop, for `AsyncStore`.
    """
