"""Peers of unknown or pre-elicitation protocol versions (2024-11-05, 2025-03-26): never asked anything."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any, NoReturn

from mcp_elicit.model import Decision, Principal
from mcp_elicit.server.eras import Need, Target
from mcp_elicit.server.eras.capabilities import legacy_missing_capability
from mcp_elicit.server.execution import A, ClientQuery, Execution, in_turn
from mcp_elicit.server.signals import Suspended
from mcp_elicit.server.writes import HeldWrites
from mcp_elicit.store import OperationRecords
from mcp_elicit.store.aio import AsyncStore


class UnaskableEra:
    async def resume(
        self, store: AsyncStore, principal: Principal, target: Target, writes: HeldWrites
    ) -> OperationRecords | None:
        return None

    def asker(self) -> CannotAskAnything:
        return CannotAskAnything()

    async def suspended(self, signal: Suspended, run: Execution) -> Any:
        raise TypeError(f"nothing suspends a call that cannot ask: got {type(signal).__name__}")

    def missing_capability(self, needs: frozenset[Need], *, tool: bool) -> Exception:
        return legacy_missing_capability(needs, tool=tool)


class CannotAskAnything:
    """`can` is always False, so the run answers with the fallback before `ask` or `query` is reached."""

    def can(self, need: Need) -> bool:
        return False

    async def ask(self, run: Execution, decision: Decision, form: Any) -> NoReturn:
        raise AssertionError("never called: can is always False")

    async def query(self, run: Execution, key: str, query: ClientQuery, answer: type[A]) -> NoReturn:
        raise AssertionError("never called: can is always False")

    async def gather(self, run: Execution, items: Sequence[Awaitable[Any]]) -> list[Any]:
        return await in_turn(items)

    async def await_approvers(self, run: Execution, decision: Decision) -> Decision:
        """A peer that cannot be asked can still wait on its live call for others to decide."""
        return await run.wait_for_approvers(decision, patience=run.approver_wait)
