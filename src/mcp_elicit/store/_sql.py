"""The store's logic, written once over a minimal SQL interface that each engine adapts.

Every write runs in one transaction through `_write()`: the change and its audit row commit together
or not at all. Compare-and-set is a conditional UPDATE on `(status, version)` plus the binding; when it
matches no row, a second read in the same transaction says why (missing, someone else's, lost race,
overdue), and an overdue record is expired right there so a late signal can never wake it.

`SQLCore` composes one class per aggregate, each in its own module so that one can be read alone:
`_operations`, `_decisions`, `_journal` (and claims), `_tokens` (and OAuth clients), `_vault`, `_outbox`
and `_sweep`, over the pieces they share in `_core` and the engine interface in `_engine`.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any, Concatenate, ParamSpec, TypeVar

from mcp_elicit.store._decisions import DecisionsCore
from mcp_elicit.store._engine import run_now
from mcp_elicit.store._journal import JournalCore
from mcp_elicit.store._operations import OperationsCore
from mcp_elicit.store._outbox import OutboxCore
from mcp_elicit.store._sweep import SweepCore
from mcp_elicit.store._tokens import TokensCore
from mcp_elicit.store._vault import VaultCore
from mcp_elicit.store.protocol import Interest

R = TypeVar("R")
P = ParamSpec("P")


class SQLCore(OperationsCore, DecisionsCore, JournalCore, TokensCore, VaultCore, OutboxCore, SweepCore):
    """The store's logic, once, as coroutines; an engine supplies transactions and value codecs.

    The `Store` a caller holds is `SQLStore`, which runs these on an engine that never waits; an engine
    with an async driver (PostgreSQL's) runs the very same coroutines on the event loop.
    """


def _blocking(
    program: Callable[Concatenate[SQLCore, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[SQLStore, P], R]:
    @functools.wraps(program)
    def call(self: SQLStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return run_now(program(self._core, *args, **kwargs))

    return call


class SQLStore(ABC):
    """The `Store` protocol over `SQLCore`, run synchronously on an engine that never waits.

    An engine with an async driver offers the same core as `asynchronous` while `serving` holds it open;
    `AsyncStore` then awaits the core's coroutine of the same name instead of calling here.
    """

    def __init__(self, core: SQLCore, listeners: list[Callable[[str], None]]) -> None:
        self._core = core
        self._change_listeners = listeners

    @property
    @abstractmethod
    def display_url(self) -> str: ...

    @abstractmethod
    def schema_version(self) -> int: ...

    @abstractmethod
    def close(self) -> None: ...

    @property
    def runs_inline(self) -> bool:
        return False

    @property
    def asynchronous(self) -> SQLCore | None:
        """The core on an async engine, open on the running event loop; `None` when there is none."""
        return None

    def serving(self) -> AbstractAsyncContextManager[None]:
        """Hold the async engine open on this event loop for as long as the block runs (where there is one)."""
        return nullcontext()

    async def listen(self, on_change: Callable[[str], None], interest: Interest | None = None) -> None:
        return None

    def add_change_listener(self, listener: Callable[[str], None]) -> None:
        """Called after each commit that moved something a call may wait on, with its subject: a decision's
        id for its transitions, an operation's id for its journal, its claims and its end."""
        self._change_listeners.append(listener)

    def atomically(self, work: Callable[[], R]) -> R:
        """Run `work`'s calls to this store (on this thread) in one transaction: all commit, or none do."""
        return run_now(self._core.atomically(functools.partial(_returning, work)))

    verify_schema = _blocking(SQLCore.verify_schema)
    create_operation = _blocking(SQLCore.create_operation)
    get_operation = _blocking(SQLCore.get_operation)
    get_operation_records = _blocking(SQLCore.get_operation_records)
    begin_operation = _blocking(SQLCore.begin_operation)
    find_operations = _blocking(SQLCore.find_operations)
    finish_operation = _blocking(SQLCore.finish_operation)
    create_decision = _blocking(SQLCore.create_decision)
    get_decision = _blocking(SQLCore.get_decision)
    list_decisions = _blocking(SQLCore.list_decisions)
    decision_page = _blocking(SQLCore.decision_page)
    count_decisions = _blocking(SQLCore.count_decisions)
    transition = _blocking(SQLCore.transition)
    expire_if_overdue = _blocking(SQLCore.expire_if_overdue)
    note = _blocking(SQLCore.note)
    sweep_expired = _blocking(SQLCore.sweep_expired)
    audit_trail = _blocking(SQLCore.audit_trail)
    journal_record = _blocking(SQLCore.journal_record)
    journal_get = _blocking(SQLCore.journal_get)
    journal = _blocking(SQLCore.journal)
    claim = _blocking(SQLCore.claim)
    claims = _blocking(SQLCore.claims)
    renew_claim = _blocking(SQLCore.renew_claim)
    release_claim = _blocking(SQLCore.release_claim)
    consume_token = _blocking(SQLCore.consume_token)
    token_consumed = _blocking(SQLCore.token_consumed)
    oauth_client_put = _blocking(SQLCore.oauth_client_put)
    oauth_client_get = _blocking(SQLCore.oauth_client_get)
    vault_put = _blocking(SQLCore.vault_put)
    vault_get = _blocking(SQLCore.vault_get)
    vault_delete = _blocking(SQLCore.vault_delete)
    vault_reseal = _blocking(SQLCore.vault_reseal)
    vault_entries = _blocking(SQLCore.vault_entries)
    outbox_subscribe = _blocking(SQLCore.outbox_subscribe)
    outbox_claim = _blocking(SQLCore.outbox_claim)
    outbox_delivered = _blocking(SQLCore.outbox_delivered)
    outbox_failed = _blocking(SQLCore.outbox_failed)
    outbox_deliveries = _blocking(SQLCore.outbox_deliveries)
    outbox_purge = _blocking(SQLCore.outbox_purge)


async def _returning(work: Callable[[], R]) -> R:
    return work()
